//! The verbs: each one API call or a few, printed as rabbitmqctl prints them.

use anyhow::Context;
use serde_json::{Map, Value, json};

use super::CtlCommand;
use super::client::{Client, enc};
use super::output::{Style, cell, lookup, table};

/// Column → field of the API object, where rabbitmqctl's name differs.
fn field(kind: &str, col: &str) -> String {
    let f = match (kind, col) {
        ("bindings", "source_name") => "source",
        ("bindings", "destination_name") => "destination",
        ("bindings", "destination_kind") => "destination_type",
        ("consumers", "queue_name") => "queue.name",
        ("consumers", "channel_pid") => "channel_details.name",
        ("channels", "pid") => "name",
        ("connections", "pid") => "name",
        ("users", "user") => "name",
        ("queues", "pid") => "node",
        _ => col,
    };
    f.to_string()
}

fn rows(kind: &str, list: &Value, columns: &[String]) -> Vec<Map<String, Value>> {
    list.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|o| {
            columns
                .iter()
                .map(|c| {
                    let v = if kind == "bindings" && c == "source_kind" {
                        Value::from("exchange")
                    } else {
                        lookup(o, &field(kind, c)).cloned().unwrap_or(Value::Null)
                    };
                    (c.clone(), v)
                })
                .collect()
        })
        .collect()
}

fn cols(given: Vec<String>, default: &[&str]) -> Vec<String> {
    if given.is_empty() {
        default.iter().map(|s| s.to_string()).collect()
    } else {
        given
    }
}

fn list(
    c: &Client,
    style: Style,
    kind: &str,
    path: &str,
    columns: Vec<String>,
    default: &[&str],
    info: &str,
) -> anyhow::Result<()> {
    style.info(info);
    let data = c.get(path)?;
    let columns = cols(columns, default);
    table(style, &columns, &rows(kind, &data, &columns));
    Ok(())
}

/// `set_policy` / `set_operator_policy`: PUT under `/api/{path}`.
fn set_policy(
    c: &Client,
    style: Style,
    vhost: &str,
    path: &str,
    what: &str,
    [apply_to, name, pattern, definition]: [String; 4],
    priority: i64,
) -> anyhow::Result<()> {
    let def: Value = serde_json::from_str(&definition)
        .with_context(|| format!("the definition is not valid JSON: {definition}"))?;
    style.info(&format!(
        "Setting {what} \"{name}\" for pattern \"{pattern}\" to \"{definition}\" with priority \"{priority}\" for vhost \"{vhost}\" ..."
    ));
    let body =
        json!({"pattern": pattern, "definition": def, "priority": priority, "apply-to": apply_to});
    c.call(
        "PUT",
        &format!("/api/{path}/{}/{}", enc(vhost), enc(&name)),
        Some(&body),
        &[],
    )?;
    Ok(())
}

fn status(c: &Client, style: Style) -> anyhow::Result<()> {
    let nodes = c.get("/api/nodes")?;
    let n = nodes.get(0).cloned().unwrap_or(Value::Null);
    let o = c.get("/api/overview")?;
    if style.json {
        println!("{}", json!({"node": n, "overview": o}));
        return Ok(());
    }
    let s = |v: &Value, k: &str| cell(lookup(v, k));
    println!("Status of node {} ...", s(&n, "name"));
    println!(
        "Runtime\n\nOS PID: {}\nProduct name: {}\nProduct version: {}\nRabbitMQ version (API): {}\nUptime (seconds): {}",
        s(&n, "os_pid"),
        s(&o, "product_name"),
        s(&o, "product_version"),
        s(&o, "rabbitmq_version"),
        n.get("uptime").and_then(Value::as_u64).unwrap_or(0) / 1000
    );
    println!(
        "\nData directory\n\nNode data directory: {}",
        s(&n, "db_dir")
    );
    let alarms: Vec<String> = n
        .get("alarms")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| cell(Some(x))).collect())
        .unwrap_or_default();
    println!("\nAlarms\n");
    if alarms.is_empty() {
        println!("(none)");
    } else {
        for a in alarms {
            println!("resource alarm: {a}");
        }
    }
    println!(
        "\nMemory\n\nTotal memory used: {} bytes\nCalculation strategy: {}\nMemory high watermark: {} bytes\nResident set (rss): {} bytes\nAllocator ({}): {} bytes",
        s(&n, "mem_used"),
        s(&n, "mem_calculation_strategy"),
        s(&n, "mem_limit"),
        s(&n, "mem_rss"),
        s(&n, "mem_allocator"),
        s(&n, "mem_allocated")
    );
    println!(
        "\nFile Descriptors\n\nTotal: {}, limit: {}",
        s(&n, "fd_used"),
        s(&n, "fd_total")
    );
    println!(
        "\nFree Disk Space\n\nLow free disk space watermark: {} bytes\nFree disk space: {} bytes",
        s(&n, "disk_free_limit"),
        s(&n, "disk_free")
    );
    println!(
        "\nTotals\n\nConnection count: {}\nQueue count: {}\nVirtual host count: {}",
        s(&o, "object_totals.connections"),
        s(&o, "object_totals.queues"),
        c.get("/api/vhosts")?.as_array().map_or(0, Vec::len)
    );
    println!("\nListeners\n");
    for l in o
        .get("listeners")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        println!(
            "Interface: {}, port: {}, protocol: {}",
            s(l, "ip_address"),
            s(l, "port"),
            s(l, "protocol")
        );
    }
    Ok(())
}

