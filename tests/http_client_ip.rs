//! Adversarial key choice (feature `tower`): what a client can write into `X-Forwarded-For` /
//! `Forwarded` never changes its key behind trusted proxies, IPv4-mapped IPv6 is IPv4, an IPv6
//! client rotating through its prefix stays one key, unusable entries fall back to the peer, and
//! a flood of distinct clients stays within the keyed map's cap.

use std::net::IpAddr;
use std::time::Duration;

use floodgate::middleware::{ClientIp, KeyExtractor, ProxyHeader, RateLimitLayer};
use floodgate::{FixedWindow, IpKey, IpKeyer, Keyed, ManualClock};
use http::{HeaderValue, Request};
use tower::{Layer, ServiceExt};

#[path = "support/http_service.rs"]
mod http_service;
use http_service::{Body, from_peer, hello};

const PROXY: &str = "10.0.0.1:50000";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A request from the proxy `PROXY` carrying `name` with each of `lines` as its own line.
fn via_proxy(name: &'static str, lines: &[&[u8]]) -> Request<Body> {
    let mut request = from_peer(PROXY);
    for line in lines {
        request
            .headers_mut()
            .append(name, HeaderValue::from_bytes(line).unwrap());
    }
    request
}

fn behind(header: ProxyHeader, hops: u32) -> ClientIp {
    ClientIp::default().behind_proxies(header, hops).unwrap()
}

/// What a client may write in front of the proxies' entries: nothing of it may move the key.
const SPOOFS: &[&[u8]] = &[
    b"",
    b"6.6.6.6",
    b"6.6.6.6, 7.7.7.7",
    b",,, ,",
    b"\"",
    b"for=\"6.6.6.6",
    b"for=6.6.6.6;host=\"a,b",
    b"\\",
    b"[2001:db8::bad]:1, unknown, _hidden",
    b"\xff\xfe\x80 not utf-8",
];

#[test]
fn x_forwarded_for_keys_the_entry_hops_from_the_right_whatever_the_client_wrote() {
    let client = "198.51.100.23";
    for hops in 1..=3u32 {
        let extractor = behind(ProxyHeader::XForwardedFor, hops);
        // The proxies' entries: the client, then hops - 1 proxies.
        let mut trusted = vec![client.to_owned()];
        trusted.extend((1..hops).map(|i| format!("203.0.113.{i}")));
        let trusted = trusted.join(", ");
        for spoof in SPOOFS {
            let long = [*spoof, b", "].concat().repeat(2_000);
            for left in [spoof.to_vec(), long] {
                // The proxy appended to the client's line ...
                let one_line = [left.as_slice(), b", ", trusted.as_bytes()].concat();
                // ... or added its own line(s) after the client's.
                let requests = [
                    via_proxy("x-forwarded-for", &[&one_line]),
                    via_proxy("x-forwarded-for", &[&left, trusted.as_bytes()]),
                ];
                for request in requests {
                    assert_eq!(
                        extractor.client_ip(&request),
                        Some(ip(client)),
                        "hops {hops}, spoof {:?}",
                        String::from_utf8_lossy(spoof)
                    );
                }
            }
        }
        // Each proxy on its own line: the lines concatenate in order.
        let mut lines: Vec<Vec<u8>> = vec![b"6.6.6.6".to_vec(), client.as_bytes().to_vec()];
        lines.extend((1..hops).map(|i| format!("203.0.113.{i}").into_bytes()));
        let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        assert_eq!(
            extractor.client_ip(&via_proxy("x-forwarded-for", &lines)),
            Some(ip(client))
        );
    }
}

#[test]
fn forwarded_keys_the_for_of_the_element_hops_from_the_right_whatever_the_client_wrote() {
    let extractor = behind(ProxyHeader::Forwarded, 2);
    let trusted: &[u8] =
        b"for=\"[2001:db8:cafe::17]:4711\";proto=https;host=\"x,y\", FOR=203.0.113.5;by=\"_lb\"";
    for spoof in SPOOFS {
        let one_line = [*spoof, b", ", trusted].concat();
        for request in [
            via_proxy("forwarded", &[&one_line]),
            via_proxy("forwarded", &[spoof, trusted]),
        ] {
            assert_eq!(
                extractor.client_ip(&request),
                Some(ip("2001:db8:cafe::17")),
                "spoof {:?}",
                String::from_utf8_lossy(spoof)
            );
        }
    }
}

