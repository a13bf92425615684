//! The batch scripts that reply per decision (`sliding_log_batch.lua`,
//! `sliding_window_batch.lua`, which read each key once) against their definition: the
//! one-decision script run once per decision, in order, by `each_batch.lua` (the batch form they
//! replaced). The same batches on the same state, copied under two names, must get the same
//! answers and leave the same state: random limits and states (sliding log: entries in the
//! window, past it, and ahead of the server's clock, as after a step back, sequences near 2^53;
//! sliding window: live, expired and ahead cells, values no script wrote, keys without an
//! expiry), requests of 0 to 4 permits on 1 to 3 keys, and deadlines (none, passed, to come).

use super::server::RedisServer;

/// The one-decision script `one` as a function, run per decision by `each_batch.lua`.
fn reference_source(one: &str) -> String {
    const TIME: &str = "local t = redis.call('TIME')";
    assert_eq!(one.matches(TIME).count(), 1);
    let body = one.replacen(TIME, "", 1);
    format!(
        "local function decide(KEYS, ARGV, t)\n{body}\nend\n{}",
        include_str!("each_batch.lua")
    )
}

const EXACT: &str = include_str!("../../src/redis/exact.lua");

/// Loads, on `server`, the definition (the one-decision script `one` per decision) and the
/// batch script `batch`, in that order; returns their SHAs.
fn load_both(server: &RedisServer, one: &str, batch: &str) -> [String; 2] {
    [
        reference_source(&format!("{EXACT}{one}")),
        batch_source(batch),
    ]
    .map(|source| server.cli(&["SCRIPT", "LOAD", &source]))
}

