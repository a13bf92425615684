//! The sliding log's batch script (`sliding_log_batch.lua`, which reads each log once) against
//! its definition: the one-decision script (`sliding_log.lua`) run once per decision, in order,
//! by `each_batch.lua` (the batch form it replaced). The same batches on the same logs, copied
//! under two names, must get the same answers and leave the same logs: random limits, logs
//! (entries in the window, past it, and ahead of the server's clock, as after a step back),
//! sequences, requests of 0 to 4 permits on 1 to 3 keys, and deadlines (none, passed, to come).

use super::server::RedisServer;

/// The one-decision script as a function, run per decision by `each_batch.lua`, as the crate's
/// `batch_source` (and `scripts/redis-instructions`) assembles it.
fn reference_source() -> String {
    let body = concat!(
        include_str!("../../src/redis/exact.lua"),
        include_str!("../../src/redis/sliding_log.lua")
    )
    .replacen("local t = redis.call('TIME')", "", 1);
    format!(
        "local function decide(KEYS, ARGV, t)\n{body}\nend\n{}",
        include_str!("../../src/redis/each_batch.lua")
    )
}

fn batch_source() -> String {
    concat!(
        include_str!("../../src/redis/exact.lua"),
        include_str!("../../src/redis/sliding_log_batch.lua")
    )
    .to_owned()
}

/// xorshift64*: the cases are the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

const WINDOW_S: u64 = 600;
const WINDOW_US: u64 = WINDOW_S * 1_000_000;

/// One key's log as it is before the batch: (score offsets from the batch's start in whole
/// seconds, the sequence if any). Offsets are at least 2 s away from the window's edge, so
/// the milliseconds between the two scripts' clocks change no entry's side of it.
fn random_log(rng: &mut Rng) -> (Vec<i64>, Option<u64>) {
    let entries = rng.below(8) as usize;
    let offsets = (0..entries)
        .map(|_| match rng.below(10) {
            0 => 30,                                             // ahead: the clock stepped back 30 s
            1 => -(WINDOW_S as i64) - 2 - rng.below(100) as i64, // out of the window
            _ => -2 - rng.below(WINDOW_S - 4) as i64,            // in the window
        })
        .collect();
    let seq = match rng.below(6) {
        0 | 1 => None,
        // Near 2^53, where the sequence can no longer name entries: the decisions that would
        // pass it fail, the ones before are admitted.
        2 => Some((1 << 53) - 1 - rng.below(5)),
        _ => Some(100 + rng.below(1_000)),
    };
    (offsets, seq)
}

/// The answer of one decision, normalised: a wait that ends with an entry scored at the
/// script's own `now` (an entry this batch added) is the window in both scripts; any other
/// wait ends at a stored entry's score + the window, the same instant for both, so it is
/// compared as that instant (`now` + the wait).
fn normalised(fields: &[i64], now: i64) -> (i64, i64, i64, i64, i64) {
    let at = |wait: i64| {
        if wait == WINDOW_US as i64 || wait == 0 {
            wait
        } else {
            now + wait
        }
    };
    (
        fields[0],
        fields[1],
        fields[2],
        at(fields[3]),
        at(fields[4]),
    )
}

/// A batch reply's integers (the server's time, five fields per decision), and its error
/// messages with the copy's key names (`r0`, `b0`) made alike.
fn parsed(reply: &str, decisions: usize) -> (Vec<i64>, Vec<String>) {
    let lines: Vec<&str> = reply.lines().map(str::trim).collect();
    let (numbers, messages) = lines.split_at(1 + 5 * decisions);
    let numbers = numbers
        .iter()
        .map(|l| {
            l.parse()
                .unwrap_or_else(|_| panic!("not an integer: {reply}"))
        })
        .collect();
    let messages = messages.iter().map(|m| m.replace(" r", " b")).collect();
    (numbers, messages)
}

