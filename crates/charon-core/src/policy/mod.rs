//! Policies: named, prioritised, regex-matched bundles of queue settings that apply to existing and
//! future queues without redeclaring them (`rabbit_policy`).
//!
//! - [`definition`]: the keys a policy may set and their validation.
//! - [`effective`]: combining a queue's declared arguments with its policy
//!   (`rabbit_amqqueue_process:process_args_policy`).
//!
//! This module owns the policy set of one vhost and the choice of the policy that applies to a
//! name: the matching policy (pattern found anywhere in the name, `apply-to` fitting) with the
//! highest priority.

mod definition;
mod effective;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use definition::{DefValue, PolicyDefinition};
pub use effective::effective_args;

/// What a policy applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    /// Queues only.
    Queues,
    /// Exchanges only.
    Exchanges,
    /// Queues and exchanges.
    All,
}

impl ApplyTo {
    /// Parses the `apply-to` value.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        match s {
            "queues" => Ok(ApplyTo::Queues),
            "exchanges" => Ok(ApplyTo::Exchanges),
            "all" => Ok(ApplyTo::All),
            other => Err(PolicyError::Invalid(format!(
                "\"{other}\" is not a valid apply-to value"
            ))),
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::All => "all",
        }
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

    /// Whether the policy applies to a queue called `name`.
    pub fn matches_queue(&self, name: &str) -> bool {
        self.apply_to != ApplyTo::Exchanges && self.regex.is_match(name)
    }

    /// Whether the policy applies to an exchange called `name`.
    pub fn matches_exchange(&self, name: &str) -> bool {
        self.apply_to != ApplyTo::Queues && self.regex.is_match(name)
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
