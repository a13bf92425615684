//! Decisions per second against a local redis-server (started by the bench on a free loopback
//! port) at 1, 16 and 128 concurrent callers (tokio tasks on the bench's runtime, each client on
//! its own one multiplexed connection): floodgate's `RedisLimiter` (fixed window and GCRA, async
//! on the caller's runtime), a plain client running a minimal fixed-window script with one
//! `EVALSHA` (the floor for one script per decision), and a naive client doing `INCR` then
//! `EXPIRE` (two round trips, and not atomic: a crash between them leaves a counter without a
//! TTL).
//!
//! `cargo bench --features redis --bench redis -- --warm-up-time 1 --measurement-time 2`
//! Throughput is printed as elements/s = decisions/s. `cargo bench --features redis --bench
//! redis -- interleaved` skips the criterion groups and prints only the interleaved table.

#[path = "../tests/redis/server.rs"]
mod server;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use floodgate::backend::FailurePolicy;
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{FixedWindow, Gcra, Rate};
use redis::aio::MultiplexedConnection;

const CALLERS: [u64; 3] = [1, 16, 128];

/// The caller counts to measure: [`CALLERS`], or those listed in `FLOODGATE_BENCH_CALLERS`
/// (comma-separated, e.g. `16` to profile one of them alone).
fn callers() -> Vec<u64> {
    match std::env::var("FLOODGATE_BENCH_CALLERS") {
        Ok(list) => list
            .split(',')
            .map(|c| {
                c.trim()
                    .parse()
                    .expect("FLOODGATE_BENCH_CALLERS: numbers, comma-separated")
            })
            .collect(),
        Err(_) => CALLERS.to_vec(),
    }
}

