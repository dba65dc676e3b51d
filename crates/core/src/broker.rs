//! The broker: virtual hosts, users and resource alarms. Protocol connections hold an
//! `Arc<Broker>`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use warren_store::{Store, StoreConfig};

use crate::access::format::{
    BindingJson, Definitions, ExchangeJson, QueueJson, VHostLimits, VHostMetadata,
};
use crate::access::policy::PolicyRecord;
use crate::access::{Access, Bootstrap, Grant};
use crate::alarm::{Alarms, DiskFreeLimit, MemoryWatermark};
use crate::binding::Destination;
use crate::error::{BrokerError, ErrorKind};
use crate::limits::METADATA_IMPORT_WINDOW_MAX;
use crate::metadata::file::FileStore;
use crate::metadata::{Change, MetadataStore};
use crate::queue::classic::Storage;
use crate::queue::queue_type::QueueType;
use crate::queue::stream::{StreamEncoding, StreamStorage};
use crate::registry::Registry;
use crate::value::{table_from_json, table_to_json};
use crate::vhost::VHost;
use crate::vhost::{ExchangeDeclare, QueueDeclare, VHostConnection};

/// How the broker keeps messages on disk and how much it lets flow into a queue.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// Size at which the message store starts a new segment file.
    pub segment_bytes: u64,
    /// Bytes of ready messages each classic queue keeps in memory before paging out.
    pub queue_memory_budget: usize,
    /// Messages publishers may have on their way into one queue before they wait
    /// (RabbitMQ's `credit_flow_default_credit`).
    pub queue_credit: u32,
    /// `stream.fsync`: a stream publish is confirmed only once its chunk is fsynced (off,
    /// as RabbitMQ: once it is written).
    pub stream_fsync: bool,
    /// How streams store messages (AMQP 1.0, through the server's codecs); without it
    /// streams are refused.
    pub stream_encoding: Option<Arc<dyn StreamEncoding>>,
}

pub struct Broker {
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    access: Access,
    /// Where durable definitions go (`crate::metadata`).
    metadata: Arc<FileStore>,
    queue_storage: Storage,
    streams: Option<StreamStorage>,
    queue_credit: u32,
    next_id: AtomicU64,
    store: Store,
    alarms: Alarms,
    /// Client connections past their handshake (see `OpenConnection`).
    open_connections: AtomicUsize,
    /// Open connections, channels and consumers for the management API.
    registry: Arc<Registry>,
    /// What the broker calls itself, in every protocol and API.
    identity: crate::identity::Identity,
}

/// Counts one client connection as open for as long as it lives
/// (`Broker::connection_count`); a protocol connection takes it once its handshake is done
/// and drops it once everything it held is released.
pub struct OpenConnection(Arc<Broker>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let before = self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "invariant: one decrement per OpenConnection");
    }
}

impl Broker {
    /// Opens the data directory: the users, vhosts, permissions and policies of
    /// `definitions/broker.json` (created from `bootstrap` on first start), each vhost's
    /// durable definitions and the messages of its durable queues.
    pub fn open(
        data_dir: &Path,
        bootstrap: &Bootstrap,
        storage: StorageConfig,
    ) -> std::io::Result<Arc<Broker>> {
        warren_store::private_dir_all(data_dir).map_err(|error| {
            std::io::Error::new(
                error.kind(),
                format!(
                    "cannot create data directory {}: {error}",
                    data_dir.display()
                ),
            )
        })?;
        let metadata = FileStore::open(data_dir)?;
        let access = Access::open(metadata.clone(), bootstrap)?;
        let (store, mut recovered) = Store::open(StoreConfig {
            dir: data_dir.join("store"),
            segment_bytes: storage.segment_bytes,
        })?;
        let queue_storage = Storage {
            store: store.clone(),
            memory_budget: storage.queue_memory_budget,
        };
        let streams = open_streams(data_dir, &storage)?;
        let mut vhosts = HashMap::new();
        for record in access.vhost_records() {
            let vhost = VHost::open(
                &record.name,
                metadata.clone(),
                Some(queue_storage.clone()),
                streams.clone(),
                storage.queue_credit,
                access.policy_set(&record.name),
                &mut recovered,
            )?;
            vhost.set_limits(record.limits.max_connections, record.limits.max_queues);
            vhost.set_default_queue_type(record.metadata.default_queue_type.as_deref());
            vhosts.insert(record.name, vhost);
        }
        store.forget_unclaimed(recovered);
        Ok(Arc::new(Broker {
            vhosts: RwLock::new(vhosts),
            access,
            metadata,
            queue_storage,
            streams,
            queue_credit: storage.queue_credit,
            next_id: AtomicU64::new(1),
            store,
            alarms: Alarms::default(),
            open_connections: AtomicUsize::new(0),
            registry: Arc::default(),
            identity: crate::identity::Identity::new(&bootstrap.identity),
        }))
    }

