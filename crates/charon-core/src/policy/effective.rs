//! The configuration a queue runs with: its declared arguments combined with the policy that
//! applies to it, as RabbitMQ's `process_args_policy` does for classic queues (and
//! `rabbit_quorum_queue` for `delivery-limit`):
//!
//! - `dead-letter-exchange`, `dead-letter-routing-key`, `overflow`: the queue argument wins;
//! - `message-ttl`, `max-length`, `max-length-bytes`, `expires`, `delivery-limit`: the smaller of
//!   the two wins;
//! - `retry-*` (Charon): see [`crate::retry::settings`] (`retry-limit` the smaller, the rest
//!   the argument's).

use crate::arguments::QueueArgs;

use super::PolicyDefinition;

fn min_of(arg: Option<u64>, policy: Option<u64>) -> Option<u64> {
    match (arg, policy) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    }
}

/// `declared` (the parsed x-arguments) overlaid with `policy`.
pub fn effective_args(
    declared: &QueueArgs,
    declared_overflow: bool,
    policy: Option<&PolicyDefinition>,
) -> QueueArgs {
    let Some(p) = policy else {
        let mut e = declared.clone();
        e.retry = declared.retry_declared.resolve(None);
        return e;
    };
    let mut e = declared.clone();
    e.dead_letter_exchange = declared
        .dead_letter_exchange
        .clone()
        .or_else(|| p.dead_letter_exchange.clone());
    e.dead_letter_routing_key = declared
        .dead_letter_routing_key
        .clone()
        .or_else(|| p.dead_letter_routing_key.clone());
    if !declared_overflow && let Some(o) = p.overflow {
        e.overflow = o;
    }
    e.message_ttl = min_of(declared.message_ttl, p.message_ttl);
    e.max_length = min_of(declared.max_length, p.max_length);
    e.max_length_bytes = min_of(declared.max_length_bytes, p.max_length_bytes);
    e.expires = min_of(declared.expires, p.expires);
    e.delivery_limit = min_of(declared.delivery_limit, p.delivery_limit);
    e.retry = declared.retry_declared.resolve(Some(&p.retry));
    e
}
