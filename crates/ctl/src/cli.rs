//! The command line of `warren ctl` (clap derive). The connection flags `--user` and
//! `--password` go before the command, because `declare user`, `declare permission` and
//! `delete permission` have their own `--user`/`--password`; the other global flags may go
//! anywhere.

use std::path::PathBuf;

use clap::{ArgAction, ArgGroup, Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "warren ctl",
    about = "Operate a broker (Warren or RabbitMQ) through its management HTTP API",
    after_help = "The broker's URL may also come from WARREN_CTL_URL \
                  (e.g. http://guest:guest@127.0.0.1:15672); flags override it."
)]
pub struct Cli {
    /// Host of the HTTP API [default: 127.0.0.1].
    #[arg(long, global = true)]
    pub host: Option<String>,
    /// Port of the HTTP API [default: 15672].
    #[arg(long, global = true)]
    pub port: Option<u16>,
    /// Base URL of the HTTP API, e.g. http://guest:guest@127.0.0.1:15672 (as WARREN_CTL_URL).
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// User name for HTTP basic auth [default: guest]; give it before the command.
    #[arg(long, short = 'u')]
    pub user: Option<String>,
    /// Password for HTTP basic auth [default: guest]; give it before the command.
    #[arg(long, short = 'p')]
    pub password: Option<String>,
    /// Virtual host of the command.
    #[arg(long, global = true, default_value = "/")]
    pub vhost: String,
    /// Print the JSON the API returned (pretty) instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Broker overview: version, node, message and object totals, listeners.
    Status,
    /// Resource alarms in effect (exit code 1 when there is one).
    Alarms,
    /// List objects (of the vhost given by --vhost where the API scopes them by vhost).
    List {
        what: ListKind,
        /// Every vhost instead of --vhost.
        #[arg(long)]
        all_vhosts: bool,
        /// The stream whose tracking `list stream-tracking` shows.
        #[arg(long)]
        stream: Option<String>,
        /// What `list stream-tracking` shows: consumer offsets, writer sequences, or both.
        #[arg(long = "type", value_enum, default_value_t = TrackingType::All)]
        tracking_type: TrackingType,
    },
    /// Declare (create or update) an object.
    #[command(subcommand)]
    Declare(Declare),
    /// Delete an object.
    #[command(subcommand)]
    Delete(Delete),
    /// Remove all ready messages from a queue.
    #[command(subcommand)]
    Purge(Purge),
    /// Publish one message through an exchange; prints whether it was routed.
    Publish {
        /// Exchange name ("" or amq.default: the default exchange).
        #[arg(long, default_value = "")]
        exchange: String,
        #[arg(long, default_value = "")]
        routing_key: String,
        #[arg(long, default_value = "")]
        payload: String,
        /// Message properties as a JSON object, e.g. '{"delivery_mode":2}'.
        #[arg(long)]
        properties: Option<String>,
    },
    /// Fetch messages from a queue (the API's get; not for production consumption).
    Get {
        #[arg(long)]
        queue: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long, value_enum, default_value_t = AckMode::AckRequeueTrue)]
        ackmode: AckMode,
    },
    /// Export the definitions (to FILE, or stdout).
    Export { file: Option<PathBuf> },
    /// Import definitions from FILE (RabbitMQ's definitions JSON).
    Import { file: PathBuf },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    Queues,
    Exchanges,
    Bindings,
    Connections,
    Channels,
    Consumers,
    Users,
    Vhosts,
    Permissions,
    TopicPermissions,
    Policies,
    OperatorPolicies,
    VhostLimits,
    /// Stream protocol connections (rabbitmqctl's list_stream_connections).
    #[value(alias = "stream_connections")]
    StreamConnections,
    /// Stream protocol publishers (rabbitmqctl's list_stream_publishers).
    #[value(alias = "stream_publishers")]
    StreamPublishers,
    /// Stream protocol subscriptions (rabbitmqctl's list_stream_consumers).
    #[value(alias = "stream_consumers")]
    StreamConsumers,
    /// A stream's stored consumer offsets and writer sequences (needs --stream; RabbitMQ's
    /// list_stream_tracking).
    #[value(alias = "stream_tracking")]
    StreamTracking,
}

