//! The exchange and queue classes: declares, deletes, bindings and purges, each checked
//! against the user's permissions as RabbitMQ's access-control table says, then carried out by
//! the vhost (which waits for the metadata store for durable changes).

use std::sync::Arc;

use warren_core::access::{Perm, ResourceKind};
use warren_core::binding::Destination;
use warren_core::vhost::{
    check_exchange_deletion, check_not_default_exchange, ExchangeDeclare, QueueDeclare,
};
use warren_core::{BrokerError, ErrorKind};
use warren_proto::amqp091::{
    ExchangeDeclare as ExchangeDeclareMethod, ExchangeDelete, FieldTable, Method,
    QueueDeclare as QueueDeclareMethod, QueueDeclareOk, QueueDelete, QueueDeleteOk, QueuePurge,
    QueuePurgeOk, ShortStr,
};

use super::connection::Connection;
use super::convert::table_to_core;
use super::fault::{Cause, Fault};
use super::publish::REPLY_TO_PSEUDO_QUEUE;

impl Connection {
    /// exchange.declare, delete, bind and unbind; the reply unless `nowait`.
    pub(super) async fn on_exchange_method(
        &mut self,
        id: u16,
        method: Method,
        cause: Cause,
    ) -> Result<(), Fault> {
        let (nowait, reply) = match method {
            Method::ExchangeDeclare(m) => (m.nowait, self.declare_exchange(&m).await),
            Method::ExchangeDelete(m) => (m.nowait, self.delete_exchange(&m).await),
            Method::ExchangeBind(m) => {
                let destination = Destination::Exchange(Arc::from(m.destination.as_str()));
                let bound = self
                    .change_binding(true, &m.source, destination, &m.routing_key, &m.arguments)
                    .await;
                (
                    m.nowait,
                    bound.map(|()| Method::ExchangeBindOk(Default::default())),
                )
            }
            Method::ExchangeUnbind(m) => {
                let destination = Destination::Exchange(Arc::from(m.destination.as_str()));
                let unbound = self
                    .change_binding(false, &m.source, destination, &m.routing_key, &m.arguments)
                    .await;
                (
                    m.nowait,
                    unbound.map(|()| Method::ExchangeUnbindOk(Default::default())),
                )
            }
            _ => unreachable!("invariant: only exchange methods are routed here"),
        };
        self.reply(id, nowait, reply, cause)
    }

    /// queue.declare, bind, unbind, purge and delete; the reply unless `nowait`.
    pub(super) async fn on_queue_method(
        &mut self,
        id: u16,
        method: Method,
        cause: Cause,
    ) -> Result<(), Fault> {
        let (nowait, reply) = match method {
            Method::QueueDeclare(m) => (m.nowait, self.declare_queue(&m).await),
            Method::QueueBind(m) => {
                let destination = Destination::Queue(Arc::from(m.queue.as_str()));
                let bound = self
                    .change_binding(true, &m.exchange, destination, &m.routing_key, &m.arguments)
                    .await;
                (
                    m.nowait,
                    bound.map(|()| Method::QueueBindOk(Default::default())),
                )
            }
            Method::QueueUnbind(m) => {
                let destination = Destination::Queue(Arc::from(m.queue.as_str()));
                let unbound = self
                    .change_binding(
                        false,
                        &m.exchange,
                        destination,
                        &m.routing_key,
                        &m.arguments,
                    )
                    .await;
                (
                    false,
                    unbound.map(|()| Method::QueueUnbindOk(Default::default())),
                )
            }
            Method::QueuePurge(m) => (m.nowait, self.purge_queue(&m).await),
            Method::QueueDelete(m) => (m.nowait, self.delete_queue(&m).await),
            _ => unreachable!("invariant: only queue methods are routed here"),
        };
        self.reply(id, nowait, reply, cause)
    }

    /// Sends a method's reply unless `nowait`; an error is the channel's.
    fn reply(
        &mut self,
        id: u16,
        nowait: bool,
        reply: Result<Method, BrokerError>,
        cause: Cause,
    ) -> Result<(), Fault> {
        let reply = reply.map_err(|error| Fault::broker(id, error, cause))?;
        if !nowait {
            self.out.method(id, &reply);
        }
        Ok(())
    }

