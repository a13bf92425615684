//! Two OS processes sharing one limit through Redis.
//!
//! ```text
//! redis-server --port 6379 &            # or any Redis; REDIS_URL=redis://host:port
//! cargo run --example redis_two_processes --features redis
//! ```
//! The program starts itself twice as workers; each worker runs 4 threads that try 100 requests
//! each against one shared limit of 300 per minute. Together they are admitted exactly 300.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use floodgate::FixedWindow;
use floodgate::backend::FailurePolicy;
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};

const LIMIT: u32 = 300;

fn worker(url: &str, key: &str) -> Result<(), Box<dyn std::error::Error>> {
    let backend = RedisBackend::blocking_connect(RedisConfig::single(url))?;
    let limiter = Arc::new(RedisLimiter::new(
        &backend,
        "example",
        FixedWindow::new(LIMIT, Duration::from_secs(60))?,
        // If Redis goes away, each of the two processes admits half of the limit on its own.
        FailurePolicy::local_fallback(0.5)?,
    )?);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            let key = key.to_owned();
            std::thread::spawn(move || {
                (0..100)
                    .filter(|_| {
                        limiter
                            .blocking_try_acquire(&key, 1)
                            .is_ok_and(|d| d.is_allowed())
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
    println!(
        "admitted={admitted} failures={}",
        limiter.failures().total()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    if let Ok(key) = std::env::var("FLOODGATE_EXAMPLE_KEY") {
        return worker(&url, &key);
    }
    // A fresh key per run, so a second run within the minute starts from zero.
    let key = format!("run-{}", std::process::id());
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(std::env::current_exe()?)
                .env("FLOODGATE_EXAMPLE_KEY", &key)
                .env("REDIS_URL", &url)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut total = 0;
    for (i, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        println!("process {i}: {}", stdout.trim());
        total += stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix("admitted="))
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0);
    }
    println!("both processes together: {total} admitted (limit {LIMIT})");
    Ok(())
}
