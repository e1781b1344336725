//! Setting, clearing and listing policies and operator policies of a vhost, and applying them at
//! once to its existing exchanges and queues (each queue actor gets its new effective settings). The management
//! API and `charon ctl` go through these functions; nothing else changes policies.

use charon_core::{ApplyTo, DefValue, Policy, PolicyDefinition, PolicyError};

use crate::broker::Broker;
use crate::handles::QueueCmd;
use crate::locks::RwLockExt;
use crate::vhost::VHostState;

/// A policy as submitted (`PUT /api/policies/{vhost}/{name}`).
#[derive(Debug, Clone)]
pub struct PolicyInput {
    /// Name.
    pub name: String,
    /// Regular expression over queue/exchange names.
    pub pattern: String,
    /// Definition entries, in order.
    pub definition: Vec<(String, DefValue)>,
    /// Priority (higher wins).
    pub priority: i64,
    /// `queues`, `exchanges` or `all`.
    pub apply_to: String,
}

/// Whether a set created or replaced a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySetOutcome {
    /// A new policy.
    Created,
    /// An existing policy was replaced.
    Updated,
}

/// A policy as listed.
#[derive(Debug, Clone)]
pub struct PolicyView {
    /// Vhost.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Pattern.
    pub pattern: String,
    /// apply-to.
    pub apply_to: &'static str,
    /// Definition entries as given.
    pub definition: Vec<(String, DefValue)>,
    /// Priority.
    pub priority: i64,
}

/// Which of a vhost's two policy sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Users' policies (`/api/policies`).
    User,
    /// Operator policies (`/api/operator-policies`): only operator keys, merged over the user
    /// policy (charon-core's `merge_operator`).
    Operator,
}

impl VHostState {
    fn policy_set(&self, kind: PolicyKind) -> &std::sync::RwLock<charon_core::Policies> {
        match kind {
            PolicyKind::User => &self.policies,
            PolicyKind::Operator => &self.operator_policies,
        }
    }
}

/// Why a policy change was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyChangeError {
    /// No such vhost.
    #[error("no such vhost")]
    NoVHost,
    /// Validation failed.
    #[error(transparent)]
    Invalid(#[from] PolicyError),
}

/// A definition value from JSON (the management API's and the store's encoding).
pub fn def_value_from_json(v: &serde_json::Value) -> DefValue {
    match v {
        serde_json::Value::String(s) => DefValue::Str(s.clone()),
        serde_json::Value::Bool(b) => DefValue::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => DefValue::Int(i),
            None => DefValue::Other(n.to_string()),
        },
        other => DefValue::Other(other.to_string()),
    }
}

/// A definition value as JSON.
pub fn def_value_to_json(v: &DefValue) -> serde_json::Value {
    match v {
        DefValue::Str(s) => serde_json::Value::String(s.clone()),
        DefValue::Int(i) => serde_json::Value::from(*i),
        DefValue::Bool(b) => serde_json::Value::Bool(*b),
        DefValue::Other(o) => {
            serde_json::from_str(o).unwrap_or_else(|_| serde_json::Value::String(o.clone()))
        }
    }
}

/// A whole definition as a JSON object, in its order.
pub fn definition_to_json(definition: &[(String, DefValue)]) -> serde_json::Value {
    serde_json::Value::Object(
        definition
            .iter()
            .map(|(k, v)| (k.clone(), def_value_to_json(v)))
            .collect(),
    )
}

fn definition_from_json(text: &str) -> Vec<(String, DefValue)> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => map
            .iter()
            .map(|(k, v)| (k.clone(), def_value_from_json(v)))
            .collect(),
        _ => Vec::new(),
    }
}

/// Saves a vhost's policies of `kind` to the store (no-op without one).
fn save(vhost: &VHostState, kind: PolicyKind) {
    let Some(p) = vhost.persistence() else {
        return;
    };
    let rows: Vec<_> = {
        let ps = vhost.policy_set(kind).read_recover();
        ps.iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.pattern.clone(),
                    p.apply_to.as_str().to_string(),
                    p.priority,
                    definition_to_json(&p.definition.raw).to_string(),
                )
            })
            .collect()
    };
    // Durable with the next group commit; the management API waits for it
    // (`Broker::wait_durable`) before it replies.
    let encoded = crate::persist::encode_policies(&rows);
    drop(match kind {
        PolicyKind::User => p.save_policies(&vhost.name, encoded),
        PolicyKind::Operator => p.save_operator_policies(&vhost.name, encoded),
    });
}

