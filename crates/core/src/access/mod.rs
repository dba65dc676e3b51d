//! Users, virtual hosts' metadata and limits, permissions, topic permissions and policies:
//! the broker-wide definitions. Kept in RabbitMQ's definitions format through the metadata
//! store (`crate::metadata`: today `<data_dir>/definitions/broker.json`), and compiled
//! into an immutable snapshot that connections read without locks (`Grant`).
//!
//! Every change bumps a generation that connections watch: a connection whose user was
//! deleted, or whose vhost was, closes; others refresh their grant on their next check.

pub mod format;
pub mod grant;
pub mod password;
pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::BrokerError;
use crate::metadata::{Change, MetadataStore};
use format::{
    operator_policy_from_parameter, operator_policy_to_parameter, Definitions, ParameterDef,
    PermissionDef, TopicPermissionDef, UserDef, VHostDef, VHostLimits, VHostMetadata,
};
pub use grant::{
    check_user_id, check_user_id_as, is_impersonator, Grant, Pattern, Perm, ResourceKind,
    TopicGrant,
};
use password::{hash_password, validate_hash, verify_password, HashingAlgorithm};
use policy::{PolicyRecord, PolicySet};

/// The user tags RabbitMQ's management plugin knows.
pub const KNOWN_TAGS: &[&str] = &[
    "administrator",
    "monitoring",
    "policymaker",
    "management",
    "impersonator",
];

/// A user who passed authentication.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthUser {
    pub name: Arc<str>,
    pub tags: Arc<[String]>,
}

impl AuthUser {
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

/// How the broker is first set up: the user and vhost RabbitMQ creates on first boot.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    pub default_user: String,
    pub default_pass: String,
    pub default_vhost: String,
    /// Users that may only connect from a loopback address (RabbitMQ's `loopback_users`).
    pub loopback_users: Vec<String>,
    /// What the broker calls itself (see `identity.rs`).
    pub identity: crate::identity::IdentityConfig,
}

