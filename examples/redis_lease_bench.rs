//! Decisions per second of one process on one hot Redis key served from leases
//! ([`LeasedKey`]), against the same key decided per call.
//!
//! ```text
//! redis-server --port 6379 &            # or any Redis; REDIS_URL=redis://host:port
//! cargo run --release --example redis_lease_bench --features redis
//! ```
//! Three cases, each with 1, 2 and 4 tasks on a 2-worker tokio runtime:
//! * `hot`: GCRA at 1,000,000/s with a burst of 10,000,000 (the limit does not bind: every
//!   decision is a grant, mostly served from the lease);
//! * `limited`: GCRA at 1,000/s with a burst of 1,000, far over the limit (mostly denials,
//!   answered locally until Redis's `retry_after`);
//! * `per-call`: the hot key's configuration decided by `RedisLimiter::try_acquire` (one script
//!   call per decision), for comparison.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::backend::FailurePolicy;
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{Gcra, Rate};

/// Runs `tasks` tasks that each decide `per_task` times with `$decide` (an async expression
/// over `$shared`, each task holding its own clone) and prints decisions per second.
macro_rules! bench {
    ($label:expr, $tasks:expr, $per_task:expr, $shared:expr, |$s:ident| $decide:expr) => {{
        let started = Instant::now();
        let handles: Vec<_> = (0..$tasks)
            .map(|_| {
                let $s = $shared.clone();
                tokio::spawn(async move {
                    let mut allowed = 0u64;
                    for _ in 0..$per_task {
                        allowed += u64::from($decide);
                    }
                    allowed
                })
            })
            .collect();
        let mut allowed = 0;
        for handle in handles {
            allowed += handle.await.expect("task");
        }
        let elapsed = started.elapsed();
        let decisions = $per_task * $tasks as u64;
        println!(
            "{:>9} {} task(s): {decisions:>9} decisions in {elapsed:>10.3?}: {:>10.0} decisions/s ({allowed} allowed)",
            $label,
            $tasks,
            decisions as f64 / elapsed.as_secs_f64()
        );
    }};
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = RedisBackend::connect(RedisConfig::single(url)).await?;
    let run_id = std::process::id();
    for tasks in [1, 2, 4] {
        let hot = Gcra::new(Rate::per_second(1_000_000), 10_000_000)?;
        let limiter = RedisLimiter::new(&backend, "bench", hot, FailurePolicy::FailClosed)?;
        let leased = Arc::new(LeasedKey::new(
            Arc::new(limiter),
            &format!("hot-{run_id}-{tasks}"),
        ));
        bench!("hot", tasks, 4_000_000 / tasks as u64, leased, |key| key
            .try_acquire(1)
            .await
            .expect("valid")
            .is_allowed());
        let c = leased.counts();
        println!(
            "          leases {} ({} permits, {:.0} per lease), per-call {}",
            c.leases,
            c.leased,
            c.leased as f64 / c.leases.max(1) as f64,
            c.exact
        );

        let tight = Gcra::new(Rate::per_second(1_000), 1_000)?;
        let limiter = RedisLimiter::new(&backend, "bench", tight, FailurePolicy::FailClosed)?;
        let leased = Arc::new(LeasedKey::new(
            Arc::new(limiter),
            &format!("limited-{run_id}-{tasks}"),
        ));
        bench!("limited", tasks, 1_000_000 / tasks as u64, leased, |key| {
            key.try_acquire(1).await.expect("valid").is_allowed()
        });

        let hot = Gcra::new(Rate::per_second(1_000_000), 10_000_000)?;
        let limiter = Arc::new(RedisLimiter::new(
            &backend,
            "bench",
            hot,
            FailurePolicy::FailClosed,
        )?);
        let key: Arc<str> = format!("percall-{run_id}-{tasks}").into();
        let shared = (limiter, key);
        bench!("per-call", tasks, 20_000 / tasks as u64, shared, |s| s
            .0
            .try_acquire(&s.1, 1)
            .await
            .expect("valid")
            .is_allowed());
    }
    // Let the connection's task finish its work before the runtime stops.
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
