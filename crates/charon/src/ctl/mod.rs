//! `charon ctl`: a `rabbitmqctl`-style command line that is a client of the management HTTP API
//! (never a back door into the broker's state). Verbs, flags (`-p vhost`, column arguments,
//! `--formatter json`, `--quiet`, `--no-table-headers`) and output mirror `rabbitmqctl` 3.10;
//! errors are one line on stderr with the API's reason and status, and rabbitmqctl's exit codes.
//!
//! - `client`: the HTTP client.
//! - `output`: informational lines and tab-separated tables.
//! - `verbs`: the verbs.
//! - `limits`: the vhost/user limits verbs.

mod client;
mod limits;
mod output;
mod verbs;

use clap::{Args, Subcommand};

pub(crate) use client::CtlError;

/// Connection and output flags shared by every `ctl` verb.
#[derive(Args, Debug)]
pub(crate) struct CtlArgs {
    /// Management API base URL.
    #[arg(
        long,
        env = "CHARON_HTTP_URL",
        default_value = "http://127.0.0.1:15672",
        global = true
    )]
    url: String,
    /// User for the management API.
    #[arg(long, env = "CHARON_USER", default_value = "guest", global = true)]
    username: String,
    /// Password for the management API.
    #[arg(long, env = "CHARON_PASSWORD", default_value = "guest", global = true)]
    password: String,
    /// Virtual host.
    #[arg(short = 'p', long = "vhost", default_value = "/", global = true)]
    vhost: String,
    /// Leave out informational lines.
    #[arg(short = 'q', long, global = true)]
    quiet: bool,
    /// Output format: `table` (tab-separated, default) or `json`.
    #[arg(long, default_value = "table", global = true)]
    formatter: String,
    /// Leave out the table's header row.
    #[arg(long = "no-table-headers", global = true)]
    no_table_headers: bool,
    #[command(subcommand)]
    command: CtlCommand,
}

