//! The report's outputs: the table on stdout, a CSV and an SVG chart.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use crate::limiters::{GOVERNOR, GOVERNOR_COARSE, Quota, Workload, reference};

/// One measured cell (of one round), or the medians of a cell over the rounds ([`medians`]).
#[derive(Clone)]
pub struct Row {
    /// The round (`--repeat`), from 0.
    pub round: usize,
    pub limiter: &'static str,
    pub threads: usize,
    pub workload: Workload,
    pub quota: Quota,
    pub seconds: f64,
    pub calls: u64,
    pub admitted: u64,
    pub bound: u64,
    pub errors: u64,
    pub mops: f64,
    pub p50_ns: f64,
    pub p99_ns: f64,
    /// [`Measured::fairness`](crate::measure::Measured::fairness): the slowest thread's share of
    /// the calls, 1 for an even split (over several rounds: the lowest round's).
    pub fairness: f64,
    /// Throughput divided by governor's in the same (threads, workload) cell of this run.
    pub vs_governor: Option<f64>,
    /// Over several rounds: the lowest and the highest round's `vs_governor`.
    pub spread: Option<(f64, f64)>,
}

impl Row {
    pub fn violates(&self) -> bool {
        self.admitted > self.bound || self.errors > 0
    }
}

/// Fills the `vs_governor` not yet known (an interleaved pair's is its own) from the governor
/// rows of the same run: each row's throughput over its reference's in the same cell of the
/// same round ([`reference`]: governor's keyed limiter for the keyed rows, governor's direct
/// limiter for the others). `coarse`: the run's floodgate limiters read the coarse clock; then
/// the direct rows are taken against `governor-coarse` (governor on its own coarse clock) where
/// the run has it, so the ratio compares limiters, not clocks.
pub fn add_ratios(rows: &mut [Row], coarse: bool) {
    let measured: Vec<(usize, &'static str, usize, Workload, f64)> = rows
        .iter()
        .map(|r| (r.round, r.limiter, r.threads, r.workload, r.mops))
        .collect();
    let has_coarse_governor = coarse && rows.iter().any(|r| r.limiter == GOVERNOR_COARSE);
    for row in rows.iter_mut().filter(|r| r.vs_governor.is_none()) {
        let against = match reference(row.limiter) {
            GOVERNOR if has_coarse_governor => GOVERNOR_COARSE,
            other => other,
        };
        row.vs_governor = measured
            .iter()
            .find(|(n, l, t, w, _)| {
                *n == row.round && *l == against && *t == row.threads && *w == row.workload
            })
            .map(|(_, _, _, _, g)| row.mops / g);
    }
}

/// The median of `values` (the mean of the middle two for an even count); NaN for none.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// One row per cell (limiter, threads, workload) of a run of several rounds: the medians of
/// its rounds' throughput, latencies and ratio to governor (each ratio taken within its round),
/// the ratio's spread, the seconds and errors of all rounds, and the calls, admissions and bound
/// of the round nearest its bound (a violation in any round shows).
pub fn medians(rows: &[Row]) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for first in rows.iter().filter(|r| r.round == 0) {
        let same: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                r.limiter == first.limiter
                    && r.threads == first.threads
                    && r.workload == first.workload
            })
            .collect();
        let of = |f: fn(&Row) -> f64| median(same.iter().map(|r| f(r)).collect());
        let ratios: Vec<f64> = same.iter().filter_map(|r| r.vs_governor).collect();
        let nearest = same
            .iter()
            .max_by(|a, b| {
                let share = |r: &Row| r.admitted as f64 / r.bound.max(1) as f64;
                share(a).total_cmp(&share(b))
            })
            .expect("the first round's row is one");
        out.push(Row {
            seconds: same.iter().map(|r| r.seconds).sum(),
            calls: nearest.calls,
            admitted: nearest.admitted,
            bound: nearest.bound,
            errors: same.iter().map(|r| r.errors).sum(),
            mops: of(|r| r.mops),
            p50_ns: of(|r| r.p50_ns),
            p99_ns: of(|r| r.p99_ns),
            fairness: same
                .iter()
                .map(|r| r.fairness)
                .fold(f64::INFINITY, f64::min),
            vs_governor: (!ratios.is_empty()).then(|| median(ratios.clone())),
            spread: (!ratios.is_empty()).then(|| {
                let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
                let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (low, high)
            }),
            ..first.clone()
        });
    }
    out
}

