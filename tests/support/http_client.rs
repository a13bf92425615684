//! A real HTTP/1 client (hyper) for the loopback server tests, whose connections come from a
//! chosen local address: the client IP the server sees.

use std::net::{IpAddr, SocketAddr};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{HeaderMap, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A response, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// The value of header `name`, if present.
    #[allow(dead_code)] // not every test reads headers
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    }
}

pub struct HttpClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    server: SocketAddr,
}

impl HttpClient {
    /// A client whose connections come from `local` (the client IP the server sees).
    pub fn from(local: IpAddr, server: SocketAddr) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_local_address(Some(local));
        HttpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            server,
        }
    }

    /// `GET /`.
    #[allow(dead_code)] // not every test asks for `/`
    pub async fn get(&self) -> Answer {
        self.get_path("/").await
    }

    /// `GET path`.
    pub async fn get_path(&self, path: &str) -> Answer {
        let url = format!("http://{}{path}", self.server);
        let response = self.client.get(url.parse().unwrap()).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }
}

/// Serves `app` on a free loopback port with each connection's peer address (axum's
/// `ConnectInfo<SocketAddr>`, what the per-IP layers read): the server's address and its task
/// (abort it to stop the server).
#[allow(dead_code)] // not every test binary serves an app
pub async fn serve(
    app: axum::Router,
) -> (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    (addr, server)
}
