//! Fanout exchange: every binding matches, routing keys are ignored.

use charon_protocol::FieldTable;

use super::{Binding, BindingTable, Destination, remove_from};

/// All bindings in a list.
#[derive(Debug, Default)]
pub struct FanoutBindings {
    all: Vec<Binding>,
}

impl BindingTable for FanoutBindings {
    fn add(&mut self, binding: Binding) -> bool {
        if self.all.contains(&binding) {
            return false;
        }
        self.all.push(binding);
        true
    }

    fn remove(&mut self, binding: &Binding) -> bool {
        remove_from(&mut self.all, binding)
    }

    fn remove_destination(&mut self, destination: &Destination) -> usize {
        let before = self.all.len();
        self.all.retain(|b| &b.destination != destination);
        before - self.all.len()
    }

    fn route<'a>(&'a self, _k: &[&str], _h: Option<&FieldTable>, out: &mut Vec<&'a Destination>) {
        out.extend(self.all.iter().map(|b| &b.destination));
    }

    fn bindings(&self) -> Box<dyn Iterator<Item = &Binding> + '_> {
        Box::new(self.all.iter())
    }

    fn len(&self) -> usize {
        self.all.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn fanout_ignores_routing_keys() {
        let mut t = FanoutBindings::default();
        t.add(Binding {
            destination: Destination::Queue(Arc::from("q")),
            routing_key: "whatever".into(),
            arguments: FieldTable::default(),
        });
        let mut out = Vec::new();
        t.route(&["other"], None, &mut out);
        assert_eq!(out.len(), 1);
    }
}
