//! Error conditions (transport.xml `amqp-error`, `connection-error`, `session-error`,
//! `link-error`) and the SASL outcome codes (security.xml `sasl-code`).

pub const INTERNAL_ERROR: &str = "amqp:internal-error";
pub const NOT_FOUND: &str = "amqp:not-found";
pub const UNAUTHORIZED_ACCESS: &str = "amqp:unauthorized-access";
pub const DECODE_ERROR: &str = "amqp:decode-error";
pub const RESOURCE_LIMIT_EXCEEDED: &str = "amqp:resource-limit-exceeded";
pub const NOT_ALLOWED: &str = "amqp:not-allowed";
pub const INVALID_FIELD: &str = "amqp:invalid-field";
pub const NOT_IMPLEMENTED: &str = "amqp:not-implemented";
pub const RESOURCE_LOCKED: &str = "amqp:resource-locked";
pub const PRECONDITION_FAILED: &str = "amqp:precondition-failed";
pub const RESOURCE_DELETED: &str = "amqp:resource-deleted";
pub const ILLEGAL_STATE: &str = "amqp:illegal-state";
pub const FRAME_SIZE_TOO_SMALL: &str = "amqp:frame-size-too-small";
pub const CONNECTION_FORCED: &str = "amqp:connection:forced";
pub const FRAMING_ERROR: &str = "amqp:connection:framing-error";
pub const WINDOW_VIOLATION: &str = "amqp:session:window-violation";
pub const UNATTACHED_HANDLE: &str = "amqp:session:unattached-handle";
pub const HANDLE_IN_USE: &str = "amqp:session:handle-in-use";
pub const DETACH_FORCED: &str = "amqp:link:detach-forced";
pub const TRANSFER_LIMIT_EXCEEDED: &str = "amqp:link:transfer-limit-exceeded";
pub const MESSAGE_SIZE_EXCEEDED: &str = "amqp:link:message-size-exceeded";

/// SASL outcome codes.
pub const SASL_OK: u8 = 0;
pub const SASL_AUTH: u8 = 1;
pub const SASL_SYS: u8 = 2;