#[test]
fn an_ipv4_mapped_address_is_the_same_client_as_the_ipv4_address() {
    let plain = ClientIp::default();
    let key = |extractor: &ClientIp, request: &Request<Body>| extractor.extract(request).unwrap();
    let v4 = key(&plain, &from_peer("198.51.100.1:1"));
    assert_eq!(key(&plain, &from_peer("[::ffff:198.51.100.1]:1")), v4);
    assert_eq!(v4.to_string(), "198.51.100.1");
    let xff = behind(ProxyHeader::XForwardedFor, 1);
    for entry in [
        "::ffff:198.51.100.1",
        "[::ffff:198.51.100.1]",
        "[::ffff:198.51.100.1]:80",
        "::FFFF:c633:6401",
        "198.51.100.1:8080",
    ] {
        let request = via_proxy("x-forwarded-for", &[entry.as_bytes()]);
        assert_eq!(key(&xff, &request), v4, "{entry}");
    }
    let fwd = behind(ProxyHeader::Forwarded, 1);
    let request = via_proxy("forwarded", &[b"for=\"[::ffff:198.51.100.1]:4711\""]);
    assert_eq!(key(&fwd, &request), v4);
    // The ::ffff:0:0/96 block is IPv4 only: no IPv6 network lands on an IPv4 key.
    let by_0 = ClientIp::new(IpKeyer::new().with_ipv6_prefix(0).unwrap());
    assert_ne!(
        key(&by_0, &from_peer("[2001:db8::1]:1")),
        key(&by_0, &from_peer("0.0.0.0:1"))
    );
}

#[test]
fn a_client_rotating_through_its_ipv6_prefix_stays_one_key() {
    // A small LCG: deterministic, no dependency.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state
    };
    let xff = behind(ProxyHeader::XForwardedFor, 1);
    let by_64 = ClientIp::new(IpKeyer::new().with_ipv6_prefix(64).unwrap())
        .behind_proxies(ProxyHeader::XForwardedFor, 1)
        .unwrap();
    let base = u128::from("2001:db8:1:2300::".parse::<std::net::Ipv6Addr>().unwrap());
    let key_of = |extractor: &ClientIp, bits: u128| -> IpKey {
        let addr = std::net::Ipv6Addr::from(bits);
        let request = via_proxy("x-forwarded-for", &[format!("[{addr}]:443").as_bytes()]);
        extractor.extract(&request).unwrap()
    };
    let by_56 = key_of(&xff, base);
    let by_64_key = key_of(&by_64, base);
    for _ in 0..2_000 {
        let low64 = u128::from(next());
        let byte = u128::from(next() & 0xff) << 64; // the 8 bits between /56 and /64
        assert_eq!(key_of(&xff, base | byte | low64), by_56);
        assert_eq!(key_of(&by_64, base | low64), by_64_key);
    }
    assert_ne!(key_of(&xff, base + (1u128 << 72)), by_56); // the next /56
    assert_ne!(key_of(&by_64, base + (1u128 << 64)), by_64_key); // the next /64
}

#[test]
fn an_entry_that_is_not_an_address_or_missing_falls_back_to_the_peer() {
    let xff = behind(ProxyHeader::XForwardedFor, 1);
    let fwd = behind(ProxyHeader::Forwarded, 1);
    let peer = Some(ip("10.0.0.1"));
    for entry in [
        &b""[..],
        b" , ,",
        b"unknown",
        b"198.51.100.1 x",
        b"[192.0.2.1]",
        b"[2001:db8::1]:99999",
        b"[2001:db8::1",
        b"fe80::1%eth0",
        b"1.2.3.4, \xff",
        b"01.2.3.4",
        b"0x7f.1",
    ] {
        let request = via_proxy("x-forwarded-for", &[entry]);
        assert_eq!(
            xff.client_ip(&request),
            peer,
            "{:?}",
            String::from_utf8_lossy(entry)
        );
    }
    for element in [
        &b"for=unknown"[..],
        b"for=_hidden",
        b"for=\"_hidden:_port\"",
        b"for=\"[2001:db8::1]:4711",
        b"proto=https",
        b"for=",
        b"1.2.3.4",
    ] {
        let request = via_proxy("forwarded", &[element]);
        assert_eq!(
            fwd.client_ip(&request),
            peer,
            "{:?}",
            String::from_utf8_lossy(element)
        );
    }
    // Fewer entries than hops.
    let two = behind(ProxyHeader::XForwardedFor, 2);
    assert_eq!(
        two.client_ip(&via_proxy("x-forwarded-for", &[b"198.51.100.1"])),
        peer
    );
    // The other header is not read.
    assert_eq!(
        xff.client_ip(&via_proxy("forwarded", &[b"for=198.51.100.1"])),
        peer
    );
    // No peer and no usable entry: no key.
    let mut request = Request::new(Body::default());
    request
        .headers_mut()
        .insert("x-forwarded-for", HeaderValue::from_static("unknown"));
    assert_eq!(xff.extract(&request), None);
    request
        .headers_mut()
        .insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
    assert_eq!(xff.client_ip(&request), Some(ip("198.51.100.1")));
}

