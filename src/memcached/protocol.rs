//! The few text-protocol commands the limiter sends, and the parsing of their replies.
//!
//! A decision is one pipelined write (memcached runs one connection's commands in order):
//!
//! ```text
//! add <cell> 0 <ttl> 1 noreply\r\n0\r\n      create the current cell at 0 with its TTL, if absent
//! incr <cell> <n>\r\n                         add the request's permits   -> "<count>" | NOT_FOUND
//! get <oldest> … <current> <current+1>\r\n    read the window             -> VALUE … END
//! ```
//!
//! and a denial one more: `decr <cell> <n>\r\n`.

use std::fmt::Write as _;
use std::ops::RangeInclusive;
use std::time::Instant;

use super::connection::Transport;
use super::error::{CallError, MemcachedError};

/// Longest key memcached accepts.
pub const MAX_KEY_LEN: usize = 250;

/// Digits of the largest cell index (`u64::MAX`).
pub(crate) const MAX_INDEX_DIGITS: usize = 20;

/// Longest value a cell can hold: a `u64` in decimal.
const MAX_VALUE_LEN: usize = 20;

/// Appends `key` with every byte memcached forbids in keys (space, control characters, non-ASCII)
/// and `%` itself written as `%XX`: distinct keys stay distinct.
pub(crate) fn encode_key(key: &str, out: &mut String) {
    for byte in key.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' {
            out.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

/// The pipelined request of one decision: add-if-absent and increment the `current` cell, then
/// read every cell of `cells`. `prefix` ends with `:`; a cell's key is `prefix` + its index.
pub(crate) fn decision_request(
    prefix: &str,
    current: u64,
    cells: RangeInclusive<u64>,
    ttl_secs: u32,
    n: u32,
) -> Vec<u8> {
    let mut request = String::with_capacity(96 + (prefix.len() + 21) * 2);
    // Writing to a String cannot fail.
    let _ = write!(
        request,
        "add {prefix}{current} 0 {ttl_secs} 1 noreply\r\n0\r\nincr {prefix}{current} {n}\r\nget"
    );
    for index in cells {
        let _ = write!(request, " {prefix}{index}");
    }
    request.push_str("\r\n");
    request.into_bytes()
}

/// `decr <cell> <n>`: takes back a denied request's permits.
pub(crate) fn take_back_request(prefix: &str, current: u64, n: u32) -> Vec<u8> {
    format!("decr {prefix}{current} {n}\r\n").into_bytes()
}

/// A line that reports an error, as an error; `None` for any other line.
fn error_line(line: &str) -> Option<CallError> {
    // `ERROR` alone answers an unknown command; `ERROR <why>` is a refusal with its reason
    // (`ERROR Too many open connections`, sent to a connection past memcached's limit).
    (line == "ERROR"
        || line.starts_with("ERROR ")
        || line.starts_with("CLIENT_ERROR")
        || line.starts_with("SERVER_ERROR"))
    .then(|| MemcachedError::Server(line.to_owned()).into())
}

fn protocol(what: String) -> CallError {
    MemcachedError::Protocol(what).into()
}

/// The reply to `incr`/`decr`: the new count, or `None` for `NOT_FOUND`.
pub(crate) fn parse_counter_line(line: &str) -> Result<Option<u64>, CallError> {
    if line == "NOT_FOUND" {
        return Ok(None);
    }
    if let Some(error) = error_line(line) {
        return Err(error);
    }
    line.parse::<u64>()
        .map(Some)
        .map_err(|_| protocol(format!("{line:?} where a count was expected")))
}

/// Longest reply line accepted (a `VALUE` header holds a key of at most 250 bytes).
const MAX_LINE: usize = 1024;

/// What a parser makes of the bytes received so far: `None` when the reply is not all there
/// yet, else the value and the bytes it used.
pub(crate) type Parsed<T> = Result<Option<(T, usize)>, CallError>;

/// The first line of `buf` (without its `\r\n`) and the bytes it used; `None` if incomplete.
fn split_line(buf: &[u8]) -> Parsed<String> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some((
            String::from_utf8_lossy(&buf[..end]).into_owned(),
            end + 2,
        ))),
        None if buf.len() > MAX_LINE => {
            Err(MemcachedError::Protocol("a reply line over 1024 bytes".into()).into())
        }
        None => Ok(None),
    }
}

