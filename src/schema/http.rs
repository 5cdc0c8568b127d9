//! HTTP/1.1 to the schema registry: one connection per request (calls are rare: the serdes
//! cache every schema and id they learn), over TCP or over rustls with the same pure-Rust
//! TLS client as the brokers' connections, basic authentication, a bounded body and one
//! timeout for the whole exchange.

use super::config::{authority, redact, RegistryConfig};
use super::error::{Result, SchemaError};
use crate::client::config::Secret;
use crate::client::security::tls::TlsConnector;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::debug;

/// The largest answer read (a schema with its references is kilobytes; a list of every
/// subject of a large registry stays well under this).
const MAX_BODY: usize = 16 << 20;

/// The registry's media type (requests and answers).
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// An answer: status and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// One registry base URL, split for connecting.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The URL as configured, without credentials (for messages).
    pub shown: String,
    tls: bool,
    host: String,
    port: u16,
    /// The path the API lives under (e.g. `/apis/ccompat/v7`), without a trailing '/'.
    base_path: String,
    /// `user:password` from the URL.
    credentials: Option<Secret>,
}

impl Endpoint {
    /// Splits `url` (`http[s]://[user:password@]host[:port][/path]`).
    ///
    /// # Errors
    /// [`SchemaError::Config`] naming the URL.
    pub(crate) fn parse(url: &str) -> Result<Endpoint> {
        let shown = redact(url);
        let bad = |why: &str| SchemaError::Config(format!("schema.registry.url {shown}: {why}"));
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("must start with http:// or https://"));
        };
        let auth = authority(url);
        let base_path = rest[auth.len()..].trim_end_matches('/').to_owned();
        let (credentials, host_port) = match auth.rsplit_once('@') {
            Some((c, h)) => (Some(Secret::new(c)), h),
            None => (None, auth),
        };
        let (host, port) = match host_port.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || host_port.starts_with('[') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| bad(&format!("'{p}' is not a port")))?,
            ),
            _ => (host_port, if tls { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Endpoint {
            shown,
            tls,
            host: host.to_owned(),
            port,
            base_path,
            credentials,
        })
    }
}

/// Sends requests to registry endpoints.
#[derive(Debug)]
pub(crate) struct Http {
    tls: Option<TlsConnector>,
    user_info: Option<Secret>,
    timeout: Duration,
}

impl Http {
    /// Reads the TLS files when any URL is https.
    ///
    /// # Errors
    /// [`SchemaError::Config`] naming the TLS setting that failed.
    pub(crate) fn new(config: &RegistryConfig, endpoints: &[Endpoint]) -> Result<Http> {
        let tls = if endpoints.iter().any(|e| e.tls) {
            Some(
                TlsConnector::new(&config.tls)
                    .map_err(|e| SchemaError::Config(format!("schema registry TLS: {e}")))?,
            )
        } else {
            None
        };
        Ok(Http {
            tls,
            user_info: config.user_info.clone(),
            timeout: config.request_timeout,
        })
    }

    /// `method path` (relative to the endpoint's base path) with an optional JSON body.
    ///
    /// # Errors
    /// [`SchemaError::Unreachable`] when no answer came (connect, reset, timeout);
    /// [`SchemaError::Tls`] when the TLS handshake failed; an answer of any status is `Ok`.
    pub(crate) async fn send(
        &self,
        at: &Endpoint,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer> {
        let unreachable = |message: String| SchemaError::Unreachable {
            url: at.shown.clone(),
            message,
        };
        let exchange = async {
            let tcp = TcpStream::connect((at.host.as_str(), at.port))
                .await
                .map_err(|e| unreachable(format!("cannot connect: {e}")))?;
            let _ = tcp.set_nodelay(true);
            let request = self.request(at, method, path, body)?;
            match (&self.tls, at.tls) {
                (Some(tls), true) => {
                    let stream =
                        tls.connect(tcp, &at.host)
                            .await
                            .map_err(|message| SchemaError::Tls {
                                url: at.shown.clone(),
                                message,
                            })?;
                    exchange(stream, request).await.map_err(unreachable)
                }
                _ => exchange(tcp, request).await.map_err(unreachable),
            }
        };
        let answer = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                unreachable(format!(
                    "no answer to {method} {path} within schema.registry.request.timeout.ms={}",
                    self.timeout.as_millis()
                ))
            })??;
        debug!(url = %at.shown, method, path, status = answer.status, "schema registry");
        Ok(answer)
    }

    fn request(
        &self,
        at: &Endpoint,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<hyper::Request<Full<Bytes>>> {
        let host = if at.host.contains(':') {
            format!("[{}]:{}", at.host, at.port)
        } else {
            format!("{}:{}", at.host, at.port)
        };
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", at.base_path))
            .header("host", host)
            .header("accept", format!("{MEDIA_TYPE}, application/json"))
            .header(
                "user-agent",
                concat!("onceflow/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(user_info) = at.credentials.as_ref().or(self.user_info.as_ref()) {
            let token = base64::engine::general_purpose::STANDARD.encode(user_info.expose());
            b = b.header("authorization", format!("Basic {token}"));
        }
        if body.is_some() {
            b = b.header("content-type", MEDIA_TYPE);
        }
        b.body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| SchemaError::Config(format!("schema registry request {path}: {e}")))
    }
}

async fn exchange<S>(
    stream: S,
    request: hyper::Request<Full<Bytes>>,
) -> std::result::Result<Answer, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    // The connection is driven beside the request; it ends when the answer is read and the
    // sender dropped.
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let answer = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("no answer: {e}"))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("reading the answer (HTTP {status}): {e}"))?
            .to_bytes();
        Ok(Answer { status, body })
    }
    .await;
    drop(sender);
    driver.abort();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_table() {
        #[rustfmt::skip]
        let cases = [
            ("http://127.0.0.1:8081",                      Some((false, "127.0.0.1", 8081, "", false))),
            ("https://registry.example.com",               Some((true, "registry.example.com", 443, "", false))),
            ("http://r/apis/ccompat/v7",                   Some((false, "r", 80, "/apis/ccompat/v7", false))),
            ("http://alice:pw@r:8080/apis/ccompat/v7/",    Some((false, "r", 8080, "/apis/ccompat/v7", true))),
            ("http://[::1]:8081",                          Some((false, "::1", 8081, "", false))),
            ("http://r:port",                              None),
            ("ftp://r",                                    None),
            ("http://",                                    None),
        ];
        for (url, want) in cases {
            match (Endpoint::parse(url), want) {
                (Ok(e), Some((tls, host, port, base, creds))) => {
                    assert_eq!(
                        (
                            e.tls,
                            e.host.as_str(),
                            e.port,
                            e.base_path.as_str(),
                            e.credentials.is_some()
                        ),
                        (tls, host, port, base, creds),
                        "{url}"
                    );
                    assert!(!e.shown.contains("pw"));
                }
                (Err(e), None) => assert!(e.to_string().contains("schema.registry.url"), "{e}"),
                (got, want) => panic!("{url}: got {got:?}, want {want:?}"),
            }
        }
    }
}