impl Default for Bootstrap {
    fn default() -> Bootstrap {
        Bootstrap {
            default_user: "guest".into(),
            default_pass: "guest".into(),
            default_vhost: "/".into(),
            loopback_users: vec!["guest".into()],
            identity: crate::identity::IdentityConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct VHostRecord {
    pub name: String,
    pub metadata: VHostMetadata,
    pub limits: VHostLimits,
}

/// The source of truth; `Snapshot` is compiled from it after every change.
#[derive(Debug, Clone, Default)]
struct State {
    users: BTreeMap<String, UserDef>,
    vhosts: BTreeMap<String, VHostRecord>,
    permissions: BTreeMap<(String, String), PermissionDef>,
    topic_permissions: BTreeMap<(String, String, String), TopicPermissionDef>,
    policies: BTreeMap<(String, String), PolicyRecord>,
    operator_policies: BTreeMap<(String, String), PolicyRecord>,
}

#[derive(Default)]
struct Snapshot {
    users: HashMap<String, UserDef>,
    grants: HashMap<(String, String), Arc<Grant>>,
}

pub struct Access {
    state: Mutex<State>,
    snapshot: ArcSwap<Snapshot>,
    store: Arc<dyn MetadataStore>,
    /// Bumped by every change made in memory: a failed write rolls back only when no change
    /// came after it (a later one wrote the whole state, this change included).
    changes: std::sync::atomic::AtomicU64,
    loopback_users: Vec<String>,
    generation: watch::Sender<u64>,
}

impl Access {
    /// Loads the broker-wide definitions from `store`, or creates them from `bootstrap` on
    /// first start.
    pub fn open(store: Arc<dyn MetadataStore>, bootstrap: &Bootstrap) -> std::io::Result<Access> {
        let (state, fresh) = match store.load_access()? {
            Some(definitions) => {
                let mut state = State::default();
                apply(&mut state, &definitions)
                    .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))?;
                (state, false)
            }
            None => (first_boot(bootstrap), true),
        };
        if fresh {
            store.init_access(&export(&state))?;
        }
        Ok(Access {
            snapshot: ArcSwap::from_pointee(compile(&state)),
            state: Mutex::new(state),
            store,
            changes: std::sync::atomic::AtomicU64::new(0),
            loopback_users: bootstrap.loopback_users.clone(),
            generation: watch::channel(0).0,
        })
    }

    /// Checks a user's password and where they connect from (RabbitMQ's texts).
    pub fn authenticate(
        &self,
        mechanism: &str,
        user: &str,
        password: &str,
        from_loopback: bool,
    ) -> Result<AuthUser, String> {
        self.log_in(mechanism, user, Some(password), from_loopback)
    }

    /// Logs `user` in by a name established outside SASL (EXTERNAL: the client certificate's
    /// name), as RabbitMQ's `check_user_login(Username, [])`: the user must exist; no password
    /// is checked. Loopback-only users still connect from loopback only.
    pub fn authenticate_external(
        &self,
        user: &str,
        from_loopback: bool,
    ) -> Result<AuthUser, String> {
        self.log_in("EXTERNAL", user, None, from_loopback)
    }

    fn log_in(
        &self,
        mechanism: &str,
        user: &str,
        password: Option<&str>,
        from_loopback: bool,
    ) -> Result<AuthUser, String> {
        let snapshot = self.snapshot.load();
        let refused = || {
            format!(
                "ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. \
                 For details see the broker logfile. (user '{user}')"
            )
        };
        let record = snapshot.users.get(user).ok_or_else(refused)?;
        let verified = password.is_none_or(|password| {
            verify_password(record.hashing_algorithm, &record.password_hash, password)
        });
        if !verified {
            return Err(refused());
        }
        if !from_loopback && self.loopback_users.iter().any(|u| u == user) {
            return Err(format!(
                "user '{user}' can only connect via localhost (loopback_users)"
            ));
        }
        Ok(AuthUser {
            name: Arc::from(user),
            tags: Arc::from(record.tags.clone()),
        })
    }

    /// The user's permissions in `vhost`; `None` when they have none there.
    pub fn grant(&self, user: &str, vhost: &str) -> Option<Arc<Grant>> {
        let snapshot = self.snapshot.load();
        snapshot
            .grants
            .get(&(user.to_owned(), vhost.to_owned()))
            .cloned()
    }

    pub fn user_exists(&self, user: &str) -> bool {
        self.snapshot.load().users.contains_key(user)
    }

    /// Bumped on every change; connections watch it.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    pub fn users(&self) -> Vec<UserDef> {
        self.state.lock().users.values().cloned().collect()
    }

    pub fn user(&self, name: &str) -> Option<UserDef> {
        self.state.lock().users.get(name).cloned()
    }

    pub fn vhost_records(&self) -> Vec<VHostRecord> {
        self.state.lock().vhosts.values().cloned().collect()
    }

    pub fn vhost_record(&self, name: &str) -> Option<VHostRecord> {
        self.state.lock().vhosts.get(name).cloned()
    }

    pub fn permissions(&self) -> Vec<PermissionDef> {
        self.state.lock().permissions.values().cloned().collect()
    }

    pub fn topic_permissions(&self) -> Vec<TopicPermissionDef> {
        self.state
            .lock()
            .topic_permissions
            .values()
            .cloned()
            .collect()
    }

    /// Policies (`operator` = false) or operator policies of every vhost.
    pub fn policies(&self, operator: bool) -> Vec<PolicyRecord> {
        let state = self.state.lock();
        let map = if operator {
            &state.operator_policies
        } else {
            &state.policies
        };
        map.values().cloned().collect()
    }

    /// The compiled policies of one vhost.
    pub fn policy_set(&self, vhost: &str) -> PolicySet {
        let state = self.state.lock();
        let of = |map: &BTreeMap<(String, String), PolicyRecord>| -> Vec<PolicyRecord> {
            map.values().filter(|p| p.vhost == vhost).cloned().collect()
        };
        PolicySet::new(&of(&state.policies), &of(&state.operator_policies))
    }

