//! `charon ctl`: a `rabbitmqctl`-style command line that is a client of the management HTTP API
//! (never a back door into the broker's state). Command names and flags mirror `rabbitmqctl`.

use anyhow::{Context, bail};
use base64::Engine;
use clap::{Args, Subcommand};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// Connection flags shared by every `ctl` command.
#[derive(Args, Debug)]
pub(crate) struct CtlArgs {
    /// Management API base URL.
    #[arg(
        long,
        env = "CHARON_HTTP_URL",
        default_value = "http://127.0.0.1:15672"
    )]
    url: String,
    /// User for the management API.
    #[arg(long, env = "CHARON_USER", default_value = "guest")]
    username: String,
    /// Password for the management API.
    #[arg(long, env = "CHARON_PASSWORD", default_value = "guest")]
    password: String,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand, Debug)]
enum CtlCommand {
    /// Sets a policy: `set_policy NAME PATTERN DEFINITION [--apply-to queues] [--priority 7]`.
    #[command(name = "set_policy")]
    SetPolicy {
        /// Virtual host.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// What the policy applies to: queues, exchanges or all.
        #[arg(long = "apply-to", default_value = "all")]
        apply_to: String,
        /// Priority; the highest-priority matching policy applies.
        #[arg(long, default_value_t = 0)]
        priority: i64,
        /// Policy name.
        name: String,
        /// Regular expression matched against queue/exchange names.
        pattern: String,
        /// Definition, a JSON object such as '{"dead-letter-exchange":"my-dlx"}'.
        definition: String,
    },
    /// Clears a policy: `clear_policy NAME`.
    #[command(name = "clear_policy")]
    ClearPolicy {
        /// Virtual host.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// Policy name.
        name: String,
    },
    /// Lists the queues of a vhost with their counts.
    #[command(name = "list_queues")]
    ListQueues {
        /// Virtual host.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
    },
    /// The dead-letter archive: list, get, groups, edit, replay, job(s), cancel, skip, delete,
    /// audit, stats (docs/archive.md).
    #[command(subcommand)]
    Dlq(Box<crate::dlq::DlqCommand>),
    /// Lists the policies of a vhost.
    #[command(name = "list_policies")]
    ListPolicies {
        /// Virtual host.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
    },
}

struct Client {
    agent: ureq::Agent,
    base: String,
    auth: String,
}

impl Client {
    fn new(args: &CtlArgs) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", args.username, args.password));
        Self {
            agent,
            base: args.url.trim_end_matches('/').to_string(),
            auth: format!("Basic {token}"),
        }
    }

    /// Sends a request; returns the JSON body (Null when empty) or fails with the API's reason.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let url = format!("{}{}", self.base, path);
        let result = match (method, body) {
            ("PUT", Some(b)) => self
                .agent
                .put(&url)
                .header("Authorization", &self.auth)
                .send_json(b),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("Authorization", &self.auth)
                .call(),
            _ => self
                .agent
                .get(&url)
                .header("Authorization", &self.auth)
                .call(),
        };
        let mut resp =
            result.with_context(|| format!("cannot reach the management API at {url}"))?;
        let status = resp.status();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let reason = value
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            bail!("Error: {reason} (HTTP {})", status.as_u16());
        }
        Ok(value)
    }
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// Runs one `ctl` command, printing what `rabbitmqctl` would.
pub(crate) fn run(args: CtlArgs) -> anyhow::Result<()> {
    let client = Client::new(&args);
    match args.command {
        CtlCommand::Dlq(cmd) => {
            return crate::dlq::run(&args.url, &args.username, &args.password, *cmd);
        }
        CtlCommand::SetPolicy {
            vhost,
            apply_to,
            priority,
            name,
            pattern,
            definition,
        } => {
            let def: Value = serde_json::from_str(&definition)
                .with_context(|| format!("the definition is not valid JSON: {definition}"))?;
            println!(
                "Setting policy \"{name}\" for pattern \"{pattern}\" to \"{definition}\" with priority \"{priority}\" for vhost \"{vhost}\" ..."
            );
            let body = serde_json::json!({
                "pattern": pattern,
                "definition": def,
                "priority": priority,
                "apply-to": apply_to,
            });
            client.call(
                "PUT",
                &format!("/api/policies/{}/{}", enc(&vhost), enc(&name)),
                Some(&body),
            )?;
        }
        CtlCommand::ClearPolicy { vhost, name } => {
            println!("Clearing policy \"{name}\" on vhost \"{vhost}\" ...");
            client.call(
                "DELETE",
                &format!("/api/policies/{}/{}", enc(&vhost), enc(&name)),
                None,
            )?;
        }
        CtlCommand::ListQueues { vhost } => {
            println!("Timeout: 60.0 seconds ...\nListing queues for vhost {vhost} ...");
            let list = client.call("GET", &format!("/api/queues/{}", enc(&vhost)), None)?;
            println!(
                "name\tmessages\tmessages_unacknowledged\tconsumers\tpolicy\tdead_letters_dropped_no_dlx"
            );
            for q in list.as_array().map(Vec::as_slice).unwrap_or_default() {
                let s = |k: &str| match q.get(k) {
                    Some(Value::String(v)) => v.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(v) => v.to_string(),
                };
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    s("name"),
                    s("messages_ready"),
                    s("messages_unacknowledged"),
                    s("consumers"),
                    s("policy"),
                    s("dead_letters_dropped_no_dlx")
                );
            }
        }
        CtlCommand::ListPolicies { vhost } => {
            println!("Listing policies for vhost \"{vhost}\" ...");
            let list = client.call("GET", &format!("/api/policies/{}", enc(&vhost)), None)?;
            println!("vhost\tname\tpattern\tapply-to\tdefinition\tpriority");
            for p in list.as_array().map(Vec::as_slice).unwrap_or_default() {
                let s = |k: &str| {
                    p.get(k)
                        .map(|v| v.as_str().map(str::to_string).unwrap_or(v.to_string()))
                        .unwrap_or_default()
                };
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    s("vhost"),
                    s("name"),
                    s("pattern"),
                    s("apply-to"),
                    s("definition"),
                    s("priority")
                );
            }
        }
    }
    Ok(())
}
