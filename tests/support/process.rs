//! A server child process for the tests and benches that need real servers (redis-server,
//! memcached): spawned, polled until it answers or exits, killed when dropped.
#![allow(dead_code)] // each user (tests, benches) uses a part

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long a server may take to answer after it starts.
pub const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running server process; dropping it kills it.
#[derive(Default)]
pub struct ServerProcess {
    child: Option<Child>,
}

impl ServerProcess {
    /// Spawns `command` and waits until `ready(pid)` holds, `pid` being the child's: `ready`
    /// must check that the server answering on the port is this child. The port was free when
    /// it was picked, but another test (tests run in parallel) may have picked it too and bound
    /// it first: this child then exits ("address in use"), and a plain ping answered by the
    /// other test's server passed for this one, so two tests shared one server (and one's kill
    /// or freeze hit the other's). If the process exits first, the error holds its status and
    /// `exit_detail` (its log or stderr), and the caller may try another port; if the deadline
    /// passes, it is killed and the error says `waiting_for` did not come.
    pub fn spawn(
        command: &mut Command,
        ready: impl Fn(u32) -> bool,
        exit_detail: impl FnOnce(&mut Child) -> String,
        waiting_for: &str,
    ) -> Result<Self, String> {
        let mut child = command.spawn().map_err(|e| format!("spawn: {e}"))?;
        let pid = child.id();
        let deadline = Instant::now() + START_DEADLINE;
        while Instant::now() < deadline {
            if ready(pid) {
                return Ok(ServerProcess { child: Some(child) });
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited with {status}: {}", exit_detail(&mut child)));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!("no {waiting_for} within the deadline"))
    }

    /// The process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.pid()
    }

    /// The process id, while it runs (for SIGSTOP / SIGCONT).
    #[allow(dead_code)] // not every test binary stops its servers
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (`STOP` or `CONT`) with `kill(1)` and waits until every thread of the
    /// process is stopped (`STOP`) or none is (`CONT`), as `/proc/PID/task/*/stat` says. `kill`
    /// returns once the signal is queued: a thread running on another core may still answer a
    /// request or two before it stops, and on a loaded machine a test's next call could be one
    /// of them. Polls every millisecond; panics after 60 s (a hang guard).
    #[allow(dead_code)] // not every test binary stops its servers
    pub fn signal_and_wait(&self, signal: &str) {
        let pid = self.pid().expect("the server runs");
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid}");
        let want_stopped = signal == "STOP";
        let deadline = Instant::now() + Duration::from_secs(60);
        while stopped_threads(pid) != Some(want_stopped) {
            assert!(
                Instant::now() < deadline,
                "process {pid} not {} 60 s after SIG{signal}",
                if want_stopped { "stopped" } else { "running" }
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Kills the process (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `attempt` every 50 ms until it succeeds; panics with its last error after
/// [`START_DEADLINE`] (for restarting a server on its old port, which may take a moment to free).
pub fn retry_until_started(mut attempt: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        match attempt() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("restart failed: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// `Some(true)` when every thread of process `pid` is stopped (state `T`), `Some(false)` when
/// none is, `None` while some are and some are not (or `/proc` cannot be read).
#[allow(dead_code)] // not every test binary stops its servers
fn stopped_threads(pid: u32) -> Option<bool> {
    let mut all = true;
    let mut none = true;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
        // `tid (comm) S ...`: the state follows the last ')' (comm may hold one).
        let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
        let stopped = state == 'T';
        all &= stopped;
        none &= !stopped;
    }
    if all {
        Some(true)
    } else if none {
        Some(false)
    } else {
        None
    }
}