    /// Lets every queue finish what it was handed (settlements of closed connections), then
    /// stops the message store: nothing is written after this returns.
    pub async fn close(&self) {
        let vhosts: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
        for vhost in vhosts {
            for queue in vhost.queue_handles() {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), queue.info()).await;
            }
        }
        self.store.close();
        self.metadata.close();
    }

    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// Every vhost, by name.
    pub fn vhosts(&self) -> Vec<Arc<VHost>> {
        let mut vhosts: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
        vhosts.sort_by(|a, b| a.name().cmp(b.name()));
        vhosts
    }

    /// Users, permissions and policies (read them here; change them through the broker's
    /// methods, which keep the vhosts in step).
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// What a connection checks at connection.open: the vhost exists, the user has
    /// permissions in it, and its connection limit allows one more.
    pub fn enter_vhost(
        &self,
        user: &str,
        vhost: &str,
    ) -> Result<(VHostConnection, Arc<Grant>), BrokerError> {
        let refused = || {
            BrokerError::new(
                ErrorKind::NotAllowed,
                format!("access to vhost '{vhost}' refused for user '{user}'"),
            )
        };
        let Some(found) = self.vhost(vhost) else {
            return Err(BrokerError::new(
                ErrorKind::NotAllowed,
                format!("vhost {vhost} not found"),
            ));
        };
        let grant = self.access.grant(user, vhost).ok_or_else(refused)?;
        let connection = found.open_connection(user)?;
        Ok((connection, grant))
    }

    /// Creates a vhost (or updates its description and tags).
    pub async fn add_vhost(&self, name: &str, metadata: VHostMetadata) -> Result<(), BrokerError> {
        check_vhost_name(name)?;
        let default_queue_type = metadata.default_queue_type.clone();
        self.access.put_vhost(name, metadata).await?;
        if let Some(vhost) = self.vhost(name) {
            vhost.set_default_queue_type(default_queue_type.as_deref());
            return Ok(());
        }
        // A vhost deleted by a process killed before it removed the vhost's definitions
        // must not come back with its old queues.
        let stale = Change::DropVHost {
            vhost: Arc::from(name),
        };
        self.metadata.submit(vec![stale]).wait().await?;
        let store: Arc<dyn MetadataStore> = self.metadata.clone();
        let (owned_name, storage) = (name.to_owned(), self.queue_storage.clone());
        let streams = self.streams.clone();
        let (credit, policies) = (self.queue_credit, self.access.policy_set(name));
        // Opening reads the vhost's definition files: off the async workers.
        let open = tokio::task::spawn_blocking(move || {
            let recovered = &mut Default::default();
            VHost::open(
                &owned_name,
                store,
                Some(storage),
                streams,
                credit,
                policies,
                recovered,
            )
        });
        let vhost = open
            .await
            .map_err(std::io::Error::other)
            .and_then(|opened| opened)
            .map_err(|error| {
                BrokerError::internal(format!("cannot create vhost '{name}': {error}"))
            })?;
        vhost.set_default_queue_type(default_queue_type.as_deref());
        // Two creations racing: the first one's vhost stays.
        self.vhosts.write().entry(name.to_owned()).or_insert(vhost);
        tracing::info!(vhost = name, "vhost created");
        Ok(())
    }

    /// Deletes a vhost: its queues and their messages, its exchanges, permissions and
    /// policies. Its connections close (they watch `Access::subscribe`).
    pub async fn delete_vhost(&self, name: &str) -> Result<(), BrokerError> {
        // Out of the map before the change is announced: its connections then find it gone.
        let removed = self.vhosts.write().remove(name);
        if let Err(error) = self.access.delete_vhost(name).await {
            if let Some(vhost) = removed {
                self.vhosts.write().insert(name.to_owned(), vhost);
            }
            return Err(error);
        }
        if let Some(vhost) = removed {
            vhost.delete_everything().await;
            tracing::info!(vhost = name, "vhost deleted");
        }
        Ok(())
    }

    pub async fn set_vhost_limits(
        &self,
        name: &str,
        limits: VHostLimits,
    ) -> Result<(), BrokerError> {
        self.access.set_vhost_limits(name, limits).await?;
        if let Some(vhost) = self.vhost(name) {
            vhost.set_limits(limits.max_connections, limits.max_queues);
        }
        Ok(())
    }

    /// Sets a policy (or operator policy); matching queues and exchanges take it at once.
    pub async fn set_policy(
        &self,
        policy: PolicyRecord,
        operator: bool,
    ) -> Result<(), BrokerError> {
        let vhost = policy.vhost.clone();
        self.access.set_policy(policy, operator).await?;
        self.reapply_policies(&vhost).await;
        Ok(())
    }

    pub async fn clear_policy(
        &self,
        vhost: &str,
        name: &str,
        operator: bool,
    ) -> Result<(), BrokerError> {
        self.access.clear_policy(vhost, name, operator).await?;
        self.reapply_policies(vhost).await;
        Ok(())
    }

    async fn reapply_policies(&self, name: &str) {
        if let Some(vhost) = self.vhost(name) {
            vhost.set_policies(self.access.policy_set(name)).await;
        }
    }

    /// Imports a RabbitMQ definitions document: users, vhosts, permissions, limits and
    /// policies first, then each vhost's exchanges, queues and bindings. Additive, as
    /// RabbitMQ's import: what exists and is not in the document stays.
    pub async fn import_definitions(&self, definitions: &Definitions) -> Result<(), BrokerError> {
        for vhost in definitions
            .vhosts
            .iter()
            .map(|v| v.name.as_str())
            .chain(definitions.queues.iter().map(|q| q.vhost.as_str()))
            .chain(definitions.exchanges.iter().map(|e| e.vhost.as_str()))
        {
            if self.vhost(vhost).is_none() && definitions.vhosts.iter().all(|v| v.name != vhost) {
                return Err(BrokerError::not_found(format!(
                    "definitions name vhost '{vhost}', which neither exists nor is defined"
                )));
            }
        }
        // Refused before anything changes: a queue type Warren does not have.
        for queue in &definitions.queues {
            let resource = crate::error::resource_name("queue", &queue.name, &queue.vhost);
            QueueType::from_arguments(&resource, &table_from_json(&queue.arguments))?;
        }
        for vhost in &definitions.vhosts {
            check_vhost_name(&vhost.name)?;
            crate::queue::queue_type::check_default_queue_type(
                &vhost.name,
                vhost.metadata().default_queue_type.as_deref(),
            )?;
            if self.vhost(&vhost.name).is_none() {
                self.add_vhost(&vhost.name, vhost.metadata()).await?;
            }
        }
        self.access.import(definitions).await?;
        for record in self.access.vhost_records() {
            if let Some(vhost) = self.vhost(&record.name) {
                vhost.set_limits(record.limits.max_connections, record.limits.max_queues);
                vhost.set_default_queue_type(record.metadata.default_queue_type.as_deref());
                vhost
                    .set_policies(self.access.policy_set(&record.name))
                    .await;
            }
        }
        self.import_topology(definitions).await
    }

    /// Declares the document's exchanges, then its queues, then its bindings, each with up to
    /// `METADATA_IMPORT_WINDOW_MAX` on their way to disk at once, so the metadata store writes
    /// them in a few large batches rather than one fsync each.
    async fn import_topology(&self, definitions: &Definitions) -> Result<(), BrokerError> {
        let vhost = |name: &str| {
            self.vhost(name)
                .ok_or_else(|| BrokerError::not_found(format!("no vhost '{name}'")))
        };
        let mut window = ImportWindow::default();
        for exchange in &definitions.exchanges {
            let vhost = vhost(&exchange.vhost)?;
            let request = ExchangeDeclare {
                name: exchange.name.clone(),
                kind: exchange.kind.clone(),
                passive: false,
                durable: exchange.durable,
                auto_delete: exchange.auto_delete,
                internal: exchange.internal,
                arguments: table_from_json(&exchange.arguments),
            };
            window
                .push(async move { vhost.declare_exchange(request).await })
                .await;
        }
        window.drain().await?;
        for queue in &definitions.queues {
            let vhost = vhost(&queue.vhost)?;
            let request = QueueDeclare {
                name: queue.name.clone(),
                passive: false,
                durable: queue.durable,
                exclusive: false,
                auto_delete: queue.auto_delete,
                arguments: table_from_json(&queue.arguments),
            };
            window
                .push(async move { vhost.declare_queue(request, 0).await.map(drop) })
                .await;
        }
        window.drain().await?;
        for binding in &definitions.bindings {
            let destination = match binding.destination_type.as_str() {
                "queue" => Destination::Queue(Arc::from(binding.destination.as_str())),
                "exchange" => Destination::Exchange(Arc::from(binding.destination.as_str())),
                other => {
                    window.drain().await?;
                    return Err(BrokerError::precondition_failed(format!(
                        "binding destination_type '{other}': use queue or exchange"
                    )));
                }
            };
            let vhost = vhost(&binding.vhost)?;
            let (source, key) = (binding.source.clone(), binding.routing_key.clone());
            let arguments = table_from_json(&binding.arguments);
            window
                .push(async move { vhost.bind(&source, destination, &key, arguments, 0).await })
                .await;
        }
        window.drain().await
    }

    /// Everything durable, as a RabbitMQ definitions document.
    pub fn export_definitions(&self) -> Definitions {
        let mut definitions = self.access.export();
        for vhost in self.vhosts() {
            let saved = vhost.durable_definitions();
            let name = vhost.name().to_string();
            definitions
                .exchanges
                .extend(saved.exchanges.into_iter().map(|e| ExchangeJson {
                    name: e.name.to_string(),
                    vhost: name.clone(),
                    kind: e.kind.as_str().into(),
                    durable: e.durable,
                    auto_delete: e.auto_delete,
                    internal: e.internal,
                    arguments: table_to_json(&e.arguments),
                }));
            definitions
                .queues
                .extend(saved.queues.into_iter().map(|q| QueueJson {
                    name: q.name.to_string(),
                    vhost: name.clone(),
                    durable: true,
                    auto_delete: q.auto_delete,
                    arguments: table_to_json(&q.arguments),
                }));
            definitions
                .bindings
                .extend(saved.bindings.into_iter().map(|b| {
                    let (destination, destination_type) = match &b.destination {
                        Destination::Queue(q) => (q.to_string(), "queue"),
                        Destination::Exchange(e) => (e.to_string(), "exchange"),
                    };
                    BindingJson {
                        source: b.source.to_string(),
                        vhost: name.clone(),
                        destination,
                        destination_type: destination_type.into(),
                        routing_key: b.routing_key.to_string(),
                        arguments: table_to_json(&b.arguments),
                    }
                }));
        }
        definitions
    }

    /// Counts a client connection as open until the returned guard drops.
    pub fn open_connection(self: &Arc<Self>) -> OpenConnection {
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self.clone())
    }

    /// Client connections open now: past their handshake and not yet torn down.
    pub fn connection_count(&self) -> usize {
        self.open_connections.load(Ordering::Relaxed)
    }

    /// What the broker calls itself (product, version, node and cluster name).
    pub fn identity(&self) -> &crate::identity::Identity {
        &self.identity
    }

    /// Open connections, their channels and consumers (management API).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The virtual hosts, sorted by name.
    pub fn vhost_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.vhosts.read().keys().cloned().collect();
        names.sort();
        names
    }

    /// A fresh id for connections and consumers.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The memory and disk alarms: connections subscribe to them, the resource monitor
    /// reports to them.
    pub fn alarms(&self) -> &Alarms {
        &self.alarms
    }

    /// Changes the memory high watermark until the next restart (what `rabbitmqctl
    /// set_vm_memory_high_watermark` does); the monitor applies it at once.
    pub fn set_memory_high_watermark(&self, watermark: MemoryWatermark) {
        self.alarms.set_memory_high_watermark(watermark);
    }

    /// Changes the disk free limit until the next restart (`rabbitmqctl set_disk_free_limit`).
    pub fn set_disk_free_limit(&self, limit: DiskFreeLimit) {
        self.alarms.set_disk_free_limit(limit);
    }
}