fn read_input(path: &str) -> anyhow::Result<String> {
    if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
    }
}

/// Runs one verb.
pub(super) fn run(c: &Client, style: Style, vhost: &str, cmd: CtlCommand) -> anyhow::Result<()> {
    let v = enc(vhost);
    match cmd {
        CtlCommand::Status => status(c, style)?,
        CtlCommand::Alarms => {
            let nodes = c.get("/api/nodes")?;
            let n = nodes.get(0).cloned().unwrap_or(Value::Null);
            let name = cell(n.get("name"));
            let alarms = n.get("alarms").cloned().unwrap_or(json!([]));
            if style.json {
                println!("{alarms}");
            } else {
                style.info(&format!(
                    "Asking node {name} to report any known resource alarms ..."
                ));
                match alarms.as_array().filter(|a| !a.is_empty()) {
                    None => println!("Node {name} reported no alarms, local or clustered"),
                    Some(a) => {
                        for x in a {
                            println!("Node {name} reported an alarm: resource: {}", cell(Some(x)));
                        }
                    }
                }
            }
        }
        CtlCommand::Environment => {
            let env = c.get("/api/charon/environment")?;
            if style.json {
                println!("{env}");
            } else {
                style.info("Application environment of node charon ...");
                for (k, val) in env.as_object().into_iter().flatten() {
                    println!("{k} = {}", cell(Some(val)));
                }
            }
        }
        CtlCommand::ListQueues { columns } => list(
            c,
            style,
            "queues",
            &format!("/api/queues/{v}"),
            columns,
            &["name", "messages"],
            &format!("Timeout: 60.0 seconds ...\nListing queues for vhost {vhost} ..."),
        )?,
        CtlCommand::ListExchanges { columns } => list(
            c,
            style,
            "exchanges",
            &format!("/api/exchanges/{v}"),
            columns,
            &["name", "type"],
            &format!("Listing exchanges for vhost {vhost} ..."),
        )?,
        CtlCommand::ListBindings { columns } => list(
            c,
            style,
            "bindings",
            &format!("/api/bindings/{v}"),
            columns,
            &[
                "source_name",
                "source_kind",
                "destination_name",
                "destination_kind",
                "routing_key",
                "arguments",
            ],
            &format!("Listing bindings for vhost {vhost}..."),
        )?,
        CtlCommand::ListConnections { columns } => list(
            c,
            style,
            "connections",
            "/api/connections",
            columns,
            &["user", "peer_host", "peer_port", "state"],
            "Listing connections ...",
        )?,
        CtlCommand::ListChannels { columns } => list(
            c,
            style,
            "channels",
            "/api/channels",
            columns,
            &["pid", "user", "consumer_count", "messages_unacknowledged"],
            "Listing channels ...",
        )?,
        CtlCommand::ListConsumers { columns } => list(
            c,
            style,
            "consumers",
            &format!("/api/consumers/{v}"),
            columns,
            &[
                "queue_name",
                "channel_pid",
                "consumer_tag",
                "ack_required",
                "prefetch_count",
                "active",
                "arguments",
            ],
            &format!("Listing consumers in vhost {vhost} ..."),
        )?,
        CtlCommand::ListUsers { columns } => list(
            c,
            style,
            "users",
            "/api/users",
            columns,
            &["user", "tags"],
            "Listing users ...",
        )?,
        CtlCommand::ListVhosts { columns } => list(
            c,
            style,
            "vhosts",
            "/api/vhosts",
            columns,
            &["name"],
            "Listing vhosts ...",
        )?,
        CtlCommand::ListPermissions => list(
            c,
            style,
            "permissions",
            &format!("/api/vhosts/{v}/permissions"),
            Vec::new(),
            &["user", "configure", "write", "read"],
            &format!("Listing permissions for vhost \"{vhost}\" ..."),
        )?,
        CtlCommand::ListUserPermissions { user } => list(
            c,
            style,
            "permissions",
            &format!("/api/users/{}/permissions", enc(&user)),
            Vec::new(),
            &["vhost", "configure", "write", "read"],
            &format!("Listing permissions for user \"{user}\" ..."),
        )?,
        CtlCommand::ListPolicies | CtlCommand::ListOperatorPolicies => {
            let (path, what) = if matches!(cmd, CtlCommand::ListOperatorPolicies) {
                ("operator-policies", "operator policy overrides")
            } else {
                ("policies", "policies")
            };
            list(
                c,
                style,
                "policies",
                &format!("/api/{path}/{v}"),
                Vec::new(),
                &[
                    "vhost",
                    "name",
                    "pattern",
                    "apply-to",
                    "definition",
                    "priority",
                ],
                &format!("Listing {what} for vhost \"{vhost}\" ..."),
            )?
        }
        CtlCommand::AddUser { name, password } => {
            style.info(&format!("Adding user \"{name}\" ..."));
            if c.get(&format!("/api/users/{}", enc(&name))).is_ok() {
                anyhow::bail!(super::CtlError {
                    message: format!("user '{name}' already exists"),
                    code: 65
                });
            }
            c.call(
                "PUT",
                &format!("/api/users/{}", enc(&name)),
                Some(&json!({"password": password, "tags": ""})),
                &[],
            )?;
        }
        CtlCommand::DeleteUser { name } => {
            style.info(&format!("Deleting user \"{name}\" ..."));
            c.call("DELETE", &format!("/api/users/{}", enc(&name)), None, &[])?;
        }
        CtlCommand::ChangePassword { name, password } => {
            style.info(&format!("Changing password for user \"{name}\" ..."));
            let u = c.get(&format!("/api/users/{}", enc(&name)))?;
            let tags = u.get("tags").cloned().unwrap_or(json!([]));
            c.call(
                "PUT",
                &format!("/api/users/{}", enc(&name)),
                Some(&json!({"password": password, "tags": tags})),
                &[],
            )?;
        }
        CtlCommand::SetUserTags { name, tags } => {
            style.info(&format!(
                "Setting tags for user \"{name}\" to [{}] ...",
                tags.join(", ")
            ));
            let u = c.get(&format!("/api/users/{}", enc(&name)))?;
            let body = json!({
                "password_hash": u.get("password_hash").cloned().unwrap_or(Value::Null),
                "hashing_algorithm": u.get("hashing_algorithm").cloned().unwrap_or(Value::Null),
                "tags": tags,
            });
            c.call(
                "PUT",
                &format!("/api/users/{}", enc(&name)),
                Some(&body),
                &[],
            )?;
        }
        CtlCommand::AddVhost { name } => {
            style.info(&format!("Adding vhost \"{name}\" ..."));
            c.call("PUT", &format!("/api/vhosts/{}", enc(&name)), None, &[])?;
        }
        CtlCommand::DeleteVhost { name } => {
            style.info(&format!("Deleting vhost \"{name}\" ..."));
            c.call("DELETE", &format!("/api/vhosts/{}", enc(&name)), None, &[])?;
        }
        CtlCommand::SetPermissions {
            user,
            configure,
            write,
            read,
        } => {
            style.info(&format!(
                "Setting permissions for user \"{user}\" in vhost \"{vhost}\" ..."
            ));
            c.call(
                "PUT",
                &format!("/api/permissions/{v}/{}", enc(&user)),
                Some(&json!({"configure": configure, "write": write, "read": read})),
                &[],
            )?;
        }
        CtlCommand::ClearPermissions { user } => {
            style.info(&format!(
                "Clearing permissions for user \"{user}\" in vhost \"{vhost}\" ..."
            ));
            c.call(
                "DELETE",
                &format!("/api/permissions/{v}/{}", enc(&user)),
                None,
                &[],
            )?;
        }
        CtlCommand::PurgeQueue { name } => {
            style.info(&format!("Purging queue '{name}' in vhost '{vhost}' ..."));
            c.call(
                "DELETE",
                &format!("/api/queues/{v}/{}/contents", enc(&name)),
                None,
                &[],
            )?;
        }
        CtlCommand::DeleteQueue {
            name,
            if_unused,
            if_empty,
        } => {
            style.info(&format!("Deleting queue '{name}' on vhost '{vhost}' ..."));
            let q = c.get(&format!("/api/queues/{v}/{}", enc(&name)))?;
            c.call(
                "DELETE",
                &format!(
                    "/api/queues/{v}/{}?if-unused={if_unused}&if-empty={if_empty}",
                    enc(&name)
                ),
                None,
                &[],
            )?;
            println!(
                "Queue was successfully deleted with {} ready messages",
                cell(q.get("messages_ready"))
            );
        }
        CtlCommand::CloseConnection { name, reason } => {
            style.info(&format!("Closing connection {name}, reason: {reason}..."));
            c.call(
                "DELETE",
                &format!("/api/connections/{}", enc(&name)),
                None,
                &[("X-Reason", reason.as_str())],
            )?;
        }
        CtlCommand::ExportDefinitions { path } => {
            let defs = c.get("/api/definitions")?;
            let text = serde_json::to_string_pretty(&defs)?;
            if path == "-" {
                println!("{text}");
            } else {
                style.info(&format!(
                    "Exporting definitions in JSON to a file at \"{path}\" ..."
                ));
                std::fs::write(&path, text).with_context(|| format!("writing {path}"))?;
            }
        }
        CtlCommand::ImportDefinitions { path } => {
            style.info(&format!(
                "Importing definitions in JSON from a file at \"{path}\" ..."
            ));
            let text = read_input(&path)?;
            let defs: Value =
                serde_json::from_str(&text).with_context(|| format!("{path} is not valid JSON"))?;
            c.call("POST", "/api/definitions", Some(&defs), &[])?;
            style.info("Successfully started definition import. This process is asynchronous and can take some time.");
        }
        CtlCommand::SetPolicy {
            apply_to,
            priority,
            name,
            pattern,
            definition,
        } => set_policy(
            c,
            style,
            vhost,
            "policies",
            "policy",
            [apply_to, name, pattern, definition],
            priority,
        )?,
        CtlCommand::SetOperatorPolicy {
            apply_to,
            priority,
            name,
            pattern,
            definition,
        } => set_policy(
            c,
            style,
            vhost,
            "operator-policies",
            "operator policy override",
            [apply_to, name, pattern, definition],
            priority,
        )?,
        CtlCommand::SetTopicPermissions {
            user,
            exchange,
            write,
            read,
        } => {
            style.info(&format!(
                "Setting topic permissions on \"{exchange}\" for user \"{user}\" in vhost \"{vhost}\" ..."
            ));
            let body = json!({"exchange": exchange, "write": write, "read": read});
            c.call(
                "PUT",
                &format!("/api/topic-permissions/{v}/{}", enc(&user)),
                Some(&body),
                &[],
            )?;
        }
        CtlCommand::ClearTopicPermissions { user, exchange } => {
            style.info(&format!(
                "Clearing topic permissions for user \"{user}\" in vhost \"{vhost}\" ..."
            ));
            let path = match &exchange {
                Some(x) => format!(
                    "/api/topic-permissions/{v}/{}?exchange={}",
                    enc(&user),
                    enc(x)
                ),
                None => format!("/api/topic-permissions/{v}/{}", enc(&user)),
            };
            c.call("DELETE", &path, None, &[])?;
        }
        CtlCommand::ListTopicPermissions => list(
            c,
            style,
            "topic_permissions",
            &format!("/api/vhosts/{v}/topic-permissions"),
            Vec::new(),
            &["user", "exchange", "write", "read"],
            &format!("Listing topic permissions for vhost \"{vhost}\" ..."),
        )?,
        CtlCommand::ListUserTopicPermissions { user } => list(
            c,
            style,
            "topic_permissions",
            &format!("/api/users/{}/topic-permissions", enc(&user)),
            Vec::new(),
            &["vhost", "exchange", "write", "read"],
            &format!("Listing topic permissions for user \"{user}\" ..."),
        )?,
        CtlCommand::ClearOperatorPolicy { name } => {
            style.info(&format!(
                "Clearing operator policy \"{name}\" on vhost \"{vhost}\" ..."
            ));
            c.call(
                "DELETE",
                &format!("/api/operator-policies/{v}/{}", enc(&name)),
                None,
                &[],
            )?;
        }
        // Run by `ctl::run` itself (`crate::dlq`).
        CtlCommand::Dlq(_) => {}
        CtlCommand::ClearPolicy { name } => {
            style.info(&format!(
                "Clearing policy \"{name}\" on vhost \"{vhost}\" ..."
            ));
            c.call(
                "DELETE",
                &format!("/api/policies/{v}/{}", enc(&name)),
                None,
                &[],
            )?;
        }
        CtlCommand::Limits(l) => super::limits::run(c, style, vhost, l)?,
    }
    Ok(())
}