/// Runs `iters` decisions split over `callers` concurrent tasks; returns the time per `iters`.
fn run<F, Fut>(runtime: &tokio::runtime::Runtime, callers: u64, iters: u64, decide: F) -> Duration
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let per_caller = iters.div_ceil(callers);
    runtime.block_on(async move {
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let decide = decide.clone();
                tokio::spawn(async move {
                    for _ in 0..per_caller {
                        decide().await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let elapsed = started.elapsed();
        // Normalise to exactly `iters` decisions.
        elapsed.mul_f64(iters as f64 / (per_caller * callers) as f64)
    })
}

/// The server, the runtime the callers run on, and the three clients.
struct Setup {
    runtime: tokio::runtime::Runtime,
    window: Arc<RedisLimiter<FixedWindow>>,
    gcra: Arc<RedisLimiter<Gcra>>,
    naive: MultiplexedConnection,
    plain: MultiplexedConnection,
    // Last: killed after the clients are gone.
    server: server::RedisServer,
}

impl Setup {
    fn new() -> Self {
        assert!(
            server::available(),
            "redis-server and redis-cli must be installed"
        );
        let server = server::RedisServer::start();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        // On the callers' runtime: the connection's task runs there, as in an application.
        let backend = runtime
            .block_on(RedisBackend::connect(
                RedisConfig::single(server.url()).timeout(Duration::from_secs(5)),
            ))
            .unwrap();
        let window = Arc::new(
            RedisLimiter::new(
                &backend,
                "bench",
                FixedWindow::new((1 << 24) - 1, Duration::from_secs(60)).unwrap(),
                FailurePolicy::FailClosed,
            )
            .unwrap(),
        );
        let gcra = Arc::new(
            RedisLimiter::new(
                &backend,
                "bench",
                Gcra::new(Rate::per_second(1_000_000), u32::MAX / 2).unwrap(),
                FailurePolicy::FailClosed,
            )
            .unwrap(),
        );
        let connect = || {
            runtime.block_on(async {
                redis::Client::open(server.url())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap()
            })
        };
        let (naive, plain) = (connect(), connect());
        Setup {
            runtime,
            window,
            gcra,
            naive,
            plain,
            server,
        }
    }

    fn floodgate_window(&self, callers: u64, iters: u64) -> Duration {
        let window = Arc::clone(&self.window);
        run(&self.runtime, callers, iters, move || {
            let window = Arc::clone(&window);
            async move {
                let outcome = window.try_acquire_outcome("k", 1).await.unwrap();
                // Every decision admitted: a denial (a deny cache's, say) would flatter it.
                assert!(outcome.failure().is_none(), "{outcome:?}");
                assert!(outcome.decision().is_allowed(), "{outcome:?}");
            }
        })
    }

    fn floodgate_gcra(&self, callers: u64, iters: u64) -> Duration {
        let gcra = Arc::clone(&self.gcra);
        run(&self.runtime, callers, iters, move || {
            let gcra = Arc::clone(&gcra);
            async move {
                let outcome = gcra.try_acquire_outcome("k", 1).await.unwrap();
                // Every decision admitted: a denial (a deny cache's, say) would flatter it.
                assert!(outcome.failure().is_none(), "{outcome:?}");
                assert!(outcome.decision().is_allowed(), "{outcome:?}");
            }
        })
    }

    fn naive(&self, callers: u64, iters: u64) -> Duration {
        let naive = self.naive.clone();
        run(&self.runtime, callers, iters, move || {
            let mut connection = naive.clone();
            async move {
                let count: u64 = redis::cmd("INCR")
                    .arg("naive")
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                let _: bool = redis::cmd("EXPIRE")
                    .arg("naive")
                    .arg(60)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                std::hint::black_box(count <= u64::from(u32::MAX));
            }
        })
    }
}

/// The plain client's script: a fixed window in one `EVALSHA`, no deadline, no TTL repair.
static PLAIN: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(PLAIN_SOURCE));
const PLAIN_SOURCE: &str = "local c = redis.call('INCRBY', KEYS[1], 1) \
     if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end \
     return c";

impl Setup {
    fn plain(&self, callers: u64, iters: u64) -> Duration {
        let plain = self.plain.clone();
        run(&self.runtime, callers, iters, move || {
            let mut connection = plain.clone();
            async move {
                let count: u64 = PLAIN
                    .key("plain")
                    .arg(60_000)
                    .invoke_async(&mut connection)
                    .await
                    .unwrap();
                std::hint::black_box(count <= u64::from(u32::MAX));
            }
        })
    }
}

fn decisions_per_second(c: &mut Criterion, setup: &Setup) {
    let mut group = c.benchmark_group("redis decisions");
    group.throughput(Throughput::Elements(1));
    for callers in CALLERS {
        group.bench_with_input(
            BenchmarkId::new("floodgate fixed window (1 EVALSHA)", callers),
            &callers,
            |b, &callers| b.iter_custom(|iters| setup.floodgate_window(callers, iters)),
        );
        group.bench_with_input(
            BenchmarkId::new("floodgate gcra (1 EVALSHA)", callers),
            &callers,
            |b, &callers| b.iter_custom(|iters| setup.floodgate_gcra(callers, iters)),
        );
        group.bench_with_input(
            BenchmarkId::new("plain fixed-window script (1 EVALSHA)", callers),
            &callers,
            |b, &callers| b.iter_custom(|iters| setup.plain(callers, iters)),
        );
        group.bench_with_input(
            BenchmarkId::new("naive INCR then EXPIRE (2 round trips)", callers),
            &callers,
            |b, &callers| b.iter_custom(|iters| setup.naive(callers, iters)),
        );
    }
    group.finish();
}

/// On a noisy machine, sequential criterion runs drift apart; this pass alternates the clients
/// in short rounds and prints the median decisions/s of each and the ratio, per caller count.
fn interleaved_ratios(setup: &Setup) {
    const ROUNDS: usize = 7;
    const DECISIONS: u64 = 4_000;
    let per_second = |d: Duration| DECISIONS as f64 / d.as_secs_f64();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("\ninterleaved: median decisions/s over {ROUNDS} alternating rounds of {DECISIONS}");
    for callers in callers() {
        let (mut window, mut gcra, mut plain, mut naive) = (vec![], vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            window.push(per_second(setup.floodgate_window(callers, DECISIONS)));
            gcra.push(per_second(setup.floodgate_gcra(callers, DECISIONS)));
            plain.push(per_second(setup.plain(callers, DECISIONS)));
            naive.push(per_second(setup.naive(callers, DECISIONS)));
        }
        let (window, gcra) = (median(window), median(gcra));
        let (plain, naive) = (median(plain), median(naive));
        println!(
            "callers {callers:>3}: floodgate fixed window {window:>8.0}/s, gcra {gcra:>8.0}/s, \
             plain EVALSHA {plain:>8.0}/s, naive INCR+EXPIRE {naive:>8.0}/s; \
             fixed window / naive = {:.2}, gcra / naive = {:.2}, fixed window / plain = {:.2}",
            window / naive,
            gcra / naive,
            window / plain
        );
        if let Some(figure) = redis_benchmark(setup, callers) {
            println!("             redis-benchmark, the plain script: {figure:>8.0}/s");
        }
    }
}

/// The server's own figure for the plain script: `redis-benchmark` running its `EVALSHA` with
/// `clients` connections (each one request at a time, so `clients` requests in flight, as with
/// the callers above), when redis-benchmark is installed.
fn redis_benchmark(setup: &Setup, clients: u64) -> Option<f64> {
    let sha = setup.server.cli(&["SCRIPT", "LOAD", PLAIN_SOURCE]);
    let output = std::process::Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &setup.server.port.to_string()])
        .args(["-c", &clients.to_string(), "-n", "40000", "-q"])
        .args(["EVALSHA", &sha, "1", "rb", "60000"])
        .output()
        .ok()?;
    // "EVALSHA ...: 71428.57 requests per second, p50=..."
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("requests per second"))?;
    let figure = line.split("requests per second").next()?;
    figure
        .rsplit([':', ' '])
        .find(|w| !w.is_empty())?
        .parse()
        .ok()
}

