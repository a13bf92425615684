//! The async connection (tokio): the same text protocol and exchange as the blocking
//! [`Connection`](super::connection::Connection), on the caller's runtime.

use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::connection::{Pending, Transport, cut};
use super::error::{CallError, MemcachedError, io_error};
use super::protocol::Parsed;

/// One open async connection with its read buffer. Deadlines are enforced around the whole
/// call (`crate::backend::until_deadline`), so the methods ignore theirs; a call that runs out
/// of time drops the connection mid-exchange, which closes it.
pub(crate) struct AsyncConnection {
    stream: TcpStream,
    buffer: Vec<u8>,
    /// Start of the unread part of `buffer`.
    start: usize,
    /// Set by any failed send or read, or a reply that made no sense: never reused.
    broken: bool,
    /// Whether the server has sent a byte since the last request (see the blocking
    /// connection's field of that name).
    replied: bool,
    /// Replies of a written request still unread: [`Pending::Nothing`] after a failed send
    /// that wrote no byte (the exchange may then run again on a fresh connection).
    pending: Pending,
}

impl AsyncConnection {
    pub(crate) async fn open(addr: SocketAddr) -> Result<Self, CallError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| CallError::Failed(MemcachedError::Unreachable { addr, source }))?;
        // Requests are small and answered one at a time: send them at once.
        stream.set_nodelay(true).map_err(io_error)?;
        Ok(AsyncConnection {
            stream,
            buffer: Vec::with_capacity(4096),
            start: 0,
            broken: false,
            replied: false,
            pending: Pending::Nothing,
        })
    }

    /// Replies of a written request still unread (see [`Pending`]).
    pub(crate) fn pending(&self) -> Pending {
        self.pending
    }

    /// Whether the server closed this idle connection, or it holds bytes no request asked
    /// for: checked, without waiting, before a pooled connection is used (as the blocking
    /// connection's `closed_while_idle`). A peek on the socket itself (non-blocking, as tokio
    /// keeps it), not tokio's `try_read`: that reads only while tokio's cached readiness is
    /// set, and a read that drained the socket cleared it, so a close that came since (seen
    /// only when the runtime's driver next turns) read as "nothing yet", and the request went
    /// out on a dead connection. A connection closed after the check fails its call, which is
    /// never sent again: counted `left_counted`, never twice.
    pub(crate) fn closed_while_idle(&self) -> bool {
        let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
        let peeked = socket2::SockRef::from(&self.stream).peek(&mut byte);
        // Anything but "nothing to read yet" (an end of stream, bytes, an error) is unusable.
        !matches!(peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Whether the connection can serve another call: nothing failed and every byte received
    /// so far was read.
    pub(crate) fn is_reusable(&self) -> bool {
        !self.broken && self.start == self.buffer.len()
    }

    async fn fill(&mut self) -> Result<(), CallError> {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk).await.map_err(io_error) {
            Ok(0) => Err(cut(
                self.replied,
                MemcachedError::Io(std::io::ErrorKind::UnexpectedEof.into()),
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
}

impl Transport for AsyncConnection {
    async fn send(&mut self, request: &[u8], _deadline: Instant) -> Result<(), CallError> {
        self.replied = false;
        let mut written = 0;
        let result = loop {
            if written == request.len() {
                break Ok(());
            }
            match self.stream.write(&request[written..]).await {
                Ok(0) => {
                    break Err(CallError::Failed(MemcachedError::Io(
                        std::io::ErrorKind::WriteZero.into(),
                    )));
                }
                Ok(sent) => written += sent,
                Err(error) => break Err(io_error(error)),
            }
        };
        if result.is_err() {
            self.broken = true;
            if written == 0 {
                // Nothing reached the server: no reply to wait for.
                self.pending = Pending::Nothing;
            }
        }
        result
    }

    async fn read_reply<T>(
        &mut self,
        _deadline: Instant,
        mut parse: impl FnMut(&[u8]) -> Parsed<T>,
    ) -> Result<T, CallError> {
        let result = loop {
            match parse(&self.buffer[self.start..]) {
                Ok(Some((value, used))) => {
                    self.start += used;
                    break Ok(value);
                }
                Ok(None) => {
                    if let Err(error) = self.fill().await {
                        break Err(error);
                    }
                }
                Err(error) => break Err(error),
            }
        };
        self.broken |= result.is_err();
        result
    }

    fn set_broken(&mut self) {
        self.broken = true;
    }

    fn set_pending(&mut self, pending: Pending) {
        self.pending = pending;
    }
}