    /// Applies `change` to a copy of the state, hands the result to the metadata store and
    /// makes it current; returns once it is durable. A write that fails is rolled back (unless
    /// a later change, which wrote this one too, came after it) and answered with an error.
    async fn change(
        &self,
        change: impl FnOnce(&mut State) -> Result<(), BrokerError>,
    ) -> Result<(), BrokerError> {
        use std::sync::atomic::Ordering;
        let (completion, previous, ours) = {
            let mut state = self.state.lock();
            let mut next = state.clone();
            change(&mut next)?;
            let definitions = Arc::new(export(&next));
            let completion = self.store.submit(vec![Change::Access { definitions }]);
            self.snapshot.store(Arc::new(compile(&next)));
            let previous = std::mem::replace(&mut *state, next);
            (
                completion,
                previous,
                self.changes.fetch_add(1, Ordering::Relaxed) + 1,
            )
        };
        let result = completion.wait().await;
        if result.is_err() {
            let mut state = self.state.lock();
            if self.changes.load(Ordering::Relaxed) == ours {
                self.snapshot.store(Arc::new(compile(&previous)));
                *state = previous;
            }
        }
        self.generation.send_modify(|g| *g += 1);
        result
    }

    /// Creates or updates a user. `password` is hashed with SHA-256; `hash` is taken as it
    /// is (RabbitMQ's `password_hash`). With neither the user has no password and cannot log
    /// in with one, also when it had one: RabbitMQ's `PUT /api/users/{name}`.
    pub async fn put_user(
        &self,
        name: &str,
        password: Option<&str>,
        hash: Option<(&str, HashingAlgorithm)>,
        tags: Vec<String>,
    ) -> Result<(), BrokerError> {
        if name.is_empty() {
            return Err(BrokerError::precondition_failed(
                "user name must not be empty",
            ));
        }
        let mut user = UserDef {
            name: name.to_owned(),
            password_hash: String::new(),
            hashing_algorithm: HashingAlgorithm::Sha256,
            tags,
            limits: Default::default(),
            password: None,
        };
        if let Some((hash, algorithm)) = hash {
            validate_hash(algorithm, hash).map_err(BrokerError::precondition_failed)?;
            user.password_hash = hash.to_owned();
            user.hashing_algorithm = algorithm;
        } else if let Some(password) = password {
            user.password_hash = hash_password(HashingAlgorithm::Sha256, password);
        }
        self.change(|state| {
            if let Some(old) = state.users.get(name) {
                user.limits = old.limits.clone();
            }
            state.users.insert(name.to_owned(), user);
            Ok(())
        })
        .await
    }

    pub async fn delete_user(&self, name: &str) -> Result<(), BrokerError> {
        self.change(|state| {
            state
                .users
                .remove(name)
                .ok_or_else(|| BrokerError::not_found(format!("no user '{name}'")))?;
            state.permissions.retain(|(user, _), _| user != name);
            state
                .topic_permissions
                .retain(|(user, _, _), _| user != name);
            Ok(())
        })
        .await
    }

    pub async fn put_vhost(&self, name: &str, metadata: VHostMetadata) -> Result<(), BrokerError> {
        if name.is_empty() {
            return Err(BrokerError::precondition_failed(
                "vhost name must not be empty",
            ));
        }
        crate::queue::queue_type::check_default_queue_type(
            name,
            metadata.default_queue_type.as_deref(),
        )?;
        self.change(|state| {
            let record = state.vhosts.entry(name.to_owned()).or_default();
            record.name = name.to_owned();
            record.metadata = metadata;
            Ok(())
        })
        .await
    }

    /// Forgets a vhost with its permissions and policies.
    pub async fn delete_vhost(&self, name: &str) -> Result<(), BrokerError> {
        self.change(|state| {
            state
                .vhosts
                .remove(name)
                .ok_or_else(|| BrokerError::not_found(format!("no vhost '{name}'")))?;
            state.permissions.retain(|(_, vhost), _| vhost != name);
            state
                .topic_permissions
                .retain(|(_, vhost, _), _| vhost != name);
            state.policies.retain(|(vhost, _), _| vhost != name);
            state
                .operator_policies
                .retain(|(vhost, _), _| vhost != name);
            Ok(())
        })
        .await
    }

