//! Direct exchange: a message goes to bindings whose key equals one of its
//! routing keys. (The default exchange is handled by the vhost.)

use charon_protocol::FieldTable;

use super::{Binding, BindingTable, Destination, remove_from};

/// Bindings indexed by binding key.
#[derive(Debug, Default)]
pub struct DirectBindings {
    /// foldhash: looked up once per routed message (SipHash was ~10 % of routing).
    by_key: foldhash::HashMap<String, Vec<Binding>>,
    count: usize,
}

impl BindingTable for DirectBindings {
    fn add(&mut self, binding: Binding) -> bool {
        let v = self.by_key.entry(binding.routing_key.clone()).or_default();
        if v.contains(&binding) {
            return false;
        }
        v.push(binding);
        self.count += 1;
        true
    }

    fn remove(&mut self, binding: &Binding) -> bool {
        let Some(v) = self.by_key.get_mut(&binding.routing_key) else {
            return false;
        };
        let removed = remove_from(v, binding);
        if v.is_empty() {
            self.by_key.remove(&binding.routing_key);
        }
        if removed {
            self.count -= 1;
        }
        removed
    }

    fn remove_destination(&mut self, destination: &Destination) -> usize {
        let before = self.count;
        self.by_key.retain(|_, v| {
            v.retain(|b| &b.destination != destination);
            !v.is_empty()
        });
        self.count = self.by_key.values().map(Vec::len).sum();
        before - self.count
    }

    fn route<'a>(&'a self, keys: &[&str], _h: Option<&FieldTable>, out: &mut Vec<&'a Destination>) {
        for key in keys {
            if let Some(v) = self.by_key.get(*key) {
                out.extend(v.iter().map(|b| &b.destination));
            }
        }
    }

    fn bindings(&self) -> Box<dyn Iterator<Item = &Binding> + '_> {
        Box::new(self.by_key.values().flatten())
    }

    fn len(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn b(q: &str, k: &str) -> Binding {
        Binding {
            destination: Destination::Queue(Arc::from(q)),
            routing_key: k.into(),
            arguments: FieldTable::default(),
        }
    }

    #[test]
    fn direct_routes_on_exact_key_only() {
        let mut t = DirectBindings::default();
        assert!(t.add(b("q1", "a")));
        assert!(!t.add(b("q1", "a")));
        t.add(b("q2", "a.b"));
        let mut out = Vec::new();
        t.route(&["a"], None, &mut out);
        assert_eq!(out, vec![&Destination::Queue(Arc::from("q1"))]);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.remove_destination(&Destination::Queue(Arc::from("q2"))),
            1
        );
        assert!(t.remove(&b("q1", "a")));
        assert!(t.is_empty());
    }
}
