//! Command keys and response codes of the RabbitMQ stream protocol, with the spec's names.
//!
//! A key travels as a uint16 whose top bit (`RESPONSE_BIT`) marks a response; the constants
//! here are the 15-bit command keys without it.

/// Set in a frame's key when the frame is a response.
pub const RESPONSE_BIT: u16 = 0x8000;

/// Command keys (the spec's "Stream Protocol Commands" table).
pub mod key {
    pub const DECLARE_PUBLISHER: u16 = 0x0001;
    pub const PUBLISH: u16 = 0x0002;
    pub const PUBLISH_CONFIRM: u16 = 0x0003;
    pub const PUBLISH_ERROR: u16 = 0x0004;
    pub const QUERY_PUBLISHER_SEQUENCE: u16 = 0x0005;
    pub const DELETE_PUBLISHER: u16 = 0x0006;
    pub const SUBSCRIBE: u16 = 0x0007;
    pub const DELIVER: u16 = 0x0008;
    pub const CREDIT: u16 = 0x0009;
    pub const STORE_OFFSET: u16 = 0x000a;
    pub const QUERY_OFFSET: u16 = 0x000b;
    pub const UNSUBSCRIBE: u16 = 0x000c;
    pub const CREATE: u16 = 0x000d;
    pub const DELETE: u16 = 0x000e;
    pub const METADATA: u16 = 0x000f;
    pub const METADATA_UPDATE: u16 = 0x0010;
    pub const PEER_PROPERTIES: u16 = 0x0011;
    pub const SASL_HANDSHAKE: u16 = 0x0012;
    pub const SASL_AUTHENTICATE: u16 = 0x0013;
    pub const TUNE: u16 = 0x0014;
    pub const OPEN: u16 = 0x0015;
    pub const CLOSE: u16 = 0x0016;
    pub const HEARTBEAT: u16 = 0x0017;
    pub const ROUTE: u16 = 0x0018;
    pub const PARTITIONS: u16 = 0x0019;
    pub const CONSUMER_UPDATE: u16 = 0x001a;
    pub const EXCHANGE_COMMAND_VERSIONS: u16 = 0x001b;
    pub const STREAM_STATS: u16 = 0x001c;
    pub const CREATE_SUPER_STREAM: u16 = 0x001d;
    pub const DELETE_SUPER_STREAM: u16 = 0x001e;
    pub const RESOLVE_OFFSET_SPEC: u16 = 0x001f;
}

/// The command's name for error texts (the spec's, in lower case).
pub(crate) fn name(command_key: u16) -> &'static str {
    match command_key {
        key::DECLARE_PUBLISHER => "declare publisher",
        key::PUBLISH => "publish",
        key::PUBLISH_CONFIRM => "publish confirm",
        key::PUBLISH_ERROR => "publish error",
        key::QUERY_PUBLISHER_SEQUENCE => "query publisher sequence",
        key::DELETE_PUBLISHER => "delete publisher",
        key::SUBSCRIBE => "subscribe",
        key::DELIVER => "deliver",
        key::CREDIT => "credit",
        key::STORE_OFFSET => "store offset",
        key::QUERY_OFFSET => "query offset",
        key::UNSUBSCRIBE => "unsubscribe",
        key::CREATE => "create",
        key::DELETE => "delete",
        key::METADATA => "metadata",
        key::METADATA_UPDATE => "metadata update",
        key::PEER_PROPERTIES => "peer properties",
        key::SASL_HANDSHAKE => "sasl handshake",
        key::SASL_AUTHENTICATE => "sasl authenticate",
        key::TUNE => "tune",
        key::OPEN => "open",
        key::CLOSE => "close",
        key::HEARTBEAT => "heartbeat",
        key::ROUTE => "route",
        key::PARTITIONS => "partitions",
        key::CONSUMER_UPDATE => "consumer update",
        key::EXCHANGE_COMMAND_VERSIONS => "exchange command versions",
        key::STREAM_STATS => "stream stats",
        key::CREATE_SUPER_STREAM => "create super stream",
        key::DELETE_SUPER_STREAM => "delete super stream",
        key::RESOLVE_OFFSET_SPEC => "resolve offset spec",
        _ => "unknown command",
    }
}

/// Response codes (the spec's "Stream Protocol Response Codes" table).
pub mod response_code {
    pub const OK: u16 = 0x01;
    pub const STREAM_DOES_NOT_EXIST: u16 = 0x02;
    pub const SUBSCRIPTION_ID_ALREADY_EXISTS: u16 = 0x03;
    pub const SUBSCRIPTION_ID_DOES_NOT_EXIST: u16 = 0x04;
    pub const STREAM_ALREADY_EXISTS: u16 = 0x05;
    pub const STREAM_NOT_AVAILABLE: u16 = 0x06;
    pub const SASL_MECHANISM_NOT_SUPPORTED: u16 = 0x07;
    pub const AUTHENTICATION_FAILURE: u16 = 0x08;
    pub const SASL_ERROR: u16 = 0x09;
    pub const SASL_CHALLENGE: u16 = 0x0a;
    pub const SASL_AUTHENTICATION_FAILURE_LOOPBACK: u16 = 0x0b;
    pub const VIRTUAL_HOST_ACCESS_FAILURE: u16 = 0x0c;
    pub const UNKNOWN_FRAME: u16 = 0x0d;
    pub const FRAME_TOO_LARGE: u16 = 0x0e;
    pub const INTERNAL_ERROR: u16 = 0x0f;
    pub const ACCESS_REFUSED: u16 = 0x10;
    pub const PRECONDITION_FAILED: u16 = 0x11;
    pub const PUBLISHER_DOES_NOT_EXIST: u16 = 0x12;
    pub const NO_OFFSET: u16 = 0x13;
}