    pub async fn set_vhost_limits(
        &self,
        vhost: &str,
        limits: VHostLimits,
    ) -> Result<(), BrokerError> {
        self.change(|state| {
            let record = state.vhosts.get_mut(vhost).ok_or_else(|| no_vhost(vhost))?;
            record.limits = limits;
            Ok(())
        })
        .await
    }

    pub async fn set_permissions(&self, permission: PermissionDef) -> Result<(), BrokerError> {
        for pattern in [&permission.configure, &permission.write, &permission.read] {
            Pattern::compile(pattern).map_err(BrokerError::precondition_failed)?;
        }
        self.change(|state| {
            check_user_and_vhost(state, &permission.user, &permission.vhost)?;
            let key = (permission.user.clone(), permission.vhost.clone());
            state.permissions.insert(key, permission);
            Ok(())
        })
        .await
    }

    pub async fn clear_permissions(&self, user: &str, vhost: &str) -> Result<(), BrokerError> {
        self.change(|state| {
            state
                .permissions
                .remove(&(user.to_owned(), vhost.to_owned()))
                .map(drop)
                .ok_or_else(|| {
                    BrokerError::not_found(format!(
                        "no permissions for user '{user}' in vhost '{vhost}'"
                    ))
                })
        })
        .await
    }

    pub async fn set_topic_permissions(
        &self,
        permission: TopicPermissionDef,
    ) -> Result<(), BrokerError> {
        check_topic_patterns(&permission).map_err(BrokerError::precondition_failed)?;
        self.change(|state| {
            check_user_and_vhost(state, &permission.user, &permission.vhost)?;
            let key = (
                permission.user.clone(),
                permission.vhost.clone(),
                permission.exchange.clone(),
            );
            state.topic_permissions.insert(key, permission);
            Ok(())
        })
        .await
    }

    /// Clears one exchange's topic permissions, or all of the user's in `vhost`.
    pub async fn clear_topic_permissions(
        &self,
        user: &str,
        vhost: &str,
        exchange: Option<&str>,
    ) -> Result<(), BrokerError> {
        self.change(|state| {
            let before = state.topic_permissions.len();
            state.topic_permissions.retain(|(u, v, e), _| {
                !(u == user && v == vhost && exchange.is_none_or(|x| x == e))
            });
            if before == state.topic_permissions.len() {
                return Err(BrokerError::not_found(format!(
                    "no topic permissions for user '{user}' in vhost '{vhost}'"
                )));
            }
            Ok(())
        })
        .await
    }

    pub async fn set_policy(
        &self,
        policy: PolicyRecord,
        operator: bool,
    ) -> Result<(), BrokerError> {
        policy
            .validate(operator)
            .map_err(BrokerError::precondition_failed)?;
        self.change(|state| {
            if !state.vhosts.contains_key(&policy.vhost) {
                return Err(no_vhost(&policy.vhost));
            }
            let key = (policy.vhost.clone(), policy.name.clone());
            if operator {
                state.operator_policies.insert(key, policy);
            } else {
                state.policies.insert(key, policy);
            }
            Ok(())
        })
        .await
    }

    pub async fn clear_policy(
        &self,
        vhost: &str,
        name: &str,
        operator: bool,
    ) -> Result<(), BrokerError> {
        self.change(|state| {
            let map = if operator {
                &mut state.operator_policies
            } else {
                &mut state.policies
            };
            map.remove(&(vhost.to_owned(), name.to_owned()))
                .map(drop)
                .ok_or_else(|| {
                    BrokerError::not_found(format!("no policy '{name}' in vhost '{vhost}'"))
                })
        })
        .await
    }

    /// Adds (or updates) everything in `definitions` except queues, exchanges and bindings,
    /// which the broker declares in each vhost.
    pub async fn import(&self, definitions: &Definitions) -> Result<(), BrokerError> {
        self.change(|state| apply(state, definitions).map_err(BrokerError::precondition_failed))
            .await
    }

    /// Users, vhosts, permissions, parameters and policies in RabbitMQ's format.
    pub fn export(&self) -> Definitions {
        let state = self.state.lock();
        export(&state)
    }
}

fn no_vhost(name: &str) -> BrokerError {
    BrokerError::not_found(format!("no vhost '{name}'"))
}

