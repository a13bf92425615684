//! The contention report: every limiter × threads × workload, next to governor.
//!
//! ```text
//! cargo run --release --example contention                     # the whole matrix, ~1 minute
//! cargo run --release --example contention -- --help
//! cargo run --release --example contention -- --limiters governor,sharded --threads 1,2,8 --duration 2s
//! ```
//! Prints a table (aggregate Mops/s, ns per call p50/p99, throughput relative to governor,
//! admitted vs the algorithm's bound) and writes `report.csv` and `report.svg` under
//! `target/floodgate-report/`. Exits with status 1 if any row admitted more than its bound.

mod limiters;
mod measure;
mod output;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use floodgate::CoarseClock;

use limiters::{ClockChoice, Entry, GOVERNOR, Workload, entries};
use output::Row;

const USAGE: &str = "\
usage: cargo run --release --example contention -- [options]

  --limiters a,b,..   limiters to run (default: all; `--list` names them; governor is always
                      measured for the at-limit rate and the ratios unless --no-governor)
  --threads 1,2,..    thread counts (default: 1, 2, 4, ... up to the cores, plus 2 x cores)
  --workloads a,..    allow-heavy, deny-heavy, at-limit (default: all three)
  --duration D        per cell: 750ms, 2s, 1.5 (seconds) (default: about 55 s / cells,
                      between 200 ms and 1 s)
  --clock C           quanta (default) or coarse: the clock floodgate's limiters read (governor
                      reads quanta; governor-coarse, its QuantaUpkeepClock at 1 ms, is the
                      ratios' reference in a coarse run that lists it)
  --call C            decision (default: `try_acquire(1)`, a whole Decision) or admit
                      (`admit(1)`, a bool: compare with `governor`, whose check is a bool)
  --out DIR           output folder (default: target/floodgate-report)
  --no-governor       leave governor out entirely (no ratios)
  --list              print the limiter names and exit
  -h, --help          this text";

struct Options {
    limiters: Vec<Entry>,
    threads: Vec<usize>,
    workloads: Vec<Workload>,
    duration: Option<Duration>,
    coarse: bool,
    out: PathBuf,
}

fn default_threads(cores: usize) -> Vec<usize> {
    let mut threads: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2))
        .take_while(|&t| t < cores)
        .collect();
    threads.extend([cores, 2 * cores]);
    threads.dedup();
    threads
}

fn list<T>(value: &str, what: &str, parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    let items: Vec<T> = value
        .split(',')
        .map(|item| parse(item.trim()).ok_or_else(|| format!("unknown {what} `{item}`")))
        .collect::<Result<_, _>>()?;
    if items.is_empty() {
        return Err(format!("no {what} given"));
    }
    Ok(items)
}

fn parse_duration(text: &str) -> Option<Duration> {
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else {
        (text, 1.0)
    };
    let seconds = number.parse::<f64>().ok()? * scale;
    (seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0)
        .then(|| Duration::from_secs_f64(seconds))
}

