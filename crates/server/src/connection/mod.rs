//! What the AMQP 0.9.1 and AMQP 1.0 connections share: their life from handshake to teardown
//! (`lifecycle`), the socket input (`read_buffer`) and output (`output`), the publish batches
//! and confirm waits (`publish_batch`), and the few steps that are the same in both
//! (heartbeat ticks, access changes, exclusive queues at teardown).

pub mod encode_buffer;
pub mod lifecycle;
pub mod output;
pub mod publish_batch;
pub mod read_buffer;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};
use warren_core::access::{Grant, Pattern};
use warren_core::consumer::ConnectionId;
use warren_core::vhost::VHost;
use warren_core::Broker;

use crate::config::Config;

/// What every connection shares.
pub struct Shared {
    pub broker: Arc<Broker>,
    pub config: Arc<Config>,
    pub shutdown: watch::Receiver<bool>,
}

/// A timer that fires every `every`; none for a connection that needs no timer (no
/// heartbeats either way). A tick missed by a busy connection is not made up for.
pub fn ticker(every: Option<Duration>) -> Option<Interval> {
    every.filter(|every| !every.is_zero()).map(|every| {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker
    })
}

/// The next tick of `ticker`; never, without one.
pub async fn tick(ticker: &mut Option<Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Users, vhosts or permissions changed: the user's grant in `vhost` as it is now (cleared
/// permissions refuse everything from now on, as RabbitMQ's permission cache does once it
/// expires), or why the connection must close (with CONNECTION_FORCED, as RabbitMQ does): its
/// user or its vhost was deleted.
pub fn current_grant(
    broker: &Broker,
    user: &str,
    vhost: &Arc<VHost>,
) -> Result<Arc<Grant>, String> {
    if !broker.access().user_exists(user) {
        return Err(format!("user '{user}' is deleted"));
    }
    let current = broker.vhost(vhost.name());
    if !current.is_some_and(|current| Arc::ptr_eq(&current, vhost)) {
        return Err(format!("vhost '{}' is deleted", vhost.name()));
    }
    let grant = broker.access().grant(user, vhost.name());
    Ok(grant.unwrap_or_else(|| {
        Arc::new(Grant {
            user: Arc::from(user),
            vhost: vhost.name().clone(),
            configure: Pattern::Nothing,
            write: Pattern::Nothing,
            read: Pattern::Nothing,
            topics: Vec::new(),
        })
    }))
}

/// Deletes the exclusive queues of connection `id`, which go with it (a queue deleted
/// meanwhile has nothing left to do).
pub async fn delete_exclusive_queues(vhost: Option<&Arc<VHost>>, id: ConnectionId) {
    let Some(vhost) = vhost else {
        return;
    };
    for queue in vhost.exclusive_queues_of(id) {
        let _ = vhost.delete_queue(queue.name(), false, false, id).await;
    }
}
