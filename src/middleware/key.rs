//! What a request is limited by: [`KeyExtractor`], the client-IP default [`ClientIp`] (the
//! peer, or the client behind trusted proxies), and [`KeyFn`] for a closure over the request.

use std::net::{IpAddr, SocketAddr};

use http::Request;

use super::forwarded::nth_from_right;
use crate::decision::ConfigError;
use crate::keyed::{IpKey, IpKeyer, Key};

/// Picks the key a request is limited by. `None` means the request has no key (see
/// [`MissingKey`](super::MissingKey)).
///
/// ```
/// use floodgate::middleware::{ClientIp, KeyExtractor};
/// use std::net::SocketAddr;
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert("192.0.2.7:50000".parse::<SocketAddr>().unwrap());
/// assert_eq!(ClientIp::default().extract(&request).unwrap().to_string(), "192.0.2.7");
/// ```
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key type of the keyed limiter.
    type Key: crate::keyed::Key;

    /// The key of `request`, if it has one.
    fn extract(&self, request: &Request<B>) -> Option<Self::Key>;
}

/// The default key: the client's IP address, as an [`IpKey`] (IPv4 by address, IPv6 by /56,
/// or as the [`IpKeyer`] given says).
///
/// By default it reads the peer address from the request's extensions, first found of:
/// axum's `ConnectInfo<SocketAddr>` (feature `axum`; serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`), a `SocketAddr`, an `IpAddr`
/// (insert one from your own accept loop, e.g. with hyper or tonic). Behind reverse proxies the
/// peer is a proxy: see [`behind_proxies`](Self::behind_proxies).
///
/// ```
/// use floodgate::IpKeyer;
/// use floodgate::middleware::{ClientIp, KeyExtractor};
/// use std::net::IpAddr;
/// let by_48 = ClientIp::new(IpKeyer::new().with_ipv6_prefix(48)?);
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert("2001:db8:0:12::1".parse::<IpAddr>()?);
/// assert_eq!(by_48.extract(&request).unwrap().network(), "2001:db8::".parse::<IpAddr>()?);
/// assert!(by_48.extract(&http::Request::new(())).is_none()); // no address: no key
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientIp {
    keyer: IpKeyer,
    proxies: Option<Proxies>,
    trusted: Option<Network>,
}

/// The network the trusted proxies connect from: a peer is in it when masking the peer with
/// `mask` gives `network`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Network {
    mask: IpKeyer,
    network: IpKey,
}

/// Trusted proxies: which header they write, and how many of them there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Proxies {
    header: ProxyHeader,
    hops: u32,
}

/// The header trusted reverse proxies record client addresses in.
///
/// ```
/// use floodgate::middleware::{ClientIp, ProxyHeader};
/// let behind_nginx = ClientIp::default().behind_proxies(ProxyHeader::XForwardedFor, 1)?;
/// # let _ = behind_nginx;
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx `$proxy_add_x_forwarded_for`, most
    /// load balancers).
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239); the `for` parameter of each element.
    Forwarded,
}