/// `Ok(None)`: help or list printed, nothing to run.
fn parse_args(cores: usize) -> Result<Option<Options>, String> {
    let mut options = Options {
        limiters: entries(),
        threads: default_threads(cores),
        workloads: Workload::ALL.to_vec(),
        duration: None,
        coarse: false,
        out: PathBuf::from("target/floodgate-report"),
    };
    let mut keep_governor = true;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "--list" => {
                entries().iter().for_each(|e| println!("{}", e.name));
                return Ok(None);
            }
            "--limiters" | "--algorithms" => {
                let names = list(&value()?, "limiter", |name| {
                    entries()
                        .iter()
                        .any(|e| e.name == name)
                        .then(|| name.to_string())
                })?;
                options
                    .limiters
                    .retain(|e| e.name == GOVERNOR || names.iter().any(|n| n == e.name));
            }
            "--threads" => {
                options.threads = list(&value()?, "thread count", |t| {
                    t.parse().ok().filter(|&t: &usize| (1..=1024).contains(&t))
                })?;
            }
            "--workloads" => {
                options.workloads = list(&value()?, "workload", |w| {
                    Workload::ALL.into_iter().find(|x| x.name() == w)
                })?;
            }
            "--duration" => {
                let text = value()?;
                options.duration =
                    Some(parse_duration(&text).ok_or_else(|| format!("bad duration `{text}`"))?);
            }
            "--clock" => match value()?.as_str() {
                "quanta" => options.coarse = false,
                "coarse" => options.coarse = true,
                other => return Err(format!("unknown clock `{other}` (quanta or coarse)")),
            },
            "--call" => match value()?.as_str() {
                // Relaxed: set before any worker thread is spawned.
                "decision" => measure::CALL_ADMIT.store(false, Ordering::Relaxed),
                "admit" => measure::CALL_ADMIT.store(true, Ordering::Relaxed),
                other => return Err(format!("unknown call `{other}` (decision or admit)")),
            },
            "--out" => options.out = PathBuf::from(value()?),
            "--no-governor" => keep_governor = false,
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if !keep_governor {
        options.limiters.retain(|e| e.name != GOVERNOR);
    }
    if options.limiters.is_empty() {
        return Err("no limiter selected".into());
    }
    Ok(Some(options))
}

/// A progress line on stderr: redrawn in place on a terminal, one line per cell otherwise.
struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    terminal: bool,
}

impl Progress {
    fn step(&mut self, label: &str) {
        let width = 30;
        let filled = width * self.done / self.total.max(1);
        let eta = if self.done == 0 {
            String::from("?")
        } else {
            let per_cell = self.started.elapsed().as_secs_f64() / self.done as f64;
            format!("{:.0}s", per_cell * (self.total - self.done) as f64)
        };
        let line = format!(
            "[{}{}] {:>3}/{} eta {:>4}  {label}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            self.done + 1,
            self.total,
            eta
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line:<110}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.done += 1;
    }

    fn finish(&self) {
        if self.terminal {
            eprint!("\r{:<110}\r", "");
        }
        eprintln!(
            "{} cells in {:.1}s",
            self.total,
            self.started.elapsed().as_secs_f64()
        );
    }
}

