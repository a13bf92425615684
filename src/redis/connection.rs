//! The shared connection to Redis (one node, or a cluster) and the runtime that drives it.
//!
//! Every call, sync or async, runs as a task on the backend's own small tokio runtime (one worker
//! thread): the connection lives there, the timeout runs there, and callers on any thread or any
//! executor only wait for the task's answer. All callers share one multiplexed socket per node.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Script, Value};

use crate::backend::BackendError;

/// Extra time a blocked sync caller waits for the task after the timeout, in case the runtime's
/// one worker is late; past it the caller gets a timeout anyway.
const GRACE: Duration = Duration::from_millis(100);

/// Where the Redis backend connects, and how long a decision may take.
///
/// ```
/// use floodgate::redis::RedisConfig;
/// use std::time::Duration;
/// let single = RedisConfig::single("redis://127.0.0.1:6379").timeout(Duration::from_millis(50));
/// assert_eq!(single.get_timeout(), Duration::from_millis(50));
/// let cluster = RedisConfig::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]);
/// assert_eq!(cluster.get_timeout(), RedisConfig::DEFAULT_TIMEOUT);
/// ```
#[derive(Clone, Debug)]
pub struct RedisConfig {
    nodes: Vec<String>,
    cluster: bool,
    timeout: Duration,
}

impl RedisConfig {
    /// The timeout unless set: 200 ms.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

    /// One Redis server (`redis://host:port/db`, `rediss://…`, `unix:///path`).
    ///
    /// ```
    /// use floodgate::redis::RedisConfig;
    /// let config = RedisConfig::single("redis://127.0.0.1:6379/0");
    /// assert_eq!(config.get_timeout(), RedisConfig::DEFAULT_TIMEOUT);
    /// ```
    pub fn single(url: impl Into<String>) -> Self {
        RedisConfig {
            nodes: vec![url.into()],
            cluster: false,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// A Redis Cluster, reached through any of its `nodes` (the rest are discovered).
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// let config = RedisConfig::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
    /// assert_eq!(config.get_timeout(), RedisConfig::DEFAULT_TIMEOUT);
    /// // At least one node is needed to discover the rest.
    /// assert!(RedisBackend::connect(RedisConfig::cluster(Vec::<String>::new())).is_err());
    /// ```
    pub fn cluster<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Self {
        RedisConfig {
            nodes: nodes.into_iter().map(Into::into).collect(),
            cluster: true,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// The longest a decision may take, connecting included; past it the limiter's
    /// [`FailurePolicy`](crate::backend::FailurePolicy) decides.
    ///
    /// ```
    /// use floodgate::redis::RedisConfig;
    /// use std::time::Duration;
    /// let config = RedisConfig::single("redis://127.0.0.1:6379").timeout(Duration::from_millis(20));
    /// assert_eq!(config.get_timeout(), Duration::from_millis(20));
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout in force.
    ///
    /// ```
    /// use floodgate::redis::RedisConfig;
    /// use std::time::Duration;
    /// assert_eq!(RedisConfig::single("redis://h").get_timeout(), Duration::from_millis(200));
    /// ```
    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }
}

/// A connection to Redis shared by every limiter and caller that clones it: a self-reconnecting
/// multiplexed connection to one node, or a cluster connection that follows slot moves.
///
/// Connecting is lazy: `connect` fails only on a bad configuration, and a server that is down
/// shows up as failures of the first decisions (handled by the limiter's policy) until it is back.
///
/// ```no_run
/// use floodgate::redis::{RedisBackend, RedisConfig};
/// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379"))?;
/// let same_sockets = backend.clone();
/// # Ok::<(), floodgate::backend::BackendError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedisBackend {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    connection: Connection,
    timeout: Duration,
    runtime: OwnRuntime,
}

/// A one-node or cluster connection, as one [`ConnectionLike`].
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Single(_) => "Connection::Single",
            Connection::Cluster(_) => "Connection::Cluster",
        })
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

/// The backend's runtime. Shut down in the background on drop, so dropping the last backend
/// inside some other async runtime neither blocks nor panics.
#[derive(Debug)]
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl OwnRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        // Always Some until drop.
        self.0
            .as_ref()
            .map(|r| r.handle())
            .expect("runtime taken only on drop")
    }
}

