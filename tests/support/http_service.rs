//! What the in-process HTTP layer tests share: the body type, an inner service that answers
//! "hello", and a request from a given peer address (the key the layer's default `KeyFn` reads).

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::Service;

/// The body of every request and response in these tests.
pub type Body = Full<Bytes>;

/// An inner service that answers every request with "hello".
pub fn hello() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_request: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    })
}

/// A request whose peer address is `peer` (`ip:port`), as a server puts it in the extensions.
pub fn from_peer(peer: &str) -> Request<Body> {
    let mut request = Request::new(Body::default());
    request
        .extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    request
}

/// A per-IP fixed window of `limit` requests per `window_secs` seconds on `clock`.
#[allow(dead_code)] // not every test binary limits by a fixed window
pub fn fixed_window(
    limit: u32,
    window_secs: u64,
    clock: &floodgate::ManualClock,
) -> floodgate::Keyed<floodgate::IpKey, floodgate::FixedWindow, floodgate::ManualClock> {
    floodgate::Keyed::builder(
        floodgate::FixedWindow::new(limit, std::time::Duration::from_secs(window_secs)).unwrap(),
    )
    .clock(clock.clone())
    .build()
    .unwrap()
}