impl ClientIp {
    /// Client IPs keyed by `keyer`.
    ///
    /// ```
    /// use floodgate::IpKeyer;
    /// use floodgate::middleware::{ClientIp, KeyExtractor};
    /// let by_24 = ClientIp::new(IpKeyer::new().with_ipv4_prefix(24)?);
    /// let mut request = http::Request::new(());
    /// request.extensions_mut().insert("192.0.2.77".parse::<std::net::IpAddr>()?);
    /// assert_eq!(by_24.extract(&request).unwrap().network().to_string(), "192.0.2.0");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const fn new(keyer: IpKeyer) -> Self {
        ClientIp {
            keyer,
            proxies: None,
            trusted: None,
        }
    }

    /// Keys by the client address that `hops` trusted reverse proxies in front of this server
    /// recorded in `header`, instead of the peer address (which is the nearest proxy).
    ///
    /// Every proxy appends the address it got the connection from, so with `hops` proxies the
    /// client's address is the `hops`-th entry **from the right** (1: the rightmost, for one
    /// proxy such as nginx or a cloud load balancer). Entries further left were sent by the
    /// client and are never read: taking the first entry, as many guides do, lets any client
    /// pick its own key and escape the limit. A request with fewer entries than `hops`, or whose
    /// entry there is not an IP address (`unknown`, an obfuscated `Forwarded` node), is keyed by
    /// its peer address.
    ///
    /// This is only as sound as `hops`: the server must be reachable only through the proxies
    /// (a client that connects directly can write the whole header; name the proxies' network
    /// with [`trusted_proxies`](Self::trusted_proxies) and such a client is keyed by its own
    /// address), and `hops` must be the number of proxies that append to the header.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `hops` = 0 (with no proxy in front, use the peer address:
    /// the default).
    ///
    /// ```
    /// use floodgate::middleware::{ClientIp, KeyExtractor, ProxyHeader};
    /// use std::net::SocketAddr;
    /// // CDN -> load balancer -> this server: two trusted hops.
    /// let client_ip = ClientIp::default().behind_proxies(ProxyHeader::XForwardedFor, 2)?;
    /// let mut request = http::Request::builder()
    ///     // The client wrote "6.6.6.6"; the CDN appended the client, the load balancer the CDN.
    ///     .header("x-forwarded-for", "6.6.6.6, 198.51.100.23, 203.0.113.5")
    ///     .body(())?;
    /// request.extensions_mut().insert("10.0.0.2:41000".parse::<SocketAddr>()?);
    /// assert_eq!(client_ip.client_ip(&request), Some("198.51.100.23".parse()?));
    /// assert!(ClientIp::default().behind_proxies(ProxyHeader::Forwarded, 0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn behind_proxies(self, header: ProxyHeader, hops: u32) -> Result<Self, ConfigError> {
        if hops == 0 {
            return Err(ConfigError::Invalid {
                what: "trusted proxy hops",
                why: "must be at least 1 (0 given): with no proxy in front, the peer address is \
                      the client's, which ClientIp uses by default",
            });
        }
        Ok(ClientIp {
            proxies: Some(Proxies { header, hops }),
            ..self
        })
    }

    /// Believes the proxies' header ([`behind_proxies`](Self::behind_proxies)) only on requests
    /// whose peer is in `network`/`prefix` (the addresses your proxies connect from); a request
    /// from any other peer is keyed by its peer address, whatever its header says, and a request
    /// without a peer address has no key. Without it, every peer is believed: a server that can
    /// also be reached directly (a published container port, a bypassable load balancer) lets
    /// any client that connects itself write the header and pick its own key.
    ///
    /// Only the peer (the nearest proxy) is checked: with `hops` above 1, the proxies further out
    /// must still be the only way to the nearest one. An IPv4-mapped peer (`::ffff:10.0.0.1`) is
    /// in an IPv4 network. One network; for proxies in several, implement [`KeyExtractor`] over
    /// [`client_ip`](Self::client_ip) and [`peer_ip`](Self::peer_ip).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a prefix above 32 (IPv4) or 128 (IPv6).
    ///
    /// ```
    /// use floodgate::middleware::{ClientIp, ProxyHeader};
    /// use std::net::SocketAddr;
    /// let client_ip = ClientIp::default()
    ///     .behind_proxies(ProxyHeader::XForwardedFor, 1)?
    ///     .trusted_proxies("10.0.0.0".parse()?, 8)?;
    /// let from = |peer: &str| -> Result<_, Box<dyn std::error::Error>> {
    ///     let mut request = http::Request::builder()
    ///         .header("x-forwarded-for", "6.6.6.6, 198.51.100.23")
    ///         .body(())?;
    ///     request.extensions_mut().insert(peer.parse::<SocketAddr>()?);
    ///     Ok(request)
    /// };
    /// // Through the proxy: the address it recorded.
    /// assert_eq!(client_ip.client_ip(&from("10.0.0.2:41000")?), Some("198.51.100.23".parse()?));
    /// // Straight from a client: its own address, not the header it wrote.
    /// assert_eq!(client_ip.client_ip(&from("203.0.113.66:41000")?), Some("203.0.113.66".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn trusted_proxies(self, network: IpAddr, prefix: u8) -> Result<Self, ConfigError> {
        let mask = match network.to_canonical() {
            IpAddr::V4(_) => IpKeyer::new().with_ipv4_prefix(prefix)?,
            IpAddr::V6(_) => IpKeyer::new().with_ipv6_prefix(prefix)?,
        };
        Ok(ClientIp {
            trusted: Some(Network {
                mask,
                network: mask.key(network),
            }),
            ..self
        })
    }

    /// The address the key is made from: the client address recorded by the trusted proxies
    /// when [`behind_proxies`](Self::behind_proxies) is set, the peer is one of them (see
    /// [`trusted_proxies`](Self::trusted_proxies)) and the request has one, otherwise the peer
    /// address.
    ///
    /// ```
    /// use floodgate::middleware::{ClientIp, ProxyHeader};
    /// use std::net::SocketAddr;
    /// let behind_one = ClientIp::default().behind_proxies(ProxyHeader::Forwarded, 1)?;
    /// let mut request = http::Request::builder()
    ///     .header("forwarded", r#"for="[2001:db8:cafe::17]:4711";proto=https"#)
    ///     .body(())?;
    /// request.extensions_mut().insert("10.0.0.2:41000".parse::<SocketAddr>()?);
    /// assert_eq!(behind_one.client_ip(&request), Some("2001:db8:cafe::17".parse()?));
    /// assert_eq!(ClientIp::default().client_ip(&request), Some("10.0.0.2".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client_ip<B>(&self, request: &Request<B>) -> Option<IpAddr> {
        let peer = Self::peer_ip(request);
        if let Some(trusted) = self.trusted {
            let peer = peer?;
            if trusted.mask.key(peer) != trusted.network {
                return Some(peer);
            }
        }
        self.proxies
            .and_then(|p| nth_from_right(request.headers(), p.header, p.hops))
            .or(peer)
    }

    /// The peer address of `request`, from its extensions (see the type docs).
    ///
    /// ```
    /// use floodgate::middleware::ClientIp;
    /// use std::net::{IpAddr, SocketAddr};
    /// let mut request = http::Request::new(());
    /// assert_eq!(ClientIp::peer_ip(&request), None);
    /// request.extensions_mut().insert("198.51.100.4:443".parse::<SocketAddr>()?);
    /// assert_eq!(ClientIp::peer_ip(&request), Some("198.51.100.4".parse::<IpAddr>()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peer_ip<B>(request: &Request<B>) -> Option<IpAddr> {
        let extensions = request.extensions();
        #[cfg(feature = "axum")]
        if let Some(axum::extract::ConnectInfo(peer)) =
            extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(peer.ip());
        }
        extensions
            .get::<SocketAddr>()
            .map(SocketAddr::ip)
            .or_else(|| extensions.get::<IpAddr>().copied())
    }
}