/// A batch script `script` as the crate assembles it (`lua_script!`): after `exact.lua` and
/// `batch_frame.lua`, before `batch_run.lua`.
pub(super) fn batch_source(script: &str) -> String {
    format!(
        "{EXACT}{}{script}{}",
        include_str!("../../src/redis/batch_frame.lua"),
        include_str!("../../src/redis/batch_run.lua")
    )
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

/// A batch's requests: each decision's n and key (from 1), and the deadlines as the client
/// sends them.
struct Requests {
    ns: Vec<String>,
    keys: Vec<String>,
    earliest: &'static str,
    distances: Vec<String>,
}

impl Requests {
    /// 1 to 20 requests of 0 to 4 permits on `keys` keys. Deadlines: none for any (earliest 0),
    /// or an earliest long past with each decision's distance 0 (none), 1 (the earliest
    /// itself: refused) or far (an hour after `start`).
    fn random(rng: &mut Rng, keys: usize, start: u64) -> Requests {
        let decisions = 1 + rng.below(20) as usize;
        let ns = (0..decisions).map(|_| rng.below(5).to_string()).collect();
        let keys = (0..decisions)
            .map(|_| (1 + rng.below(keys as u64)).to_string())
            .collect();
        let late = rng.below(2) == 1;
        let distances = (0..decisions)
            .map(|_| match (late, rng.below(3)) {
                (false, _) | (true, 0) => "0".to_owned(),
                (true, 1) => "1".to_owned(),
                (true, _) => (start + 3_600_000_000).to_string(),
            })
            .collect();
        let earliest = if late { "1" } else { "0" };
        Requests {
            ns,
            keys,
            earliest,
            distances,
        }
    }

    /// The EVALSHA of `sha` on `keys` (each limiter key's Redis keys): per, the four shared
    /// arguments (n's place holds the first n, as the client sends it), the slot, the lists.
    fn call(&self, sha: &str, keys: &[String], layout: &Layout) -> Vec<String> {
        let Layout { per, config, slot } = *layout;
        let mut args = vec!["EVALSHA".to_owned(), sha.to_owned(), keys.len().to_string()];
        args.extend(keys.iter().cloned());
        args.push(per.to_string());
        let mut shared: Vec<String> = config.iter().map(u64::to_string).collect();
        shared.insert(slot - 1, self.ns[0].clone());
        shared.truncate(4);
        while shared.len() < 4 {
            shared.push("0".to_owned());
        }
        args.extend(shared);
        args.push(slot.to_string());
        let uniform = self.ns.iter().all(|n| *n == self.ns[0]);
        args.push(if uniform {
            self.ns[0].clone()
        } else {
            self.ns.join(" ")
        });
        args.push(self.earliest.to_owned());
        args.push(self.distances.join(" "));
        if keys.len() > per {
            args.push(self.keys.join(" "));
        }
        args
    }
}

/// A batch reply's integers (the server's time, five fields per decision), and its error
/// messages with the copies' key names (`r0`, `b0`) made alike.
fn parsed(reply: &str, decisions: usize) -> (Vec<i64>, Vec<String>) {
    let lines: Vec<&str> = reply.lines().map(str::trim).collect();
    assert!(
        lines.len() > 5 * decisions,
        "{decisions} decisions: {reply}"
    );
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

/// An algorithm's batch arguments: Redis keys per limiter key, its configuration (the shared
/// arguments but n), and n's slot among the shared arguments (from 1).
struct Layout {
    per: usize,
    config: [u64; 3],
    slot: usize,
}

/// One side's batch: its `now`, decisions (each wait as made comparable) and error messages.
type Decided = (i64, Vec<[i64; 5]>, Vec<String>);

/// Runs `requests` by the reference (keys `r…`) and by the batch script (keys `b…`), one call
/// right after the other, and returns each one's `now`, decisions (each wait as `at` makes it
/// comparable) and error messages.
fn both(
    server: &RedisServer,
    shas: [&str; 2],
    keys: impl Fn(&str) -> Vec<String>,
    layout: &Layout,
    requests: &Requests,
    at: impl Fn(i64, i64) -> i64,
) -> [Decided; 2] {
    let decisions = requests.ns.len();
    let replies = [("r", shas[0]), ("b", shas[1])].map(|(side, sha)| {
        let args = requests.call(sha, &keys(side), layout);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        server.cli(&args)
    });
    replies.map(|reply| {
        let (numbers, messages) = parsed(&reply, decisions);
        let now = numbers[0];
        let decided = numbers[1..]
            .chunks(5)
            .map(|f| [f[0], f[1], f[2], at(f[3], now), at(f[4], now)])
            .collect();
        (now, decided, messages)
    })
}

const WINDOW_S: u64 = 600;
const WINDOW_US: u64 = WINDOW_S * 1_000_000;

/// How long after the batch's `start` (the server's `TIME`, read before the case is written)
/// every entry stays on its side of the window's edge and of the scripts' `now`: the case's
/// three `redis-cli` calls (the setup, the reference, the batch script) may take up to this
/// long, however loaded the machine, before an entry could be in the window for one script
/// and out of it for the other.
const MARGIN_S: u64 = WINDOW_S / 2;

/// One key's log as it is before the batch: (score offsets from the batch's start in whole
/// seconds, the sequence if any). An entry in the window is at most `WINDOW_S - MARGIN_S` old
/// at `start`, one ahead is `MARGIN_S` ahead of it, one out of the window was out at `start`:
/// each stays on its side for [`MARGIN_S`] (it was 2 s, which three `redis-cli` calls on a
/// loaded machine could take).
fn random_log(rng: &mut Rng) -> (Vec<i64>, Option<u64>) {
    let entries = rng.below(8) as usize;
    let offsets = (0..entries)
        .map(|_| match rng.below(10) {
            0 => MARGIN_S as i64, // ahead: the clock stepped back
            1 => -(WINDOW_S as i64) - 2 - rng.below(100) as i64, // out of the window
            _ => -2 - rng.below(WINDOW_S - MARGIN_S - 2) as i64, // in the window
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

/// Reads, in one call, what each of `logs` holds: per key one line, its entries
/// (`score:member`, oldest first), its sequence and the two keys' `PEXPIRETIME`s (ms; -1 none,
/// -2 no key), separated by `|`.
const LOGS_HELD: &str = "local out = {} for i, log in ipairs(KEYS) do \
    local z = redis.call('ZRANGE', log, '0', '-1', 'WITHSCORES') local e = {} \
    for j = 1, #z, 2 do e[#e + 1] = z[j + 1] .. ':' .. z[j] end \
    out[i] = table.concat(e, ',') .. '|' .. tostring(redis.call('GET', log .. ':seq')) .. '|' \
      .. redis.call('PEXPIRETIME', log) .. '|' .. redis.call('PEXPIRETIME', log .. ':seq') end \
    return out";

/// What a key holds after the batch, from a line of [`LOGS_HELD`]: its entries (an entry the
/// batch added, scored at its script's `now`, as "now"), the sequence, and when the log and the
/// sequence expire.
fn log_held(line: &str, now: i64) -> (Vec<String>, String, [i64; 2]) {
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

/// Runs `script` (Lua, no keys) in one call.
fn eval(server: &RedisServer, script: &str) -> String {
    server.cli(&["EVAL", script, "0"])
}

/// Two expiries alike: the same instant (one the batch did not touch, or set from a stored
/// entry's score), or the same distance from each script's `now` (set from an entry it added),
/// within the millisecond both round up to.
fn same_expiry(r: i64, r_now: i64, b: i64, b_now: i64) -> bool {
    r == b || (r > 0 && b > 0 && ((r * 1_000 - r_now) - (b * 1_000 - b_now)).abs() < 1_000)
}

/// Calls in each of `answers` (one side's) that were: admitted, denied, refused past their
/// deadline, failed.
fn tally(decided: &[[i64; 5]]) -> [usize; 4] {
    [1, 0, 2, 3].map(|allowed| decided.iter().filter(|d| d[0] == allowed).count())
}

#[test]
fn the_sliding_log_batch_script_decides_and_writes_as_the_one_decision_script_per_decision() {
    let server = RedisServer::start();
    let [reference, batch] = load_both(
        &server,
        include_str!("../../src/redis/sliding_log.lua"),
        include_str!("../../src/redis/sliding_log_batch.lua"),
    );
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut seen = [0; 4];
    let mut several_added = 0;
    for case in 0..120 {
        server.cli(&["FLUSHALL"]);
        let start = server.time_micros();
        let limit = 1 + rng.below(12);
        let keys = 1 + rng.below(3) as usize;
        // Both copies written in one call, expiring at the same instant.
        let expire_at = start / 1_000 + 900_000;
        let mut setup = String::new();
        for g in 0..keys {
            let (offsets, seq) = random_log(&mut rng);
            for side in ["r", "b"] {
                let log = format!("{side}{g}");
                for (i, offset) in offsets.iter().enumerate() {
                    let score = start as i64 + offset * 1_000_000;
                    setup += &format!("redis.call('ZADD', '{log}', '{score}', '{score}:{i}') ");
                }
                if !offsets.is_empty() {
                    setup += &format!("redis.call('PEXPIREAT', '{log}', '{expire_at}') ");
                }
                if let Some(seq) = seq {
                    setup +=
                        &format!("redis.call('SET', '{log}:seq', '{seq}', 'PXAT', '{expire_at}') ");
                }
            }
        }
        eval(&server, &(setup + "return 1"));
        let requests = Requests::random(&mut rng, keys, start);
        let names = |side: &str| -> Vec<String> {
            (0..keys)
                .flat_map(|g| [format!("{side}{g}"), format!("{side}{g}:seq")])
                .collect()
        };
        // A wait that ends with an entry scored at the script's own `now` (one this batch
        // added) is the window in both; any other ends at a stored entry's score + the
        // window, the same instant for both, compared as that instant.
        let at = |wait: i64, now: i64| {
            if wait == WINDOW_US as i64 || wait == 0 {
                wait
            } else {
                now + wait
            }
        };
        let [r, b] = both(
            &server,
            [&reference, &batch],
            names,
            &Layout {
                per: 2,
                config: [limit, WINDOW_US, 0],
                slot: 3,
            },
            &requests,
            at,
        );
        let context = format!(
            "case {case}: limit {limit}, n {:?}, keys {:?}, deadlines {:?}",
            requests.ns, requests.keys, requests.distances
        );
        assert_eq!((&r.1, &r.2), (&b.1, &b.2), "{context}");
        let held = |side: &str, now: i64| -> Vec<_> {
            let mut args = vec!["EVAL".to_owned(), LOGS_HELD.to_owned(), keys.to_string()];
            args.extend((0..keys).map(|g| format!("{side}{g}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let lines = server.cli(&args);
            lines.lines().map(|line| log_held(line, now)).collect()
        };
        let (r_held, b_held) = (held("r", r.0), held("b", b.0));
        for (g, (rk, bk)) in r_held.iter().zip(&b_held).enumerate() {
            assert_eq!(
                (&rk.0, &rk.1),
                (&bk.0, &bk.1),
                "{context} key {g}: entries, sequence"
            );
            for (x, y) in rk.2.iter().zip(&bk.2) {
                assert!(
                    same_expiry(*x, r.0, *y, b.0),
                    "{context} key {g}: expiries {rk:?} / {bk:?} (nows {}, {})",
                    r.0,
                    b.0
                );
            }
        }
        let counted = tally(&r.1);
        (0..4).for_each(|i| seen[i] += counted[i]);
        several_added += r_held
            .iter()
            .filter(|k| k.0.iter().filter(|e| e.starts_with("now:")).count() > 1)
            .count();
    }
    // The cases reach every branch: several admissions on a key, denials, late refusals,
    // sequences run out.
    let [_, denied, late, failed] = seen;
    assert!(denied > 100 && late > 20 && failed > 10, "{seen:?}");
    assert!(
        several_added > 50,
        "{several_added} keys given several entries by one batch"
    );
}

const CELL_US: u64 = 60_000_000;
const CELLS: u64 = 10;

/// Reads, in one call, what each of `hashes` holds: per key one line, its fields and values
/// sorted (`index=count`), and its `PEXPIRETIME`, separated by `|`.
const CELLS_HELD: &str = "local out = {} for i, key in ipairs(KEYS) do \
    local h = redis.call('HGETALL', key) local e = {} \
    for j = 1, #h, 2 do e[#e + 1] = h[j] .. '=' .. h[j + 1] end table.sort(e) \
    out[i] = table.concat(e, ',') .. '|' .. redis.call('PEXPIRETIME', key) end return out";

#[test]
fn the_sliding_window_batch_script_decides_and_writes_as_the_one_decision_script_per_decision() {
    let server = RedisServer::start();
    let [reference, batch] = load_both(
        &server,
        include_str!("../../src/redis/sliding_window.lua"),
        include_str!("../../src/redis/sliding_window_batch.lua"),
    );
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut seen = [0; 4];
    let mut compared = 0;
    for case in 0..120 {
        server.cli(&["FLUSHALL"]);
        let start = server.time_micros();
        let current = start / CELL_US;
        let limit = 1 + rng.below(15);
        let keys = 1 + rng.below(3) as usize;
        let expire_at = start / 1_000 + 900_000;
        let mut setup = String::new();
        for g in 0..keys {
            // Cells: live ones (the current and the 9 before), expired ones, one ahead (the
            // clock stepped back); now and then a value no script wrote, or no expiry.
            let mut fields = Vec::new();
            for _ in 0..rng.below(12) {
                let index = match rng.below(8) {
                    0 => current - CELLS - rng.below(20),
                    1 => current + 1,
                    _ => current - rng.below(CELLS),
                };
                fields.push((index.to_string(), rng.below(4).to_string()));
            }
            match rng.below(16) {
                0 => fields.push(("x".to_owned(), "1".to_owned())),
                1 => fields.push((current.to_string(), "-1".to_owned())),
                _ => {}
            }
            let expires = rng.below(4) != 0;
            for side in ["r", "b"] {
                let key = format!("{side}{g}");
                for (index, count) in &fields {
                    setup += &format!("redis.call('HSET', '{key}', '{index}', '{count}') ");
                }
                if expires && !fields.is_empty() {
                    setup += &format!("redis.call('PEXPIREAT', '{key}', '{expire_at}') ");
                }
            }
        }
        eval(&server, &(setup + "return 1"));
        let requests = Requests::random(&mut rng, keys, start);
        let names =
            |side: &str| -> Vec<String> { (0..keys).map(|g| format!("{side}{g}")).collect() };
        // Every wait ends when a cell leaves the window: the same instant for both.
        let at = |wait: i64, now: i64| if wait == 0 { 0 } else { now + wait };
        let [r, b] = both(
            &server,
            [&reference, &batch],
            names,
            &Layout {
                per: 1,
                config: [limit, CELL_US, CELLS],
                slot: 4,
            },
            &requests,
            at,
        );
        if r.0 as u64 / CELL_US != b.0 as u64 / CELL_US {
            continue; // a new cell began between the two calls: not the same decisions
        }
        compared += 1;
        let context = format!(
            "case {case}: limit {limit}, n {:?}, keys {:?}, deadlines {:?}",
            requests.ns, requests.keys, requests.distances
        );
        assert_eq!((&r.1, &r.2), (&b.1, &b.2), "{context}");
        let held = |side: &str| -> Vec<String> {
            let mut args = vec!["EVAL".to_owned(), CELLS_HELD.to_owned(), keys.to_string()];
            args.extend((0..keys).map(|g| format!("{side}{g}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            server.cli(&args).lines().map(str::to_owned).collect()
        };
        assert_eq!(held("r"), held("b"), "{context}: cells and expiries");
        let counted = tally(&r.1);
        (0..4).for_each(|i| seen[i] += counted[i]);
    }
    let [admitted, denied, late, failed] = seen;
    assert!(compared >= 110, "{compared} of 120 cases compared");
    assert!(
        admitted > 200 && denied > 100 && late > 20 && failed > 10,
        "{seen:?}"
    );
}

/// A server out of memory refuses a script's first write that may grow memory (and none after
/// it). Run per decision, the sliding window's admissions each fail alone (their `HINCRBY` is
/// that first write) while its denials are still answered; the sliding log's first write is a
/// trim, which Redis allows, so its admissions go through. The batch scripts must fail exactly
/// the same decisions, not the whole call (under a fail-open policy a failed call admits its
/// denials too).
#[test]
fn out_of_memory_fails_the_same_decisions_as_the_one_decision_scripts() {
    let server = RedisServer::start();
    let window = load_both(
        &server,
        include_str!("../../src/redis/sliding_window.lua"),
        include_str!("../../src/redis/sliding_window_batch.lua"),
    );
    let log = load_both(
        &server,
        include_str!("../../src/redis/sliding_log.lua"),
        include_str!("../../src/redis/sliding_log_batch.lua"),
    );
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    // Two admissions and a request above what is left, then the same on a second key.
    let requests = Requests {
        ns: ["1", "1", "5", "1", "1", "5"].map(String::from).to_vec(),
        keys: ["1", "1", "1", "2", "2", "2"].map(String::from).to_vec(),
        earliest: "0",
        distances: vec!["0".to_owned(); 6],
    };
    // The refusal's text, without the script and line it names.
    let alike = |messages: &[String]| -> Vec<String> {
        messages
            .iter()
            .map(|m| m.split(" script:").next().unwrap_or(m).to_owned())
            .collect()
    };
    let at = |wait: i64, now: i64| if wait == 0 { 0 } else { now + wait };
    let [r, b] = both(
        &server,
        [&window[0], &window[1]],
        |side| vec![format!("{side}w0"), format!("{side}w1")],
        &Layout {
            per: 1,
            config: [3, CELL_US, CELLS],
            slot: 4,
        },
        &requests,
        at,
    );
    let statuses = |d: &[[i64; 5]]| d.iter().map(|f| f[0]).collect::<Vec<_>>();
    assert_eq!(statuses(&r.1), [3, 3, 0, 3, 3, 0], "per decision: {r:?}");
    assert_eq!(statuses(&b.1), statuses(&r.1), "{b:?}");
    assert_eq!(alike(&b.2), alike(&r.2));
    assert!(r.2[0].contains("OOM"), "{r:?}");
    let at = |wait: i64, now: i64| {
        if wait == WINDOW_US as i64 || wait == 0 {
            wait
        } else {
            now + wait
        }
    };
    let [r, b] = both(
        &server,
        [&log[0], &log[1]],
        |side| {
            ["0", "1"]
                .iter()
                .flat_map(|g| [format!("{side}l{g}"), format!("{side}l{g}:seq")])
                .collect()
        },
        &Layout {
            per: 2,
            config: [3, WINDOW_US, 0],
            slot: 3,
        },
        &requests,
        at,
    );
    assert_eq!(statuses(&r.1), [1, 1, 0, 1, 1, 0], "per decision: {r:?}");
    assert_eq!((&b.1, alike(&b.2)), (&r.1, alike(&r.2)));
}
