//! The AMQP 0.9.1 driver: a minimal client on tokio and Warren's own codec
//! (`warren_proto::amqp091`), written for load generation rather than for applications: no
//! per-message allocation, many messages per write, many deliveries per read.

mod connection;
mod consumer;
mod publisher;

use std::net::IpAddr;

use warren_proto::amqp091::{
    ChannelOpen, ExchangeDeclare, FieldTable, Method, QueueBind, QueueDeclare, ShortStr,
};

use crate::driver::{ConsumerSetup, Driver, PublisherSetup};
use crate::error::PerfError;
use crate::topology::{QueueSpec, Topology};
use crate::uri::Endpoint;

pub use connection::{Connection, STEP_TIMEOUT};
pub use consumer::Consumer;
pub use publisher::Publisher;

/// Connects to one AMQP 0.9.1 broker.
#[derive(Clone, Debug)]
pub struct Amqp091 {
    endpoint: Endpoint,
    heartbeat_s: u16,
}

impl Amqp091 {
    pub fn new(endpoint: Endpoint, heartbeat_s: u16) -> Amqp091 {
        Amqp091 {
            endpoint,
            heartbeat_s,
        }
    }

    async fn connect(&self) -> Result<Connection, PerfError> {
        Connection::open(&self.endpoint, self.heartbeat_s, None).await
    }
}

impl Driver for Amqp091 {
    type Publisher = Publisher;
    type Consumer = Consumer;
    type Idle = Connection;

    fn protocol(&self) -> &'static str {
        "amqp091"
    }

    async fn prepare(&self, topology: &Topology) -> Result<(), PerfError> {
        let mut connection = self.connect().await?;
        let open = Method::ChannelOpen(ChannelOpen::default());
        connection
            .call(1, &open, "opening the setup channel")
            .await?;
        // declared: the exchange first, for the bindings; checked (-p): the queues first, as
        // the user named them
        if !topology.predeclared {
            declare_exchange(&mut connection, topology).await?;
        }
        for queue in &topology.queues {
            declare_queue(&mut connection, topology, queue).await?;
        }
        if topology.predeclared {
            declare_exchange(&mut connection, topology).await?;
        }
        connection.close().await
    }

    async fn open_publisher(&self, setup: PublisherSetup) -> Result<Publisher, PerfError> {
        Publisher::open(self.connect().await?, &setup).await
    }

    async fn open_consumer(&self, setup: ConsumerSetup) -> Result<Consumer, PerfError> {
        Consumer::open(self.connect().await?, &setup).await
    }

    async fn open_idle(
        &self,
        channels: u16,
        source: Option<IpAddr>,
    ) -> Result<Connection, PerfError> {
        let mut connection = Connection::open(&self.endpoint, self.heartbeat_s, source).await?;
        for channel in 1..=channels {
            let open = Method::ChannelOpen(ChannelOpen::default());
            connection
                .call(channel, &open, "opening an idle channel")
                .await?;
        }
        connection.use_small_buffers();
        Ok(connection)
    }

    async fn tend_idle(&self, idle: &mut Connection) -> Result<(), PerfError> {
        idle.discard_ready()?;
        idle.heartbeat_if_due(tokio::time::Instant::now());
        idle.flush_all().await
    }

    async fn close_idle(&self, idle: Connection) -> Result<(), PerfError> {
        idle.close().await
    }
}

/// Declares and binds one named queue, or with `-p` checks that it exists.
async fn declare_queue(
    connection: &mut Connection,
    topology: &Topology,
    queue: &QueueSpec,
) -> Result<(), PerfError> {
    let what = if topology.predeclared {
        format!("checking that queue '{}' exists (-p)", queue.name)
    } else {
        format!("declaring queue '{}'", queue.name)
    };
    let declare = Method::QueueDeclare(QueueDeclare {
        queue: ShortStr::from(queue.name.as_str()),
        passive: topology.predeclared,
        durable: queue.durable,
        auto_delete: queue.auto_delete,
        arguments: consumer::field_table(&queue.arguments),
        ..Default::default()
    });
    connection.call(1, &declare, &what).await?;
    let Some(key) = queue.binding_key.as_ref().filter(|_| !topology.predeclared) else {
        return Ok(());
    };
    let bind = Method::QueueBind(QueueBind {
        queue: ShortStr::from(queue.name.as_str()),
        exchange: ShortStr::from(topology.exchange.as_str()),
        routing_key: ShortStr::from(key.as_str()),
        ..Default::default()
    });
    let what = format!(
        "binding queue '{}' to exchange '{}'",
        queue.name, topology.exchange
    );
    connection.call(1, &bind, &what).await?;
    Ok(())
}

/// Declares the run's exchange (durable, as PerfTest does), or checks it exists with `-p`.
async fn declare_exchange(
    connection: &mut Connection,
    topology: &Topology,
) -> Result<(), PerfError> {
    let builtin = topology.exchange.is_empty() || topology.exchange.starts_with("amq.");
    if builtin || (!topology.declare_exchange && !topology.predeclared) {
        return Ok(());
    }
    let what = if topology.predeclared {
        format!("checking that exchange '{}' exists (-p)", topology.exchange)
    } else {
        format!(
            "declaring exchange '{}' of type {}",
            topology.exchange, topology.exchange_type
        )
    };
    let declare = Method::ExchangeDeclare(ExchangeDeclare {
        exchange: ShortStr::from(topology.exchange.as_str()),
        kind: ShortStr::from(topology.exchange_type.as_str()),
        passive: topology.predeclared,
        durable: true,
        arguments: FieldTable::default(),
        ..Default::default()
    });
    connection.call(1, &declare, &what).await?;
    Ok(())
}

/// The error for a channel.close or connection.close received on a fast path.
fn broker_closed(doing: &str, channel: u16, code: u16, text: &ShortStr) -> PerfError {
    let target = if channel == 0 {
        "the connection".to_owned()
    } else {
        format!("channel {channel}")
    };
    let hint = match code {
        404 => " (does the exchange or queue exist?)",
        403 => " (check the user's permissions)",
        320 => " (the broker is shutting down or an operator closed the connection)",
        _ => "",
    };
    PerfError::Broker(format!(
        "{doing}: the broker closed {target}: {code} {text}{hint}"
    ))
}
