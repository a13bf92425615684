//! The seeds' memcached limiter, for comparison: read the window's cells with one multi-get, sum,
//! and only then `increment(key, 1, initial 1, ttl = window)`. Two separate steps: callers that
//! read the same sum all pass. The split into [`NaiveClient::read_sum`] and
//! [`NaiveClient::increment`] lets a test put a barrier between them.
#![allow(dead_code)] // the bench uses a part

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One connection doing the seeds' read-then-increment.
pub struct NaiveClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    prefix: String,
    cells: u64,
    ttl_secs: u64,
}

impl NaiveClient {
    /// A client for keys `prefix<cell>`, `cells` cells per window, cells expiring after `ttl_secs`.
    pub fn connect(addr: &str, prefix: &str, cells: u64, ttl_secs: u64) -> Self {
        let writer = TcpStream::connect(addr).expect("connect to memcached");
        writer
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        writer.set_nodelay(true).unwrap();
        NaiveClient {
            reader: BufReader::new(writer.try_clone().unwrap()),
            writer,
            prefix: prefix.to_owned(),
            cells,
            ttl_secs,
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("a reply line");
        line.trim_end_matches("\r\n").to_owned()
    }

    /// Step 1: the sum of the window's cells ending at `current` (one multi-get).
    pub fn read_sum(&mut self, current: u64) -> u64 {
        let keys: Vec<String> = (current.saturating_sub(self.cells - 1)..=current)
            .map(|i| format!("{}{i}", self.prefix))
            .collect();
        write!(self.writer, "get {}\r\n", keys.join(" ")).unwrap();
        let mut sum = 0;
        loop {
            let line = self.line();
            if line == "END" {
                return sum;
            }
            let len: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
            let mut data = vec![0u8; len + 2];
            self.reader.read_exact(&mut data).unwrap();
            let text = String::from_utf8_lossy(&data[..len]);
            sum += text.trim_end().parse::<u64>().unwrap();
        }
    }

    /// Step 2: `increment(cell, 1, initial 1, ttl)`: `incr`, or `add` with 1 if absent.
    pub fn increment(&mut self, current: u64) {
        let key = format!("{}{current}", self.prefix);
        write!(self.writer, "incr {key} 1\r\n").unwrap();
        if self.line() != "NOT_FOUND" {
            return;
        }
        write!(self.writer, "add {key} 0 {} 1\r\n1\r\n", self.ttl_secs).unwrap();
        if self.line() == "NOT_STORED" {
            // Someone added it in between.
            write!(self.writer, "incr {key} 1\r\n").unwrap();
            self.line();
        }
    }

    /// The seeds' check: admit if the window's sum is under `limit`, then increment.
    pub fn check(&mut self, current: u64, limit: u64) -> bool {
        if self.read_sum(current) < limit {
            self.increment(current);
            true
        } else {
            false
        }
    }
}
