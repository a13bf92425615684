//! The connection to one memcached server: small pools of blocking and of async (tokio) TCP
//! connections speaking the text protocol, every call bounded by one deadline.
//!
//! Written over `std::net::TcpStream` rather than a client crate because a limiter needs two
//! things the crates did not give together: a deadline over the *whole* call (connect, write, every
//! read), and a connection that is never reused after an error or a timeout (a reply still in
//! flight would otherwise be read as the answer to the next command: a silently wrong count).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::async_connection::AsyncConnection;
use super::error::{CallError, MemcachedError, io_error};
use super::protocol::{self, Parsed};
use crate::backend::{BackendError, LastReply, NotSent, until_deadline};

/// Idle blocking connections kept for reuse; more concurrent callers open more (up to
/// [`MAX_OPEN`]), closed after use. (The async pool keeps up to [`MAX_OPEN`]: see
/// [`MemcachedBackend::pool_async`].)
const MAX_IDLE: usize = 64;

/// Connections in use at once, per backend and per path (blocking, async): more concurrent
/// callers wait for one, within their deadline. Without a bound a flood of concurrent calls
/// opened one each and ran memcached out of connections (1,024 by default), turning the flood
/// into failures decided by the policy.
const MAX_OPEN: usize = 128;

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
    grace: Duration,
    lazy: bool,
}

impl MemcachedConfig {
    /// The timeout unless set: 200 ms.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

    /// The grace unless set: 1 s.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(1);

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
            grace: Self::DEFAULT_GRACE,
            lazy: false,
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

    /// How long past its caller's deadline an exchange may still run to finish once its
    /// request is written: its caller gone (an async future dropped, or the timeout passed, on
    /// either path: a blocking call hands its connection to a thread of its own), it reads
    /// memcached's reply and takes back (`decr`) the increment its caller never got, a denial's
    /// as always and an admission's too. An exchange that cannot finish within the grace is
    /// dropped, its connection closed, and its permits may stay counted until their cell leaves
    /// the window (counted in [`MemcachedLimiter::reclaims`](super::MemcachedLimiter::reclaims)).
    /// Meanwhile it holds its connection, one of the backend's 128. An async admission that
    /// reached its caller's end but was dropped unread is given back on a new connection,
    /// bounded by the timeout from the drop plus the grace. The caller never waits for
    /// the grace: it gets its answer, or its timeout, within the timeout. `Duration::MAX` means
    /// no end (an exchange then runs until memcached answers or its connection fails).
    ///
    /// ```
    /// use floodgate::memcached::MemcachedConfig;
    /// use std::time::Duration;
    /// let config = MemcachedConfig::new("127.0.0.1:11211").grace(Duration::from_secs(5));
    /// assert_eq!(config.get_grace(), Duration::from_secs(5));
    /// ```
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Connect at the first call instead of at [`MemcachedBackend::connect`]: the backend is
    /// returned at once, whether or not the server is up, and decisions fail (decided by the
    /// policy) until it answers. For a service that must start while memcached is down (with
    /// [`FailurePolicy::FailOpen`](crate::backend::FailurePolicy) or a local share). Without it
    /// (the default), `connect` fails at startup on a closed port or a server that does not
    /// answer, as `RedisConfig::lazy` does for Redis.
    ///
    /// ```
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig};
    /// // Nothing listens on port 1, yet the backend is made: calls fail until a server answers.
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:1").lazy())?;
    /// assert_eq!(backend.addr().port(), 1);
    /// // Eager (the default), the same address fails now:
    /// assert!(MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:1")).is_err());
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn lazy(mut self) -> Self {
        self.lazy = true;
        self
    }

    /// The grace in force (see [`grace`](Self::grace)).
    ///
    /// ```
    /// use floodgate::memcached::MemcachedConfig;
    /// use std::time::Duration;
    /// assert_eq!(MemcachedConfig::new("localhost:11211").get_grace(), Duration::from_secs(1));
    /// ```
    pub fn get_grace(&self) -> Duration {
        self.grace
    }
}

