//! The configuration a queue runs with: its declared arguments combined with the policy that
//! applies to it, as RabbitMQ's `process_args_policy` does for classic queues (and
//! `rabbit_quorum_queue` for `delivery-limit`):
//!
//! - `dead-letter-exchange`, `dead-letter-routing-key`: the queue argument wins;
//! - `overflow`: the queue argument wins on classic queues, the policy on quorum queues
//!   (`rabbit_quorum_queue`: `policy_has_precedence`), where `reject-publish-dlx` is not
//!   supported and acts as the default, drop-head;
//! - `message-ttl`, `max-length`, `max-length-bytes`, `expires`, `consumer-timeout`: the smaller
//!   of the two wins (`consumer-timeout`: `rabbit_channel:get_queue_consumer_timeout/2`);
//! - `delivery-limit`: the smaller, unless one is negative (unlimited): then the larger
//!   (`rabbit_quorum_queue:resolve_delivery_limit/2`).
//! - `retry-*` (Charon): see [`crate::retry::settings`] (`retry-limit` the smaller, the rest
//!   the argument's).

use crate::arguments::{Overflow, QueueArgs, QueueType};

use super::PolicyDefinition;

fn min_of(arg: Option<u64>, policy: Option<u64>) -> Option<u64> {
    match (arg, policy) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    }
}

fn resolve_delivery_limit(arg: Option<i64>, policy: Option<i64>) -> Option<i64> {
    match (arg, policy) {
        (Some(a), Some(p)) if a < 0 || p < 0 => Some(a.max(p)),
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
    let mut e = overlay(declared, declared_overflow, policy);
    if e.queue_type == QueueType::Quorum && e.overflow == Overflow::RejectPublishDlx {
        e.overflow = Overflow::DropHead;
    }
    e
}

fn overlay(
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
    let policy_wins = declared.queue_type == QueueType::Quorum;
    if (policy_wins || !declared_overflow)
        && let Some(o) = p.overflow
    {
        e.overflow = o;
    }
    e.message_ttl = min_of(declared.message_ttl, p.message_ttl);
    e.max_length = min_of(declared.max_length, p.max_length);
    e.max_length_bytes = min_of(declared.max_length_bytes, p.max_length_bytes);
    e.expires = min_of(declared.expires, p.expires);
    e.consumer_timeout = min_of(declared.consumer_timeout, p.consumer_timeout);
    e.delivery_limit = resolve_delivery_limit(declared.delivery_limit, p.delivery_limit);
    e.retry = declared.retry_declared.resolve(Some(&p.retry));
    e
}