/// The reply to `incr`/`decr`, parsed from the bytes received so far.
pub(crate) fn parse_counter(buf: &[u8]) -> Parsed<Option<u64>> {
    let Some((line, used)) = split_line(buf)? else {
        return Ok(None);
    };
    Ok(Some((parse_counter_line(&line)?, used)))
}

/// The reply to `version` (`VERSION <version>`): the startup check's.
pub(crate) fn parse_version(buf: &[u8]) -> Parsed<()> {
    let Some((line, used)) = split_line(buf)? else {
        return Ok(None);
    };
    if line.starts_with("VERSION ") {
        return Ok(Some(((), used)));
    }
    Err(error_line(&line)
        .unwrap_or_else(|| protocol(format!("{line:?} where VERSION <version> was expected"))))
}

/// Reads the reply to `incr`/`decr`.
pub(crate) async fn read_counter<T: Transport>(
    connection: &mut T,
    deadline: Instant,
) -> Result<Option<u64>, CallError> {
    connection.read_reply(deadline, parse_counter).await
}

/// A `VALUE <key> <flags> <bytes>` header: the cell index (the key must be `prefix` + an index
/// in `cells`) and the data length.
pub(crate) fn parse_value_header(
    line: &str,
    prefix: &str,
    cells: &RangeInclusive<u64>,
) -> Result<(u64, usize), CallError> {
    if let Some(error) = error_line(line) {
        return Err(error);
    }
    let mut words = line.split(' ');
    let (Some("VALUE"), Some(key), Some(_flags), Some(bytes), None) = (
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
    ) else {
        return Err(protocol(format!(
            "{line:?} where VALUE or END was expected"
        )));
    };
    let index = key
        .strip_prefix(prefix)
        .and_then(|index| index.parse::<u64>().ok())
        .filter(|index| cells.contains(index))
        .ok_or_else(|| protocol(format!("a value for {key:?}, which was not asked for")))?;
    let len = bytes
        .parse::<usize>()
        .ok()
        .filter(|&len| len <= MAX_VALUE_LEN)
        .ok_or_else(|| protocol(format!("{key} holds {bytes} bytes, not a count")))?;
    Ok((index, len))
}

/// The reply to the `get` of `cells`, parsed from the bytes received so far: `(index, count)`
/// of every cell found, oldest first.
pub(crate) fn parse_counts(
    buf: &[u8],
    prefix: &str,
    cells: &RangeInclusive<u64>,
) -> Parsed<Vec<(u64, u64)>> {
    let mut counts: Vec<(u64, u64)> = Vec::new();
    let mut at = 0;
    loop {
        let Some((line, used)) = split_line(&buf[at..])? else {
            return Ok(None);
        };
        at += used;
        if line == "END" {
            counts.sort_unstable_by_key(|&(index, _)| index);
            return Ok(Some((counts, at)));
        }
        let (index, len) = parse_value_header(&line, prefix, cells)?;
        if buf.len() - at < len + 2 {
            return Ok(None);
        }
        let block = &buf[at..at + len + 2];
        if &block[len..] != b"\r\n" {
            return Err(protocol("a data block not ended by CRLF".into()));
        }
        let data = &block[..len];
        at += len + 2;
        // memcached pads a decremented number with spaces up to its old length.
        let count = std::str::from_utf8(data)
            .ok()
            .and_then(|text| text.trim_end_matches(' ').parse::<u64>().ok())
            .ok_or_else(|| {
                protocol(format!(
                    "{prefix}{index} holds {:?}, not a count",
                    String::from_utf8_lossy(data)
                ))
            })?;
        if counts.iter().any(|&(seen, _)| seen == index) {
            return Err(protocol(format!("{prefix}{index} came twice")));
        }
        counts.push((index, count));
    }
}