/// How much shorter than the time left a socket timeout is set. Linux rounds `SO_RCVTIMEO` /
/// `SO_SNDTIMEO` up to whole scheduler ticks (4 ms at HZ=250, 10 ms at HZ=100) and wakes on a
/// tick: set to exactly the time left, a call overran its timeout by 4–8 ms. So the socket waits
/// until this much before the deadline, and the last stretch is polled without blocking, with
/// sleeps of [`POLL_STEP`] (high-resolution timers): a timeout then holds within about
/// `POLL_STEP` plus the scheduler's wake-up latency.
const TICK_SLACK: Duration = Duration::from_millis(12);

/// The sleep between non-blocking tries in the last [`TICK_SLACK`] before a deadline.
const POLL_STEP: Duration = Duration::from_micros(100);

/// The time left until `deadline`, or a timeout.
/// `at + by`, or, where that overflows `Instant`, as late as it goes within about 136 years of
/// `at`: a grace of `Duration::MAX` means no end, not none (nor a panic).
pub(crate) fn later_by(at: Instant, by: Duration) -> Instant {
    at.checked_add(by)
        .or_else(|| at.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(at)
}

/// µs from `origin` to `at` (0 for an `at` before it).
fn micros_since(origin: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(origin).as_micros()).unwrap_or(u64::MAX)
}

fn remaining(deadline: Instant) -> Result<Duration, CallError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(CallError::Timeout)
    } else {
        Ok(left)
    }
}

/// A connection a decision's exchange runs on: the blocking [`Connection`], or (with tokio) the
/// async one. The exchange is written once, as an `async fn` over this trait; on the blocking
/// connection its futures never wait (every method blocks instead), so
/// [`run_blocking`] completes it in one poll.
pub(crate) trait Transport {
    /// Sends `request` whole.
    async fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), CallError>;
    /// Parses a reply with `parse`, reading until it is complete.
    async fn read_reply<T>(
        &mut self,
        deadline: Instant,
        parse: impl FnMut(&[u8]) -> Parsed<T>,
    ) -> Result<T, CallError>;
    /// Marks the connection out of step: never reused.
    fn set_broken(&mut self);
    /// Records which replies of a written request are still unread, for finishing the
    /// exchange after its caller's timeout (blocking connections; the async path finishes
    /// in its own task instead).
    fn set_pending(&mut self, _pending: Pending) {}
}

/// Where a blocking exchange stands with replies still unread: what a [`Finisher`] must read
/// (and undo) once its caller has timed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Pending {
    /// Every reply read.
    #[default]
    Nothing,
    /// The decision request is (being) written; `added` is the `incr`'s reply once read.
    Decision { added: Option<Option<u64>> },
    /// The take-back is (being) written, its reply unread.
    TakeBack,
}

/// Finishes a blocking exchange its caller timed out of (on a thread of its own), before the
/// deadline it is given.
pub(crate) type Finisher = Box<dyn FnOnce(&mut Connection, Pending, Instant) + Send>;

impl Transport for Connection {
    async fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), CallError> {
        Connection::send(self, request, deadline)
    }

    async fn read_reply<T>(
        &mut self,
        deadline: Instant,
        parse: impl FnMut(&[u8]) -> Parsed<T>,
    ) -> Result<T, CallError> {
        self.read_reply_blocking(deadline, parse)
    }

    fn set_broken(&mut self) {
        Connection::set_broken(self);
    }

    fn set_pending(&mut self, pending: Pending) {
        self.pending = pending;
    }
}

/// A connection failure: as it is before any byte of the reply; after (`replied`), as a
/// protocol error naming the cut: the request was carried out. Neither is sent again (see
/// [`MemcachedBackend::call`]: only a request never written is).
pub(crate) fn cut(replied: bool, error: MemcachedError) -> CallError {
    match error {
        MemcachedError::Io(error) if replied => {
            CallError::Failed(MemcachedError::Protocol(format!(
                "the connection was cut mid-reply ({error}); the request was carried out, so \
                 it is not sent again"
            )))
        }
        error => CallError::Failed(error),
    }
}

/// Completes a future that never waits (an exchange over the blocking [`Connection`]).
pub(crate) fn run_blocking<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        // Unreachable: every await in an exchange on a blocking connection is ready at once.
        std::task::Poll::Pending => unreachable!("a blocking exchange waited"),
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
    /// Whether the socket is in non-blocking mode (the last stretch before a deadline).
    nonblocking: bool,
    /// Whether the server has sent a byte since the last request: if the connection fails
    /// then, the request was carried out, and must not be sent again.
    replied: bool,
    /// Replies of a written request still unread.
    pending: Pending,
}