/// CPU time (µs) this process has used, all threads (`/proc/self/task/*/schedstat`, in ns).
fn client_cpu_us() -> f64 {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat
            .split(' ')
            .next()
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
    }
    total as f64 / 1_000.0
}

/// CPU time (µs) the server has used (`INFO cpu`: `used_cpu_sys` + `used_cpu_user`, in s).
fn server_cpu_us(setup: &Setup) -> f64 {
    let info = setup.server.cli(&["INFO", "cpu"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("used_cpu_sys:") + field("used_cpu_user:")) * 1e6
}

/// Calls the server has taken from clients (`INFO commandstats`: `EVALSHA`, `INCR`, `EXPIRE`,
/// not the commands scripts run) and the µs it spent running them (I/O excluded).
fn server_calls(setup: &Setup) -> (f64, f64) {
    let info = setup.server.cli(&["INFO", "commandstats"]);
    let stat = |command: &str, field: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|l| l.split(',').find_map(|f| f.strip_prefix(field)))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let commands = ["evalsha", "incr", "expire"];
    (
        commands.iter().map(|c| stat(c, "calls=")).sum(),
        commands.iter().map(|c| stat(c, "usec=")).sum(),
    )
}

/// Where the time goes, robust to a noisy machine: CPU µs per decision in this process and in
/// the server, and the wall-clock µs per decision, for each client (median of alternating
/// rounds). On a machine where the two share the cores, decisions/s is bounded by
/// cores / (client + server CPU per decision), and by 1 / server CPU per decision.
fn cpu_per_decision(setup: &Setup) {
    const ROUNDS: usize = 5;
    const DECISIONS: u64 = 20_000;
    type Client = fn(&Setup, u64, u64) -> Duration;
    let clients: [(&str, Client); 4] = [
        ("floodgate fixed window", Setup::floodgate_window),
        ("floodgate gcra", Setup::floodgate_gcra),
        ("plain EVALSHA", Setup::plain),
        ("naive INCR+EXPIRE", Setup::naive),
    ];
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // `cpu NAME`: only the clients whose name contains NAME (for a profiler).
    let only = std::env::args().skip_while(|a| a != "cpu").nth(1);
    let clients: Vec<_> = clients
        .into_iter()
        .filter(|(name, _)| only.as_ref().is_none_or(|o| name.contains(o.as_str())))
        .collect();
    println!("\ncpu: median µs per decision over {ROUNDS} alternating rounds of {DECISIONS}");
    for callers in callers() {
        let mut samples = vec![(vec![], vec![], vec![], vec![], vec![]); clients.len()];
        for _ in 0..ROUNDS {
            for ((_, client), (client_us, server_us, exec_us, wall_us, calls)) in
                clients.iter().zip(&mut samples)
            {
                let (c0, s0, n0) = (client_cpu_us(), server_cpu_us(setup), server_calls(setup));
                let wall = client(setup, callers, DECISIONS);
                let (c1, s1, n1) = (client_cpu_us(), server_cpu_us(setup), server_calls(setup));
                let per = |us: f64| us / DECISIONS as f64;
                client_us.push(per(c1 - c0));
                server_us.push(per(s1 - s0));
                exec_us.push(per(n1.1 - n0.1));
                wall_us.push(per(wall.as_secs_f64() * 1e6));
                calls.push(per(n1.0 - n0.0));
            }
        }
        for ((name, _), (client_us, server_us, exec_us, wall_us, calls)) in
            clients.iter().zip(samples)
        {
            println!(
                "callers {callers:>3}: {name:<24} client {:>5.2} µs, server {:>5.2} µs \
                 (running commands {:>5.2} µs), wall {:>6.2} µs, {:>5.3} calls",
                median(client_us),
                median(server_us),
                median(exec_us),
                median(wall_us),
                median(calls),
            );
        }
    }
}

fn main() {
    let setup = Setup::new();
    if std::env::args().any(|a| a == "cpu") {
        return cpu_per_decision(&setup);
    }
    let mut criterion = Criterion::default().configure_from_args();
    decisions_per_second(&mut criterion, &setup);
    // Only under `cargo bench` (which passes --bench), not when tests run the bench once.
    if std::env::args().any(|a| a == "--bench") {
        interleaved_ratios(&setup);
    }
    criterion.final_summary();
}
