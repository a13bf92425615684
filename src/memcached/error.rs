//! What can go wrong in a memcached call.

use std::fmt;
use std::io;
use std::net::SocketAddr;

/// Why a memcached call failed (inside [`BackendError::Server`](crate::backend::BackendError::Server),
/// with its [`FailureKind`](crate::backend::FailureKind) and the server, `memcached://host:port`).
///
/// ```
/// use floodgate::memcached::MemcachedError;
/// let e = MemcachedError::Server("SERVER_ERROR out of memory".into());
/// assert_eq!(e.to_string(), "memcached replied SERVER_ERROR out of memory");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum MemcachedError {
    /// No connection could be opened (refused, no route, …).
    Unreachable {
        /// The server's address.
        addr: SocketAddr,
        /// What the operating system said.
        source: io::Error,
    },
    /// The connection broke during a call.
    Io(io::Error),
    /// The server answered `ERROR`, `CLIENT_ERROR …` or `SERVER_ERROR …`. `ERROR Too many
    /// open connections` (memcached past its connection limit, `memcached -c`, refusing a new
    /// connection before reading anything) is a refused connection
    /// ([`FailureKind::Refused`](crate::backend::FailureKind::Refused)), the server unavailable.
    Server(String),
    /// A reply that is not what the protocol promises.
    Protocol(String),
}

impl fmt::Display for MemcachedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemcachedError::Unreachable { addr, source } => {
                write!(f, "memcached at {addr} is unreachable: {source}")
            }
            MemcachedError::Io(error) => write!(f, "memcached connection lost: {error}"),
            MemcachedError::Server(line) if is_connection_limit(line) => write!(
                f,
                "memcached refused the connection, replying {line}: its connection limit \
                 (`memcached -c`) was reached"
            ),
            MemcachedError::Server(line) => write!(f, "memcached replied {line}"),
            MemcachedError::Protocol(what) => write!(f, "unexpected reply from memcached: {what}"),
        }
    }
}

impl std::error::Error for MemcachedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MemcachedError::Unreachable { source, .. } => Some(source),
            MemcachedError::Io(error) => Some(error),
            _ => None,
        }
    }
}

/// Whether `line` is memcached's refusal of a connection past its limit (`memcached -c`):
/// `ERROR Too many open connections` (memcached 1.6.18, seen; `SERVER_ERROR Too many open
/// connections` is taken the same way), written as soon as the connection is accepted, before
/// any request is read, and the connection closed.
pub(crate) fn is_connection_limit(line: &str) -> bool {
    ["ERROR ", "SERVER_ERROR "]
        .iter()
        .filter_map(|prefix| line.strip_prefix(prefix))
        .any(|rest| {
            rest.trim_end()
                .eq_ignore_ascii_case("Too many open connections")
        })
}

/// A failed call: out of time, or a [`MemcachedError`].
#[derive(Debug)]
pub(crate) enum CallError {
    Timeout,
    /// The call's deadline passed before its request was written (a blocking call's thread
    /// held, or waiting for a connection): nothing was sent, so it says nothing about the
    /// server ([`NotSent`](crate::backend::NotSent)).
    NotSent,
    Failed(MemcachedError),
}

impl From<MemcachedError> for CallError {
    fn from(error: MemcachedError) -> Self {
        CallError::Failed(error)
    }
}

impl MemcachedError {
    /// The kind of failure, as the Redis backend classifies its own: a refused connection (a
    /// closed port, or memcached's refusal past its connection limit: `ERROR Too many open
    /// connections`, the server unavailable, not a reply to the request), another connection
    /// failure, a reply the protocol does not promise, or the server's own error line (`ERROR`,
    /// `CLIENT_ERROR …`, `SERVER_ERROR …`, as Redis's error replies).
    pub(crate) fn kind(&self) -> crate::backend::FailureKind {
        use crate::backend::FailureKind;
        match self {
            MemcachedError::Unreachable { source, .. }
                if source.kind() == io::ErrorKind::ConnectionRefused =>
            {
                FailureKind::Refused
            }
            MemcachedError::Unreachable { .. } | MemcachedError::Io(_) => FailureKind::Connection,
            MemcachedError::Server(line) if is_connection_limit(line) => FailureKind::Refused,
            MemcachedError::Server(_) => FailureKind::Script,
            MemcachedError::Protocol(_) => FailureKind::Protocol,
        }
    }

    /// Whether this is memcached's refusal of a connection past its limit
    /// ([`is_connection_limit`]): the request on that connection was never read.
    pub(crate) fn is_connection_limit(&self) -> bool {
        matches!(self, MemcachedError::Server(line) if is_connection_limit(line))
    }
}

/// An I/O error during a call: a timeout if the socket gave up waiting, a lost connection else.
pub(crate) fn io_error(error: io::Error) -> CallError {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => CallError::Timeout,
        _ => CallError::Failed(MemcachedError::Io(error)),
    }
}