impl RedisBackend {
    /// A backend for `config`. Starts the backend's runtime (one worker thread) and the
    /// connection (lazily: no server needs to be up yet).
    ///
    /// # Errors
    /// [`BackendError::Failed`] for an invalid URL, an empty node list, or a runtime that cannot
    /// start.
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// // Lazy: no server needs to be up; only a bad configuration fails here.
    /// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379"))?;
    /// assert_eq!(backend.timeout(), RedisConfig::DEFAULT_TIMEOUT);
    /// let bad = RedisBackend::connect(RedisConfig::single("not a url")).unwrap_err();
    /// assert!(bad.to_string().contains("\"not a url\"")); // names the URL, and redis's reason
    /// let secret = RedisBackend::connect(RedisConfig::single("rediss://u:hunter2@h:x")).unwrap_err();
    /// assert!(!secret.to_string().contains("hunter2")); // a password is never shown
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn connect(config: RedisConfig) -> Result<Self, BackendError> {
        crate::backend::validate_timeout(config.timeout)?;
        if config.nodes.is_empty() {
            return Err(BackendError::failed(std::io::Error::other(
                "no Redis node given",
            )));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("floodgate-redis")
            .enable_all()
            .build()
            .map_err(BackendError::failed)?;
        let connection = {
            let _inside = runtime.enter();
            let timeout = config.timeout;
            if config.cluster {
                let client = ClusterClient::builder(config.nodes.clone())
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()
                    .map_err(|error| bad_url(&config.nodes.join(", "), &error))?;
                let cluster_config = ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                Connection::Cluster(client.get_pending_async_connection_with_config(cluster_config))
            } else {
                let client = redis::Client::open(config.nodes[0].as_str())
                    .map_err(|error| bad_url(&config.nodes[0], &error))?;
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(Duration::from_millis(500))
                    .set_number_of_retries(4);
                Connection::Single(
                    ConnectionManager::new_lazy_with_config(client, manager_config)
                        .map_err(BackendError::failed)?,
                )
            }
        };
        Ok(RedisBackend {
            shared: Arc::new(Shared {
                connection,
                timeout: config.timeout,
                runtime: OwnRuntime(Some(runtime)),
            }),
        })
    }

    /// The longest a decision may take.
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// use std::time::Duration;
    /// let config = RedisConfig::single("redis://127.0.0.1:6379").timeout(Duration::from_millis(75));
    /// let backend = RedisBackend::connect(config)?; // lazy: no server needed yet
    /// assert_eq!(backend.timeout(), Duration::from_millis(75));
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// Runs `script` once (EVALSHA; on NOSCRIPT, SCRIPT LOAD and EVALSHA again), within the
    /// timeout, on the backend's runtime. The future that does the work.
    fn eval_task(
        &self,
        script: &'static Script,
        keys: Vec<String>,
        args: [u64; 4],
    ) -> impl std::future::Future<Output = Result<Vec<i64>, BackendError>> + Send + 'static {
        let mut connection = self.shared.connection.clone();
        let timeout = self.shared.timeout;
        async move {
            let mut invocation = script.prepare_invoke();
            for key in &keys {
                invocation.key(key);
            }
            for arg in args {
                invocation.arg(arg);
            }
            match tokio::time::timeout(timeout, invocation.invoke_async(&mut connection)).await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(error)) => Err(BackendError::failed(error)),
                Err(_) => Err(BackendError::Timeout { after: timeout }),
            }
        }
    }

    /// [`eval_task`](Self::eval_task), awaited from any executor.
    pub(crate) async fn eval(
        &self,
        script: &'static Script,
        keys: Vec<String>,
        args: [u64; 4],
    ) -> Result<Vec<i64>, BackendError> {
        let task = self
            .shared
            .runtime
            .handle()
            .spawn(self.eval_task(script, keys, args));
        match task.await {
            Ok(result) => result,
            Err(join_error) => Err(BackendError::failed(join_error)),
        }
    }

    /// [`eval_task`](Self::eval_task), blocking the calling thread (never past the timeout plus
    /// a short grace). Works from inside an async runtime too (it then blocks that thread).
    pub(crate) fn eval_blocking(
        &self,
        script: &'static Script,
        keys: Vec<String>,
        args: [u64; 4],
    ) -> Result<Vec<i64>, BackendError> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let task = self.eval_task(script, keys, args);
        self.shared.runtime.handle().spawn(async move {
            // The receiver may have given up already; then nobody needs the answer.
            let _ = sender.send(task.await);
        });
        let timeout = self.shared.timeout;
        receiver
            .recv_timeout(timeout.saturating_add(GRACE))
            .unwrap_or(Err(BackendError::Timeout { after: timeout }))
    }
}

/// The error for a Redis URL (or cluster node list) redis-rs refuses: names the URL, with any
/// password replaced by `***`, and redis-rs's reason.
fn bad_url(url: &str, error: &redis::RedisError) -> BackendError {
    BackendError::failed(std::io::Error::other(format!(
        "invalid Redis URL {:?}: {error}",
        redact(url)
    )))
}

/// `url` with the password of its user-info part (`scheme://user:password@host`) replaced.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            let hidden = if user_info.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}")
        }
        None => url.to_owned(),
    }
}
