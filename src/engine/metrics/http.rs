//! The scrape endpoint: a small HTTP/1.1 listener on tokio. `GET /metrics` answers 200 with
//! [`render`]'s text (`text/plain; version=0.0.4`); any other well-formed
//! request 404; a malformed one 400. One request per connection (`Connection: close`).
//!
//! It faces whatever reaches the port, so it is bounded everywhere: a request head larger than
//! [`ServerOptions::max_request_bytes`] is answered 431 and closed, a connection that has not
//! sent its head within [`ServerOptions::timeout`] is closed, and past
//! [`ServerOptions::max_connections`] open connections new ones are closed at once. Parsing is
//! a pure function of the bytes (`route`), tested with garbage.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::{render, Metrics};

/// The content type of the text exposition format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The listener's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerOptions {
    /// The largest request head read (request line and headers).
    pub max_request_bytes: usize,
    /// How long one connection may take, from accept to the answer written.
    pub timeout: Duration,
    /// Connections served at once; more are closed without an answer.
    pub max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_request_bytes: 8 * 1024,
            timeout: Duration::from_secs(5),
            max_connections: 16,
        }
    }
}

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The address cannot be listened on.
    #[error("cannot listen for metrics on {addr}: {source}; choose a free address (e.g. 127.0.0.1:9464)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /metrics` (a query string is ignored).
    Metrics,
    /// Any other well-formed request.
    NotFound,
    /// Not an HTTP/1.x request line.
    BadRequest,
}

/// The route of a request head (the bytes up to the blank line). Pure: never panics, whatever
/// the bytes.
pub(crate) fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(line) = std::str::from_utf8(line) else {
        return Route::BadRequest;
    };
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Route::BadRequest;
    };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic());
    if !token(method) || !target.starts_with('/') || !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        _ => Route::NotFound,
    }
}

/// The answer's bytes for a route; `body` renders the metrics (called for `Metrics` only).
pub(crate) fn response(route: Route, body: impl FnOnce() -> String) -> Vec<u8> {
    let (status, content_type, body) = match route {
        Route::Metrics => ("200 OK", CONTENT_TYPE, body()),
        Route::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: the metrics are at GET /metrics\n".to_owned(),
        ),
        Route::BadRequest => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad request\n".to_owned(),
        ),
    };
    head_and_body(status, content_type, &body)
}

fn head_and_body(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The running listener; dropping it stops accepting (connections under way finish within
/// their timeout).
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see [`Self::local_addr`]) with the default
    /// [`ServerOptions`].
    ///
    /// # Errors
    /// [`MetricsError::Bind`] when the address cannot be listened on (in use, not local).
    pub async fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<Self, MetricsError> {
        Self::start_with(addr, metrics, ServerOptions::default()).await
    }

    /// As [`Self::start`], with these bounds.
    ///
    /// # Errors
    /// [`MetricsError::Bind`].
    pub async fn start_with(
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        options: ServerOptions,
    ) -> Result<Self, MetricsError> {
        let bind = |source| MetricsError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        tracing::info!(addr = %local, "metrics listener started");
        let task = tokio::spawn(accept_loop(listener, metrics, options));
        Ok(MetricsServer { addr: local, task })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn accept_loop(listener: TcpListener, metrics: Arc<Metrics>, options: ServerOptions) {
    let slots = Arc::new(Semaphore::new(options.max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "metrics listener: too many connections, closing");
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let served = tokio::time::timeout(options.timeout, serve(stream, &metrics, options));
            match served.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics connection failed"),
                Err(_) => tracing::debug!(%peer, "metrics connection timed out"),
            }
            drop(permit);
        });
    }
}

/// One connection: read the head, answer, close.
async fn serve(
    mut stream: TcpStream,
    metrics: &Metrics,
    options: ServerOptions,
) -> std::io::Result<()> {
    let answer = match read_head(&mut stream, options.max_request_bytes).await? {
        Head::Complete(head) => response(route(&head), || render(&metrics.snapshot())),
        Head::TooLarge => head_and_body(
            "431 Request Header Fields Too Large",
            "text/plain; charset=utf-8",
            "request too large\n",
        ),
        Head::Closed => return Ok(()),
    };
    stream.write_all(&answer).await?;
    stream.shutdown().await
}

enum Head {
    Complete(Vec<u8>),
    TooLarge,
    Closed,
}