impl Connection {
    fn open(addr: SocketAddr, deadline: Instant) -> Result<Self, CallError> {
        // Past the deadline before connecting (the caller's thread held): nothing is sent.
        let left = remaining(deadline).map_err(|_| CallError::NotSent)?;
        let stream =
            TcpStream::connect_timeout(&addr, left).map_err(|source| match source.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => CallError::Timeout,
                _ => CallError::Failed(MemcachedError::Unreachable { addr, source }),
            })?;
        // Requests are small and answered one at a time: send them at once.
        stream.set_nodelay(true).map_err(io_error)?;
        Ok(Connection {
            stream,
            buffer: Vec::with_capacity(4096),
            start: 0,
            broken: false,
            nonblocking: false,
            replied: false,
            pending: Pending::Nothing,
        })
    }

    /// Runs one `read` or `write` (`op`) to completion or `deadline`: blocking on the socket
    /// until [`TICK_SLACK`] before it, then polling (see [`TICK_SLACK`] for why).
    fn before_deadline(
        &mut self,
        deadline: Instant,
        reading: bool,
        mut op: impl FnMut(&mut TcpStream) -> io::Result<usize>,
    ) -> Result<usize, CallError> {
        loop {
            let left = remaining(deadline)?;
            let nonblocking = left <= TICK_SLACK;
            if nonblocking != self.nonblocking {
                self.stream.set_nonblocking(nonblocking).map_err(io_error)?;
                self.nonblocking = nonblocking;
            }
            if !nonblocking {
                let wait = Some(left - TICK_SLACK);
                if reading {
                    self.stream.set_read_timeout(wait)
                } else {
                    self.stream.set_write_timeout(wait)
                }
                .map_err(io_error)?;
            }
            match op(&mut self.stream) {
                Ok(done) => return Ok(done),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if nonblocking {
                        std::thread::sleep(POLL_STEP.min(left));
                    }
                }
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    fn send_inner(
        &mut self,
        request: &[u8],
        deadline: Instant,
        written: &mut usize,
    ) -> Result<(), CallError> {
        while *written < request.len() {
            match self.before_deadline(deadline, false, |s| s.write(&request[*written..]))? {
                0 => {
                    return Err(CallError::Failed(MemcachedError::Io(
                        io::ErrorKind::WriteZero.into(),
                    )));
                }
                sent => *written += sent,
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
        let read = self.before_deadline(deadline, true, |s| s.read(&mut chunk));
        match read {
            Ok(0) => Err(cut(
                self.replied,
                MemcachedError::Io(io::ErrorKind::UnexpectedEof.into()),
            )),
            Ok(read) => {
                self.replied = true;
                self.buffer.extend_from_slice(&chunk[..read]);
                Ok(())
            }
            Err(CallError::Failed(error)) => Err(cut(self.replied, error)),
            Err(timeout) => Err(timeout),
        }
    }

    /// Sends `request` whole, before `deadline`. One that failed before its first byte was
    /// written leaves no reply pending (its [`Pending`] is cleared: nothing to finish).
    /// A deadline that passes before the first byte is written (already passed when it is
    /// called: the caller's thread held, or waiting for a connection; or passing before the
    /// write loop wrote a byte) is [`CallError::NotSent`]: nothing reached the server. Once a
    /// byte is written, a deadline passing is [`CallError::Timeout`].
    pub(crate) fn send(&mut self, request: &[u8], deadline: Instant) -> Result<(), CallError> {
        self.replied = false;
        if Instant::now() >= deadline {
            self.pending = Pending::Nothing;
            return Err(CallError::NotSent);
        }
        // Between the deadline check above and the write loop.
        #[cfg(test)]
        super::write_gap::before_write(deadline);
        let mut written = 0;
        let result = self.send_inner(request, deadline, &mut written);
        if result.is_err() {
            self.broken = true;
            if written == 0 {
                self.pending = Pending::Nothing;
            }
        }
        match result {
            // The deadline passed before the first byte was written (between the check above
            // and the write loop's own, or with the write waiting on a full socket buffer):
            // nothing reached the server, as above.
            Err(CallError::Timeout) if written == 0 => Err(CallError::NotSent),
            result => result,
        }
    }

    /// Parses a reply with `parse`, reading more bytes until it is complete, before `deadline`.
    pub(crate) fn read_reply_blocking<T>(
        &mut self,
        deadline: Instant,
        mut parse: impl FnMut(&[u8]) -> Parsed<T>,
    ) -> Result<T, CallError> {
        let result = loop {
            match parse(&self.buffer[self.start..]) {
                Ok(Some((value, used))) => {
                    self.start += used;
                    break Ok(value);
                }
                Ok(None) => {
                    if let Err(error) = self.fill(deadline) {
                        break Err(error);
                    }
                }
                Err(error) => break Err(error),
            }
        };
        self.broken |= result.is_err();
        result
    }

    /// Replies of a written request still unread.
    pub(crate) fn pending(&self) -> Pending {
        self.pending
    }

    /// Whether the server closed this idle connection (restarted, its `idle_timeout`), or it
    /// holds bytes no request asked for: checked, without waiting, before a pooled connection
    /// is used (a peek: an end of stream, or a reset, is seen at once). A request is never
    /// sent on a connection found so, so a fresh one can take it without counting it twice.
    /// One closed after this check fails its call (decided by the policy), never retried.
    fn closed_while_idle(&mut self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        // `before_deadline` puts the socket back in blocking mode for the exchange.
        self.nonblocking = true;
        let mut byte = [0u8; 1];
        // Anything but "nothing to read yet" (an end of stream, bytes, an error) is unusable.
        !matches!(self.stream.peek(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
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
/// Connecting is eager: `connect` opens a connection and checks that memcached answers
/// (`version`) within the timeout, so a wrong port fails at startup with an error naming the
/// server (refused: [`FailureKind::Refused`](crate::backend::FailureKind::Refused)); the
/// connection is kept for the first call. With [`MemcachedConfig::lazy`] it only resolves the
/// address, and a server that is down shows up as failures of the first decisions (handled by
/// the limiter's policy) until it is back. A connection that saw any error or timeout is
/// closed, never reused.
///
/// There is no reconnect timer: a call that finds no idle connection, or finds one closed
/// (memcached restarted), connects anew at once, within its deadline. While memcached is down
/// each call is refused at once, and the first call after it is back is decided by it; the
/// limiter's circuit breaker, not a back-off here, spares a server that is down the calls.
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
    grace: Duration,
    idle: Mutex<Vec<Connection>>,
    /// Idle async connections: registered with the runtime that opened them.
    idle_async: Mutex<Vec<AsyncConnection>>,
    /// Blocking calls under way (at most [`MAX_OPEN`]), and the signal that one ended.
    busy: Mutex<usize>,
    freed: Condvar,
    /// Places for async calls under way ([`MAX_OPEN`]), each held until its exchange ends
    /// (past its caller, when the caller is gone).
    busy_async: Arc<tokio::sync::Semaphore>,
    /// When the backend was made: the origin of [`last_reply`](Self::last_reply)'s µs.
    origin: Instant,
    /// When memcached last answered a call of a caller (or the startup check).
    last_reply: LastReply,
}

/// A blocking call's place among the [`MAX_OPEN`], given back on drop (owned: a finisher thread
/// holds it until the exchange ends).
struct Place(Arc<Shared>);

impl Drop for Place {
    fn drop(&mut self) {
        *self
            .0
            .busy
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) -= 1;
        self.0.freed.notify_one();
    }
}

impl Shared {
    /// The server as the errors name it: `memcached://host:port`.
    fn server(&self) -> String {
        format!("memcached://{}", self.addr)
    }

    /// Waits, until `deadline`, for one of the [`MAX_OPEN`] places of blocking calls.
    fn place(self: &Arc<Self>, deadline: Instant) -> Result<Place, BackendError> {
        let mut busy = self
            .busy
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        while *busy >= MAX_OPEN {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.all_busy());
            }
            busy = self
                .freed
                .wait_timeout(busy, left)
                .unwrap_or_else(|poison| poison.into_inner())
                .0;
        }
        *busy += 1;
        Ok(Place(Arc::clone(self)))
    }

    /// The error of a call that found every connection busy until its deadline: it never got
    /// one, so nothing was sent ([`NotSent`]: decided by the policy and counted, never told to
    /// the breaker; the calls holding the connections report their own failures).
    fn all_busy(&self) -> BackendError {
        self.not_sent(format!(
            "not sent: all {MAX_OPEN} connections of this backend were busy until the timeout \
             ({:?})",
            self.timeout
        ))
    }

    /// A timeout at this server whose request was never sent ([`NotSent`], saying `why`).
    fn not_sent(&self, why: String) -> BackendError {
        BackendError::at(
            crate::backend::FailureKind::Timeout,
            self.server(),
            NotSent(why.into()),
        )
    }
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
    /// A backend for `config`: resolves the server's address, then (unless
    /// [`MemcachedConfig::lazy`]) opens a connection and checks that memcached answers
    /// (`version`) within the timeout, blocking the calling thread meanwhile; that connection
    /// is kept for the first call.
    ///
    /// # Errors
    /// [`BackendError::Failed`] for an address that does not resolve or a timeout of zero or
    /// over an hour; and (eager only) a [`BackendError`] naming the server
    /// (`memcached://host:port`) for a server that refuses the connection
    /// ([`FailureKind::Refused`](crate::backend::FailureKind::Refused)), does not answer
    /// within the timeout ([`FailureKind::Timeout`](crate::backend::FailureKind::Timeout)), or
    /// answers something other than memcached's `VERSION` line.
    ///
    /// ```
    /// use floodgate::backend::FailureKind;
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig};
    /// assert!(MemcachedBackend::connect(MemcachedConfig::new("no port")).is_err());
    /// // Nothing listens on port 1: eager connecting fails now, naming the server.
    /// let refused = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:1")).unwrap_err();
    /// assert_eq!(refused.kind(), FailureKind::Refused);
    /// assert!(refused.to_string().contains("memcached://127.0.0.1:1"), "{refused}");
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
        let backend = MemcachedBackend {
            shared: Arc::new(Shared {
                addr,
                timeout: config.timeout,
                grace: config.grace,
                idle: Mutex::new(Vec::new()),
                idle_async: Mutex::new(Vec::new()),
                busy: Mutex::new(0),
                freed: Condvar::new(),
                busy_async: Arc::new(tokio::sync::Semaphore::new(MAX_OPEN)),
                origin: Instant::now(),
                last_reply: LastReply::default(),
            }),
        };
        if !config.lazy {
            backend.check()?;
        }
        Ok(backend)
    }

    /// Records that memcached answered a call just now ([`LastReply`]: one clock read and one
    /// store), where a call's answer is read: a blocking call ([`call_by`](Self::call_by): a
    /// decision, the startup check) and an async decision (`decide_async`) that returns one.
    pub(crate) fn replied(&self) {
        let shared = &*self.shared;
        let micros = micros_since(shared.origin, Instant::now());
        shared.last_reply.record(micros);
    }

    /// Whether memcached answered a call within the last backend timeout (`false` if it never
    /// has: a lazy backend before its first answer). A try cut short by its caller's own
    /// budget is the caller's matter only while this holds; otherwise memcached looks down
    /// (`MemcachedLimiter::try_acquire_for`, issue 18). See [`LastReply`] for how stale the
    /// time kept may be (never later than a real answer).
    pub(crate) fn answered_within_timeout(&self) -> bool {
        let shared = &*self.shared;
        let now = micros_since(shared.origin, Instant::now());
        let timeout = u64::try_from(shared.timeout.as_micros()).unwrap_or(u64::MAX);
        shared.last_reply.answered_within(now, timeout)
    }

    /// The startup check: `version` on a pooled (or new) connection within the timeout.
    fn check(&self) -> Result<(), BackendError> {
        let nothing_to_finish = || -> Finisher { Box::new(|_, _, _| {}) };
        self.call(
            |connection, deadline| {
                connection.send(b"version\r\n", deadline)?;
                connection.read_reply_blocking(deadline, protocol::parse_version)
            },
            nothing_to_finish,
        )
    }

    /// The longest a decision may take.
    ///
    /// ```
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig};
    /// use std::time::Duration;
    /// let config = MemcachedConfig::new("127.0.0.1:11211").timeout(Duration::from_millis(50));
    /// let backend = MemcachedBackend::connect(config.lazy())?; // lazy: no connection opened yet
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
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy
    /// assert_eq!(backend.addr(), "127.0.0.1:11211".parse::<std::net::SocketAddr>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Runs `exchange` on a pooled (or new) connection, all of it before one deadline `timeout`
    /// from now. The connection goes back to the pool only if the exchange succeeded and left
    /// nothing unread. A pooled connection found closed before use (the server restarted, or
    /// closed it while idle) is replaced by a fresh one, within the same deadline, as is one
    /// whose exchange failed on the connection before the first byte of its request was
    /// written (nothing reached the server). Once a byte was written, a failure is never sent
    /// again: the server may have counted the request (an `incr` carried out, its reply lost),
    /// and a second copy would count it twice; it is finished, or counted `left_counted`, as
    /// any exchange cut after its write (issue 18). An exchange that ends
    /// with a written request's replies unread ([`Pending`]: its timeout passed, say) is handed,
    /// with its connection and its place, to the [`Finisher`] that `finisher` makes, on a thread
    /// of its own, until the deadline plus the grace; the caller returns at once.
    pub(crate) fn call<T>(
        &self,
        exchange: impl Fn(&mut Connection, Instant) -> Result<T, CallError>,
        finisher: impl FnOnce() -> Finisher,
    ) -> Result<T, BackendError> {
        self.call_by(Instant::now() + self.shared.timeout, exchange, finisher)
    }

    /// As [`call`](Self::call), before `deadline` (a caller's own, sooner than the timeout).
    pub(crate) fn call_by<T>(
        &self,
        deadline: Instant,
        exchange: impl Fn(&mut Connection, Instant) -> Result<T, CallError>,
        finisher: impl FnOnce() -> Finisher,
    ) -> Result<T, BackendError> {
        let place = self.shared.place(deadline)?;
        let mut pooled = self.lock_idle().pop();
        if pooled.as_mut().is_some_and(Connection::closed_while_idle) {
            // Every idle connection predates the close: drop them all.
            self.lock_idle().clear();
            pooled = None;
        }
        let from_pool = pooled.is_some();
        let run = |connection: Option<Connection>| {
            let mut connection = match connection {
                Some(connection) => connection,
                None => match Connection::open(self.shared.addr, deadline) {
                    Ok(connection) => connection,
                    Err(error) => return (Err(error), None),
                },
            };
            let value = exchange(&mut connection, deadline);
            (value, Some(connection))
        };
        let (result, connection) = match run(pooled) {
            // Nothing of the failed request was written (a send that wrote no byte leaves no
            // `Pending`): the server never saw it, so a fresh connection may send it.
            (Err(CallError::Failed(MemcachedError::Io(_))), Some(connection))
                if from_pool && connection.pending == Pending::Nothing =>
            {
                // Every idle connection predates the break: drop them all.
                self.lock_idle().clear();
                run(None)
            }
            other => other,
        };
        if let Some(mut connection) = connection {
            let pending = std::mem::take(&mut connection.pending);
            if pending != Pending::Nothing {
                let finish = finisher();
                let finish_by = later_by(deadline, self.shared.grace);
                // A thread that cannot be started drops the exchange (its permits may stay:
                // the finisher, dropped unrun, counts it left counted).
                let _ = std::thread::Builder::new()
                    .name("floodgate-memcached-finish".into())
                    .spawn(move || {
                        finish(&mut connection, pending, finish_by);
                        drop(connection);
                        drop(place);
                    });
            } else if result.is_ok() && connection.is_reusable() {
                let mut idle = self.lock_idle();
                if idle.len() < MAX_IDLE {
                    idle.push(connection);
                }
            }
        }
        if result.is_ok() {
            self.replied();
        }
        result.map_err(|error| self.call_failed(error))
    }

    /// The error of a call that failed: classified by its kind, at this server
    /// (`memcached://host:port`), as the Redis backend reports its own.
    pub(crate) fn call_failed(&self, error: CallError) -> BackendError {
        let server = self.shared.server();
        match error {
            CallError::Timeout => BackendError::at(
                crate::backend::FailureKind::Timeout,
                server,
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", self.shared.timeout),
                ),
            ),
            CallError::NotSent => self.shared.not_sent(format!(
                "not sent: the call's deadline passed before its request was written ({:?} \
                 from the call)",
                self.shared.timeout
            )),
            CallError::Failed(error) => BackendError::at(error.kind(), server, error),
        }
    }

    /// The timeout of an async call whose exchange had not written its request by its
    /// deadline (not started, its runtime busy elsewhere; or the deadline passing between its
    /// start and its first write): nothing was sent, so the breaker is not told of it
    /// ([`NotSent`]), as a Redis request whose deadline passed before it was written.
    pub(crate) fn not_sent(&self) -> BackendError {
        self.shared.not_sent(format!(
            "not sent: the call's exchange had not written its request by its deadline ({:?} \
             from the call)",
            self.shared.timeout
        ))
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.shared
            .idle
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn lock_idle_async(&self) -> std::sync::MutexGuard<'_, Vec<AsyncConnection>> {
        self.shared
            .idle_async
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The grace of async exchanges whose caller is gone ([`MemcachedConfig::grace`]).
    pub(crate) fn grace(&self) -> Duration {
        self.shared.grace
    }

    /// Waits, until `deadline`, for one of the [`MAX_OPEN`] places of async calls; the place is
    /// owned, so it can outlive its caller (a detached exchange holds it until it ends).
    pub(crate) async fn async_place(
        &self,
        deadline: Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, BackendError> {
        let places = Arc::clone(&self.shared.busy_async);
        // Never closed: a place comes, or the deadline.
        match until_deadline(places.acquire_owned(), deadline).await {
            Ok(Ok(place)) => Ok(place),
            _ => Err(self.shared.all_busy()),
        }
    }

    /// An idle async connection, if any.
    pub(crate) fn pop_idle_async(&self) -> Option<AsyncConnection> {
        self.lock_idle_async().pop()
    }

    /// Drops every idle async connection (one was found broken: they all predate the break).
    pub(crate) fn clear_idle_async(&self) {
        self.lock_idle_async().clear();
    }

    /// Keeps `connection` for reuse if it is in step; closes it otherwise. The async pool has
    /// room for every connection the places allow ([`MAX_OPEN`], not [`MAX_IDLE`]): an exchange
    /// runs in a task of its own, so between a place given back and the next caller taking a
    /// connection with it, other exchanges may end and pool theirs; with room for only 64 the
    /// rest were closed and reopened (a flood of 3,000 calls opened 150-280 connections, not
    /// 130).
    pub(crate) fn pool_async(&self, connection: AsyncConnection) {
        if connection.is_reusable() {
            let mut idle = self.lock_idle_async();
            if idle.len() < MAX_OPEN {
                idle.push(connection);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With every place of the blocking path taken, a call waits until its deadline, then gets
    /// a timeout that names the cause; a place given back is taken by the next call.
    #[test]
    fn a_call_finding_every_connection_busy_times_out_saying_so() {
        let config = MemcachedConfig::new("127.0.0.1:1").timeout(Duration::from_millis(5));
        let backend = MemcachedBackend::connect(config.lazy()).unwrap();
        let shared = &backend.shared;
        let far = Instant::now() + Duration::from_secs(3600);
        let mut places: Vec<Place> = (0..MAX_OPEN).map(|_| shared.place(far).unwrap()).collect();
        let error = shared.place(Instant::now()).err().expect("no place left");
        assert!(error.is_timeout(), "{error}");
        // It never got a connection: nothing was sent, so the breaker is not told.
        assert!(error.is_not_sent(), "{error}");
        assert!(
            error
                .to_string()
                .contains("not sent: all 128 connections of this backend were busy"),
            "{error}"
        );
        places.pop();
        assert!(shared.place(Instant::now()).is_ok());
    }

    /// A request whose send failed before its first byte was written leaves no reply to read:
    /// no finisher is started for it (one would wait the whole grace, holding a place, for a
    /// reply that never comes, and count the request as left counted). Before: the exchange's
    /// pending decision stayed, and a finisher was made.
    #[test]
    fn a_request_never_written_is_not_handed_to_a_finisher() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = MemcachedConfig::new(listener.local_addr().unwrap().to_string())
            .timeout(Duration::from_secs(30));
        let backend = MemcachedBackend::connect(config.lazy()).unwrap();
        let finisher_made = std::sync::atomic::AtomicBool::new(false);
        let result = backend.call(
            |connection, _| {
                connection.set_pending(Pending::Decision { added: None });
                // Its deadline passed before the send: nothing is written.
                Connection::send(connection, b"incr k 1\r\n", Instant::now())
            },
            || -> Finisher {
                finisher_made.store(true, std::sync::atomic::Ordering::SeqCst);
                Box::new(|_, _, _| {})
            },
        );
        assert!(result.unwrap_err().is_timeout());
        assert!(!finisher_made.load(std::sync::atomic::Ordering::SeqCst));
    }

    /// A blocking call whose deadline passes once its send has begun, before any byte of its
    /// request is written, sent nothing: a "not sent" timeout, as one whose deadline had
    /// passed before the send (issue 18: the send's deadline check and its write loop's are a
    /// few instructions apart; a deadline passing in between was a plain timeout, told to the
    /// breaker). Made deterministic by the test hook between the two (`write_gap`),
    /// which waits until the deadline has passed. Before: "timeout at memcached://…: no answer
    /// within 30s", not `is_not_sent`.
    #[test]
    fn a_deadline_passing_before_the_first_byte_is_written_is_not_sent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let config = MemcachedConfig::new(addr.to_string()).timeout(Duration::from_secs(30));
        let backend = MemcachedBackend::connect(config.lazy()).unwrap();
        crate::memcached::write_gap::hold_past_deadline(true);
        let result = backend.call(
            |connection, _| {
                connection.set_pending(Pending::Decision { added: None });
                let deadline = Instant::now() + Duration::from_millis(20);
                Connection::send(connection, b"incr k 1\r\n", deadline)
            },
            || -> Finisher { panic!("nothing was written: nothing to finish") },
        );
        crate::memcached::write_gap::hold_past_deadline(false);
        let error = result.unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert!(error.is_not_sent(), "{error}");
        assert!(error.to_string().contains("not sent"), "{error}");
        // The connection, not reused, reached the listener with no byte.
        drop(backend);
        let (mut accepted, _) = listener.accept().unwrap();
        let mut received = Vec::new();
        accepted.read_to_end(&mut received).unwrap();
        assert!(received.is_empty(), "{received:?}");
    }

    /// A blocking call whose deadline passed before its request was written sent nothing: a
    /// "not sent" timeout ([`NotSent`]: decided by the policy, never told to the breaker),
    /// whether its thread was held before the send (a connection open) or before the connect
    /// (none opened). Before: a plain timeout, "no answer within 30s".
    #[test]
    fn a_call_past_its_deadline_before_its_write_is_not_sent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let config = MemcachedConfig::new(addr.to_string()).timeout(Duration::from_secs(30));
        let backend = MemcachedBackend::connect(config.lazy()).unwrap();
        let nothing_to_finish = || -> Finisher { Box::new(|_, _, _| {}) };
        let check = |error: BackendError| {
            assert!(error.is_timeout(), "{error}");
            assert!(error.is_not_sent(), "{error}");
            let message = error.to_string();
            assert!(
                message.contains(&format!("memcached://{addr}")),
                "{message}"
            );
            assert!(message.contains("not sent"), "{message}");
        };
        // Held before the send: the connection is open, the deadline passed.
        let held_before_send = backend.call(
            |connection, _| Connection::send(connection, b"version\r\n", Instant::now()),
            nothing_to_finish,
        );
        check(held_before_send.unwrap_err());
        // Held before the connect: the deadline passed as the call began.
        let held_before_connect = backend.call_by(
            Instant::now(),
            |connection, deadline| Connection::send(connection, b"version\r\n", deadline),
            nothing_to_finish,
        );
        check(held_before_connect.unwrap_err());
        // The first call's connection reached the listener with no byte; the second opened
        // none.
        let (mut accepted, _) = listener.accept().unwrap();
        let mut received = Vec::new();
        accepted.read_to_end(&mut received).unwrap();
        assert!(received.is_empty(), "{received:?}");
        listener.set_nonblocking(true).unwrap();
        assert_eq!(
            listener.accept().err().map(|e| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );
    }
}