/// Reads, in one call, what each of `logs` holds: per key one line, its entries
/// (`score:member`, oldest first), its sequence and the two keys' `PEXPIRETIME`s (ms; -1 none,
/// -2 no key), separated by `|`.
const HELD: &str = "local out = {} for i, log in ipairs(KEYS) do \
    local z = redis.call('ZRANGE', log, '0', '-1', 'WITHSCORES') local e = {} \
    for j = 1, #z, 2 do e[#e + 1] = z[j + 1] .. ':' .. z[j] end \
    out[i] = table.concat(e, ',') .. '|' .. tostring(redis.call('GET', log .. ':seq')) .. '|' \
      .. redis.call('PEXPIRETIME', log) .. '|' .. redis.call('PEXPIRETIME', log .. ':seq') end \
    return out";

/// What a key holds after the batch, from a line of [`HELD`]: its entries (an entry the batch
/// added, scored at its script's `now`, as "now"), the sequence, and when the log and the
/// sequence expire.
fn held(line: &str, now: i64) -> (Vec<String>, String, [i64; 2]) {
    let fields: Vec<&str> = line.trim().split('|').collect();
    let entries = fields[0]
        .split(',')
        .filter(|e| !e.is_empty())
        .map(|entry| {
            // score:score:number (the member is "score:number")
            let mut parts = entry.splitn(2, ':');
            let score: i64 = parts.next().unwrap().parse().unwrap();
            let (_, number) = parts.next().unwrap().split_once(':').unwrap();
            if score == now {
                format!("now:{number}")
            } else {
                format!("{score}:{number}")
            }
        })
        .collect();
    let expiry = |f: &str| -> i64 { f.parse().unwrap() };
    (
        entries,
        fields[1].to_owned(),
        [expiry(fields[2]), expiry(fields[3])],
    )
}

/// Writes the logs and sequences of `setup` (key, score offsets in seconds from `start`, the
/// sequence) in one call, both copies expiring at `start` + 15 minutes.
fn write_logs(server: &RedisServer, start: u64, setup: &[(String, Vec<i64>, Option<u64>)]) {
    let mut script = String::new();
    for (log, offsets, seq) in setup {
        for (i, offset) in offsets.iter().enumerate() {
            let score = start as i64 + offset * 1_000_000;
            script += &format!("redis.call('ZADD', '{log}', '{score}', '{score}:{i}') ");
        }
        let expire_at = start / 1_000 + 900_000;
        if !offsets.is_empty() {
            script += &format!("redis.call('PEXPIREAT', '{log}', '{expire_at}') ");
        }
        if let Some(seq) = seq {
            script += &format!("redis.call('SET', '{log}:seq', '{seq}', 'PXAT', '{expire_at}') ");
        }
    }
    script += "return 1";
    server.cli(&["EVAL", &script, "0"]);
}

/// Two expiries alike: the same instant (one the batch did not touch, or set from a stored
/// entry's score), or the same distance from each script's `now` (set from an entry it added),
/// within the millisecond both round up to.
fn same_expiry(r: i64, r_now: i64, b: i64, b_now: i64) -> bool {
    r == b || (r > 0 && b > 0 && ((r * 1_000 - r_now) - (b * 1_000 - b_now)).abs() < 1_000)
}