/// Declarations of an import in flight: at most `METADATA_IMPORT_WINDOW_MAX` at once. Each
/// runs to its end (none is cancelled half-way, which would leave it pending); the first
/// error is kept.
#[derive(Default)]
struct ImportWindow {
    tasks: tokio::task::JoinSet<Result<(), BrokerError>>,
    error: Option<BrokerError>,
}

impl ImportWindow {
    async fn push(
        &mut self,
        declaration: impl std::future::Future<Output = Result<(), BrokerError>> + Send + 'static,
    ) {
        while self.tasks.len() >= METADATA_IMPORT_WINDOW_MAX {
            self.join_one().await;
        }
        self.tasks.spawn(declaration);
    }

    async fn join_one(&mut self) {
        let result = match self.tasks.join_next().await {
            Some(Ok(result)) => result,
            Some(Err(error)) => Err(BrokerError::internal(format!(
                "an import declaration stopped: {error}"
            ))),
            None => Ok(()),
        };
        if let Err(error) = result {
            self.error.get_or_insert(error);
        }
    }

    /// Waits for every declaration in flight; the first error, if any. (Dropped without
    /// this, as on an early return, the declarations finish by themselves: see `Drop`.)
    async fn drain(&mut self) -> Result<(), BrokerError> {
        while !self.tasks.is_empty() {
            self.join_one().await;
        }
        self.error.take().map_or(Ok(()), Err)
    }
}

