//! Reading the client address that trusted reverse proxies recorded in `X-Forwarded-For` or
//! `Forwarded` (RFC 7239), counting hops from the right.
//!
//! Each proxy appends the address it received the connection from, so the entries at the right
//! were written by your proxies and everything to their left came from the client, who can
//! write anything there. Both headers are therefore read from the right, as bytes, and only the
//! entry asked for is parsed: nothing the client wrote (invalid UTF-8, an unbalanced quote, a
//! thousand entries) can shift, hide or replace it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};

use super::key::ProxyHeader;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The address `hops` entries from the right (1 = the rightmost) of `header`, over all its
/// lines in order; `None` when there are fewer entries or that entry is not an IP address
/// (`unknown`, an obfuscated identifier, garbage).
pub(super) fn nth_from_right(
    headers: &HeaderMap,
    header: ProxyHeader,
    hops: u32,
) -> Option<IpAddr> {
    let name = match header {
        ProxyHeader::XForwardedFor => X_FORWARDED_FOR,
        ProxyHeader::Forwarded => FORWARDED,
    };
    let mut left = hops;
    for line in headers.get_all(name).iter().rev() {
        let mut elements = ListFromRight::new(line.as_bytes(), header == ProxyHeader::Forwarded);
        while let Some(element) = elements.next_element() {
            let element = trim(element);
            if element.is_empty() {
                continue; // an empty list element (`a,,b`) is no hop
            }
            left -= 1;
            if left == 0 {
                return match header {
                    ProxyHeader::XForwardedFor => parse_node(element),
                    ProxyHeader::Forwarded => forwarded_for(element).and_then(|n| parse_node(&n)),
                };
            }
        }
    }
    None
}

/// The elements of a comma-separated list, from the right. With `quotes`, commas inside quoted
/// strings do not separate (quotes are matched from the right, so an unbalanced quote further
/// left, written by the client, cannot swallow the proxies' elements).
struct ListFromRight<'a> {
    rest: &'a [u8],
    quotes: bool,
    done: bool,
}

impl<'a> ListFromRight<'a> {
    fn new(line: &'a [u8], quotes: bool) -> Self {
        ListFromRight {
            rest: line,
            quotes,
            done: false,
        }
    }

    fn next_element(&mut self) -> Option<&'a [u8]> {
        if self.done {
            return None;
        }
        let bytes = self.rest;
        let mut in_quote = false;
        let mut i = bytes.len();
        while i > 0 {
            i -= 1;
            match bytes[i] {
                b'"' if self.quotes && !is_escaped(bytes, i) => in_quote = !in_quote,
                b',' if !in_quote => {
                    self.rest = &bytes[..i];
                    return Some(&bytes[i + 1..]);
                }
                _ => {}
            }
        }
        self.done = true;
        Some(bytes)
    }
}

/// Whether the byte at `i` is preceded by an odd number of backslashes.
fn is_escaped(bytes: &[u8], i: usize) -> bool {
    bytes[..i].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// The `for` parameter of one `Forwarded` element (`for=192.0.2.1;proto=https`), unquoted.
fn forwarded_for(element: &[u8]) -> Option<String> {
    let element = std::str::from_utf8(element).ok()?;
    let mut rest = element;
    loop {
        let (pair, tail) = split_pair(rest);
        let (name, value) = pair.split_once('=')?;
        if name.trim().eq_ignore_ascii_case("for") {
            return unquote(value.trim());
        }
        rest = tail?;
    }
}

/// Splits off the first `name=value` pair of an element at a `;` outside quotes.
fn split_pair(text: &str) -> (&str, Option<&str>) {
    let mut in_quote = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quote => escaped = true,
            '"' => in_quote = !in_quote,
            ';' if !in_quote => return (&text[..i], Some(&text[i + 1..])),
            _ => {}
        }
    }
    (text, None)
}

/// A token as is, or a quoted string without its quotes and escapes.
fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return Some(value.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' { chars.next()? } else { c });
    }
    Some(out)
}

