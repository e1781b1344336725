//! Operator policies (`rabbit_policy`'s `operator_policy` parameters): policies an operator sets
//! to cap what users' policies and queue arguments ask for. They carry only the keys RabbitMQ
//! 4.x registers as `operator_policy_validator`s and are merged with the user policy that
//! applies to the same queue (`rabbit_policy:merge_operator_definitions/2`,
//! `rabbit_policies:merge_policy_value/3`):
//!
//! - `expires`, `message-ttl`, `max-length`, `max-length-bytes`, `max-in-memory-length`,
//!   `max-in-memory-bytes`: the smaller value wins;
//! - `delivery-limit`: the smaller, unless one is negative (unlimited): then the larger;
//! - `overflow`, `queue-version` and booleans: the operator policy's value.
//!
//! The merged definition then meets the queue's arguments as a user policy alone would
//! ([`super::effective_args`]: for the numeric keys the smaller of argument and policy), so an
//! operator policy caps queue arguments as well.

use super::{DefValue, PolicyDefinition, PolicyError};

/// The keys an operator policy may set (RabbitMQ 4.x: `rabbit_policies` plus the classic and
/// quorum queue types' operator validators that Charon stores).
pub const OPERATOR_KEYS: &[&str] = &[
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
    "queue-version",
    "overflow",
    "queue-master-locator",
    "target-group-size",
];

/// Keys merged by taking the smaller value.
const MIN_KEYS: &[&str] = &[
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
];

impl PolicyDefinition {
    /// Validates `entries` as RabbitMQ validates an operator policy's definition: only
    /// [`OPERATOR_KEYS`], each with the value a policy may have.
    pub fn parse_operator(entries: Vec<(String, DefValue)>) -> Result<Self, PolicyError> {
        let unknown: Vec<String> = entries
            .iter()
            .filter(|(k, _)| !OPERATOR_KEYS.contains(&k.as_str()))
            .map(|(k, _)| format!("<<\"{k}\">>"))
            .collect();
        if !unknown.is_empty() {
            return Err(PolicyError::Invalid(format!(
                "[{}] are not recognised policy settings",
                unknown.join(",")
            )));
        }
        PolicyDefinition::parse(entries)
    }
}

/// One key's value when both the user policy (`val`) and the operator policy (`op`) set it.
fn merge_value(key: &str, val: &DefValue, op: &DefValue) -> DefValue {
    match (key, val, op) {
        (k, DefValue::Int(a), DefValue::Int(b)) if MIN_KEYS.contains(&k) => {
            DefValue::Int(*a.min(b))
        }
        ("delivery-limit", DefValue::Int(a), DefValue::Int(b)) => {
            if *a < 0 || *b < 0 {
                DefValue::Int(*a.max(b))
            } else {
                DefValue::Int(*a.min(b))
            }
        }
        _ => op.clone(),
    }
}

/// The definition a queue gets from its user `policy` and its `operator` policy: either alone
/// as it is, both merged key by key (keys in name order, as RabbitMQ lists them).
pub fn merge_operator(
    policy: Option<&PolicyDefinition>,
    operator: Option<&PolicyDefinition>,
) -> Option<PolicyDefinition> {
    let (p, o) = match (policy, operator) {
        (None, None) => return None,
        (Some(p), None) => return Some(p.clone()),
        (None, Some(o)) => return Some(o.clone()),
        (Some(p), Some(o)) => (p, o),
    };
    let mut keys: Vec<&str> = p
        .raw
        .iter()
        .chain(o.raw.iter())
        .map(|(k, _)| k.as_str())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let get = |d: &'_ PolicyDefinition, k: &str| -> Option<DefValue> {
        d.raw
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let raw: Vec<(String, DefValue)> = keys
        .into_iter()
        .filter_map(|k| {
            let v = match (get(p, k), get(o, k)) {
                (Some(v), Some(op)) => merge_value(k, &v, &op),
                (Some(v), None) | (None, Some(v)) => v,
                (None, None) => return None,
            };
            Some((k.to_string(), v))
        })
        .collect();
    // Every key was valid in one of the two definitions, so the merge parses; should it not,
    // the user policy stays in force rather than nothing.
    Some(PolicyDefinition::parse(raw).unwrap_or_else(|_| p.clone()))
}