fn check_user_and_vhost(state: &State, user: &str, vhost: &str) -> Result<(), BrokerError> {
    if !state.users.contains_key(user) {
        return Err(BrokerError::not_found(format!("no user '{user}'")));
    }
    if !state.vhosts.contains_key(vhost) {
        return Err(no_vhost(vhost));
    }
    Ok(())
}

/// Topic permission patterns compile once their variables are expanded.
fn check_topic_patterns(permission: &TopicPermissionDef) -> Result<(), String> {
    for pattern in [&permission.write, &permission.read] {
        Pattern::compile(&grant::expand_variables(
            pattern,
            &permission.user,
            &permission.vhost,
        ))?;
    }
    Ok(())
}

fn first_boot(bootstrap: &Bootstrap) -> State {
    let mut state = State::default();
    let user = &bootstrap.default_user;
    let vhost = &bootstrap.default_vhost;
    state.users.insert(
        user.clone(),
        UserDef {
            name: user.clone(),
            password_hash: hash_password(HashingAlgorithm::Sha256, &bootstrap.default_pass),
            hashing_algorithm: HashingAlgorithm::Sha256,
            tags: vec!["administrator".into()],
            limits: Default::default(),
            password: None,
        },
    );
    state.vhosts.insert(
        vhost.clone(),
        VHostRecord {
            name: vhost.clone(),
            metadata: VHostMetadata {
                description: "Default virtual host".into(),
                ..Default::default()
            },
            limits: VHostLimits::default(),
        },
    );
    state.permissions.insert(
        (user.clone(), vhost.clone()),
        PermissionDef {
            user: user.clone(),
            vhost: vhost.clone(),
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        },
    );
    state
}

/// Merges `definitions` into `state`, validating every entry first. Users and vhosts go
/// first: the parameters, permissions and policies after them name those.
fn apply(state: &mut State, definitions: &Definitions) -> Result<(), String> {
    apply_users_and_vhosts(state, definitions)?;
    apply_parameters(state, definitions)?;
    apply_permissions(state, definitions)?;
    apply_policies(state, definitions)
}

fn apply_users_and_vhosts(state: &mut State, definitions: &Definitions) -> Result<(), String> {
    for user in &definitions.users {
        let mut user = user.clone();
        if let Some(password) = user.password.take() {
            user.password_hash = hash_password(HashingAlgorithm::Sha256, &password);
            user.hashing_algorithm = HashingAlgorithm::Sha256;
        }
        validate_hash(user.hashing_algorithm, &user.password_hash)
            .map_err(|error| format!("user '{}': {error}", user.name))?;
        state.users.insert(user.name.clone(), user);
    }
    for vhost in &definitions.vhosts {
        let metadata = vhost.metadata();
        crate::queue::queue_type::check_default_queue_type(
            &vhost.name,
            metadata.default_queue_type.as_deref(),
        )
        .map_err(|error| error.text)?;
        let record = state.vhosts.entry(vhost.name.clone()).or_default();
        record.name = vhost.name.clone();
        record.metadata = vhost.metadata();
    }
    Ok(())
}

/// Runtime parameters: vhost limits and operator policies (others are skipped with a warning).
fn apply_parameters(state: &mut State, definitions: &Definitions) -> Result<(), String> {
    for parameter in &definitions.parameters {
        match parameter.component.as_str() {
            "vhost-limits" => {
                let limits = VHostLimits::from_json(&parameter.value)
                    .map_err(|error| format!("vhost '{}': {error}", parameter.vhost))?;
                state
                    .vhosts
                    .get_mut(&parameter.vhost)
                    .ok_or_else(|| format!("limits for unknown vhost '{}'", parameter.vhost))?
                    .limits = limits;
            }
            "operator_policy" => {
                let policy = operator_policy_from_parameter(parameter)?;
                policy.validate(true)?;
                state
                    .operator_policies
                    .insert((policy.vhost.clone(), policy.name.clone()), policy);
            }
            other => tracing::warn!(
                component = other,
                name = %parameter.name,
                "definitions: parameter component '{other}' is not supported; skipped"
            ),
        }
    }
    Ok(())
}

