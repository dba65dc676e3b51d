//! Permission checks: each AMQP 0.9.1 operation checks what RabbitMQ's access-control table
//! says (configure/write/read on a queue or exchange, topic permissions on topic exchanges'
//! routing keys) against the connection's grant. A refusal is a 403 ACCESS_REFUSED naming
//! the permission, the resource and the user.

use warren_core::access::{Grant, Perm, ResourceKind};
use warren_core::exchange::ExchangeType;
use warren_core::BrokerError;

use super::connection::Connection;
use warren_proto::amqp091::{reply_code, ShortStr};

use super::fault::{Cause, Fault};

impl Connection {
    fn grant_ref(&self) -> &Grant {
        self.grant
            .as_deref()
            .expect("invariant: channels exist only after connection.open")
    }

    /// Checks one permission on one resource of the connection's vhost.
    pub(super) fn check(
        &self,
        perm: Perm,
        kind: ResourceKind,
        name: &str,
    ) -> Result<(), BrokerError> {
        self.grant_ref().check(perm, kind, name)
    }

    /// Checks a routing key against topic permissions when `exchange` is a topic exchange.
    /// The key is read (and its UTF-8 re-checked by `as_str`) only under topic permissions:
    /// this runs for every publish.
    pub(super) fn check_topic(
        &self,
        perm: Perm,
        exchange: &str,
        routing_key: &ShortStr,
    ) -> Result<(), BrokerError> {
        let grant = self.grant_ref();
        if !grant.has_topic_permissions() {
            return Ok(());
        }
        let vhost = self.vhost();
        let snapshot = vhost.snapshot();
        match snapshot.exchange(exchange) {
            Some(def) if def.kind == ExchangeType::Topic => {
                grant.check_topic(perm, exchange, routing_key.as_str())
            }
            _ => Ok(()),
        }
    }

    /// The broker-wide definitions changed: a deleted user or vhost ends the connection;
    /// otherwise the grant is refreshed (see `connection::current_grant`).
    pub(super) fn on_access_changed(&mut self) -> Result<(), Fault> {
        let vhost = self.vhost();
        let grant = crate::connection::current_grant(&self.shared.broker, &self.user, &vhost)
            .map_err(|text| {
                Fault::connection(reply_code::CONNECTION_FORCED, text, Cause::default())
            })?;
        self.grant = Some(grant);
        Ok(())
    }
}
