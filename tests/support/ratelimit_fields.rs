//! The draft-11 `RateLimit-Policy` and `RateLimit` fields read as a client reads them: with an
//! RFC 9651 structured-field parser (the `sfv` crate), checked against the draft's rules, so a
//! test that asserts an exact line also knows the line is valid.

use http::HeaderMap;
use sfv::{BareItem, List, ListEntry, Parser};

/// One policy item: its name, its integer parameters in order, its quota unit `qu` and its
/// `pk` if any.
#[derive(Debug, PartialEq, Eq)]
pub struct PolicyItem {
    pub name: String,
    pub ints: Vec<(String, i64)>,
    pub qu: Option<String>,
    pub pk: Option<Vec<u8>>,
}

/// Parses a `RateLimit` or `RateLimit-Policy` value: a List whose members are Items with a
/// String value, integer parameters, an optional String `qu` and an optional Byte Sequence
/// `pk`. Panics (naming the value) on anything else.
pub fn parse_list(value: &str) -> Vec<PolicyItem> {
    let list: List = Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field List: {e}"));
    list.into_iter()
        .map(|entry| {
            let ListEntry::Item(item) = entry else {
                panic!("{value:?}: an inner list where an Item belongs");
            };
            let BareItem::String(name) = &item.bare_item else {
                panic!("{value:?}: an item that is not a String");
            };
            let mut ints = Vec::new();
            let mut pk = None;
            let mut qu = None;
            for (key, param) in &item.params {
                match (key.as_str(), param) {
                    ("pk", BareItem::ByteSequence(bytes)) => pk = Some(bytes.clone()),
                    ("qu", BareItem::String(unit)) => qu = Some(unit.as_str().to_owned()),
                    (key, BareItem::Integer(n)) => ints.push((key.to_owned(), i64::from(*n))),
                    (key, other) => panic!("{value:?}: parameter {key} = {other:?}"),
                }
            }
            PolicyItem {
                name: name.as_str().to_owned(),
                ints,
                qu,
                pk,
            }
        })
        .collect()
}

fn single_line(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut lines = headers.get_all(name).iter();
    let line = lines.next()?.to_str().unwrap().to_owned();
    assert!(lines.next().is_none(), "{name} sent on more than one line");
    Some(line)
}

/// The `RateLimit-Policy` and `RateLimit` lines of `headers` (`None` when neither is there),
/// after checking them: both Lists parse; they name the same policies in the same order; each
/// policy has `q` (and optionally `w` > 0), each state `r` ≤ `q` and `t` (which only an allowed
/// response without a reset time leaves out), nothing else but the
/// same `pk` in both; and on a 429 `Retry-After` is at least every `t` of an exhausted policy.
/// A policy in the quota unit `concurrent-requests` (the only `qu` floodgate writes) has no `w`
/// and its state no `t`.
pub fn checked_fields(headers: &HeaderMap) -> Option<(String, String)> {
    let policy = single_line(headers, "ratelimit-policy");
    let state = single_line(headers, "ratelimit");
    let (policy, state) = match (policy, state) {
        (None, None) => return None,
        (Some(p), Some(s)) => (p, s),
        (p, s) => panic!("one field without the other: {p:?} / {s:?}"),
    };
    let policies = parse_list(&policy);
    let states = parse_list(&state);
    assert_eq!(policies.len(), states.len(), "{policy} / {state}");
    for (p, s) in policies.iter().zip(&states) {
        assert_eq!(p.name, s.name, "{policy} / {state}");
        assert_eq!(p.pk, s.pk, "{policy} / {state}");
        let keys: Vec<&str> = p.ints.iter().map(|(k, _)| k.as_str()).collect();
        let concurrent = match p.qu.as_deref() {
            None => false,
            Some("concurrent-requests") => true,
            Some(other) => panic!("{policy}: quota unit {other:?}"),
        };
        assert_eq!(s.qu, None, "{state}: qu belongs to the policy");
        if concurrent {
            assert_eq!(keys, ["q"], "{policy}: a concurrency quota has no window");
            let keys: Vec<&str> = s.ints.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["r"], "{state}: a concurrency state has no t");
            assert!(
                0 <= s.ints[0].1 && s.ints[0].1 <= p.ints[0].1,
                "{state}: r above q"
            );
            continue;
        }
        assert!(keys == ["q"] || keys == ["q", "w"], "{policy}");
        assert!(p.ints.iter().all(|&(_, v)| v >= 0), "{policy}");
        assert!(
            keys.len() == 1 || p.ints[1].1 > 0,
            "{policy}: w must be positive"
        );
        let keys: Vec<&str> = s.ints.iter().map(|(k, _)| k.as_str()).collect();
        // `t` is left out only where no reset time is known (a backend failing open), and
        // never on a denial.
        let denied = headers.contains_key("retry-after");
        assert!(keys == ["r", "t"] || (keys == ["r"] && !denied), "{state}");
        let (r, t) = (s.ints[0].1, s.ints.get(1).map_or(0, |&(_, t)| t));
        assert!(0 <= r && r <= p.ints[0].1, "{state}: r above q");
        assert!(t >= 0, "{state}");
        if let Some(retry_after) = headers.get("retry-after") {
            let retry_after: i64 = retry_after.to_str().unwrap().parse().unwrap();
            assert!(
                r > 0 || retry_after >= t,
                "Retry-After {retry_after} < t in {state}"
            );
        }
    }
    Some((policy, state))
}
