//! Resource permissions for the routes that act on queues, exchanges and bindings: the checks
//! AMQP 0.9.1 makes for the same operation (RabbitMQ's access-control table), evaluated by
//! core's `Grant` as the AMQP connection evaluates them, and refused as RabbitMQ's management
//! API refuses them.
//!
//! RabbitMQ's API reaches the broker in one of three ways, and each answers a refusal
//! differently (RabbitMQ 4.x, `deps/rabbitmq_management/src`):
//! - `rabbit_mgmt_util:direct_request` (declare, delete, purge, bind, unbind) calls
//!   `rabbit_channel:handle_method/6` and answers `access_refused` or `not_allowed` with
//!   `not_authorised(<<"Access refused.">>)`: 401 `{"error": "not_authorised", "reason":
//!   "Access refused."}`.
//! - `rabbit_mgmt_util:with_channel` (get) opens a direct connection as the user, and answers
//!   the channel's close for ACCESS_REFUSED with `not_authorised(Reason)`: 401 whose reason is
//!   the close text, `ACCESS_REFUSED - read access to queue 'q' in vhost '/' refused for user
//!   'u'`.
//! - `rabbit_mgmt_wm_exchange_publish` casts `basic.publish` on such a channel and answers the
//!   channel's death with `bad_request_exception(Code, Reason)`: 400 `{"error":
//!   "bad_request", "reason": "403 ACCESS_REFUSED - ..."}` (406 PRECONDITION_FAILED for a
//!   forged `user_id`).
//!
//! A user without permissions in the vhost is refused the direct connection itself by
//! `with_channel` (`{error, not_allowed}`), and every check by `direct_request`: 401 `Access
//! refused.` either way. Administrators are no exception: `check_resource_access` looks at
//! permissions only, never at tags.

use std::sync::Arc;

use warren_core::access::{Grant, Perm, ResourceKind};
use warren_core::exchange::ExchangeType;
use warren_core::vhost::VHost;
use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp091::reply_code;

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::ApiState;

/// How a route reaches the broker in RabbitMQ, which decides how a refusal is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// `rabbit_mgmt_util:direct_request`.
    DirectRequest,
    /// `rabbit_mgmt_util:with_channel`, a synchronous method.
    Channel,
    /// `rabbit_mgmt_wm_exchange_publish`: a publish on a channel, refused asynchronously.
    Publish,
}

/// What one user may do with one vhost's resources, for one route.
pub(crate) struct Permit<'a> {
    /// `None` when the user has no permissions in the vhost (an administrator may still
    /// reach it through `routes::vhost`).
    grant: Option<Arc<Grant>>,
    vhost: &'a VHost,
    via: Via,
}

/// The reason RabbitMQ gives when it hides the broker's text.
const ACCESS_REFUSED: &str = "Access refused.";

impl<'a> Permit<'a> {
    pub(crate) fn new(state: &ApiState, user: &AuthUser, vhost: &'a VHost, via: Via) -> Self {
        Permit {
            grant: state.broker.access().grant(&user.name, vhost.name()),
            vhost,
            via,
        }
    }

    /// Checks `perm` on a queue or exchange of the vhost (`""` is the default exchange).
    pub(crate) fn check(&self, perm: Perm, kind: ResourceKind, name: &str) -> Result<(), ApiError> {
        let grant = self.grant()?;
        grant
            .check(perm, kind, name)
            .map_err(|error| self.refusal(error))
    }

    /// Checks a routing key against the user's topic permissions when `exchange` is a topic
    /// exchange, as RabbitMQ's `check_topic_authorisation`: write to publish, read to bind.
    pub(crate) fn check_topic(
        &self,
        perm: Perm,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), ApiError> {
        let grant = self.grant()?;
        let is_topic = self
            .vhost
            .snapshot()
            .exchange(exchange)
            .is_some_and(|def| def.kind == ExchangeType::Topic);
        if !is_topic {
            return Ok(());
        }
        grant
            .check_topic(perm, exchange, routing_key)
            .map_err(|error| self.refusal(error))
    }

    /// The answer to an error of the broker for this route: refusals (ACCESS_REFUSED,
    /// NOT_ALLOWED, PRECONDITION_FAILED on a publish) as RabbitMQ answers them, others as
    /// every route answers them.
    pub(crate) fn refusal(&self, error: BrokerError) -> ApiError {
        match (self.via, error.kind) {
            (Via::DirectRequest, ErrorKind::AccessRefused | ErrorKind::NotAllowed) => {
                ApiError::not_authorised(ACCESS_REFUSED)
            }
            (Via::Channel, ErrorKind::AccessRefused) => {
                ApiError::not_authorised(reply_text(reply_code::ACCESS_REFUSED, &error.text))
            }
            (Via::Publish, ErrorKind::AccessRefused) => {
                channel_closed(reply_code::ACCESS_REFUSED, &error.text)
            }
            (Via::Publish, ErrorKind::PreconditionFailed) => {
                channel_closed(reply_code::PRECONDITION_FAILED, &error.text)
            }
            _ => ApiError::from(error),
        }
    }

    fn grant(&self) -> Result<&Grant, ApiError> {
        self.grant
            .as_deref()
            .ok_or_else(|| ApiError::not_authorised(ACCESS_REFUSED))
    }
}

/// The text of a channel.close, as the AMQP connection writes it: `ACCESS_REFUSED - ...`.
fn reply_text(code: u16, text: &str) -> String {
    format!("{} - {text}", reply_code::name(code))
}

/// RabbitMQ's `bad_request_exception(Code, Reason)`: 400 with `"<code> <close text>"`.
fn channel_closed(code: u16, text: &str) -> ApiError {
    ApiError::bad_request(format!("{code} {}", reply_text(code, text)))
}