    async fn declare_exchange(&self, m: &ExchangeDeclareMethod) -> Result<Method, BrokerError> {
        let name = m.exchange.as_str();
        check_not_default_exchange(name)?;
        if !m.passive {
            self.check(Perm::Configure, ResourceKind::Exchange, name)?;
            let alternate = m.arguments.get("alternate-exchange");
            if let Some(ae) = alternate.and_then(|v| v.as_str()) {
                self.check(Perm::Write, ResourceKind::Exchange, ae)?;
                self.check(Perm::Read, ResourceKind::Exchange, name)?;
            }
        }
        let declare = ExchangeDeclare {
            name: name.to_owned(),
            kind: m.kind.as_str().to_owned(),
            passive: m.passive,
            durable: m.durable,
            auto_delete: m.auto_delete,
            internal: m.internal,
            arguments: table_to_core(&m.arguments),
        };
        self.vhost().declare_exchange(declare).await?;
        Ok(Method::ExchangeDeclareOk(Default::default()))
    }

    async fn delete_exchange(&self, m: &ExchangeDelete) -> Result<Method, BrokerError> {
        let vhost = self.vhost();
        let name = m.exchange.as_str();
        check_exchange_deletion(name, vhost.name())?;
        self.check(Perm::Configure, ResourceKind::Exchange, name)?;
        vhost.delete_exchange(name, m.if_unused).await?;
        Ok(Method::ExchangeDeleteOk(Default::default()))
    }

    async fn declare_queue(&self, m: &QueueDeclareMethod) -> Result<Method, BrokerError> {
        if m.passive && m.queue.as_str() == REPLY_TO_PSEUDO_QUEUE {
            // The direct reply-to pseudo queue always exists, as in RabbitMQ.
            return Ok(Method::QueueDeclareOk(QueueDeclareOk {
                queue: m.queue.clone(),
                message_count: 0,
                consumer_count: 1,
            }));
        }
        if !m.passive {
            let name = match m.queue.as_str() {
                "" => "amq.gen-",
                name => name,
            };
            self.check(Perm::Configure, ResourceKind::Queue, name)?;
            let dlx = m.arguments.get("x-dead-letter-exchange");
            if let Some(dlx) = dlx.and_then(|v| v.as_str()) {
                self.check(Perm::Write, ResourceKind::Exchange, dlx)?;
                self.check(Perm::Read, ResourceKind::Queue, name)?;
            }
        }
        let request = QueueDeclare {
            name: m.queue.as_str().to_owned(),
            passive: m.passive,
            durable: m.durable,
            exclusive: m.exclusive,
            auto_delete: m.auto_delete,
            arguments: table_to_core(&m.arguments),
        };
        let queue = self.vhost().declare_queue(request, self.id).await?;
        let info = if m.nowait {
            Default::default()
        } else {
            queue.info().await?
        };
        Ok(Method::QueueDeclareOk(QueueDeclareOk {
            queue: queue.name().as_ref().into(),
            message_count: info.messages,
            consumer_count: info.consumers,
        }))
    }

    async fn purge_queue(&self, m: &QueuePurge) -> Result<Method, BrokerError> {
        let name = m.queue.as_str();
        self.check(Perm::Read, ResourceKind::Queue, name)?;
        let message_count = self.vhost().purge_queue(name, self.id).await?;
        Ok(Method::QueuePurgeOk(QueuePurgeOk { message_count }))
    }

    async fn delete_queue(&self, m: &QueueDelete) -> Result<Method, BrokerError> {
        let name = m.queue.as_str();
        self.check(Perm::Configure, ResourceKind::Queue, name)?;
        let deleted = self
            .vhost()
            .delete_queue(name, m.if_unused, m.if_empty, self.id)
            .await;
        let message_count = match deleted {
            Ok(count) => count,
            // Deleting a queue that does not exist succeeds, as in RabbitMQ.
            Err(e) if e.kind == ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        Ok(Method::QueueDeleteOk(QueueDeleteOk { message_count }))
    }

    /// exchange.bind / unbind and queue.bind / unbind: one change to the vhost's bindings.
    async fn change_binding(
        &self,
        bind: bool,
        source: &ShortStr,
        destination: Destination,
        routing_key: &ShortStr,
        arguments: &FieldTable,
    ) -> Result<(), warren_core::BrokerError> {
        let vhost = self.vhost();
        let source = source.as_str();
        check_not_default_exchange(source)?;
        if let Destination::Exchange(name) = &destination {
            check_not_default_exchange(name)?;
        }
        let (kind, name) = match &destination {
            Destination::Queue(name) => (ResourceKind::Queue, name),
            Destination::Exchange(name) => (ResourceKind::Exchange, name),
        };
        self.check(Perm::Write, kind, name)?;
        self.check(Perm::Read, ResourceKind::Exchange, source)?;
        self.check_topic(Perm::Read, source, routing_key)?;
        let routing_key = routing_key.as_str();
        let arguments = table_to_core(arguments);
        if bind {
            vhost
                .bind(source, destination, routing_key, arguments, self.id)
                .await
        } else {
            vhost
                .unbind(source, destination, routing_key, arguments, self.id)
                .await
        }
    }
}