#[tokio::test]
async fn a_flood_of_distinct_clients_stays_within_the_cap_and_spoofing_makes_no_key() {
    let per_ip: Keyed<IpKey, _, _> =
        Keyed::builder(FixedWindow::new(1, Duration::from_secs(60)).unwrap())
            .clock(ManualClock::new())
            .max_keys(64)
            .build()
            .unwrap();
    let layer = RateLimitLayer::with_key(per_ip, behind(ProxyHeader::XForwardedFor, 1));
    let limiter = layer.limiter().clone();
    let service = layer.layer(hello());
    // One client spoofing a fresh first entry each time: one key, denied after the first.
    for i in 0..200u32 {
        let spoof = format!("{}.{}.{}.{}, 198.51.100.1", i % 250, i / 250, 7, 9);
        let response = service
            .clone()
            .oneshot(via_proxy("x-forwarded-for", &[spoof.as_bytes()]))
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            if i == 0 { 200 } else { 429 },
            "request {i}"
        );
    }
    assert_eq!(limiter.len(), 1);
    // Distinct /56s, one request each: the map never holds more than its cap.
    for i in 0..2_000u32 {
        let entry = format!("2001:db8:{:x}:{:x}00::1", i >> 8, i & 0xff);
        let _ = service
            .clone()
            .oneshot(via_proxy("x-forwarded-for", &[entry.as_bytes()]))
            .await
            .unwrap();
        assert!(limiter.len() <= 64, "{} keys after {i}", limiter.len());
    }
}

/// RFC 7239 §6: a node is an address with an optional port, and the port may be obfuscated
/// (`_` and letters, digits, `.`, `_`, `-`) while the address is not. The address is the client.
#[test]
fn a_forwarded_node_with_an_obfuscated_port_is_still_its_address() {
    let fwd = behind(ProxyHeader::Forwarded, 1);
    for (element, client) in [
        (
            &b"for=\"[2001:db8:cafe::17]:_hidden\""[..],
            "2001:db8:cafe::17",
        ),
        (b"for=\"192.0.2.43:_p-1.x\";proto=https", "192.0.2.43"),
        (b"for=192.0.2.43:_port", "192.0.2.43"),
    ] {
        let request = via_proxy("forwarded", &[element]);
        assert_eq!(
            fwd.client_ip(&request),
            Some(ip(client)),
            "{:?}",
            String::from_utf8_lossy(element)
        );
    }
    // Not a port, obfuscated or not: no address (the peer).
    for element in [
        &b"for=\"[2001:db8::1]:_\""[..],
        b"for=\"[2001:db8::1]:_a b\"",
        b"for=\"[2001:db8::1]:x\"",
        b"for=\"192.0.2.43:_a:_b\"",
        b"for=\"_hidden:_port\"",
    ] {
        let request = via_proxy("forwarded", &[element]);
        assert_eq!(
            fwd.client_ip(&request),
            Some(ip("10.0.0.1")),
            "{:?}",
            String::from_utf8_lossy(element)
        );
    }
}

/// The trap in another form: a server also reachable directly (a published container port, a
/// load balancer that can be bypassed). A client that connects itself writes the whole header;
/// with the proxies' network given, only a peer in it is believed, and any other is its own key.
#[test]
fn a_peer_outside_the_trusted_proxies_is_keyed_by_its_own_address() {
    let trusting = behind(ProxyHeader::XForwardedFor, 1)
        .trusted_proxies("10.0.0.0".parse().unwrap(), 8)
        .unwrap();
    let from = |peer: &str, xff: &str| {
        let mut request = from_peer(peer);
        request
            .headers_mut()
            .insert("x-forwarded-for", HeaderValue::from_str(xff).unwrap());
        request
    };
    // Through the proxy: the entry it wrote.
    let request = from("10.0.0.1:50000", "6.6.6.6, 198.51.100.1");
    assert_eq!(trusting.client_ip(&request), Some(ip("198.51.100.1")));
    let request = from("[::ffff:10.1.2.3]:50000", "198.51.100.1");
    assert_eq!(trusting.client_ip(&request), Some(ip("198.51.100.1")));
    // Directly: whatever it wrote, its own address; every spoof is the same key.
    for spoof in ["6.6.6.6", "10.0.0.1", "1.1.1.1, 2.2.2.2", "198.51.100.1"] {
        let request = from("203.0.113.66:40000", spoof);
        assert_eq!(trusting.client_ip(&request), Some(ip("203.0.113.66")));
        let key = trusting.extract(&request).unwrap();
        assert_eq!(key.to_string(), "203.0.113.66");
    }
    let request = from("[2001:db8::66]:40000", "6.6.6.6");
    assert_eq!(trusting.client_ip(&request), Some(ip("2001:db8::66")));
    // No peer: nothing vouches for the header, so no key.
    let mut request = Request::new(Body::default());
    request
        .headers_mut()
        .insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
    assert_eq!(trusting.client_ip(&request), None);
    // IPv6 proxies, and a setting that cannot be a network.
    let v6 = behind(ProxyHeader::Forwarded, 1)
        .trusted_proxies("2001:db8:aa::".parse().unwrap(), 48)
        .unwrap();
    let mut request = from_peer("[2001:db8:aa:1::5]:1");
    request
        .headers_mut()
        .insert("forwarded", HeaderValue::from_static("for=192.0.2.9"));
    assert_eq!(v6.client_ip(&request), Some(ip("192.0.2.9")));
    let ipv4 = ClientIp::default().trusted_proxies("10.0.0.0".parse().unwrap(), 33);
    assert!(ipv4.is_err());
    let ipv6 = ClientIp::default().trusted_proxies("2001:db8::".parse().unwrap(), 129);
    assert!(ipv6.is_err());
}
