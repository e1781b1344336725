//! The settings a policy definition may carry and their validation (`rabbit_policies:validate_policy`
//! for the keys Charon implements; other keys RabbitMQ knows are kept and listed but do nothing).

use crate::arguments::{MAX_EXPIRY, Overflow};

use super::PolicyError;

/// A definition value as received (JSON-like).
#[derive(Debug, Clone, PartialEq)]
pub enum DefValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// Anything else, as its JSON text.
    Other(String),
}

impl DefValue {
    fn describe(&self) -> String {
        match self {
            DefValue::Str(s) => format!("<<\"{s}\">>"),
            DefValue::Int(i) => i.to_string(),
            DefValue::Bool(b) => b.to_string(),
            DefValue::Other(o) => o.clone(),
        }
    }
}

/// Keys RabbitMQ accepts that Charon stores without acting on them.
const INERT_KEYS: &[&str] = &[
    "queue-mode",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "queue-master-locator",
    "queue-leader-locator",
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "federation-upstream-set",
    "federation-upstream",
    "max-age",
    "stream-max-segment-size-bytes",
    "initial-cluster-size",
    "dead-letter-strategy",
    "queue-version",
    "target-group-size",
];

/// A validated policy definition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyDefinition {
    /// `dead-letter-exchange`.
    pub dead_letter_exchange: Option<String>,
    /// `dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<String>,
    /// `alternate-exchange` (for exchanges; the exchange's own argument wins).
    pub alternate_exchange: Option<String>,
    /// `message-ttl` (ms).
    pub message_ttl: Option<u64>,
    /// `expires` (ms).
    pub expires: Option<u64>,
    /// `max-length`.
    pub max_length: Option<u64>,
    /// `max-length-bytes`.
    pub max_length_bytes: Option<u64>,
    /// `overflow`.
    pub overflow: Option<Overflow>,
    /// `delivery-limit` (any integer, negative = unlimited, as RabbitMQ 4.x validates it).
    pub delivery_limit: Option<i64>,
    /// `retry-*` keys (`crate::retry`).
    pub retry: crate::retry::RetryKeys,
    /// `consumer-timeout` (ms, RabbitMQ 3.12+).
    pub consumer_timeout: Option<u64>,
    /// Every key as given, in order, for listing.
    pub raw: Vec<(String, DefValue)>,
}

fn invalid(msg: String) -> PolicyError {
    PolicyError::Invalid(msg)
}

fn string(key: &str, v: &DefValue) -> Result<String, PolicyError> {
    match v {
        DefValue::Str(s) => Ok(s.clone()),
        other => Err(invalid(format!(
            "{key} should be a string, actually was {}",
            other.describe()
        ))),
    }
}

fn non_neg(key: &str, v: &DefValue, max: Option<i64>) -> Result<u64, PolicyError> {
    match v {
        DefValue::Int(i) if *i >= 0 && max.is_none_or(|m| *i <= m) => Ok(*i as u64),
        other => Err(invalid(format!(
            "{key} should be a non-negative integer{}, actually was {}",
            max.map(|m| format!(" no greater than {m}"))
                .unwrap_or_default(),
            other.describe()
        ))),
    }
}

impl PolicyDefinition {
    /// Validates `entries` (key, value) as RabbitMQ would for a policy definition.
    pub fn parse(entries: Vec<(String, DefValue)>) -> Result<Self, PolicyError> {
        if entries.is_empty() {
            return Err(invalid("no policy provided".into()));
        }
        let mut d = PolicyDefinition::default();
        let mut unknown = Vec::new();
        for (key, v) in &entries {
            match key.as_str() {
                "dead-letter-exchange" => d.dead_letter_exchange = Some(string(key, v)?),
                "dead-letter-routing-key" => d.dead_letter_routing_key = Some(string(key, v)?),
                // `rabbit_policies:validate_policy0`'s message.
                "alternate-exchange" => match v {
                    DefValue::Str(s) => d.alternate_exchange = Some(s.clone()),
                    other => {
                        return Err(invalid(format!(
                            "{} is not a valid alternate exchange name",
                            other.describe()
                        )));
                    }
                },
                "message-ttl" => d.message_ttl = Some(non_neg(key, v, Some(MAX_EXPIRY))?),
                "expires" => {
                    let e = non_neg(key, v, Some(MAX_EXPIRY))?;
                    if e == 0 {
                        return Err(invalid(format!(
                            "{key} should be a positive integer, actually was 0"
                        )));
                    }
                    d.expires = Some(e);
                }
                "max-length" => d.max_length = Some(non_neg(key, v, None)?),
                "consumer-timeout" => match v {
                    DefValue::Int(i) if *i >= 0 => d.consumer_timeout = Some(*i as u64),
                    other => {
                        return Err(invalid(format!(
                            "{} is not a valid consumer timeout",
                            other.describe()
                        )));
                    }
                },
                "max-length-bytes" => d.max_length_bytes = Some(non_neg(key, v, None)?),
                "delivery-limit" => match v {
                    DefValue::Int(i) => d.delivery_limit = Some(*i),
                    other => {
                        return Err(invalid(format!(
                            "{} is not a valid delivery limit",
                            other.describe()
                        )));
                    }
                },
                "overflow" => {
                    d.overflow = Some(match v {
                        DefValue::Str(s) if s == "drop-head" => Overflow::DropHead,
                        DefValue::Str(s) if s == "reject-publish" => Overflow::RejectPublish,
                        DefValue::Str(s) if s == "reject-publish-dlx" => Overflow::RejectPublishDlx,
                        other => {
                            return Err(invalid(format!(
                                "{} is not a valid overflow value",
                                other.describe()
                            )));
                        }
                    })
                }
                // The dead-letter archive (charon-server's `archive`): a boolean.
                "dead-letter-archive" => {
                    if !matches!(v, DefValue::Bool(_)) {
                        return Err(invalid(format!(
                            "{key} should be a boolean, actually was {}",
                            v.describe()
                        )));
                    }
                }
                k if INERT_KEYS.contains(&k) => {}
                k if k.starts_with("retry-")
                    && d.retry.parse_policy_key(k, v).map_err(invalid)? => {}
                _ => unknown.push(key.clone()),
            }
        }
        if !unknown.is_empty() {
            return Err(invalid(format!(
                "[{}] are not recognised policy settings",
                unknown
                    .iter()
                    .map(|k| format!("<<\"{k}\">>"))
                    .collect::<Vec<_>>()
                    .join(",")
            )));
        }
        if d.dead_letter_routing_key.is_some() && d.dead_letter_exchange.is_none() {
            // RabbitMQ accepts this in a policy; the key is used only with a DLX from somewhere.
        }
        d.raw = entries;
        Ok(d)
    }
}