/// Applies the policies to every exchange of `vhost` (their alternate exchanges) and sends every
/// queue its current effective settings.
fn reapply(vhost: &VHostState) {
    vhost.apply_exchange_policies();
    let topo = vhost.topology.read_recover();
    for entry in topo.queues() {
        let args = vhost.effective_args(&entry.meta);
        let handle = entry.handle.clone();
        handle.set_consumer_timeout(args.consumer_timeout);
        if let Err(Some(cmd)) = handle.try_send(QueueCmd::SetArgs {
            args: Box::new(args),
        }) {
            tokio::spawn(async move { handle.send(cmd).await });
        }
    }
}

impl Broker {
    /// Sets (creates or replaces) a policy and applies it to existing queues at once.
    pub fn set_policy(
        &self,
        vhost: &str,
        input: PolicyInput,
    ) -> Result<PolicySetOutcome, PolicyChangeError> {
        self.set_policy_of(PolicyKind::User, vhost, input)
    }

    /// Clears a policy; false when the vhost or policy does not exist.
    pub fn clear_policy(&self, vhost: &str, name: &str) -> bool {
        self.clear_policy_of(PolicyKind::User, vhost, name)
    }

    /// Policies of one vhost, or of all vhosts.
    pub fn list_policies(&self, vhost: Option<&str>) -> Vec<PolicyView> {
        self.list_policies_of(PolicyKind::User, vhost)
    }

    /// Sets (creates or replaces) a policy of `kind` and applies it to existing queues at once.
    pub fn set_policy_of(
        &self,
        kind: PolicyKind,
        vhost: &str,
        input: PolicyInput,
    ) -> Result<PolicySetOutcome, PolicyChangeError> {
        let v = self.vhost(vhost).ok_or(PolicyChangeError::NoVHost)?;
        let apply_to = ApplyTo::parse(&input.apply_to)?;
        let definition = match kind {
            PolicyKind::User => PolicyDefinition::parse(input.definition)?,
            PolicyKind::Operator => PolicyDefinition::parse_operator(input.definition)?,
        };
        let policy = Policy::new(
            &input.name,
            &input.pattern,
            apply_to,
            input.priority,
            definition,
        )?;
        let created = {
            let mut ps = v.policy_set(kind).write_recover();
            ps.set(policy)
        };
        save(&v, kind);
        reapply(&v);
        Ok(if created {
            PolicySetOutcome::Created
        } else {
            PolicySetOutcome::Updated
        })
    }

    /// Clears a policy of `kind`; false when the vhost or policy does not exist.
    pub fn clear_policy_of(&self, kind: PolicyKind, vhost: &str, name: &str) -> bool {
        let Some(v) = self.vhost(vhost) else {
            return false;
        };
        let removed = {
            let mut ps = v.policy_set(kind).write_recover();
            ps.clear(name)
        };
        if removed {
            save(&v, kind);
            reapply(&v);
        }
        removed
    }

    /// Restores a vhost's saved policies of `kind` (at start, before its queues).
    pub(crate) fn restore_policies(
        &self,
        vhost: &VHostState,
        kind: PolicyKind,
        data: bytes::Bytes,
    ) {
        for (name, pattern, apply_to, priority, def) in crate::persist::decode_policies(data) {
            let policy = ApplyTo::parse(&apply_to).and_then(|a| {
                let entries = definition_from_json(&def);
                let d = match kind {
                    PolicyKind::User => PolicyDefinition::parse(entries)?,
                    PolicyKind::Operator => PolicyDefinition::parse_operator(entries)?,
                };
                Policy::new(&name, &pattern, a, priority, d)
            });
            match policy {
                Ok(p) => {
                    vhost.policy_set(kind).write_recover().set(p);
                }
                Err(e) => tracing::warn!(policy = %name, error = %e, "could not restore a policy"),
            }
        }
    }

    /// Policies of `kind` of one vhost, or of all vhosts.
    pub fn list_policies_of(&self, kind: PolicyKind, vhost: Option<&str>) -> Vec<PolicyView> {
        let mut out = Vec::new();
        for v in self.vhosts() {
            if vhost.is_some_and(|n| n != &*v.name) {
                continue;
            }
            let ps = v.policy_set(kind).read_recover();
            for p in ps.iter() {
                out.push(PolicyView {
                    vhost: v.name.to_string(),
                    name: p.name.clone(),
                    pattern: p.pattern.clone(),
                    apply_to: p.apply_to.as_str(),
                    definition: p.definition.raw.clone(),
                    priority: p.priority,
                });
            }
        }
        out
    }
}