impl Drop for ImportWindow {
    fn drop(&mut self) {
        self.tasks.detach_all();
    }
}

/// Vhost names: not empty, and within the length RabbitMQ's short strings allow.
fn check_vhost_name(name: &str) -> Result<(), BrokerError> {
    if name.is_empty() || name.len() > crate::limits::NAME_BYTES_MAX {
        return Err(BrokerError::precondition_failed(format!(
            "vhost name '{name}' must be 1 to {} bytes",
            crate::limits::NAME_BYTES_MAX
        )));
    }
    Ok(())
}

/// The stream storage of a broker with a stream encoding: logs under `<data_dir>/streams`,
/// all made durable through one `StreamSync`.
fn open_streams(
    data_dir: &Path,
    storage: &StorageConfig,
) -> std::io::Result<Option<StreamStorage>> {
    let Some(encoding) = storage.stream_encoding.clone() else {
        return Ok(None);
    };
    let root = data_dir.join("streams");
    warren_store::private_dir_all(&root).map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!("cannot create stream directory {}: {error}", root.display()),
        )
    })?;
    Ok(Some(StreamStorage {
        root,
        sync: warren_store::StreamSync::start(storage.stream_fsync)?,
        io: Arc::new(warren_store::FsIo),
        encoding,
    }))
}