/// A node: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`;
/// the port may be obfuscated (`192.0.2.1:_p`, `[2001:db8::1]:_p`, RFC 7239 §6.3).
fn parse_node(node: impl AsRef<[u8]>) -> Option<IpAddr> {
    let node = std::str::from_utf8(node.as_ref()).ok()?.trim();
    if let Some(bracketed) = node.strip_prefix('[') {
        let (ip, port) = bracketed.split_once(']')?;
        if !(port.is_empty() || port.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return ip.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    node.parse::<IpAddr>().ok().or_else(|| {
        // An IPv4 address and a port (a bare IPv6 address has more than one colon and parsed).
        let (ip, port) = node.split_once(':')?;
        if !is_port(port) {
            return None;
        }
        ip.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    })
}

/// A port number, or an obfuscated port: `_` and then letters, digits, `.`, `_` or `-`.
fn is_port(port: &str) -> bool {
    match port.strip_prefix('_') {
        Some(obfuscated) => {
            !obfuscated.is_empty()
                && obfuscated
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
        None => port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(name: &str, lines: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(line).unwrap(),
            );
        }
        map
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn x_forwarded_for_counts_from_the_right_over_all_lines() {
        let map = headers(
            "x-forwarded-for",
            &[b"6.6.6.6, 203.0.113.9", b"198.51.100.1 ,, 10.0.0.2"],
        );
        let xff = |hops| nth_from_right(&map, ProxyHeader::XForwardedFor, hops);
        assert_eq!(xff(1), ip("10.0.0.2"));
        assert_eq!(xff(2), ip("198.51.100.1")); // the empty element is no hop
        assert_eq!(xff(3), ip("203.0.113.9"));
        assert_eq!(xff(4), ip("6.6.6.6"));
        assert_eq!(xff(5), None);
    }

    #[test]
    fn client_written_garbage_on_the_left_does_not_matter() {
        let map = headers(
            "x-forwarded-for",
            &[b"\xff\xfe not an ip, [2001:db8::7]:443"],
        );
        assert_eq!(
            nth_from_right(&map, ProxyHeader::XForwardedFor, 1),
            ip("2001:db8::7")
        );
        assert_eq!(nth_from_right(&map, ProxyHeader::XForwardedFor, 2), None);
        let map = headers(
            "forwarded",
            &[b"for=\"evil, for=6.6.6.6, for=192.0.2.60;proto=https"],
        );
        assert_eq!(
            nth_from_right(&map, ProxyHeader::Forwarded, 1),
            ip("192.0.2.60")
        );
    }

    #[test]
    fn forwarded_nodes_in_every_form() {
        let map = headers(
            "forwarded",
            &[
                b"for=unknown, For=\"_hidden\"",
                b"for=192.0.2.43:8080;by=10.0.0.1, proto=http;FOR=\"[2001:db8:cafe::17]:4711\"",
                b"host=\"a;b,c\";for=\"198.51.100.17\", by=10.0.0.1",
            ],
        );
        let fwd = |hops| nth_from_right(&map, ProxyHeader::Forwarded, hops);
        assert_eq!(fwd(1), None); // an element without `for`
        assert_eq!(fwd(2), ip("198.51.100.17"));
        assert_eq!(fwd(3), ip("2001:db8:cafe::17"));
        assert_eq!(fwd(4), ip("192.0.2.43"));
        assert_eq!(fwd(5), None); // obfuscated
        assert_eq!(fwd(6), None); // unknown
        assert_eq!(fwd(7), None); // no more
    }

    #[test]
    fn nodes() {
        assert_eq!(parse_node("192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(parse_node("192.0.2.1:80"), ip("192.0.2.1"));
        assert_eq!(parse_node("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(parse_node("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(parse_node("[2001:db8::1]:80"), ip("2001:db8::1"));
        assert_eq!(parse_node("[2001:db8::1]:x"), None);
        assert_eq!(parse_node("[2001:db8::1]:+80"), None);
        assert_eq!(parse_node("192.0.2.1:+80"), None);
        assert_eq!(parse_node("192.0.2.1:65536"), None);
        assert_eq!(parse_node("[2001:db8::1]:_p.1-x_"), ip("2001:db8::1"));
        assert_eq!(parse_node("192.0.2.1:_p"), ip("192.0.2.1"));
        assert_eq!(parse_node("192.0.2.1:_"), None);
        assert_eq!(parse_node("_hidden:_p"), None);
        assert_eq!(parse_node("[192.0.2.1]"), None);
        assert_eq!(parse_node("unknown"), None);
        assert_eq!(unquote(r#""a\"b""#).as_deref(), Some("a\"b"));
        assert_eq!(unquote("\"open"), None);
    }
}