/// Reads until the blank line that ends the head, at most `max` bytes.
async fn read_head(stream: &mut TcpStream, max: usize) -> std::io::Result<Head> {
    let mut buf = vec![0u8; max];
    let mut len = 0;
    loop {
        if let Some(end) = head_end(&buf[..len]) {
            buf.truncate(end);
            return Ok(Head::Complete(buf));
        }
        if len == max {
            return Ok(Head::TooLarge);
        }
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(Head::Closed);
        }
        len += n;
    }
}

/// Where the head ends (after `\r\n\r\n`, or `\n\n` from lenient clients).
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_are_routed_by_method_and_path() {
        let cases: [(&[u8], Route); 14] = [
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Route::Metrics),
            (b"GET /metrics HTTP/1.0\r\n\r\n", Route::Metrics),
            (b"GET /metrics?name[]=x HTTP/1.1\r\n\r\n", Route::Metrics),
            (b"GET /metrics HTTP/1.1\n\n", Route::Metrics),
            (b"GET / HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"POST /metrics HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"get /metrics HTTP/1.1\r\n\r\n", Route::NotFound),
            (b"GET /metrics\r\n\r\n", Route::BadRequest),
            (b"GET  /metrics HTTP/1.1\r\n\r\n", Route::BadRequest),
            (b"GET metrics HTTP/1.1\r\n\r\n", Route::BadRequest),
            (b"GET /metrics HTTP/2.0\r\n\r\n", Route::BadRequest),
            (b"\xff\xfe /metrics HTTP/1.1\r\n\r\n", Route::BadRequest),
            (b"", Route::BadRequest),
        ];
        for (head, want) in cases {
            assert_eq!(route(head), want, "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        let cases: [(&[u8], Option<usize>); 5] = [
            (b"GET / HTTP/1.1\r\n\r\nbody", Some(18)),
            (b"GET / HTTP/1.1\n\n", Some(16)),
            (b"GET / HTTP/1.1\r\nHost: a\r\n", None),
            (b"", None),
            (b"\n\n\r\n\r\n", Some(2)),
        ];
        for (buf, want) in cases {
            assert_eq!(head_end(buf), want, "{:?}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn answers_carry_status_type_and_length() {
        let ok = String::from_utf8(response(Route::Metrics, || "a 1\n".into())).unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("Content-Type: text/plain; version=0.0.4"),
            "{ok}"
        );
        assert!(ok.contains("Content-Length: 4\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\na 1\n"), "{ok}");
        let missing = String::from_utf8(response(Route::NotFound, || unreachable!())).unwrap();
        assert!(
            missing.starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{missing}"
        );
        let bad = String::from_utf8(response(Route::BadRequest, || unreachable!())).unwrap();
        assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad}");
    }

    proptest! {
        #[test]
        fn garbage_never_panics_and_is_never_served_metrics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let r = route(&bytes);
            if r == Route::Metrics {
                prop_assert!(bytes.starts_with(b"GET /metrics"));
            }
            let _ = head_end(&bytes);
        }
    }

    async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // The server may close before reading everything (a too-large head): ignore.
        let _ = s.write_all(request).await;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn the_listener_serves_metrics_and_survives_garbage_and_silence() {
        let options = ServerOptions {
            max_request_bytes: 256,
            timeout: Duration::from_millis(300),
            max_connections: 4,
        };
        let metrics = Arc::new(Metrics::new());
        metrics.record_in();
        let local = "127.0.0.1:0".parse().unwrap();
        let server = MetricsServer::start_with(local, metrics, options)
            .await
            .unwrap();
        let addr = server.local_addr();

        let garbage = exchange(addr, b"\x00\x01\xff garbage\r\n\r\n").await;
        assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
        let big = exchange(addr, &[b'A'; 1024]).await;
        assert!(big.is_empty() || big.starts_with("HTTP/1.1 431"), "{big}");
        // Silent clients are cut off by the timeout (read_to_end returns).
        let silent = tokio::time::timeout(Duration::from_secs(5), exchange(addr, b"GET /me")).await;
        assert_eq!(
            silent.expect("a silent client must be closed by the timeout"),
            ""
        );
        let other = exchange(addr, b"GET /other HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");

        let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("\nonceflow_source_records_total 1\n"), "{ok}");
    }
}