#[test]
fn the_batch_script_decides_and_writes_as_the_one_decision_script_run_per_decision() {
    let server = RedisServer::start();
    let reference = server.cli(&["SCRIPT", "LOAD", &reference_source()]);
    let batch = server.cli(&["SCRIPT", "LOAD", &batch_source()]);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut denials = 0;
    let mut refused_late = 0;
    let mut failed = 0;
    let mut admitted_after_batch_admissions = 0;
    for case in 0..120 {
        server.cli(&["FLUSHALL"]);
        let start = server.time_micros();
        let limit = 1 + rng.below(12);
        let keys = 1 + rng.below(3) as usize;
        let mut setup = Vec::new();
        for g in 0..keys {
            let (offsets, seq) = random_log(&mut rng);
            for side in ["r", "b"] {
                setup.push((format!("{side}{g}"), offsets.clone(), seq));
            }
        }
        write_logs(&server, start, &setup);
        let decisions = 1 + rng.below(20) as usize;
        let ns: Vec<String> = (0..decisions).map(|_| rng.below(5).to_string()).collect();
        let groups: Vec<String> = (0..decisions)
            .map(|_| (1 + rng.below(keys as u64)).to_string())
            .collect();
        // Deadlines: none for any (earliest 0), or an earliest long past with each decision's
        // distance 0 (none), 1 (the earliest itself: refused) or far (an hour from now).
        let late = rng.below(2) == 1;
        let distances: Vec<String> = (0..decisions)
            .map(|_| match (late, rng.below(3)) {
                (false, _) | (true, 0) => "0".to_owned(),
                (true, 1) => "1".to_owned(),
                (true, _) => (start + 3_600_000_000).to_string(),
            })
            .collect();
        let earliest = if late { "1" } else { "0" };
        let uniform = ns.iter().all(|n| *n == ns[0]);
        let mut replies = Vec::new();
        for (side, sha) in [("r", &reference), ("b", &batch)] {
            let mut args: Vec<String> = vec!["EVALSHA".into(), sha.clone(), (2 * keys).to_string()];
            for g in 0..keys {
                args.push(format!("{side}{g}"));
                args.push(format!("{side}{g}:seq"));
            }
            // per, the four shared arguments (n's place holds the first n, as the client
            // sends it), the slot of n (from 1: the third).
            args.extend(
                [
                    "2",
                    &limit.to_string(),
                    &WINDOW_US.to_string(),
                    &ns[0],
                    "0",
                    "3",
                ]
                .map(String::from),
            );
            args.push(if uniform { ns[0].clone() } else { ns.join(" ") });
            args.push(earliest.into());
            args.push(distances.join(" "));
            if keys > 1 {
                args.push(groups.join(" "));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            replies.push(parsed(&server.cli(&args), decisions));
        }
        let mut answers = Vec::new();
        let mut after = Vec::new();
        for (side, (reply, messages)) in ["r", "b"].into_iter().zip(&replies) {
            let now = reply[0];
            let decided: Vec<_> = reply[1..]
                .chunks(5)
                .map(|fields| normalised(fields, now))
                .collect();
            answers.push((decided, messages.clone()));
            let mut args = vec!["EVAL".to_owned(), HELD.to_owned(), keys.to_string()];
            args.extend((0..keys).map(|g| format!("{side}{g}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let lines = server.cli(&args);
            after.push(
                lines
                    .lines()
                    .map(|line| held(line, now))
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(
            answers[0], answers[1],
            "case {case}: limit {limit}, n {ns:?}, keys {groups:?}, deadlines {distances:?}"
        );
        let (r_now, b_now) = (replies[0].0[0], replies[1].0[0]);
        for (g, (r, b)) in after[0].iter().zip(&after[1]).enumerate() {
            assert_eq!(
                (&r.0, &r.1),
                (&b.0, &b.1),
                "case {case} key {g}: entries, sequence"
            );
            for (x, y) in r.2.iter().zip(&b.2) {
                assert!(
                    same_expiry(*x, r_now, *y, b_now),
                    "case {case} key {g}: expiries {r:?} / {b:?} (nows {r_now}, {b_now})"
                );
            }
        }
        denials += answers[0].0.iter().filter(|a| a.0 == 0).count();
        refused_late += answers[0].0.iter().filter(|a| a.0 == 2).count();
        failed += answers[0].0.iter().filter(|a| a.0 == 3).count();
        admitted_after_batch_admissions += after[0]
            .iter()
            .filter(|k| k.0.iter().filter(|e| e.starts_with("now:")).count() > 1)
            .count();
    }
    // The cases reach every branch: several admissions on a key, denials, late refusals,
    // sequences run out.
    assert!(denials > 100, "{denials} denials");
    assert!(
        refused_late > 20,
        "{refused_late} refused past their deadline"
    );
    assert!(failed > 10, "{failed} failed: the sequence ran out");
    assert!(
        admitted_after_batch_admissions > 50,
        "{admitted_after_batch_admissions} keys given several entries by one batch"
    );
}
