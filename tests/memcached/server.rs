//! Real `memcached` processes for the tests and the bench: started on a free loopback port,
//! killed when the guard drops. Also a raw text-protocol helper to look at what the limiter wrote.
#![allow(dead_code)] // each user (tests, bench) uses a part

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "../support/process.rs"]
mod process;
use process::{ServerProcess, retry_until_started};

/// One `memcached` on 127.0.0.1. Dropping it kills it.
pub struct MemcachedServer {
    pub port: u16,
    process: ServerProcess,
    /// `-t` and `-c`: worker threads and the connection limit.
    threads: u32,
    max_conns: u32,
}

/// Whether memcached is installed.
pub fn available() -> bool {
    Command::new("memcached")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl MemcachedServer {
    /// A server with 64 MiB of memory, TCP only.
    pub fn start() -> Self {
        Self::start_with(4, 1024)
    }

    /// A server with one worker thread and a limit of `max_conns` connections (`-c`; memcached
    /// counts its own files in it: at `-c 24`, about 12 clients are served and the next is
    /// refused with `ERROR Too many open connections`; below about 16 it does not start).
    pub fn start_with_max_conns(max_conns: u32) -> Self {
        Self::start_with(1, max_conns)
    }

    fn start_with(threads: u32, max_conns: u32) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            let mut server = MemcachedServer {
                port: free_port(),
                process: ServerProcess::default(),
                threads,
                max_conns,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("could not start memcached: {last_error}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new("memcached");
        command
            .args(["-l", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "0", "-m", "64"])
            .args([
                "-t",
                &self.threads.to_string(),
                "-c",
                &self.max_conns.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if running_as_root() {
            // memcached refuses to run as root unless told which user to be.
            command.args(["-u", "root"]);
        }
        self.process = ServerProcess::spawn(
            &mut command,
            // `stats` names the process: not another test's memcached that bound the port first.
            |pid| {
                self.request("stats\r\n")
                    .contains(&format!("STAT pid {pid}\r\n"))
            },
            |child| {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                stderr
            },
            "stats naming the child's process id",
        )?;
        Ok(())
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Freezes the server (SIGSTOP): connections still open (the kernel accepts them), nothing
    /// is answered.
    pub fn pause(&self) {
        self.process.signal_and_wait("STOP");
    }

    /// Thaws a server frozen by [`pause`](Self::pause) (SIGCONT).
    pub fn resume(&self) {
        self.process.signal_and_wait("CONT");
    }

    /// Starts the server again on the same port (empty: memcached keeps nothing).
    pub fn restart(&mut self) {
        self.kill();
        retry_until_started(|| self.spawn());
    }

    /// Sends `request` on a fresh connection and returns the reply (read until it ends with a
    /// line that ends a reply), or "" if the server cannot be reached.
    pub fn request(&self, request: &str) -> String {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return String::new();
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if stream.write_all(request.as_bytes()).is_err() {
            return String::new();
        }
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        while !is_complete(&reply) {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(read) => reply.extend_from_slice(&chunk[..read]),
            }
        }
        String::from_utf8_lossy(&reply).into_owned()
    }

    /// The value of `key` (trailing padding spaces removed), `None` if absent.
    pub fn get(&self, key: &str) -> Option<String> {
        let reply = self.request(&format!("get {key}\r\n"));
        let mut lines = reply.split("\r\n");
        let header = lines.next()?;
        header
            .starts_with("VALUE ")
            .then(|| lines.next().unwrap_or("").trim_end().to_owned())
    }

    /// The value of a `stats` line (`time`: memcached's own clock, in whole seconds).
    pub fn stat(&self, stat: &str) -> u64 {
        let reply = self.request("stats\r\n");
        reply
            .lines()
            .find_map(|line| line.strip_prefix(&format!("STAT {stat} ")))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {stat} in {reply:?}"))
    }

    /// The count in `key`, 0 if absent.
    pub fn count(&self, key: &str) -> u64 {
        self.get(key).map_or(0, |v| v.parse().expect("a count"))
    }

    /// Seconds until `key` expires (meta get `t` flag), `None` if absent; -1 for never.
    pub fn ttl(&self, key: &str) -> Option<i64> {
        let reply = self.request(&format!("mg {key} t\r\n"));
        let line = reply.lines().next().unwrap_or("");
        if !line.starts_with("HD") {
            return None;
        }
        line.split(' ')
            .find_map(|flag| flag.strip_prefix('t'))
            .map(|t| t.parse().expect("a TTL"))
    }

    /// Stores `value` under `key` with no expiry.
    pub fn set(&self, key: &str, value: &str) {
        let reply = self.request(&format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()));
        assert_eq!(reply, "STORED\r\n");
    }
}

/// Whether `reply` ends with a line that ends any reply the helpers ask for: `END` after a
/// `get`'s values or `stats`' lines (which may come in several reads: a read that ends between
/// two `STAT` lines is not the whole reply), else the first line.
fn is_complete(reply: &[u8]) -> bool {
    let text = String::from_utf8_lossy(reply);
    let Some(body) = text.strip_suffix("\r\n") else {
        return false;
    };
    let last = body.rsplit("\r\n").next().unwrap_or("");
    let ends_at_end = body.starts_with("VALUE ") || body.starts_with("STAT ");
    !ends_at_end && !last.is_empty() || last == "END"
}

#[test]
fn a_reply_read_in_parts_is_complete_only_at_its_end() {
    // A `stats` reply cut between two lines (the failure seen once: "no time in" a reply that
    // held `pid` and `uptime` only), and whole.
    assert!(!is_complete(b"STAT pid 7\r\nSTAT uptime 5\r\n"));
    assert!(is_complete(
        b"STAT pid 7\r\nSTAT uptime 5\r\nSTAT time 9\r\nEND\r\n"
    ));
    assert!(!is_complete(b"VALUE k 0 1\r\n3\r\n"));
    assert!(is_complete(b"VALUE k 0 1\r\n3\r\nEND\r\n"));
    assert!(is_complete(b"END\r\n"));
    assert!(is_complete(b"STORED\r\n"));
    assert!(is_complete(b"HD t2\r\n"));
    assert!(!is_complete(b"HD t2"));
}