impl<B> KeyExtractor<B> for ClientIp {
    type Key = IpKey;

    #[inline]
    fn extract(&self, request: &Request<B>) -> Option<IpKey> {
        self.client_ip(request).map(|ip| self.keyer.key(ip))
    }
}

/// A key from a closure over the request (an API key header, a user id a previous layer put in
/// the extensions).
///
/// The closure's key type is a [`Key`](crate::Key): the integers, strings, IP addresses,
/// [`HashedKey`](crate::keyed::HashedKey), [`IpKey`] and pairs are; a type of your own needs one
/// line (see [`Key`](crate::Key)).
///
/// A key the client writes (a header value) is as long as the client likes, up to the server's
/// header size limit, and a keyed map holds one per client it has seen: key such values by a
/// [`HashedKey`](crate::keyed::HashedKey) (16 bytes, whatever the value's length), not by the
/// bytes themselves, or 100,000 keys of 8 KiB each hold 800 MiB.
///
/// ```
/// use floodgate::keyed::HashedKey;
/// use floodgate::middleware::{KeyExtractor, KeyFn};
/// let api_key = KeyFn(|request: &http::Request<()>| {
///     request.headers().get("x-api-key").map(|value| HashedKey::new(value.as_bytes()))
/// });
/// let request = http::Request::builder().header("x-api-key", "k1").body(())?;
/// assert_eq!(api_key.extract(&request), Some(HashedKey::new(b"k1")));
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct KeyFn<F>(pub F);

impl<F, B, K> KeyExtractor<B> for KeyFn<F>
where
    F: Fn(&Request<B>) -> Option<K> + Clone + Send + Sync + 'static,
    K: Key,
{
    type Key = K;

    #[inline]
    fn extract(&self, request: &Request<B>) -> Option<K> {
        (self.0)(request)
    }
}