/// Permissions and topic permissions, each for a user and a vhost that exist.
fn apply_permissions(state: &mut State, definitions: &Definitions) -> Result<(), String> {
    for permission in &definitions.permissions {
        for pattern in [&permission.configure, &permission.write, &permission.read] {
            Pattern::compile(pattern)?;
        }
        check_user_and_vhost(state, &permission.user, &permission.vhost)
            .map_err(|error| format!("permissions: {}", error.text))?;
        state.permissions.insert(
            (permission.user.clone(), permission.vhost.clone()),
            permission.clone(),
        );
    }
    for permission in &definitions.topic_permissions {
        check_topic_patterns(permission)?;
        check_user_and_vhost(state, &permission.user, &permission.vhost)
            .map_err(|error| format!("topic permissions: {}", error.text))?;
        state.topic_permissions.insert(
            (
                permission.user.clone(),
                permission.vhost.clone(),
                permission.exchange.clone(),
            ),
            permission.clone(),
        );
    }
    Ok(())
}

fn apply_policies(state: &mut State, definitions: &Definitions) -> Result<(), String> {
    for policy in &definitions.policies {
        policy
            .validate(false)
            .map_err(|error| format!("policy '{}': {error}", policy.name))?;
        if !state.vhosts.contains_key(&policy.vhost) {
            return Err(format!(
                "policy '{}': no vhost '{}'",
                policy.name, policy.vhost
            ));
        }
        state
            .policies
            .insert((policy.vhost.clone(), policy.name.clone()), policy.clone());
    }
    Ok(())
}

fn export(state: &State) -> Definitions {
    let mut parameters: Vec<ParameterDef> = state
        .vhosts
        .values()
        .filter(|v| !v.limits.is_empty())
        .map(|v| ParameterDef {
            vhost: v.name.clone(),
            component: "vhost-limits".into(),
            name: "limits".into(),
            value: serde_json::Value::Object(v.limits.to_json()),
        })
        .collect();
    parameters.extend(
        state
            .operator_policies
            .values()
            .map(operator_policy_to_parameter),
    );
    Definitions {
        rabbit_version: Some(crate::RABBITMQ_COMPATIBLE_VERSION.into()),
        rabbitmq_version: Some(crate::RABBITMQ_COMPATIBLE_VERSION.into()),
        product_name: Some(crate::identity::PRODUCT.into()),
        product_version: Some(env!("CARGO_PKG_VERSION").into()),
        users: state.users.values().cloned().collect(),
        vhosts: state
            .vhosts
            .values()
            .map(|v| VHostDef {
                name: v.name.clone(),
                metadata: Some(v.metadata.clone()),
                description: None,
                tags: Vec::new(),
                limits: serde_json::Value::Array(
                    v.limits
                        .to_json()
                        .into_iter()
                        .map(|(k, v)| serde_json::json!([k, v]))
                        .collect(),
                ),
            })
            .collect(),
        permissions: state.permissions.values().cloned().collect(),
        topic_permissions: state.topic_permissions.values().cloned().collect(),
        parameters,
        global_parameters: Vec::new(),
        policies: state.policies.values().cloned().collect(),
        ..Default::default()
    }
}

fn compile(state: &State) -> Snapshot {
    let mut grants = HashMap::new();
    for ((user, vhost), permission) in &state.permissions {
        let compile = |source: &str| Pattern::compile(source).unwrap_or(Pattern::Nothing);
        let topics = state
            .topic_permissions
            .values()
            .filter(|t| &t.user == user && &t.vhost == vhost)
            .map(|t| TopicGrant {
                exchange: Arc::from(t.exchange.as_str()),
                write: compile(&grant::expand_variables(&t.write, user, vhost)),
                read: compile(&grant::expand_variables(&t.read, user, vhost)),
            })
            .collect();
        let grant = Grant {
            user: Arc::from(user.as_str()),
            vhost: Arc::from(vhost.as_str()),
            configure: compile(&permission.configure),
            write: compile(&permission.write),
            read: compile(&permission.read),
            topics,
        };
        grants.insert((user.clone(), vhost.clone()), Arc::new(grant));
    }
    Snapshot {
        users: state.users.clone().into_iter().collect(),
        grants,
    }
}

#[cfg(test)]
mod tests;
