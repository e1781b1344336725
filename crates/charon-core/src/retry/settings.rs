//! Retry settings: the `x-retry-*` queue arguments and `retry-*` policy keys, their validation
//! (RabbitMQ-style errors: `{value_negative,-1}` for an argument, "retry-limit should be a
//! non-negative integer, actually was -1" for a policy), and the effective settings a queue runs
//! with, by RabbitMQ's argument-vs-policy rule: a limit (`retry-limit`) takes the smaller of the
//! two; every other key is taken from the argument when the queue has it. The schedule is one
//! unit: when the arguments name one (`x-retry-delays` or `x-retry-backoff-initial`) the
//! policy's schedule is ignored.

use charon_protocol::{AMQPValue, FieldTable};

use crate::policy::DefValue;
use crate::value::{as_int_arg, as_longstr, lookup, type_name};

use super::{OrderKey, RetrySettings, Schedule};

/// Longest delay accepted (ten years in ms, as for `x-message-ttl`).
pub const MAX_DELAY: u64 = 315_360_000_000;
/// Most entries in a `retry-delays` list.
pub const MAX_DELAYS: usize = 1000;
/// Default attempts when only a backoff is given.
pub const DEFAULT_LIMIT: u32 = 3;
/// Default first delay (ms) when only `retry-limit` is given.
pub const DEFAULT_INITIAL: u64 = 1000;

/// Retry keys as given on one side (arguments or policy), validated but not combined.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RetryKeys {
    /// `retry-limit`.
    pub limit: Option<u32>,
    /// `retry-backoff-initial` (ms).
    pub initial: Option<u64>,
    /// `retry-backoff-multiplier`.
    pub multiplier: Option<f64>,
    /// `retry-backoff-max` (ms).
    pub max: Option<u64>,
    /// `retry-backoff-jitter` (0..=1).
    pub jitter: Option<f64>,
    /// `retry-delays` (ms each).
    pub delays: Option<Vec<u64>>,
    /// `retry-on-requeue`.
    pub on_requeue: Option<bool>,
    /// `retry-order-key`.
    pub order_key: Option<OrderKey>,
}

/// The argument names, in validation order.
pub const RETRY_ARGS: &[&str] = &[
    "x-retry-limit",
    "x-retry-backoff-initial",
    "x-retry-backoff-multiplier",
    "x-retry-backoff-max",
    "x-retry-backoff-jitter",
    "x-retry-delays",
    "x-retry-on-requeue",
    "x-retry-order-key",
];

/// The policy keys.
pub const RETRY_POLICY_KEYS: &[&str] = &[
    "retry-limit",
    "retry-backoff-initial",
    "retry-backoff-multiplier",
    "retry-backoff-max",
    "retry-backoff-jitter",
    "retry-delays",
    "retry-on-requeue",
    "retry-order-key",
];

fn as_float(v: &AMQPValue) -> Option<f64> {
    match v {
        AMQPValue::Float(f) => Some(f64::from(*f)),
        AMQPValue::Double(d) => Some(*d),
        AMQPValue::DecimalValue(d) => Some(f64::from(d.value) / 10f64.powi(i32::from(d.scale))),
        other => as_int_arg(other).map(|i| i as f64),
    }
}

fn arg_delay(v: &AMQPValue) -> Result<u64, String> {
    let i = as_int_arg(v).ok_or_else(|| format!("\"expected integer, got {}\"", type_name(v)))?;
    if i < 0 {
        return Err(format!("{{value_negative,{i}}}"));
    }
    let u = i as u64;
    if u > MAX_DELAY {
        return Err(format!("{{value_too_large,{i}}}"));
    }
    Ok(u)
}

/// Validates one argument; `Err` is the Erlang-style reason.
fn parse_arg(keys: &mut RetryKeys, key: &str, v: &AMQPValue) -> Result<(), String> {
    match key {
        "x-retry-limit" => {
            let d = arg_delay(v)?;
            keys.limit = Some(u32::try_from(d).map_err(|_| format!("{{value_too_large,{d}}}"))?);
        }
        "x-retry-backoff-initial" => keys.initial = Some(arg_delay(v)?),
        "x-retry-backoff-max" => keys.max = Some(arg_delay(v)?),
        "x-retry-backoff-multiplier" => {
            let f = as_float(v).ok_or_else(|| format!("{{unacceptable_type,{}}}", type_name(v)))?;
            if !(1.0..=1000.0).contains(&f) {
                return Err(format!("{{value_out_of_range,{f}}}"));
            }
            keys.multiplier = Some(f);
        }
        "x-retry-backoff-jitter" => {
            let f = as_float(v).ok_or_else(|| format!("{{unacceptable_type,{}}}", type_name(v)))?;
            if !(0.0..=1.0).contains(&f) {
                return Err(format!("{{value_out_of_range,{f}}}"));
            }
            keys.jitter = Some(f);
        }
        "x-retry-delays" => {
            let AMQPValue::FieldArray(a) = v else {
                return Err(format!("{{unacceptable_type,{}}}", type_name(v)));
            };
            let list = a
                .as_slice()
                .iter()
                .map(arg_delay)
                .collect::<Result<Vec<_>, _>>()?;
            if list.is_empty() || list.len() > MAX_DELAYS {
                return Err(format!("{{invalid_length,{}}}", list.len()));
            }
            keys.delays = Some(list);
        }
        "x-retry-on-requeue" => match v {
            AMQPValue::Boolean(b) => keys.on_requeue = Some(*b),
            other => return Err(format!("{{unacceptable_type,{}}}", type_name(other))),
        },
        "x-retry-order-key" => match as_longstr(v) {
            Some(s) if !s.is_empty() => {
                keys.order_key = Some(OrderKey::parse(&String::from_utf8_lossy(s)));
            }
            Some(_) => return Err("{value_empty,<<>>}".to_string()),
            None => return Err(format!("{{unacceptable_type,{}}}", type_name(v))),
        },
        _ => {}
    }
    Ok(())
}