fn ns(v: f64) -> String {
    if v.is_infinite() {
        ">4096".into()
    } else {
        format!("{v:.1}")
    }
}

fn quota_text(q: Quota) -> String {
    format!("{} per {:?}", q.limit, q.period)
}

/// The share-nothing row: one clock read per call, nothing written.
const SHARE_NOTHING: &str = "floor/clock";

/// The parallelism check, when the run has [`SHARE_NOTHING`] at one thread and more: how its
/// throughput scaled (about `t` on `t` free cores). Far below, the threads did not run at once
/// (other processes, or a CPU share that `nice` does not override): the multi-thread rows then
/// measure the machine's scheduling more than contention on the limiter.
pub fn parallelism(rows: &[Row]) -> Vec<String> {
    let mut lines = Vec::new();
    let share_nothing = |r: &&Row| r.limiter == SHARE_NOTHING;
    for one in rows.iter().filter(share_nothing).filter(|r| r.threads == 1) {
        for many in rows
            .iter()
            .filter(share_nothing)
            .filter(|r| r.threads > 1 && r.workload == one.workload && r.round == one.round)
        {
            let scaled = many.mops / one.mops;
            let verdict = if scaled < 0.75 * many.threads as f64 {
                ": the threads did not run at once; these rows are not a contention measure"
            } else {
                ""
            };
            lines.push(format!(
                "parallelism check ({}): {SHARE_NOTHING} (nothing shared) at {} threads ran \
                 {scaled:.2}x its 1-thread rate (free cores: {}x){verdict}",
                one.workload.name(),
                many.threads,
                many.threads
            ));
        }
    }
    lines
}

/// The table, one section per workload, rows by thread count then limiter.
pub fn table(rows: &[Row], workloads: &[Workload]) -> String {
    let mut out = String::new();
    for &workload in workloads {
        let section: Vec<&Row> = rows.iter().filter(|r| r.workload == workload).collect();
        if section.is_empty() {
            continue;
        }
        let spreads = section.iter().any(|r| r.spread.is_some());
        let _ = writeln!(out, "\n{}", workload.name());
        let _ = writeln!(
            out,
            "{:<22} {:>3}  {:>8}  {:>8} {:>8}  {:>5}  {:>6}{}  {:>13}  {:>13}  {:>16}  accuracy",
            "limiter",
            "thr",
            "Mops/s",
            "p50 ns",
            "p99 ns",
            "fair",
            "×gov",
            if spreads {
                format!("  {:>11}", "spread")
            } else {
                String::new()
            },
            "calls",
            "admitted",
            "bound"
        );
        let mut last_threads = 0;
        for r in section {
            if r.threads != last_threads && last_threads != 0 {
                out.push('\n');
            }
            last_threads = r.threads;
            let ratio = r.vs_governor.map_or("-".into(), |x| format!("{x:.2}"));
            let spread = match (spreads, r.spread) {
                (false, _) => String::new(),
                (true, None) => format!("  {:>11}", "-"),
                (true, Some((low, high))) => format!("  {:>11}", format!("{low:.2}..{high:.2}")),
            };
            let check = if r.errors > 0 {
                format!("!! {} ERRORS", r.errors)
            } else if r.admitted > r.bound {
                format!("!! VIOLATION: {} over", r.admitted - r.bound)
            } else {
                "ok".into()
            };
            let _ = writeln!(
                out,
                "{:<22} {:>3}  {:>8.2}  {:>8} {:>8}  {:>5.2}  {:>6}{}  {:>13}  {:>13}  {:>16}  {}   ({})",
                r.limiter,
                r.threads,
                r.mops,
                ns(r.p50_ns),
                ns(r.p99_ns),
                r.fairness,
                ratio,
                spread,
                r.calls,
                r.admitted,
                r.bound,
                check,
                quota_text(r.quota),
            );
        }
    }
    out
}

