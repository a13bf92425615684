//! What a request is limited by: [`KeyExtractor`], the client-IP default [`ClientIp`], and
//! [`KeyFn`] for a closure over the request.

use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};

use http::Request;

use crate::keyed::{IpKey, IpKeyer};

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
    type Key: Hash + Eq + Clone + Send + Sync + 'static;

    /// The key of `request`, if it has one.
    fn extract(&self, request: &Request<B>) -> Option<Self::Key>;
}

/// The default key: the client's IP address, as an [`IpKey`] (IPv4 by address, IPv6 by /64,
/// or as the [`IpKeyer`] given says).
///
/// It reads the peer address from the request's extensions, first found of:
/// axum's `ConnectInfo<SocketAddr>` (feature `axum`; serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`), a `SocketAddr`, an `IpAddr`
/// (insert one from your own accept loop, e.g. with hyper or tonic). Behind a reverse proxy the
/// peer is the proxy: use [`KeyFn`] to read a header the proxy sets instead.
///
/// ```
/// use floodgate::IpKeyer;
/// use floodgate::middleware::{ClientIp, KeyExtractor};
/// use std::net::IpAddr;
/// let by_56 = ClientIp::new(IpKeyer::new().with_ipv6_prefix(56)?);
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert("2001:db8:0:12::1".parse::<IpAddr>()?);
/// assert_eq!(by_56.extract(&request).unwrap().network(), "2001:db8::".parse::<IpAddr>()?);
/// assert!(by_56.extract(&http::Request::new(())).is_none()); // no address: no key
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientIp {
    keyer: IpKeyer,
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
        ClientIp { keyer }
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
        Self::peer_ip(request).map(|ip| self.keyer.key(ip))
    }
}

/// A key from a closure over the request (an API key header, a user id a previous layer put in
/// the extensions, the first address of `X-Forwarded-For` set by your proxy).
///
/// ```
/// use floodgate::middleware::{KeyExtractor, KeyFn};
/// let api_key = KeyFn(|request: &http::Request<()>| {
///     request.headers().get("x-api-key").map(|value| value.as_bytes().to_vec())
/// });
/// let request = http::Request::builder().header("x-api-key", "k1").body(())?;
/// assert_eq!(api_key.extract(&request), Some(b"k1".to_vec()));
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct KeyFn<F>(pub F);

impl<F, B, K> KeyExtractor<B> for KeyFn<F>
where
    F: Fn(&Request<B>) -> Option<K> + Clone + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Key = K;

    #[inline]
    fn extract(&self, request: &Request<B>) -> Option<K> {
        (self.0)(request)
    }
}
