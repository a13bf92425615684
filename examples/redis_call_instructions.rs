//! Instruction count of a `RedisLimiter` decision on the caller's side (one round trip to a
//! single server): the decision's future polled inside `measured_loop_poll` (never inlined),
//! so callgrind counts the caller's polls (building and sending the script call, reading its
//! reply, deciding) and not the runtime's scheduling or the connection's driver task; and
//! `blocking_try_acquire_outcome` inside `measured_loop_blocking` (the same future, run by
//! `block_on` on the calling thread, its park and wake-up included).
//!
//! ```text
//! redis-server --port 6379 &            # or REDIS_URL=redis://host:port
//! cargo build --release --example redis_call_instructions --features redis
//! valgrind --tool=callgrind --toggle-collect='*measured_loop_poll*' --callgrind-out-file=/dev/null \
//!     target/release/examples/redis_call_instructions async 20000   # Ir / 20000 a decision
//! valgrind --tool=callgrind --toggle-collect='*measured_loop_blocking*' --callgrind-out-file=/dev/null \
//!     target/release/examples/redis_call_instructions blocking 20000
//! ```
//! Fixed window, every decision allowed (a limit of 2^24 - 1 a minute), 30 s timeout (valgrind's
//! round trips must not turn into policy decisions). Prints the polls a decision took.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use floodgate::FixedWindow;
use floodgate::backend::FailurePolicy;
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};

static POLLS: AtomicU64 = AtomicU64::new(0);

/// One poll of a decision's future: what callgrind counts (`async`).
#[inline(never)]
fn measured_loop_poll<F: Future>(future: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
    future.poll(cx)
}

/// A future polled through [`measured_loop_poll`].
struct Measured<F>(Pin<Box<F>>);

impl<F: Future> Future for Measured<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        POLLS.fetch_add(1, Ordering::Relaxed);
        measured_loop_poll(self.0.as_mut(), cx)
    }
}

/// `calls` blocking decisions: what callgrind counts (`blocking`).
#[inline(never)]
fn measured_loop_blocking(limiter: &RedisLimiter<FixedWindow>, calls: u64) -> u64 {
    let mut allowed = 0;
    for _ in 0..calls {
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).expect("valid");
        allowed += u64::from(black_box(outcome).decision().is_allowed());
    }
    allowed
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "async".into());
    let calls: u64 = args
        .next()
        .map_or(Ok(20_000), |arg| arg.parse())
        .map_err(|_| "the second argument is the number of calls")?;
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let config = RedisConfig::single(url).timeout(Duration::from_secs(30));
    let window = FixedWindow::new((1 << 24) - 1, Duration::from_secs(60))?;
    let policy = FailurePolicy::FailClosed;
    match mode.as_str() {
        "async" => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let allowed = runtime.block_on(async move {
                let backend = RedisBackend::connect(config).await?;
                let limiter = RedisLimiter::new(&backend, "instructions", window, policy)?;
                // Warm up: the script loaded, the connection's buffers grown.
                for _ in 0..100 {
                    limiter.try_acquire_outcome("k", 1).await?;
                }
                let task = tokio::spawn(async move {
                    let mut allowed = 0u64;
                    for _ in 0..calls {
                        let decide = Measured(Box::pin(limiter.try_acquire_outcome("k", 1)));
                        let outcome = decide.await.expect("valid");
                        assert!(outcome.failure().is_none(), "{outcome:?}");
                        allowed += u64::from(outcome.decision().is_allowed());
                    }
                    allowed
                });
                Ok::<_, Box<dyn std::error::Error>>(task.await?)
            })?;
            assert_eq!(allowed, calls, "every decision allowed");
            let polls = POLLS.load(Ordering::Relaxed);
            println!(
                "async: {calls} decisions, {polls} polls ({:.3} a decision)",
                polls as f64 / calls as f64
            );
        }
        "blocking" => {
            let backend = RedisBackend::blocking_connect(config)?;
            let limiter = RedisLimiter::new(&backend, "instructions", window, policy)?;
            for _ in 0..100 {
                limiter.blocking_try_acquire_outcome("k", 1)?;
            }
            let allowed = measured_loop_blocking(&limiter, calls);
            assert_eq!(allowed, calls, "every decision allowed");
            println!("blocking: {calls} decisions");
        }
        _ => return Err("the first argument is async or blocking".into()),
    }
    Ok(())
}
