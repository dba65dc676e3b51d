//! The broker: virtual hosts and users. Protocol connections hold an `Arc<Broker>`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::vhost::VHost;

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
}

impl Broker {
    /// Opens the data directory, creating `default_vhost` and recovering its definitions.
    pub fn open(
        data_dir: &Path,
        default_vhost: &str,
        users: Vec<User>,
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
        let vhost = VHost::open(default_vhost, data_dir)?;
        let vhosts = HashMap::from([(default_vhost.to_string(), vhost)]);
        let users = users.into_iter().map(|u| (u.name.clone(), u)).collect();
        Ok(Arc::new(Broker {
            vhosts: RwLock::new(vhosts),
            users: RwLock::new(users),
            next_id: AtomicU64::new(1),
        }))
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

    /// A fresh id for connections and consumers.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}
