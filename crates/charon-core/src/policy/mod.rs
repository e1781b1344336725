//! Policies: named, prioritised, regex-matched bundles of queue settings that apply to existing and
//! future queues without redeclaring them (`rabbit_policy`).
//!
//! - [`definition`]: the keys a policy may set and their validation.
//! - [`effective`]: combining a queue's declared arguments with its policy
//!   (`rabbit_amqqueue_process:process_args_policy`).
//! - [`operator`]: operator policies' keys and their merge with the user policy.
//!
//! This module owns the policy set of one vhost and the choice of the policy that applies to a
//! name: the matching policy (pattern found anywhere in the name, `apply-to` fitting) with the
//! highest priority.

mod definition;
mod effective;
mod operator;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::arguments::QueueType;

pub use definition::{DefValue, PolicyDefinition};
pub use effective::effective_args;
pub use operator::{OPERATOR_KEYS, merge_operator};

/// What a policy applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    /// Queues only.
    Queues,
    /// Exchanges only.
    Exchanges,
    /// Queues and exchanges.
    All,
    /// Classic queues only (RabbitMQ 4.x).
    ClassicQueues,
    /// Quorum queues only (RabbitMQ 4.x).
    QuorumQueues,
    /// Streams only (RabbitMQ 4.x).
    Streams,
}

impl ApplyTo {
    /// Parses the `apply-to` value.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        match s {
            "queues" => Ok(ApplyTo::Queues),
            "exchanges" => Ok(ApplyTo::Exchanges),
            "all" => Ok(ApplyTo::All),
            "classic_queues" => Ok(ApplyTo::ClassicQueues),
            "quorum_queues" => Ok(ApplyTo::QuorumQueues),
            "streams" => Ok(ApplyTo::Streams),
            other => Err(PolicyError::Invalid(format!(
                "apply-to '{other}' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'"
            ))),
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::All => "all",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
        }
    }

    /// Whether it covers queues of type `ty` (`rabbit_policy:matches_queue_type/3`).
    fn covers_queue(self, ty: QueueType) -> bool {
        match self {
            ApplyTo::Queues | ApplyTo::All => true,
            ApplyTo::Exchanges => false,
            ApplyTo::ClassicQueues => ty == QueueType::Classic,
            ApplyTo::QuorumQueues => ty == QueueType::Quorum,
            ApplyTo::Streams => ty == QueueType::Stream,
        }
    }
}

/// Policy keys a queue type does not support (its `unsupported_policies` capability in
/// RabbitMQ 4.x, restricted to keys Charon accepts). A policy with any of them does not match
/// a queue of that type at all (`rabbit_queue_type:is_policy_applicable/2`). `delivery-limit`
/// is supported by classic queues as a Charon extension (retries, issue 10).
fn unsupported_keys(ty: QueueType) -> &'static [&'static str] {
    match ty {
        QueueType::Classic => &["max-in-memory-length", "max-in-memory-bytes"],
        QueueType::Quorum => &[
            "queue-mode",
            "ha-mode",
            "ha-params",
            "ha-sync-mode",
            "ha-promote-on-shutdown",
            "ha-promote-on-failure",
            "queue-master-locator",
        ],
        QueueType::Stream => &[
            "expires",
            "message-ttl",
            "dead-letter-exchange",
            "dead-letter-routing-key",
            "max-length",
            "max-in-memory-length",
            "max-in-memory-bytes",
            "overflow",
            "queue-mode",
            "delivery-limit",
            "ha-mode",
            "ha-params",
            "ha-sync-mode",
            "ha-promote-on-shutdown",
            "ha-promote-on-failure",
            "queue-master-locator",
        ],
    }
}

/// A policy refused at validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A value or key is not acceptable; the text says which.
    #[error("{0}")]
    Invalid(String),
}

/// One policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Name, unique per vhost.
    pub name: String,
    /// The regular expression as given.
    pub pattern: String,
    regex: regex::Regex,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Higher wins.
    pub priority: i64,
    /// The settings.
    pub definition: PolicyDefinition,
}

impl Policy {
    /// Validates and builds a policy.
    pub fn new(
        name: &str,
        pattern: &str,
        apply_to: ApplyTo,
        priority: i64,
        definition: PolicyDefinition,
    ) -> Result<Self, PolicyError> {
        let regex = regex::Regex::new(pattern).map_err(|e| {
            PolicyError::Invalid(format!(
                "\"{pattern}\" is not a valid regular expression: {e}"
            ))
        })?;
        Ok(Policy {
            name: name.to_string(),
            pattern: pattern.to_string(),
            regex,
            apply_to,
            priority,
            definition,
        })
    }

    /// Whether the policy applies to a classic queue called `name`.
    pub fn matches_queue(&self, name: &str) -> bool {
        self.matches_queue_of(name, QueueType::Classic)
    }

    /// Whether the policy applies to a queue of type `ty` called `name`: `apply-to` covers the
    /// type, the type supports every key of the definition, and the pattern matches.
    pub fn matches_queue_of(&self, name: &str, ty: QueueType) -> bool {
        let unsupported = unsupported_keys(ty);
        self.apply_to.covers_queue(ty)
            && !self
                .definition
                .raw
                .iter()
                .any(|(k, _)| unsupported.contains(&k.as_str()))
            && self.regex.is_match(name)
    }

    /// Whether the policy applies to an exchange called `name`.
    pub fn matches_exchange(&self, name: &str) -> bool {
        matches!(self.apply_to, ApplyTo::Exchanges | ApplyTo::All) && self.regex.is_match(name)
    }
}

/// The policies of one vhost.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    by_name: BTreeMap<String, Policy>,
}

impl Policies {
    /// Adds or replaces a policy; true when it is new.
    pub fn set(&mut self, policy: Policy) -> bool {
        self.by_name.insert(policy.name.clone(), policy).is_none()
    }

    /// Removes a policy; false when there was none by that name.
    pub fn clear(&mut self, name: &str) -> bool {
        self.by_name.remove(name).is_some()
    }

    /// All policies, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Policy> {
        self.by_name.values()
    }

    /// The policy that applies to queue `name`: the matching one with the highest priority (the
    /// first by name among equals).
    pub fn for_queue(&self, name: &str) -> Option<&Policy> {
        self.best(|p| p.matches_queue(name))
    }

    /// The policy that applies to queue `name` of type `ty`.
    pub fn for_queue_of(&self, name: &str, ty: QueueType) -> Option<&Policy> {
        self.best(|p| p.matches_queue_of(name, ty))
    }

    /// The policy that applies to exchange `name`.
    pub fn for_exchange(&self, name: &str) -> Option<&Policy> {
        self.best(|p| p.matches_exchange(name))
    }

    fn best(&self, fits: impl Fn(&Policy) -> bool) -> Option<&Policy> {
        let mut best: Option<&Policy> = None;
        for p in self.by_name.values().filter(|p| fits(p)) {
            if best.is_none_or(|b| p.priority > b.priority) {
                best = Some(p);
            }
        }
        best
    }
}
