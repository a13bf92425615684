//! A TCP proxy on a free loopback port in front of a server, that can lose one reply: armed,
//! it forwards the next request holding `EVALSHA` to the server, swallows the server's reply,
//! runs a hook (while that reply is lost: the server has run the request, the client does not
//! know it), then closes that connection both ways. Or it can rewrite one reply: armed, it
//! hands the reply to the next `EVALSHA` (one read of the server's answer: a short reply, which
//! the server writes at once) to a function and forwards what that returns. Everything else is
//! forwarded as is.
#![allow(dead_code)] // each user uses a part

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// What runs while the reply is lost.
type Hook = Box<dyn FnOnce() + Send>;

/// What a rewritten reply becomes.
type Rewrite = Box<dyn FnOnce(&[u8]) -> Vec<u8> + Send>;

/// The proxy: its port, and the hook of the next reply to lose (armed) or none.
pub struct LossyProxy {
    pub port: u16,
    armed: Arc<Mutex<Option<Hook>>>,
    rewrite: Arc<Mutex<Option<Rewrite>>>,
    requests: Arc<AtomicUsize>,
}

impl LossyProxy {
    /// A listener on a free loopback port, to be handed to [`forward`](Self::forward) (bound
    /// first: the server may need to know the port before it starts).
    pub fn listener() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").expect("bind a loopback port")
    }

    /// Forwards each connection to `listener` to 127.0.0.1:`target`, on threads of its own.
    pub fn forward(listener: TcpListener, target: u16) -> Self {
        let port = listener.local_addr().unwrap().port();
        let armed: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
        let rewrite: Arc<Mutex<Option<Rewrite>>> = Arc::new(Mutex::new(None));
        let requests = Arc::new(AtomicUsize::new(0));
        let (accept_armed, accept_requests) = (Arc::clone(&armed), Arc::clone(&requests));
        let accept_rewrite = Arc::clone(&rewrite);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    return;
                };
                pump(
                    client,
                    server,
                    &accept_armed,
                    &accept_rewrite,
                    &accept_requests,
                );
            }
        });
        LossyProxy {
            port,
            armed,
            rewrite,
            requests,
        }
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Loses the reply to the next `EVALSHA` sent through the proxy, running `hook` meanwhile.
    pub fn lose_next_reply(&self, hook: impl FnOnce() + Send + 'static) {
        *self.armed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(hook));
    }

    /// Rewrites the reply to the next `EVALSHA` sent through the proxy with `rewrite`.
    pub fn rewrite_next_reply(&self, rewrite: impl FnOnce(&[u8]) -> Vec<u8> + Send + 'static) {
        *self.rewrite.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(rewrite));
    }

    /// Whether the armed rewrite has happened (its function taken).
    pub fn rewritten(&self) -> bool {
        self.rewrite
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Whether the armed loss has happened (its hook taken).
    pub fn lost(&self) -> bool {
        self.armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// How many `EVALSHA` requests went through the proxy to the server (each read from a
    /// client that holds the word counts once).
    pub fn script_requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Two threads: client to server (arming this connection's loss when an armed `EVALSHA` goes
/// through), server to client (losing the reply when this connection's loss is armed).
fn pump(
    mut client: TcpStream,
    mut server: TcpStream,
    armed: &Arc<Mutex<Option<Hook>>>,
    rewrite: &Arc<Mutex<Option<Rewrite>>>,
    requests: &Arc<AtomicUsize>,
) {
    let doomed: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(None));
    let rewriting: Arc<Mutex<Option<Rewrite>>> = Arc::new(Mutex::new(None));
    let (mut client_in, mut server_out) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (armed, requests, doom) = (Arc::clone(armed), Arc::clone(requests), Arc::clone(&doomed));
    let (rewrite, to_rewrite) = (Arc::clone(rewrite), Arc::clone(&rewriting));
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64 * 1024];
        loop {
            let read = match client_in.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let chunk = &buffer[..read];
            if chunk.windows(7).any(|w| w.eq_ignore_ascii_case(b"EVALSHA")) {
                requests.fetch_add(1, Ordering::SeqCst);
                // Taken before the request is forwarded: its reply cannot come before.
                let hook = armed.lock().unwrap_or_else(PoisonError::into_inner).take();
                if hook.is_some() {
                    *doom.lock().unwrap_or_else(PoisonError::into_inner) = hook;
                }
                let change = rewrite
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if change.is_some() {
                    *to_rewrite.lock().unwrap_or_else(PoisonError::into_inner) = change;
                }
            }
            if server_out.write_all(chunk).is_err() {
                break;
            }
        }
        let _ = server_out.shutdown(Shutdown::Write);
    });
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64 * 1024];
        loop {
            let read = match server.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let hook = doomed.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(hook) = hook {
                // The reply is lost: run the hook, then close the connection both ways.
                hook();
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                return;
            }
            let change = rewriting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            let written = match change {
                Some(change) => client.write_all(&change(&buffer[..read])),
                None => client.write_all(&buffer[..read]),
            };
            if written.is_err() {
                break;
            }
        }
        let _ = client.shutdown(Shutdown::Both);
    });
}