impl RetryKeys {
    /// Parses the `x-retry-*` arguments of `args`. `Err((arg, reason))` names the first bad one.
    pub fn from_args(args: &FieldTable) -> Result<Self, (String, String)> {
        let mut keys = RetryKeys::default();
        for key in RETRY_ARGS {
            if let Some(v) = lookup(args, key) {
                parse_arg(&mut keys, key, v).map_err(|r| ((*key).to_string(), r))?;
            }
        }
        Ok(keys)
    }

    /// Whether any key is set.
    pub fn is_empty(&self) -> bool {
        *self == RetryKeys::default()
    }

    /// Parses one policy key (`retry-*`); `Ok(false)` when `key` is not a retry key.
    pub fn parse_policy_key(&mut self, key: &str, v: &DefValue) -> Result<bool, String> {
        let describe = || match v {
            DefValue::Str(s) => format!("<<\"{s}\">>"),
            DefValue::Int(i) => i.to_string(),
            DefValue::Bool(b) => b.to_string(),
            DefValue::Other(o) => o.clone(),
        };
        let delay = |what: &str| -> Result<u64, String> {
            match v {
                DefValue::Int(i) if *i >= 0 && (*i as u64) <= MAX_DELAY => Ok(*i as u64),
                _ => Err(format!(
                    "{key} should be {what}, actually was {}",
                    describe()
                )),
            }
        };
        let float = |lo: f64, hi: f64| -> Result<f64, String> {
            let f = match v {
                DefValue::Int(i) => Some(*i as f64),
                DefValue::Other(o) => o.trim().parse::<f64>().ok(),
                _ => None,
            };
            match f {
                Some(f) if (lo..=hi).contains(&f) => Ok(f),
                _ => Err(format!(
                    "{key} should be a number between {lo} and {hi}, actually was {}",
                    describe()
                )),
            }
        };
        match key {
            "retry-limit" => {
                let d = delay("a non-negative integer")?;
                self.limit = Some(u32::try_from(d).map_err(|_| {
                    format!("{key} should be a non-negative integer, actually was {d}")
                })?);
            }
            "retry-backoff-initial" => self.initial = Some(delay("a non-negative integer")?),
            "retry-backoff-max" => self.max = Some(delay("a non-negative integer")?),
            "retry-backoff-multiplier" => self.multiplier = Some(float(1.0, 1000.0)?),
            "retry-backoff-jitter" => self.jitter = Some(float(0.0, 1.0)?),
            "retry-delays" => {
                let bad = || {
                    format!(
                        "{key} should be a non-empty list of non-negative integers, actually was {}",
                        describe()
                    )
                };
                let DefValue::Other(text) = v else {
                    return Err(bad());
                };
                let inner = text
                    .trim()
                    .strip_prefix('[')
                    .and_then(|t| t.strip_suffix(']'))
                    .ok_or_else(bad)?;
                let list = inner
                    .split(',')
                    .map(|s| s.trim().parse::<u64>().ok().filter(|d| *d <= MAX_DELAY))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(bad)?;
                if list.is_empty() || list.len() > MAX_DELAYS {
                    return Err(bad());
                }
                self.delays = Some(list);
            }
            "retry-on-requeue" => match v {
                DefValue::Bool(b) => self.on_requeue = Some(*b),
                _ => {
                    return Err(format!(
                        "{key} should be a boolean, actually was {}",
                        describe()
                    ));
                }
            },
            "retry-order-key" => match v {
                DefValue::Str(s) if !s.is_empty() => self.order_key = Some(OrderKey::parse(s)),
                _ => {
                    return Err(format!(
                        "{key} should be a non-empty string, actually was {}",
                        describe()
                    ));
                }
            },
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn names_schedule(&self) -> bool {
        self.delays.is_some() || self.initial.is_some()
    }

    /// The settings a queue runs with: `self` (its arguments) combined with `policy`. `None`
    /// when neither side turns retries on (no limit, no delays, no initial backoff).
    pub fn resolve(&self, policy: Option<&RetryKeys>) -> Option<RetrySettings> {
        let empty = RetryKeys::default();
        let p = policy.unwrap_or(&empty);
        let limit = match (self.limit, p.limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sched = if self.names_schedule() { self } else { p };
        if limit.is_none() && !sched.names_schedule() {
            return None;
        }
        let schedule = match &sched.delays {
            Some(d) => Schedule::Delays(d.clone()),
            None => Schedule::Backoff {
                initial: sched.initial.unwrap_or(DEFAULT_INITIAL),
                multiplier: self.multiplier.or(p.multiplier).unwrap_or(1.0),
                max: self.max.or(p.max),
                jitter: self.jitter.or(p.jitter).unwrap_or(0.0),
            },
        };
        let limit = limit.unwrap_or(match &schedule {
            Schedule::Delays(d) => u32::try_from(d.len()).unwrap_or(u32::MAX),
            Schedule::Backoff { .. } => DEFAULT_LIMIT,
        });
        Some(RetrySettings {
            limit,
            schedule,
            on_requeue: self.on_requeue.or(p.on_requeue).unwrap_or(false),
            order_key: self.order_key.clone().or_else(|| p.order_key.clone()),
        })
    }
}
