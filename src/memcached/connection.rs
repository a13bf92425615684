//! The connection to one memcached server: a small pool of blocking TCP connections speaking the
//! text protocol, every call bounded by one deadline.
//!
//! Written over `std::net::TcpStream` rather than a client crate because a limiter needs two
//! things the crates did not give together: a deadline over the *whole* call (connect, write, every
//! read), and a connection that is never reused after an error or a timeout (a reply still in
//! flight would otherwise be read as the answer to the next command: a silently wrong count).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::{CallError, MemcachedError, io_error};
use crate::backend::BackendError;

/// Idle connections kept for reuse; more concurrent callers open more, closed after use.
const MAX_IDLE: usize = 64;

/// Longest reply line accepted (a `VALUE` header holds a key of at most 250 bytes).
const MAX_LINE: usize = 1024;

/// Where the memcached backend connects, and how long a decision may take.
///
/// ```
/// use floodgate::memcached::MemcachedConfig;
/// use std::time::Duration;
/// let config = MemcachedConfig::new("127.0.0.1:11211").timeout(Duration::from_millis(50));
/// assert_eq!(config.get_timeout(), Duration::from_millis(50));
/// assert_eq!(MemcachedConfig::new("localhost:11211").get_timeout(), MemcachedConfig::DEFAULT_TIMEOUT);
/// ```
#[derive(Clone, Debug)]
pub struct MemcachedConfig {
    server: String,
    timeout: Duration,
}

impl MemcachedConfig {
    /// The timeout unless set: 200 ms.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

    /// One memcached server, `host:port`.
    ///
    /// ```
    /// use floodgate::memcached::MemcachedConfig;
    /// let config = MemcachedConfig::new("127.0.0.1:11211");
    /// assert_eq!(config.get_timeout(), MemcachedConfig::DEFAULT_TIMEOUT);
    /// ```
    pub fn new(server: impl Into<String>) -> Self {
        MemcachedConfig {
            server: server.into(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// The longest a decision may take, connecting included; past it the limiter's
    /// [`FailurePolicy`](crate::backend::FailurePolicy) decides.
    ///
    /// ```
    /// use floodgate::memcached::MemcachedConfig;
    /// use std::time::Duration;
    /// let config = MemcachedConfig::new("127.0.0.1:11211").timeout(Duration::from_millis(50));
    /// assert_eq!(config.get_timeout(), Duration::from_millis(50));
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout in force.
    ///
    /// ```
    /// use floodgate::memcached::MemcachedConfig;
    /// use std::time::Duration;
    /// assert_eq!(MemcachedConfig::new("localhost:11211").get_timeout(), Duration::from_millis(200));
    /// ```
    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }
}

/// The time left until `deadline`, or a timeout.
fn remaining(deadline: Instant) -> Result<Duration, CallError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(CallError::Timeout)
    } else {
        Ok(left)
    }
}

/// One open connection with its read buffer.
pub(crate) struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
    /// Start of the unread part of `buffer`.
    start: usize,
    /// Set by any failed send or read: a reply may still be on its way, so the connection is out
    /// of step and must not be reused.
    broken: bool,
}

impl Connection {
    fn open(addr: SocketAddr, deadline: Instant) -> Result<Self, CallError> {
        let stream =
            TcpStream::connect_timeout(&addr, remaining(deadline)?).map_err(
                |source| match source.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => CallError::Timeout,
                    _ => CallError::Failed(MemcachedError::Unreachable { addr, source }),
                },
            )?;
        // Requests are small and answered one at a time: send them at once.
        stream.set_nodelay(true).map_err(io_error)?;
        Ok(Connection {
            stream,
            buffer: Vec::with_capacity(4096),
            start: 0,
            broken: false,
        })
    }

    fn send_inner(&mut self, request: &[u8], deadline: Instant) -> Result<(), CallError> {
        let mut written = 0;
        while written < request.len() {
            self.stream
                .set_write_timeout(Some(remaining(deadline)?))
                .map_err(io_error)?;
            match self.stream.write(&request[written..]) {
                Ok(0) => {
                    return Err(CallError::Failed(MemcachedError::Io(
                        io::ErrorKind::WriteZero.into(),
                    )));
                }
                Ok(sent) => written += sent,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
        Ok(())
    }

    /// Reads more bytes into the buffer, before `deadline`.
    fn fill(&mut self, deadline: Instant) -> Result<(), CallError> {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; 4096];
        loop {
            self.stream
                .set_read_timeout(Some(remaining(deadline)?))
                .map_err(io_error)?;
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(CallError::Failed(MemcachedError::Io(
                        io::ErrorKind::UnexpectedEof.into(),
                    )));
                }
                Ok(read) => {
                    self.buffer.extend_from_slice(&chunk[..read]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    fn line_inner(&mut self, deadline: Instant) -> Result<String, CallError> {
        loop {
            let unread = &self.buffer[self.start..];
            if let Some(end) = unread.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&unread[..end]).into_owned();
                self.start += end + 2;
                return Ok(line);
            }
            if unread.len() > MAX_LINE {
                return Err(MemcachedError::Protocol("a reply line over 1024 bytes".into()).into());
            }
            self.fill(deadline)?;
        }
    }

    fn data_inner(&mut self, len: usize, deadline: Instant) -> Result<Vec<u8>, CallError> {
        while self.buffer.len() - self.start < len + 2 {
            self.fill(deadline)?;
        }
        let block = &self.buffer[self.start..self.start + len + 2];
        if &block[len..] != b"\r\n" {
            return Err(MemcachedError::Protocol("a data block not ended by CRLF".into()).into());
        }
        let data = block[..len].to_vec();
        self.start += len + 2;
        Ok(data)
    }

    /// Sends `request` whole, before `deadline`.
    pub(crate) fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), CallError> {
        let result = self.send_inner(request, deadline);
        self.broken |= result.is_err();
        result
    }

    /// The next reply line, without its `\r\n`.
    pub(crate) fn line(&mut self, deadline: Instant) -> Result<String, CallError> {
        let result = self.line_inner(deadline);
        self.broken |= result.is_err();
        result
    }

    /// The next `len` data bytes and their `\r\n`.
    pub(crate) fn data(&mut self, len: usize, deadline: Instant) -> Result<Vec<u8>, CallError> {
        let result = self.data_inner(len, deadline);
        self.broken |= result.is_err();
        result
    }

    /// Marks the connection out of step (a reply that made no sense).
    pub(crate) fn set_broken(&mut self) {
        self.broken = true;
    }

    /// Whether the connection can serve another call: nothing failed and every byte received so
    /// far was read.
    fn is_reusable(&self) -> bool {
        !self.broken && self.start == self.buffer.len()
    }
}

