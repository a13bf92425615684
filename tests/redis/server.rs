//! Real `redis-server` processes for the tests and the bench: started on free loopback ports in
//! temporary directories, killed (and their directories removed) when the guard drops.
#![allow(dead_code)] // each user (tests, bench) uses a part

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "../support/process.rs"]
mod process;
use process::{ServerProcess, retry_until_started};

/// One `redis-server` on 127.0.0.1. Dropping it kills it and removes its directory.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    process: ServerProcess,
}

/// Whether redis-server and redis-cli are installed.
pub fn available() -> bool {
    ["redis-server", "redis-cli"].iter().all(|bin| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// A port that was free a moment ago (and, for cluster nodes, whose bus port +10000 was too).
fn free_port(with_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        if !with_bus {
            return port;
        }
        if port <= 55_535 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn temp_dir(port: u16) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floodgate-redis-{}-{}-{port}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    dir
}

impl RedisServer {
    /// A standalone server without persistence.
    pub fn start() -> Self {
        Self::start_node(false)
    }

    fn start_node(cluster: bool) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port(cluster);
            let mut server = RedisServer {
                port,
                dir: temp_dir(port),
                cluster,
                process: ServerProcess::default(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .current_dir(&self.dir)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--loglevel", "warning", "--logfile", "redis.log"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            command.args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
            ]);
        }
        let log = self.dir.join("redis.log");
        self.process = ServerProcess::spawn(
            &mut command,
            |pid| self.answers_as(pid),
            |_| std::fs::read_to_string(&log).unwrap_or_default(),
            "INFO server naming the child's process id",
        )?;
        Ok(())
    }

    /// Whether the server on the port answers, and is process `pid` (`INFO server`'s
    /// `process_id`), not another test's server that bound the port first.
    fn answers_as(&self, pid: u32) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"INFO server\r\n").is_err() {
            return false;
        }
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&reply);
            if let Some(rest) = text.split("\r\nprocess_id:").nth(1)
                && let Some((id, _)) = rest.split_once("\r\n")
            {
                return id == pid.to_string();
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(read) => reply.extend_from_slice(&chunk[..read]),
            }
        }
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A Redis Cluster of one master owning every slot, which announces itself at
    /// 127.0.0.1:`announced` (`CLUSTER SLOTS` names that port, not its own): a cluster client
    /// reaches it only there (a proxy in front of it).
    pub fn start_cluster_announcing(announced: u16) -> Self {
        let node = Self::start_node(true);
        let port = announced.to_string();
        node.cli(&["CONFIG", "SET", "cluster-announce-ip", "127.0.0.1"]);
        node.cli(&["CONFIG", "SET", "cluster-announce-port", &port]);
        node.cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        wait_until_cluster_ok(|| {
            node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                && node.cli(&["CLUSTER", "SLOTS"]).contains(&port)
        });
        node
    }

    /// A Redis Cluster of one master owning every slot whose `CLUSTER SLOTS` names no host
    /// for its nodes (`cluster-preferred-endpoint-type unknown-endpoint`: a `NULL` host, which
    /// Redis documents as "the endpoint the command was sent to", as behind a load balancer).
    pub fn start_cluster_of_unknown_endpoints() -> Self {
        let node = Self::start_node(true);
        let kind = "cluster-preferred-endpoint-type";
        node.cli(&["CONFIG", "SET", kind, "unknown-endpoint"]);
        node.cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        wait_until_cluster_ok(|| node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
        node
    }

    /// A Redis Cluster of one master owning every slot, with an ACL user `user` whose password
    /// is `password` (every command, every key), beside the default user (no password).
    pub fn start_cluster_with_user(user: &str, password: &str) -> Self {
        let node = Self::start_node(true);
        let pass = format!(">{password}");
        node.cli(&["ACL", "SETUSER", user, "on", &pass, "~*", "&*", "+@all"]);
        node.cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        wait_until_cluster_ok(|| node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
        node
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same port (its data is gone: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        retry_until_started(|| self.spawn());
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered. Returns once
    /// every thread of the server is stopped.
    pub fn freeze(&self) {
        self.process.signal_and_wait("STOP");
    }

    /// Resumes a frozen server (SIGCONT): it then runs what queued up meanwhile.
    pub fn thaw(&self) {
        self.process.signal_and_wait("CONT");
    }

    /// How many times the server has run `command` (`INFO commandstats`), e.g. `"evalsha"`.
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().expect("a count"))
    }

    /// Waits (polling, bounded by 60 s as a hang guard) until the server has run `command` at
    /// least `calls` times.
    pub fn wait_for_calls(&self, command: &str, calls: u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.calls(command) < calls {
            assert!(
                Instant::now() < deadline,
                "{command} ran {} times, expected {calls}",
                self.calls(command)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Runs `redis-cli -p port ARGS…` and returns its trimmed stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        assert!(output.status.success(), "redis-cli {args:?} failed");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Runs `redis-cli` and returns its trimmed stdout, whatever its exit status.
    pub fn cli_unchecked(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }

    /// From now on logs every command in `SLOWLOG` (threshold 0, room for 4,096), so that
    /// [`script_calls`](Self::script_calls) sees each script call the server runs.
    pub fn log_script_calls(&self) {
        self.cli(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        self.cli(&["CONFIG", "SET", "slowlog-max-len", "4096"]);
        self.cli(&["SLOWLOG", "RESET"]);
    }

    /// Each `EVALSHA` the server ran since [`log_script_calls`](Self::log_script_calls), oldest
    /// first (a NOSCRIPT attempt too). `SLOWLOG` keeps a command's first 32 words: `keys` and
    /// `args` are cut there, `numkeys` never is.
    pub fn script_calls(&self) -> Vec<ScriptCall> {
        let log = self.cli(&["SLOWLOG", "GET", "4096"]);
        let lines: Vec<&str> = log.lines().map(str::trim).collect();
        let is_int = |l: &str| l.parse::<u64>().is_ok();
        let mut calls = Vec::new();
        // Each entry: id, timestamp, duration (µs), the command's words, client address, name.
        for i in 3..lines.len() {
            let entry = lines[i - 3..i].iter().all(|l| is_int(l));
            if !entry || !lines[i].eq_ignore_ascii_case("evalsha") {
                continue;
            }
            let numkeys: usize = lines[i + 2].parse().expect("EVALSHA numkeys");
            let words: Vec<String> = lines[i + 3..]
                .iter()
                .take_while(|l| l.parse::<std::net::SocketAddr>().is_err())
                .map(|l| (*l).to_owned())
                .collect();
            let split = numkeys.min(words.len());
            calls.push(ScriptCall {
                sha: lines[i + 1].to_owned(),
                numkeys,
                keys: words[..split].to_vec(),
                args: words[split..].to_vec(),
            });
        }
        calls.reverse();
        calls
    }

    /// The server's `TIME` in microseconds.
    pub fn time_micros(&self) -> u64 {
        let time = self.cli(&["TIME"]);
        let mut parts = time.lines().map(|l| l.trim().parse::<u64>().unwrap());
        parts.next().unwrap() * 1_000_000 + parts.next().unwrap()
    }
}

/// One `EVALSHA` from `SLOWLOG` ([`RedisServer::script_calls`]).
#[derive(Debug)]
pub struct ScriptCall {
    /// The script's SHA1, as EVALSHA named it.
    pub sha: String,
    pub numkeys: usize,
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `ok` every 50 ms until it holds: a cluster's nodes agreeing on their slots. The 20 s
/// bound only turns a hang into a failure (a local cluster settles within a second or two).
fn wait_until_cluster_ok(ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "cluster did not become ok");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Redis Cluster of three masters (no replicas), created with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_node(true)).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes };
        wait_until_cluster_ok(|| {
            cluster.nodes.iter().all(|n| {
                let info = n.cli(&["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && info.contains("cluster_known_nodes:3")
            })
        });
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// How many nodes hold `key` (each node answers only for its own slots).
    pub fn holders(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.cli_unchecked(&["EXISTS", key]) == "1")
            .count()
    }
}