/// The verbs (rabbitmqctl's names).
#[derive(Subcommand, Debug)]
pub(crate) enum CtlCommand {
    /// Node status: versions, listeners, memory, disk, file descriptors, alarms.
    #[command(name = "status")]
    Status,
    /// Resource alarms in effect (`rabbitmq-diagnostics alarms`).
    #[command(name = "alarms")]
    Alarms,
    /// The broker's effective configuration.
    #[command(name = "environment")]
    Environment,
    /// Lists queues: `list_queues [column ...]` (default: name messages).
    #[command(name = "list_queues")]
    ListQueues { columns: Vec<String> },
    /// Lists exchanges (default columns: name type).
    #[command(name = "list_exchanges")]
    ListExchanges { columns: Vec<String> },
    /// Lists bindings.
    #[command(name = "list_bindings")]
    ListBindings { columns: Vec<String> },
    /// Lists connections (default columns: user peer_host peer_port state).
    #[command(name = "list_connections")]
    ListConnections { columns: Vec<String> },
    /// Lists channels.
    #[command(name = "list_channels")]
    ListChannels { columns: Vec<String> },
    /// Lists consumers.
    #[command(name = "list_consumers")]
    ListConsumers { columns: Vec<String> },
    /// Lists users.
    #[command(name = "list_users")]
    ListUsers { columns: Vec<String> },
    /// Lists vhosts (default column: name).
    #[command(name = "list_vhosts")]
    ListVhosts { columns: Vec<String> },
    /// Lists the permissions on a vhost.
    #[command(name = "list_permissions")]
    ListPermissions,
    /// Lists a user's permissions.
    #[command(name = "list_user_permissions")]
    ListUserPermissions { user: String },
    /// Lists the policies of a vhost.
    #[command(name = "list_policies")]
    ListPolicies,
    /// Adds a user: `add_user NAME PASSWORD`.
    #[command(name = "add_user")]
    AddUser {
        name: String,
        #[arg(id = "new_password", value_name = "PASSWORD")]
        password: String,
    },
    /// Deletes a user.
    #[command(name = "delete_user")]
    DeleteUser { name: String },
    /// Changes a user's password.
    #[command(name = "change_password")]
    ChangePassword {
        name: String,
        #[arg(id = "new_password", value_name = "PASSWORD")]
        password: String,
    },
    /// Sets a user's tags (none: no tags).
    #[command(name = "set_user_tags")]
    SetUserTags { name: String, tags: Vec<String> },
    /// Adds a vhost.
    #[command(name = "add_vhost")]
    AddVhost { name: String },
    /// Deletes a vhost.
    #[command(name = "delete_vhost")]
    DeleteVhost { name: String },
    /// Sets a user's permissions on a vhost: `set_permissions [-p vhost] USER CONF WRITE READ`.
    #[command(name = "set_permissions")]
    SetPermissions {
        user: String,
        configure: String,
        write: String,
        read: String,
    },
    /// Clears a user's permissions on a vhost.
    #[command(name = "clear_permissions")]
    ClearPermissions { user: String },
    /// Purges a queue.
    #[command(name = "purge_queue")]
    PurgeQueue { name: String },
    /// Deletes a queue.
    #[command(name = "delete_queue")]
    DeleteQueue {
        name: String,
        /// Only if it has no consumers.
        #[arg(short = 'u', long = "if-unused")]
        if_unused: bool,
        /// Only if it is empty.
        #[arg(short = 'e', long = "if-empty")]
        if_empty: bool,
    },
    /// Closes a connection: `close_connection NAME REASON`.
    #[command(name = "close_connection")]
    CloseConnection { name: String, reason: String },
    /// Exports definitions to a file (`-` for stdout).
    #[command(name = "export_definitions")]
    ExportDefinitions { path: String },
    /// Imports definitions from a file (`-` for stdin).
    #[command(name = "import_definitions")]
    ImportDefinitions { path: String },
    /// Sets a policy: `set_policy NAME PATTERN DEFINITION [--apply-to queues] [--priority 7]`.
    #[command(name = "set_policy")]
    SetPolicy {
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
    /// Clears a policy.
    #[command(name = "clear_policy")]
    ClearPolicy { name: String },
    /// Sets an operator policy: `set_operator_policy NAME PATTERN DEFINITION [--apply-to queues]
    /// [--priority 7]` (only the keys RabbitMQ allows there: max-length, message-ttl, ...).
    #[command(name = "set_operator_policy")]
    SetOperatorPolicy {
        /// What the policy applies to: queues, exchanges or all.
        #[arg(long = "apply-to", default_value = "all")]
        apply_to: String,
        /// Priority; the highest-priority matching operator policy applies.
        #[arg(long, default_value_t = 0)]
        priority: i64,
        /// Operator policy name.
        name: String,
        /// Regular expression matched against queue names.
        pattern: String,
        /// Definition, a JSON object such as '{"max-length":1000}'.
        definition: String,
    },
    /// Clears an operator policy.
    #[command(name = "clear_operator_policy")]
    ClearOperatorPolicy { name: String },
    /// Sets a user's topic permission on a topic exchange:
    /// `set_topic_permissions [-p vh] USER EXCHANGE WRITE READ`.
    #[command(name = "set_topic_permissions")]
    SetTopicPermissions {
        user: String,
        exchange: String,
        write: String,
        read: String,
    },
    /// Clears a user's topic permissions on the vhost (on one exchange when given).
    #[command(name = "clear_topic_permissions")]
    ClearTopicPermissions {
        user: String,
        exchange: Option<String>,
    },
    /// Lists the topic permissions of a vhost.
    #[command(name = "list_topic_permissions")]
    ListTopicPermissions,
    /// Lists a user's topic permissions.
    #[command(name = "list_user_topic_permissions")]
    ListUserTopicPermissions { user: String },
    /// Lists the operator policies of a vhost.
    #[command(name = "list_operator_policies")]
    ListOperatorPolicies,
    /// Vhost and user limits.
    #[command(flatten)]
    Limits(limits::LimitsCommand),
    /// The dead-letter archive: list, get, groups, edit, replay, job(s), cancel, skip, delete,
    /// audit, stats (docs/archive.md).
    #[command(subcommand)]
    Dlq(Box<crate::dlq::DlqCommand>),
}

/// Runs one `ctl` command, printing what `rabbitmqctl` would. Errors are one line on stderr
/// (`Error: ...`) and the process exits with rabbitmqctl's code.
pub(crate) fn run(args: CtlArgs) -> ! {
    let client = client::Client::new(&args.url, &args.username, &args.password);
    let style = output::Style {
        quiet: args.quiet,
        json: args.formatter == "json",
        headers: !args.no_table_headers,
    };
    let result = match args.command {
        CtlCommand::Dlq(cmd) => crate::dlq::run(&args.url, &args.username, &args.password, *cmd),
        CtlCommand::Limits(l) => limits::run(&client, style, &args.vhost, l),
        command => verbs::run(&client, style, &args.vhost, command),
    };
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let code = e.downcast_ref::<CtlError>().map_or(70, |c| c.code);
            eprintln!("Error: {e:#}");
            std::process::exit(code);
        }
    }
}