/// A connection to one memcached server shared by every limiter and thread that clones it: a pool
/// of blocking TCP connections (one per concurrent caller, up to 64 kept idle).
///
/// Connecting is lazy: `connect` only resolves the address, so a server that is down shows up as
/// failures of the first decisions (handled by the limiter's policy) until it is back. A
/// connection that saw any error or timeout is closed, never reused.
///
/// ```no_run
/// use floodgate::memcached::{MemcachedBackend, MemcachedConfig};
/// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211"))?;
/// let same_pool = backend.clone();
/// # Ok::<(), floodgate::backend::BackendError>(())
/// ```
#[derive(Clone, Debug)]
pub struct MemcachedBackend {
    shared: Arc<Shared>,
}

struct Shared {
    addr: SocketAddr,
    timeout: Duration,
    idle: Mutex<Vec<Connection>>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedBackend")
            .field("addr", &self.addr)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl MemcachedBackend {
    /// A backend for `config`. Resolves the server's address; opens no connection yet.
    ///
    /// # Errors
    /// [`BackendError::Failed`] for an address that does not resolve or a zero timeout.
    ///
    /// ```
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig};
    /// assert!(MemcachedBackend::connect(MemcachedConfig::new("no port")).is_err());
    /// ```
    pub fn connect(config: MemcachedConfig) -> Result<Self, BackendError> {
        crate::backend::validate_timeout(config.timeout)?;
        let addr = config
            .server
            .to_socket_addrs()
            .map_err(|e| {
                BackendError::failed(io::Error::new(
                    e.kind(),
                    format!("memcached address {:?}: {e}", config.server),
                ))
            })?
            .next()
            .ok_or_else(|| {
                BackendError::failed(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("memcached address {:?} resolves to nothing", config.server),
                ))
            })?;
        Ok(MemcachedBackend {
            shared: Arc::new(Shared {
                addr,
                timeout: config.timeout,
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The longest a decision may take.
    ///
    /// ```
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig};
    /// use std::time::Duration;
    /// let config = MemcachedConfig::new("127.0.0.1:11211").timeout(Duration::from_millis(50));
    /// let backend = MemcachedBackend::connect(config)?; // lazy: no connection opened yet
    /// assert_eq!(backend.timeout(), Duration::from_millis(50));
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// The server's address.
    ///
    /// ```
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig};
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211"))?; // lazy
    /// assert_eq!(backend.addr(), "127.0.0.1:11211".parse::<std::net::SocketAddr>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Runs `exchange` on a pooled (or new) connection, all of it before one deadline `timeout`
    /// from now. The connection goes back to the pool only if the exchange succeeded and left
    /// nothing unread. A pooled connection found broken (the server restarted since it was last
    /// used) is replaced by a fresh one once, within the same deadline.
    pub(crate) fn call<T>(
        &self,
        exchange: impl Fn(&mut Connection, Instant) -> Result<T, CallError>,
    ) -> Result<T, BackendError> {
        let deadline = Instant::now() + self.shared.timeout;
        let pooled = self.lock_idle().pop();
        let from_pool = pooled.is_some();
        let run = |connection: Option<Connection>| {
            let mut connection = match connection {
                Some(connection) => connection,
                None => Connection::open(self.shared.addr, deadline)?,
            };
            let value = exchange(&mut connection, deadline)?;
            Ok((value, connection))
        };
        let result = match run(pooled) {
            Err(CallError::Failed(MemcachedError::Io(_))) if from_pool => {
                // Every idle connection predates the break: drop them all.
                self.lock_idle().clear();
                run(None)
            }
            other => other,
        };
        match result {
            Ok((value, connection)) => {
                if connection.is_reusable() {
                    let mut idle = self.lock_idle();
                    if idle.len() < MAX_IDLE {
                        idle.push(connection);
                    }
                }
                Ok(value)
            }
            Err(CallError::Timeout) => Err(BackendError::Timeout {
                after: self.shared.timeout,
            }),
            Err(CallError::Failed(error)) => Err(BackendError::failed(error)),
        }
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.shared
            .idle
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}
