//! `charon ctl` verbs for RabbitMQ's vhost and user limits (`set_vhost_limits`,
//! `clear_vhost_limits`, `list_vhost_limits`, `set_user_limits`, `clear_user_limits`,
//! `list_user_limits`), as clients of `/api/vhost-limits` and `/api/user-limits`.

use anyhow::Context;
use serde_json::{Map, Value, json};

use super::client::{Client, enc};
use super::output::{Style, table};

/// A limits verb.
#[derive(clap::Subcommand, Debug)]
#[allow(clippy::enum_variant_names)] // rabbitmqctl's verb names
pub(crate) enum LimitsCommand {
    /// Sets the vhost's limits: `set_vhost_limits [-p VHOST] '{"max-connections": 10}'`.
    #[command(name = "set_vhost_limits")]
    SetVhostLimits { definition: String },
    /// Clears all of the vhost's limits.
    #[command(name = "clear_vhost_limits")]
    ClearVhostLimits,
    /// Lists the vhost's limits (`--global`: every vhost's).
    #[command(name = "list_vhost_limits")]
    ListVhostLimits {
        #[arg(long)]
        global: bool,
    },
    /// Sets a user's limits: `set_user_limits USER '{"max-channels": 10}'`.
    #[command(name = "set_user_limits")]
    SetUserLimits { user: String, definition: String },
    /// Clears a user's limit (`all` for every one): `clear_user_limits USER max-channels`.
    #[command(name = "clear_user_limits")]
    ClearUserLimits { user: String, name: String },
    /// Lists user limits (`--user NAME` for one user).
    #[command(name = "list_user_limits")]
    ListUserLimits {
        #[arg(long)]
        user: Option<String>,
    },
}

fn object(definition: &str) -> anyhow::Result<Map<String, Value>> {
    let v: Value = serde_json::from_str(definition)
        .with_context(|| format!("the limits are not valid JSON: {definition}"))?;
    match v {
        Value::Object(o) => Ok(o),
        _ => anyhow::bail!("the limits must be a JSON object: {definition}"),
    }
}

fn listing(c: &Client, style: Style, path: &str, key: &str) -> anyhow::Result<()> {
    let data = c.get(path)?;
    let columns = vec![key.to_string(), "limits".to_string()];
    let rows: Vec<Map<String, Value>> = data
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let mut m = Map::new();
            m.insert(key.into(), o.get(key).cloned().unwrap_or(Value::Null));
            m.insert(
                "limits".into(),
                o.get("value").cloned().unwrap_or(json!({})),
            );
            m
        })
        .collect();
    table(style, &columns, &rows);
    Ok(())
}

/// Runs a limits verb against `vhost`.
pub(super) fn run(c: &Client, style: Style, vhost: &str, cmd: LimitsCommand) -> anyhow::Result<()> {
    let v = enc(vhost);
    match cmd {
        LimitsCommand::SetVhostLimits { definition } => {
            let o = object(&definition)?;
            style.info(&format!(
                "Setting vhost limits to \"{definition}\" for vhost \"{vhost}\" ..."
            ));
            for (name, value) in o {
                let path = format!("/api/vhost-limits/{v}/{}", enc(&name));
                c.call("PUT", &path, Some(&json!({"value": value})), &[])?;
            }
        }
        LimitsCommand::ClearVhostLimits => {
            style.info(&format!("Clearing vhost \"{vhost}\" limits ..."));
            for name in ["max-connections", "max-queues"] {
                let path = format!("/api/vhost-limits/{v}/{name}");
                c.call("DELETE", &path, None, &[])?;
            }
        }
        LimitsCommand::ListVhostLimits { global } => {
            if global {
                style.info("Listing limits for all vhosts ...");
                listing(c, style, "/api/vhost-limits", "vhost")?;
            } else {
                style.info(&format!("Listing limits for vhost \"{vhost}\" ..."));
                listing(c, style, &format!("/api/vhost-limits/{v}"), "vhost")?;
            }
        }
        LimitsCommand::SetUserLimits { user, definition } => {
            let o = object(&definition)?;
            style.info(&format!(
                "Setting user limits to \"{definition}\" for user \"{user}\" ..."
            ));
            for (name, value) in o {
                let path = format!("/api/user-limits/{}/{}", enc(&user), enc(&name));
                c.call("PUT", &path, Some(&json!({"value": value})), &[])?;
            }
        }
        LimitsCommand::ClearUserLimits { user, name } => {
            style.info(&format!(
                "Clearing \"{name}\" limit for user \"{user}\" ..."
            ));
            let names: Vec<&str> = if name == "all" {
                vec!["max-connections", "max-channels"]
            } else {
                vec![name.as_str()]
            };
            for n in names {
                let path = format!("/api/user-limits/{}/{}", enc(&user), enc(n));
                c.call("DELETE", &path, None, &[])?;
            }
        }
        LimitsCommand::ListUserLimits { user } => match user {
            Some(u) => {
                style.info(&format!("Listing limits for user \"{u}\" ..."));
                listing(c, style, &format!("/api/user-limits/{}", enc(&u)), "user")?;
            }
            None => {
                style.info("Listing limits for all users ...");
                listing(c, style, "/api/user-limits", "user")?;
            }
        },
    }
    Ok(())
}