pub fn write_csv(rows: &[Row], clock: &str, path: &Path) -> io::Result<()> {
    let mut out = String::from(
        "limiter,clock,threads,workload,limit,period_ns,seconds,calls,admitted,bound,bound_ok,errors,mops,ns_p50,ns_p99,fairness,throughput_vs_governor,round\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:.6},{},{},{},{},{},{:.4},{:.2},{:.2},{:.3},{},{}",
            r.limiter,
            clock,
            r.threads,
            r.workload.name(),
            r.quota.limit,
            r.quota.period.as_nanos(),
            r.seconds,
            r.calls,
            r.admitted,
            r.bound,
            !r.violates(),
            r.errors,
            r.mops,
            r.p50_ns,
            r.p99_ns,
            r.fairness,
            r.vs_governor.map_or(String::new(), |x| format!("{x:.4}")),
            r.round + 1,
        );
    }
    std::fs::write(path, out)
}

const COLORS: [&str; 10] = [
    "#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#17becf", "#bcbd22",
];

/// A round number at or above `v`: 1, 2 or 5 times a power of ten.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * magnitude)
}

/// Throughput vs threads, one panel per workload, one line per limiter.
pub fn svg(rows: &[Row], workloads: &[Workload], limiters: &[&str], title: &str) -> String {
    const PW: f64 = 400.0;
    const PH: f64 = 300.0;
    const ML: f64 = 55.0; // margins: left, right, top, bottom
    const MR: f64 = 15.0;
    const MT: f64 = 40.0;
    const MB: f64 = 45.0;
    let mut threads: Vec<usize> = rows.iter().map(|r| r.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let panels: Vec<Workload> = workloads
        .iter()
        .copied()
        .filter(|w| rows.iter().any(|r| r.workload == *w))
        .collect();
    let legend_rows = limiters.len().div_ceil(3);
    let width = PW * panels.len().max(1) as f64;
    let height = PH + 30.0 + 20.0 * legend_rows as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="16" text-anchor="middle" font-size="13">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    for (p, &workload) in panels.iter().enumerate() {
        let x0 = PW * p as f64 + ML;
        let (w, h) = (PW - ML - MR, PH - MT - MB);
        let y0 = MT;
        let max = rows
            .iter()
            .filter(|r| r.workload == workload)
            .map(|r| r.mops)
            .fold(0.0, f64::max);
        let top = nice_ceiling(max);
        let x_of = |t: usize| {
            let i = threads.iter().position(|&x| x == t).unwrap_or(0) as f64;
            x0 + if threads.len() > 1 {
                w * i / (threads.len() - 1) as f64
            } else {
                w / 2.0
            }
        };
        let y_of = |v: f64| y0 + h - h * (v / top);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>"#,
            x0 + w / 2.0,
            y0 - 8.0,
            workload.name()
        );
        for k in 0..=4 {
            let v = top * k as f64 / 4.0;
            let y = y_of(v);
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                x0 + w,
                x0 - 4.0,
                y + 4.0,
                trim(v)
            );
        }
        for &t in &threads {
            let x = x_of(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x}" y1="{y0}" x2="{x}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{t}</text>"##,
                y0 + h,
                y0 + h + 14.0
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">threads</text><text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">Mops/s (all threads)</text>"#,
            x0 + w / 2.0,
            y0 + h + 30.0,
            x0 - 40.0,
            y0 + h / 2.0,
            x0 - 40.0,
            y0 + h / 2.0
        );
        for (i, limiter) in limiters.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> = threads
                .iter()
                .filter_map(|&t| {
                    rows.iter()
                        .find(|r| r.workload == workload && r.threads == t && r.limiter == *limiter)
                        .map(|r| (x_of(t), y_of(r.mops)))
                })
                .collect();
            let path: Vec<String> = points
                .iter()
                .map(|(x, y)| format!("{x:.1},{y:.1}"))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{}"/>"#,
                path.join(" ")
            );
            for (x, y) in points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{color}"/>"#
                );
            }
        }
    }
    for (i, limiter) in limiters.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let x = 20.0 + (i % 3) as f64 * (width - 40.0) / 3.0;
        let y = PH + 20.0 + 20.0 * (i / 3) as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            x + 22.0,
            x + 28.0,
            y + 4.0,
            escape(limiter)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
