//! The broker: virtual hosts, users and resource alarms. Protocol connections hold an
//! `Arc<Broker>`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use warren_store::{Store, StoreConfig};

use crate::alarm::{Alarms, DiskFreeLimit, MemoryWatermark};
use crate::queue::classic::Storage;
use crate::registry::Registry;
use crate::vhost::VHost;

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
}

#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub password: String,
    /// Only from loopback addresses (RabbitMQ's `loopback_users`).
    pub loopback_only: bool,
}

pub struct Broker {
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    users: RwLock<HashMap<String, User>>,
    next_id: AtomicU64,
    store: Store,
    alarms: Alarms,
    /// Client connections past their handshake (see `OpenConnection`).
    open_connections: AtomicUsize,
    /// Open connections, channels and consumers for the management API.
    registry: Arc<Registry>,
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
    /// Opens the data directory, creating `default_vhost` and recovering its definitions.
    pub fn open(
        data_dir: &Path,
        default_vhost: &str,
        users: Vec<User>,
        storage: StorageConfig,
    ) -> std::io::Result<Arc<Broker>> {
        std::fs::create_dir_all(data_dir).map_err(|error| {
            std::io::Error::new(
                error.kind(),
                format!(
                    "cannot create data directory {}: {error}",
                    data_dir.display()
                ),
            )
        })?;
        let (store, mut recovered) = Store::open(StoreConfig {
            dir: data_dir.join("store"),
            segment_bytes: storage.segment_bytes,
        })?;
        let queue_storage = Storage {
            store: store.clone(),
            memory_budget: storage.queue_memory_budget,
        };
        let vhost = VHost::open(
            default_vhost,
            data_dir,
            Some(queue_storage),
            storage.queue_credit,
            &mut recovered,
        )?;
        store.forget_unclaimed(recovered);
        let vhosts = HashMap::from([(default_vhost.to_string(), vhost)]);
        let users = users.into_iter().map(|u| (u.name.clone(), u)).collect();
        Ok(Arc::new(Broker {
            vhosts: RwLock::new(vhosts),
            users: RwLock::new(users),
            next_id: AtomicU64::new(1),
            store,
            alarms: Alarms::default(),
            open_connections: AtomicUsize::new(0),
            registry: Arc::default(),
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
    }

    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// Checks a user's password and where they connect from.
    pub fn authenticate(
        &self,
        mechanism: &str,
        user: &str,
        password: &str,
        from_loopback: bool,
    ) -> Result<(), String> {
        let users = self.users.read();
        match users.get(user) {
            Some(u) if u.password == password => {
                if u.loopback_only && !from_loopback {
                    Err(format!(
                        "user '{user}' can only connect via localhost (loopback_users)"
                    ))
                } else {
                    Ok(())
                }
            }
            _ => Err(format!(
                "ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. \
                 For details see the broker logfile. (user '{user}')"
            )),
        }
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
