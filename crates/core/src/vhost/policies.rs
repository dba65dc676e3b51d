//! What the broker-wide definitions set on a vhost: policies (applied to new and existing
//! queues and exchanges), limits, the count of open connections, and deletion.

use std::sync::atomic::Ordering;

use super::*;

/// Counts one client connection in its vhost until dropped (`VHost::open_connection`).
pub struct VHostConnection(Arc<VHost>);

impl Drop for VHostConnection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl VHostConnection {
    pub fn vhost(&self) -> &Arc<VHost> {
        &self.0
    }
}

impl VHost {
    /// A queue's settings from its declared arguments and the policies that match it.
    pub(super) fn effective_args(&self, def: &QueueDef) -> Result<QueueArgs, BrokerError> {
        let policies = self.policies.load();
        if policies.is_empty() {
            return QueueArgs::from_def(def);
        }
        let mut arguments = policies
            .queue_arguments(&def.name, &def.arguments)
            .arguments;
        if is_stream(def) {
            // For a stream's retention and segment size the policy wins over the declared
            // argument (RabbitMQ's `rabbit_stream_queue:policy_precedence`).
            let policy = policies.queue_arguments(&def.name, &Table::new()).arguments;
            for key in STREAM_POLICY_WINS {
                if let Some(value) = policy.get(key) {
                    arguments.insert(key.to_string(), value.clone());
                }
            }
        }
        let merged = QueueDef {
            arguments,
            ..def.clone()
        };
        QueueArgs::from_def(&merged)
    }

    /// The policy and operator policy that apply to a queue (the HTTP API shows them).
    pub fn queue_policies(&self, name: &str) -> (Option<Arc<str>>, Option<Arc<str>>) {
        let effective = self.policies.load().queue_arguments(name, &Table::new());
        (effective.policy, effective.operator_policy)
    }

    /// Installs new policies: every queue whose settings change gets them at once, and
    /// exchanges' alternate exchanges follow.
    pub async fn set_policies(&self, policies: PolicySet) {
        self.policies.store(Arc::new(policies));
        let queues: Vec<QueueHandle> = {
            let meta = self.meta.lock();
            self.publish_full_snapshot(&meta);
            meta.queues.values().cloned().collect()
        };
        for queue in queues {
            let args = match self.effective_args(queue.def()) {
                Ok(args) => args,
                Err(error) => {
                    tracing::warn!(
                        "{}: policy not applied: {}",
                        queue.def().resource(),
                        error.text
                    );
                    continue;
                }
            };
            if **queue.args() != args {
                let _ = queue.set_args(args).await;
            }
        }
    }

    /// Sets the vhost's limits (`None` = unlimited).
    pub fn set_limits(&self, max_connections: Option<i64>, max_queues: Option<i64>) {
        self.max_connections
            .store(max_connections.unwrap_or(-1), Ordering::Relaxed);
        self.max_queues
            .store(max_queues.unwrap_or(-1), Ordering::Relaxed);
    }

    /// Sets the vhost's `default_queue_type` (checked by `check_default_queue_type`: unset,
    /// classic or stream).
    pub fn set_default_queue_type(&self, default: Option<&str>) {
        let stream = matches!(default, Some("stream" | "rabbit_stream_queue"));
        self.default_stream.store(stream, Ordering::Relaxed);
    }

    /// A new queue declared without `x-queue-type` takes the vhost's default type when its
    /// properties suit that type (a stream: durable, neither exclusive nor auto-delete), and
    /// stays classic otherwise, as RabbitMQ's `augment_declare_args` decides. Queues that
    /// exist already keep their type.
    pub(super) fn apply_default_queue_type(&self, req: &mut crate::vhost::QueueDeclare) {
        let suits_stream = req.durable && !req.exclusive && !req.auto_delete;
        if self.default_stream.load(Ordering::Relaxed)
            && suits_stream
            && !req.arguments.contains_key("x-queue-type")
        {
            req.arguments.insert(
                "x-queue-type".into(),
                crate::value::Value::Str(QueueType::Stream.name().into()),
            );
        }
    }

    pub(super) fn check_queue_limit(&self, name: &str, queues: usize) -> Result<(), BrokerError> {
        let max = self.max_queues.load(Ordering::Relaxed);
        if max >= 0 && queues as i64 >= max {
            return Err(BrokerError::precondition_failed(format!(
                "cannot declare queue '{name}': queue limit in vhost '{}' ({max}) is reached",
                self.name
            )));
        }
        Ok(())
    }

    /// Counts a new connection, unless the vhost's `max-connections` is reached.
    pub fn open_connection(self: &Arc<Self>, user: &str) -> Result<VHostConnection, BrokerError> {
        let max = self.max_connections.load(Ordering::Relaxed);
        let count = self.connections.fetch_add(1, Ordering::Relaxed);
        let guard = VHostConnection(self.clone());
        if max >= 0 && count as i64 >= max {
            return Err(BrokerError::new(
                crate::error::ErrorKind::NotAllowed,
                format!(
                    "access to vhost '{}' refused for user '{user}': vhost connection limit \
                     ({max}) is reached",
                    self.name
                ),
            ));
        }
        Ok(guard)
    }

    /// Connections open in this vhost.
    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Deletes every queue (with its messages) and the vhost's definitions file: the vhost
    /// was deleted.
    pub async fn delete_everything(&self) {
        let queues: Vec<QueueHandle> = self.meta.lock().queues.values().cloned().collect();
        for queue in queues {
            let _ = queue
                .request(|reply| QueueCmd::Delete {
                    if_unused: false,
                    if_empty: false,
                    reply,
                })
                .await;
            drop(self.forget_queue(queue.name()));
        }
        let drop_all = Change::DropVHost {
            vhost: self.name.clone(),
        };
        if let Err(error) = self.metadata.submit(vec![drop_all]).wait().await {
            tracing::warn!(vhost = %self.name, %error, "cannot remove the definitions");
        }
    }
}

/// The stream arguments whose policy value wins over the declared one.
const STREAM_POLICY_WINS: [&str; 3] = [
    "x-max-length-bytes",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
];

fn is_stream(def: &QueueDef) -> bool {
    crate::queue::QueueType::from_arguments(&def.resource(), &def.arguments)
        == Ok(crate::queue::QueueType::Stream)
}