/// Reads the reply to the `get` of `cells`.
pub(crate) async fn read_counts<T: Transport>(
    connection: &mut T,
    deadline: Instant,
    prefix: &str,
    cells: &RangeInclusive<u64>,
) -> Result<Vec<(u64, u64)>, CallError> {
    connection
        .read_reply(deadline, |buf| parse_counts(buf, prefix, cells))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_encoded_injectively_with_only_allowed_bytes() {
        let encode = |k: &str| {
            let mut s = String::new();
            encode_key(k, &mut s);
            s
        };
        assert_eq!(encode("user-42"), "user-42");
        assert_eq!(encode("a b"), "a%20b");
        assert_eq!(encode("a%20b"), "a%2520b");
        assert_eq!(encode("é\n"), "%C3%A9%0A");
        assert_ne!(encode("a b"), encode("a%20b"));
        assert!(
            encode("x \t\r\n\u{7f}ü")
                .bytes()
                .all(|b| b.is_ascii_graphic())
        );
    }

    #[test]
    fn a_decision_is_one_pipelined_write() {
        let request = decision_request("api:k:", 7, 6..=8, 12, 3);
        assert_eq!(
            String::from_utf8(request).unwrap(),
            "add api:k:7 0 12 1 noreply\r\n0\r\nincr api:k:7 3\r\nget api:k:6 api:k:7 api:k:8\r\n"
        );
        assert_eq!(take_back_request("api:k:", 7, 3), b"decr api:k:7 3\r\n");
    }

    #[test]
    fn counter_replies() {
        assert_eq!(parse_counter_line("42").unwrap(), Some(42));
        assert_eq!(parse_counter_line("NOT_FOUND").unwrap(), None);
        let error =
            parse_counter_line("CLIENT_ERROR cannot increment or decrement non-numeric value")
                .unwrap_err();
        assert!(matches!(
            error,
            CallError::Failed(MemcachedError::Server(_))
        ));
        assert!(matches!(
            parse_counter_line("STORED").unwrap_err(),
            CallError::Failed(MemcachedError::Protocol(_))
        ));
        assert!(parse_counter_line("-1").is_err());
    }

    #[test]
    fn replies_parse_only_once_complete() {
        let reply = b"3\r\nVALUE p:k:6 0 2\r\n12\r\nVALUE p:k:5 0 3\r\n1  \r\nEND\r\nnext";
        let cells = 5..=7;
        let (counter, used) = parse_counter(reply).unwrap().unwrap();
        assert_eq!((counter, used), (Some(3), 3));
        let rest = &reply[used..];
        for cut in 0..rest.len() - 4 {
            assert!(
                parse_counts(&rest[..cut], "p:k:", &cells)
                    .unwrap()
                    .is_none(),
                "{cut}"
            );
        }
        let (counts, used) = parse_counts(rest, "p:k:", &cells).unwrap().unwrap();
        assert_eq!(counts, vec![(5, 1), (6, 12)]);
        assert_eq!(&rest[used..], b"next");
        assert!(parse_counter(&[b'1'; 2000]).is_err());
        assert!(parse_counts(b"VALUE p:k:6 0 2\r\n12xxEND\r\n", "p:k:", &cells).is_err());
    }

    #[test]
    fn value_headers_must_name_a_cell_that_was_asked_for() {
        let cells = 5..=7;
        assert_eq!(
            parse_value_header("VALUE p:k:6 0 2", "p:k:", &cells).unwrap(),
            (6, 2)
        );
        for bad in [
            "VALUE p:k:8 0 2",
            "VALUE other:6 0 2",
            "VALUE p:k:6 0",
            "VALUE p:k:6 0 2 9",
            "VALUE p:k:6 0 99999",
            "VALUE p:k:x 0 1",
            "SERVER_ERROR out of memory",
            "",
        ] {
            assert!(parse_value_header(bad, "p:k:", &cells).is_err(), "{bad}");
        }
    }
}