fn main() -> ExitCode {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let options = match parse_args(cores) {
        Ok(Some(options)) => options,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let clock = if options.coarse {
        match CoarseClock::new() {
            Ok(c) => ClockChoice::Coarse(c),
            Err(e) => {
                eprintln!("error: cannot start the coarse clock: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        ClockChoice::Quanta
    };
    // The coarse clock lags real time by up to its 1 ms resolution: widen the span for bounds.
    let clock_slack = if options.coarse { 2_000_000 } else { 0 };
    let has_governor = options.limiters.iter().any(|e| e.name == GOVERNOR);
    let cells = options.limiters.len() * options.threads.len() * options.workloads.len();
    let duration = options
        .duration
        .unwrap_or_else(|| Duration::from_secs_f64((55.0 / cells as f64).clamp(0.2, 1.0)));
    println!(
        "floodgate contention report: {cores} cores, clock {}, {:?} per cell, {cells} cells",
        clock.name(),
        duration
    );
    println!(
        "at-limit rate: half of governor's allow-heavy throughput at the same thread count{}",
        if has_governor {
            ""
        } else {
            " (governor left out: each limiter's own)"
        }
    );

    let mut progress = Progress {
        total: cells,
        done: 0,
        started: Instant::now(),
        terminal: std::io::stderr().is_terminal(),
    };
    let mut rows: Vec<Row> = Vec::new();
    for &threads in &options.threads {
        // allow-heavy first: the at-limit rate is derived from it.
        let mut at_limit_rate: Option<f64> = None;
        let mut order = options.workloads.clone();
        order.sort_by_key(|w| Workload::ALL.iter().position(|x| x == w));
        for &workload in &order {
            for entry in &options.limiters {
                progress.step(&format!(
                    "{} × {threads} threads × {}",
                    entry.name,
                    workload.name()
                ));
                let rate = match workload {
                    Workload::AtLimit => *at_limit_rate.get_or_insert_with(|| {
                        half_allow_rate(&rows, entry, threads, &clock, has_governor)
                    }),
                    _ => 0.0,
                };
                let quota = workload.quota(rate);
                let limiter = match (entry.build)(quota, &clock) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("\nerror: {} rejects {quota:?}: {e}", entry.name);
                        return ExitCode::FAILURE;
                    }
                };
                let m = measure::run(&*limiter, threads, duration);
                let mut span = m.span;
                span.start = span.start.saturating_sub(clock_slack);
                rows.push(Row {
                    limiter: entry.name,
                    threads,
                    workload,
                    quota,
                    seconds: m.span.nanos() as f64 / 1e9,
                    calls: m.calls,
                    admitted: m.admitted,
                    bound: (entry.bound)(quota, span),
                    errors: m.errors,
                    mops: m.mops(),
                    p50_ns: m.latency.quantile(0.50),
                    p99_ns: m.latency.quantile(0.99),
                    vs_governor: None,
                });
            }
        }
    }
    progress.finish();
    output::add_ratios(&mut rows, options.coarse);
    println!("{}", output::table(&rows, &options.workloads));
    println!(
        "Mops/s: calls by all threads per second. p50/p99: per-call time seen by one thread \
         (batches of {}). ×gov: throughput / governor's in the same cell (with --clock coarse: \
         governor-coarse's, where the run has it). bound: the most the \
         algorithm may admit over the measured time.",
        measure::BATCH
    );

    let names: Vec<&str> = options.limiters.iter().map(|e| e.name).collect();
    let title = format!(
        "floodgate contention: throughput vs threads ({cores} cores, clock {})",
        clock.name()
    );
    let written = std::fs::create_dir_all(&options.out).and_then(|()| {
        output::write_csv(&rows, clock.name(), &options.out.join("report.csv"))?;
        std::fs::write(
            options.out.join("report.svg"),
            output::svg(&rows, &options.workloads, &names, &title),
        )
    });
    match written {
        Ok(()) => println!(
            "wrote {0}/report.csv and {0}/report.svg",
            options.out.display()
        ),
        Err(e) => eprintln!("error: cannot write under {}: {e}", options.out.display()),
    }

    let violations: Vec<&Row> = rows.iter().filter(|r| r.violates()).collect();
    if violations.is_empty() {
        println!("accuracy: every row admitted no more than its bound");
        ExitCode::SUCCESS
    } else {
        for r in &violations {
            eprintln!(
                "!! ACCURACY VIOLATION: {} × {} threads × {}: admitted {} > bound {} ({} errors)",
                r.limiter,
                r.threads,
                r.workload.name(),
                r.admitted,
                r.bound,
                r.errors
            );
        }
        ExitCode::FAILURE
    }
}

/// Half of governor's allow-heavy throughput at `threads` (the limiter's own without governor),
/// in calls per second; measured now, briefly, when the run has no such row.
fn half_allow_rate(
    rows: &[Row],
    entry: &Entry,
    threads: usize,
    clock: &ClockChoice,
    has_governor: bool,
) -> f64 {
    let reference = if has_governor { GOVERNOR } else { entry.name };
    if let Some(row) = rows.iter().find(|r| {
        r.limiter == reference && r.threads == threads && r.workload == Workload::AllowHeavy
    }) {
        return row.mops * 1e6 / 2.0;
    }
    let calibrate = entries()
        .into_iter()
        .find(|e| e.name == reference)
        .expect("reference limiter is in the table");
    let quota = Workload::AllowHeavy.quota(0.0);
    match (calibrate.build)(quota, clock) {
        Ok(limiter) => {
            measure::run(&*limiter, threads, Duration::from_millis(200)).mops() * 1e6 / 2.0
        }
        Err(_) => 1e6,
    }
}