/// What `list stream-tracking` shows (RabbitMQ's `--offset`, `--writer`, `--all`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackingType {
    Offset,
    Writer,
    All,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum AckMode {
    AckRequeueTrue,
    AckRequeueFalse,
    RejectRequeueTrue,
    RejectRequeueFalse,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueType {
    Classic,
    Quorum,
    Stream,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestinationType {
    Queue,
    Exchange,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum ApplyTo {
    All,
    Queues,
    Exchanges,
    ClassicQueues,
    QuorumQueues,
    Streams,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "kebab-case")]
pub enum LimitName {
    MaxConnections,
    MaxQueues,
}

#[derive(Subcommand, Debug)]
pub enum Declare {
    Queue(QueueArgs),
    Exchange(ExchangeArgs),
    Binding(BindingArgs),
    User(UserArgs),
    Vhost(VhostArgs),
    /// Configure/write/read permissions of a user in --vhost.
    Permission {
        #[arg(long)]
        user: String,
        #[arg(long)]
        configure: String,
        #[arg(long)]
        write: String,
        #[arg(long)]
        read: String,
    },
    /// Topic permissions of a user on a topic exchange in --vhost.
    TopicPermission {
        #[arg(long)]
        user: String,
        #[arg(long)]
        exchange: String,
        #[arg(long)]
        write: String,
        #[arg(long)]
        read: String,
    },
    Policy(PolicyArgs),
    OperatorPolicy(PolicyArgs),
    /// A limit of --vhost (a negative value removes the limit).
    VhostLimit {
        #[arg(long, value_enum)]
        name: LimitName,
        #[arg(long, allow_hyphen_values = true)]
        value: i64,
    },
}

/// A queue (created or updated).
#[derive(Args, Debug)]
pub struct QueueArgs {
    #[arg(long)]
    pub name: String,
    #[arg(long, action = ArgAction::Set, default_value_t = true)]
    pub durable: bool,
    #[arg(long)]
    pub auto_delete: bool,
    /// Queue type (sets the x-queue-type argument); quorum queues and streams are durable.
    #[arg(long = "type", alias = "queue-type", value_enum)]
    pub queue_type: Option<QueueType>,
    /// Queue arguments as a JSON object, e.g. '{"x-max-length":10}'.
    #[arg(long)]
    pub arguments: Option<String>,
}

/// An exchange (created or updated).
#[derive(Args, Debug)]
pub struct ExchangeArgs {
    #[arg(long)]
    pub name: String,
    /// direct, fanout, topic, headers, or a plugin's type (x-consistent-hash, ...).
    #[arg(long = "type")]
    pub exchange_type: String,
    #[arg(long, action = ArgAction::Set, default_value_t = true)]
    pub durable: bool,
    #[arg(long)]
    pub auto_delete: bool,
    #[arg(long)]
    pub internal: bool,
    #[arg(long)]
    pub arguments: Option<String>,
}

/// A user, with a password or a password hash.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("secret").required(true).args(["password", "password_hash"])))]
pub struct UserArgs {
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub password: Option<String>,
    /// A RabbitMQ password hash (base64 of salt + hash), as in definitions files.
    #[arg(long)]
    pub password_hash: Option<String>,
    #[arg(long, requires = "password_hash")]
    pub hashing_algorithm: Option<String>,
    /// Comma-separated tags, e.g. administrator or monitoring,policymaker.
    #[arg(long, default_value = "")]
    pub tags: String,
}

/// A virtual host.
#[derive(Args, Debug)]
pub struct VhostArgs {
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub description: Option<String>,
    /// Comma-separated tags.
    #[arg(long)]
    pub tags: Option<String>,
}

#[derive(Args, Debug)]
pub struct BindingArgs {
    /// Source exchange.
    #[arg(long)]
    pub source: String,
    #[arg(long)]
    pub destination: String,
    #[arg(long, value_enum, default_value_t = DestinationType::Queue)]
    pub destination_type: DestinationType,
    #[arg(long, default_value = "")]
    pub routing_key: String,
    /// Binding arguments as a JSON object (declare only).
    #[arg(long)]
    pub arguments: Option<String>,
}

#[derive(Args, Debug)]
pub struct PolicyArgs {
    #[arg(long)]
    pub name: String,
    /// Regular expression matched against queue/exchange names.
    #[arg(long)]
    pub pattern: String,
    /// The policy's definition as a JSON object, e.g. '{"max-length":10}'.
    #[arg(long)]
    pub definition: String,
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i64,
    #[arg(long, value_enum, default_value_t = ApplyTo::All)]
    pub apply_to: ApplyTo,
}

#[derive(Subcommand, Debug)]
pub enum Delete {
    Queue {
        #[arg(long)]
        name: String,
        /// Only when the queue has no messages.
        #[arg(long)]
        if_empty: bool,
        /// Only when the queue has no consumers.
        #[arg(long)]
        if_unused: bool,
    },
    Exchange {
        #[arg(long)]
        name: String,
        #[arg(long)]
        if_unused: bool,
    },
    /// The binding between source and destination with the given routing key.
    Binding(BindingArgs),
    User {
        #[arg(long)]
        name: String,
    },
    Vhost {
        #[arg(long)]
        name: String,
    },
    Permission {
        #[arg(long)]
        user: String,
    },
    /// All topic permissions of the user in --vhost.
    TopicPermission {
        #[arg(long)]
        user: String,
    },
    Policy {
        #[arg(long)]
        name: String,
    },
    OperatorPolicy {
        #[arg(long)]
        name: String,
    },
    VhostLimit {
        #[arg(long, value_enum)]
        name: LimitName,
    },
}

#[derive(Subcommand, Debug)]
pub enum Purge {
    Queue {
        #[arg(long)]
        name: String,
    },
}
