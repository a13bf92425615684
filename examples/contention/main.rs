//! The contention report: every limiter × threads × workload, next to governor.
//!
//! ```text
//! cargo run --release --example contention                     # the whole matrix, ~1 minute
//! cargo run --release --example contention -- --help
//! cargo run --release --example contention -- --limiters governor,sharded --threads 1,2,8 --duration 2s
//! cargo run --release --example contention -- --limiters smooth-bursty --threads 2 --repeat 9
//! cargo run --release --example contention -- --limiters governor,gcra --threads 1,2 --repeat 7 \
//!     --interleave 10ms --duration 250ms          # the paired measure for a busy machine
//! ```
//! Prints a table (aggregate Mops/s, ns per call p50/p99, the slowest thread's share of the
//! calls, throughput relative to governor,
//! admitted vs the algorithm's bound; with `--repeat K`, per-cell medians over K paired rounds
//! and the spread of the ratio; with `--interleave T`, each limiter measured in turns of T
//! with governor inside its cell) and writes `report.csv` and `report.svg` under
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
  --repeat K          run the matrix K times (default 1), the limiters of a cell in alternating
                      order (reversed every other round), and print per-cell medians: the
                      ratio to governor is taken within each round (a paired measure), then its
                      median and spread (min..max) over the rounds; the at-limit rate is the
                      first round's for every round
  --interleave T      measure each limiter together with governor (its reference), the two
                      in turns of T (e.g. 10ms) within the cell: a paired measure that sees the
                      same machine conditions on both sides (each still gets --duration in all;
                      at-limit, each side idles through the other's turns and refills there, and
                      its bound counts the whole cell)
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
    repeat: usize,
    /// `--interleave`: each limiter measured in turns of this length with its reference.
    interleave: Option<Duration>,
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
        repeat: 1,
        interleave: None,
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
            "--repeat" => {
                let text = value()?;
                options.repeat = text
                    .parse()
                    .ok()
                    .filter(|&k: &usize| (1..=1000).contains(&k))
                    .ok_or_else(|| format!("bad repeat count `{text}` (1 to 1000)"))?;
            }
            "--interleave" => {
                let text = value()?;
                let slice = parse_duration(&text)
                    .filter(|d| *d >= Duration::from_millis(1))
                    .ok_or_else(|| format!("bad turn length `{text}` (at least 1ms)"))?;
                options.interleave = Some(slice);
            }
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
    let groups_per_cell = groups(
        &options.limiters.iter().collect::<Vec<_>>(),
        options.interleave.is_some(),
    )
    .len();
    let cells = options.limiters.len() * options.threads.len() * options.workloads.len();
    let duration = options
        .duration
        .unwrap_or_else(|| Duration::from_secs_f64((55.0 / cells as f64).clamp(0.2, 1.0)));
    let repeat = options.repeat;
    println!(
        "floodgate contention report: {cores} cores, clock {}, {:?} per cell, {cells} cells{}{}, \
         load average {}",
        clock.name(),
        duration,
        if repeat > 1 {
            format!(" x {repeat} rounds (limiters alternating)")
        } else {
            String::new()
        },
        // Printed beside the rounds.
        options.interleave.map_or(String::new(), |t| format!(
            ", each with governor in turns of {t:?}"
        )),
        load_average()
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
        total: groups_per_cell * options.threads.len() * options.workloads.len() * repeat,
        done: 0,
        started: Instant::now(),
        terminal: std::io::stderr().is_terminal(),
    };
    let mut rows: Vec<Row> = Vec::new();
    for round in 0..repeat {
        for &threads in &options.threads {
            // allow-heavy first: the at-limit rate is derived from it (the first round's).
            let mut at_limit_rate: Option<f64> = None;
            let mut order = options.workloads.clone();
            order.sort_by_key(|w| Workload::ALL.iter().position(|x| x == w));
            for &workload in &order {
                // Every other round in reverse order: no limiter always runs right after another.
                let mut limiters: Vec<&Entry> = options.limiters.iter().collect();
                if round % 2 == 1 {
                    limiters.reverse();
                }
                // The first limiter named decides the at-limit rate (governor's allow-heavy
                // throughput in the first round, when governor runs): the same in every round.
                let rate = match (workload, options.limiters.first()) {
                    (Workload::AtLimit, Some(first)) => *at_limit_rate.get_or_insert_with(|| {
                        half_allow_rate(&rows, first, threads, &clock, has_governor)
                    }),
                    _ => 0.0,
                };
                let quota = workload.quota(rate);
                let mut reference_done: Vec<&str> = Vec::new();
                for group in groups(&limiters, options.interleave.is_some()) {
                    let names: Vec<&str> = group.iter().map(|e| e.name).collect();
                    progress.step(&format!(
                        "{} × {threads} threads × {} (round {})",
                        names.join(" / "),
                        workload.name(),
                        round + 1
                    ));
                    let mut built: Vec<Box<dyn floodgate::Limiter>> = Vec::new();
                    for entry in &group {
                        match (entry.build)(quota, &clock) {
                            Ok(l) => built.push(l),
                            Err(e) => {
                                eprintln!("\nerror: {} rejects {quota:?}: {e}", entry.name);
                                return ExitCode::FAILURE;
                            }
                        }
                    }
                    let refs: Vec<&dyn floodgate::Limiter> = built.iter().map(|l| &**l).collect();
                    let measured = match (&refs[..], options.interleave) {
                        ([one], _) => vec![measure::run(*one, threads, duration)],
                        (_, Some(slice)) => {
                            measure::run_interleaved(&refs, threads, duration, slice)
                        }
                        (_, None) => unreachable!("groups of two only when interleaving"),
                    };
                    // A pair is a limiter and its reference: the ratio is the pair's own.
                    let pair_reference = (group.len() == 2).then(|| {
                        let i = group
                            .iter()
                            .position(|e| limiters::reference(e.name) == e.name)
                            .expect("a pair holds its reference");
                        (i, measured[i].mops())
                    });
                    for (i, (entry, m)) in group.iter().zip(&measured).enumerate() {
                        let is_reference = pair_reference.is_some_and(|(r, _)| r == i);
                        if is_reference {
                            // Shown once per cell (from its first pair).
                            if reference_done.contains(&entry.name) {
                                continue;
                            }
                            reference_done.push(entry.name);
                        }
                        let mut span = m.span;
                        span.start = span.start.saturating_sub(clock_slack);
                        rows.push(Row {
                            round,
                            limiter: entry.name,
                            threads,
                            workload,
                            quota,
                            seconds: m.active_nanos as f64 / 1e9,
                            calls: m.calls,
                            admitted: m.admitted,
                            bound: (entry.bound)(quota, span),
                            errors: m.errors,
                            mops: m.mops(),
                            p50_ns: m.latency.quantile(0.50),
                            p99_ns: m.latency.quantile(0.99),
                            fairness: m.fairness(),
                            vs_governor: pair_reference.map(|(_, g)| m.mops() / g),
                            spread: None,
                        });
                    }
                }
            }
        }
    }
    progress.finish();
    output::add_ratios(&mut rows, options.coarse);
    // One row per cell: itself in a single round, else the medians over the rounds.
    let cells_shown = if repeat > 1 {
        output::medians(&rows)
    } else {
        rows.clone()
    };
    println!("{}", output::table(&cells_shown, &options.workloads));
    println!(
        "Mops/s: calls by all threads per second. p50/p99: per-call time seen by one thread \
         (batches of {}). fair: the slowest thread's calls over an even share (1 = even; a \
         starved thread shows here, not in p99, over several rounds the lowest). ×gov: throughput / governor's in the same cell (with --clock coarse: \
         governor-coarse's, where the run has it). bound: the most the \
         algorithm may admit over the measured time.",
        measure::BATCH
    );
    for line in output::parallelism(&cells_shown) {
        println!("{line}");
    }
    if repeat > 1 {
        println!(
            "{repeat} rounds: Mops/s, p50, p99 and ×gov are medians over the rounds (×gov taken \
             within each round); spread: the lowest and highest round's ×gov; calls, admitted, \
             bound: the round nearest its bound; accuracy: every round's. Load average now {}.",
            load_average()
        );
    }

    let names: Vec<&str> = options.limiters.iter().map(|e| e.name).collect();
    let title = format!(
        "floodgate contention: throughput vs threads ({cores} cores, clock {})",
        clock.name()
    );
    let written = std::fs::create_dir_all(&options.out).and_then(|()| {
        output::write_csv(&rows, clock.name(), &options.out.join("report.csv"))?;
        std::fs::write(
            options.out.join("report.svg"),
            output::svg(&cells_shown, &options.workloads, &names, &title),
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
                "!! ACCURACY VIOLATION: {} × {} threads × {} (round {}): admitted {} > bound {} \
                 ({} errors)",
                r.limiter,
                r.threads,
                r.workload.name(),
                r.round + 1,
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

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`), or `?` where there is none.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".into(),
        |text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        },
    )
}

/// The groups a cell measures together, in `limiters`' order: each limiter alone, or with
/// `interleave` each with its reference ([`limiters::reference`]) in turns (the reference first
/// where it comes first in `limiters`); a reference paired with anyone is not measured alone.
fn groups<'a>(limiters: &[&'a Entry], interleave: bool) -> Vec<Vec<&'a Entry>> {
    let position = |name: &str| limiters.iter().position(|e| e.name == name);
    let paired = |e: &Entry| {
        let r = limiters::reference(e.name);
        (interleave && r != e.name).then(|| position(r)).flatten()
    };
    let mut out = Vec::new();
    for (i, entry) in limiters.iter().enumerate() {
        match paired(entry) {
            Some(r) if r < i => out.push(vec![limiters[r], *entry]),
            Some(r) => out.push(vec![*entry, limiters[r]]),
            None if limiters.iter().any(|e| paired(e) == Some(i)) => {}
            None => out.push(vec![*entry]),
        }
    }
    out
}
