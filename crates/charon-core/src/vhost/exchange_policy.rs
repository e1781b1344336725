//! Policies applied to exchanges: which policy applies to each exchange (the highest priority
//! among those whose `apply-to` is `exchanges` or `all` and whose pattern matches its name, as
//! `rabbit_policy:match/2`) and what it sets — today its `alternate-exchange`, which routing
//! uses when the exchange has no such argument (`Exchange::alternate_exchange`).
//!
//! The default exchange takes no policy: it is not an exchange one can set anything on
//! (RabbitMQ 4.x: "the default exchange … does not support the alternate exchange feature").
//! Callers apply policies under the topology's write lock, so a change is seen by every route
//! computed after it (and invalidates route caches keyed by the topology's generation).

use std::sync::Arc;

use super::VHost;
use crate::exchange::ExchangePolicy;
use crate::policy::Policies;

fn applied(policies: &Policies, name: &str) -> Option<ExchangePolicy> {
    if name.is_empty() {
        return None;
    }
    policies.for_exchange(name).map(|p| ExchangePolicy {
        name: Arc::from(p.name.as_str()),
        alternate_exchange: p.definition.alternate_exchange.as_deref().map(Arc::from),
    })
}

impl<Q: Clone> VHost<Q> {
    /// Sets on exchange `name` (if it exists) what `policies` apply to it.
    pub fn apply_exchange_policy(&mut self, name: &str, policies: &Policies) {
        if let Some(x) = self.exchanges.get_mut(name) {
            x.policy = applied(policies, name);
        }
    }

    /// Sets on every exchange what `policies` apply to it (after a policy was set or cleared);
    /// returns how many exchanges changed.
    pub fn apply_exchange_policies(&mut self, policies: &Policies) -> usize {
        let mut changed = 0;
        for (name, x) in self.exchanges.iter_mut() {
            let p = applied(policies, name);
            if x.policy != p {
                x.policy = p;
                changed += 1;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use charon_protocol::{AMQPValue, FieldTable};

    use super::*;
    use crate::policy::{ApplyTo, DefValue, Policy, PolicyDefinition};
    use crate::vhost::ExchangeDeclare;

    fn policy(name: &str, pattern: &str, apply_to: ApplyTo, priority: i64, ae: &str) -> Policy {
        let d = PolicyDefinition::parse(vec![(
            "alternate-exchange".into(),
            DefValue::Str(ae.into()),
        )])
        .expect("valid definition");
        Policy::new(name, pattern, apply_to, priority, d).expect("valid policy")
    }

    fn declare(v: &mut VHost<u32>, name: &str, args: FieldTable) {
        let d = ExchangeDeclare {
            name: name.into(),
            kind: "direct".into(),
            durable: true,
            arguments: args,
            ..Default::default()
        };
        v.declare_exchange(&d).expect("declared");
    }

    fn routed(v: &VHost<u32>, exchange: &str) -> Vec<u32> {
        let mut out = Vec::new();
        v.route(exchange, &["nothing-bound"], None, &mut out)
            .expect("routed");
        out
    }

    fn vhost_with_ae_queues() -> VHost<u32> {
        let mut v: VHost<u32> = VHost::new("/");
        for (ae, q) in [("ae", 1), ("ae2", 2)] {
            let d = ExchangeDeclare {
                name: ae.into(),
                kind: "fanout".into(),
                ..Default::default()
            };
            v.declare_exchange(&d).expect("declared");
            let meta = crate::vhost::QueueDeclare {
                name: format!("q-{ae}"),
                ..Default::default()
            };
            v.declare_queue(&meta, 0, |_| q).expect("queue");
            v.bind_queue(&format!("q-{ae}"), ae, "", &FieldTable::default())
                .expect("bound");
        }
        v
    }

    #[test]
    fn policy_alternate_exchange_routes_unroutable_messages() {
        let mut v = vhost_with_ae_queues();
        declare(&mut v, "has-ae", FieldTable::default());
        assert_eq!(routed(&v, "has-ae"), Vec::<u32>::new());
        let mut ps = Policies::default();
        ps.set(policy("AE", "^has-ae", ApplyTo::Exchanges, 0, "ae"));
        assert_eq!(v.apply_exchange_policies(&ps), 1);
        assert_eq!(routed(&v, "has-ae"), vec![1]);
        ps.clear("AE");
        v.apply_exchange_policies(&ps);
        assert_eq!(routed(&v, "has-ae"), Vec::<u32>::new());
    }

    #[test]
    fn alternate_exchange_argument_wins_over_policy() {
        let mut v = vhost_with_ae_queues();
        let mut args = FieldTable::default();
        args.insert(
            "alternate-exchange".into(),
            AMQPValue::LongString("ae2".into()),
        );
        declare(&mut v, "has-ae-args", args);
        let mut ps = Policies::default();
        ps.set(policy("AE", "^has-ae", ApplyTo::All, 0, "ae"));
        v.apply_exchange_policies(&ps);
        assert_eq!(routed(&v, "has-ae-args"), vec![2]);
    }

    #[test]
    fn highest_priority_exchange_policy_applies_and_queue_policies_do_not() {
        let mut v = vhost_with_ae_queues();
        declare(&mut v, "x", FieldTable::default());
        let mut ps = Policies::default();
        ps.set(policy("low", "^x$", ApplyTo::Exchanges, 1, "ae"));
        ps.set(policy("high", "^x$", ApplyTo::Exchanges, 5, "ae2"));
        ps.set(policy("queues-only", "^x$", ApplyTo::Queues, 9, "ae"));
        v.apply_exchange_policy("x", &ps);
        assert_eq!(routed(&v, "x"), vec![2]);
        let listed = v.exchange("x").and_then(|x| x.policy.clone());
        assert_eq!(listed.map(|p| p.name), Some(Arc::from("high")));
    }
}
