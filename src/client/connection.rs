//! One connection to one broker: pipelined, cancel-safe, poisoned on failure.
//!
//! The transport is anything `AsyncRead + AsyncWrite + Send + Unpin + 'static`: a TCP socket
//! ([`Connection::connect`]), a TLS stream (`connect_secured`, which also runs SASL; the writer
//! task re-authenticates, KIP-368), or an in-memory `tokio::io::duplex` in the unit
//! tests ([`Connection::over`]). Only the constructor and the two tasks are generic; the
//! [`Connection`] type is not (see its doc comment for why).
//!
//! Many requests can be in flight at once; responses are matched by correlation id. A writer
//! task owns the socket's write half, so a caller that drops its request future half way never
//! leaves half a frame on the wire. A reader task owns the read half and hands each response
//! frame to the waiting caller.
//!
//! Once anything goes wrong (read or write error, a response for a correlation id that was
//! never sent, a request timeout) the connection is *poisoned*: every request in flight and
//! every later one fails with the same [`Error::ConnectionClosed`], and the broker pool replaces
//! the connection. A half-working connection is worse than none: Kafka answers requests on one
//! connection in order, so after a lost response the order is no longer known.
//!
//! A *cancelled* request is not a failure. Its caller stopped waiting (a `select!`, a timeout
//! around `poll`, a dropped future), but the request is on the wire and the broker will answer
//! it, in order, before anything sent after it:
//! 1. caller A sends a Fetch (correlation id 5) that the broker holds for max_wait;
//! 2. A is cancelled: its [`PendingResponse`] is dropped and slot 5 becomes `Abandoned`;
//! 3. caller B sends ApiVersions (id 6) on the same connection;
//! 4. the broker answers 5, then 6. The reader finds slot 5 abandoned, reads the frame whole
//!    and discards it, then hands 6 to B.
//!
//! Until this was fixed, step 2 removed slot 5 and step 4 took the response for "a correlation
//! id nobody waits for": the connection was poisoned and B, and every other request in flight on
//! it, failed with ConnectionClosed (protocol test
//! `a_cancelled_request_does_not_fail_the_next_one_on_its_connection`).
//!
//! A request timeout still poisons, as the Java client closes the connection on one: the broker
//! did not answer in time, and nothing says it ever will. Requests the broker holds on purpose
//! get their own, longer timeout ([`PendingResponse::with_timeout`]): a Fetch its max_wait on top
//! of request.timeout.ms, a JoinGroup the rebalance timeout.

use super::error::{Error, Result};
use super::security::{self, Secured, SecurityConfig};
use crate::protocol::frame::{self, FrameError};
use crate::protocol::produce_frame;
use crate::protocol::versions::ApiVersions;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, ProduceRequest, SaslAuthenticateRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use std::collections::HashMap;
use std::io::IoSlice;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, debug_span, Instrument};

type Waiter = oneshot::Sender<Result<Bytes>>;

/// A request on the wire, by correlation id.
enum Slot {
    /// Someone waits for the response.
    Waiting(Waiter),
    /// The caller was cancelled; the response will still come and is discarded.
    Abandoned,
}

struct Pending {
    waiters: HashMap<i32, Slot>,
    /// Set once; the reason every later request fails.
    poisoned: Option<String>,
}

struct Shared {
    addr: String,
    pending: Mutex<Pending>,
    /// The next correlation id (here, not in [`Connection`], because the writer task sends
    /// requests of its own: SASL re-authentication).
    next_correlation_id: AtomicI32,
    /// A SASL session the broker limits in time (KIP-368): the writer re-authenticates before
    /// writing past its deadline. None: no SASL, or a session without an end.
    session: Mutex<Option<Session>>,
    /// Re-authentications done (KIP-368).
    reauthentications: AtomicU64,
}

/// What the writer needs to re-authenticate.
struct Session {
    /// Re-authenticate before writing anything after this.
    reauth_at: Instant,
    security: Arc<SecurityConfig>,
    client_id: String,
    request_timeout: Duration,
    /// SaslAuthenticate's version.
    version: i16,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        // A panic while holding this lock would be a bug in this module; recover the data
        // rather than cascade the panic into every caller.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails everything in flight and refuses everything after.
    fn poison(&self, reason: String) {
        let waiters = {
            let mut p = self.lock();
            if p.poisoned.is_none() {
                debug!(broker = %self.addr, %reason, "connection poisoned");
                p.poisoned = Some(reason.clone());
            }
            std::mem::take(&mut p.waiters)
        };
        let reason = self.lock().poisoned.clone().unwrap_or(reason);
        for (_, slot) in waiters {
            if let Slot::Waiting(w) = slot {
                let _ = w.send(Err(Error::ConnectionClosed {
                    broker: self.addr.clone(),
                    reason: reason.clone(),
                }));
            }
        }
    }

    fn next_correlation_id(&self) -> i32 {
        self.next_correlation_id.fetch_add(1, Ordering::Relaxed) & i32::MAX
    }

    /// Registers a waiter for `correlation_id`, unless the connection is poisoned.
    fn register(&self, correlation_id: i32) -> Result<oneshot::Receiver<Result<Bytes>>> {
        let mut p = self.lock();
        if let Some(reason) = &p.poisoned {
            return Err(Error::ConnectionClosed {
                broker: self.addr.clone(),
                reason: reason.clone(),
            });
        }
        let (tx, rx) = oneshot::channel();
        p.waiters.insert(correlation_id, Slot::Waiting(tx));
        Ok(rx)
    }

    fn closed_error(&self) -> Option<Error> {
        self.lock()
            .poisoned
            .as_ref()
            .map(|reason| Error::ConnectionClosed {
                broker: self.addr.clone(),
                reason: reason.clone(),
            })
    }
}

/// A request on the wire whose response has not been read yet. Dropping it (a cancelled
/// caller) abandons the slot: the response, when it comes, is read and discarded, and the
/// connection goes on serving the requests sent after it.
pub struct PendingResponse<R: Request> {
    shared: Arc<Shared>,
    rx: oneshot::Receiver<Result<Bytes>>,
    correlation_id: i32,
    version: i16,
    timeout: Duration,
    _request: std::marker::PhantomData<fn() -> R>,
}

impl<R: Request> Drop for PendingResponse<R> {
    fn drop(&mut self) {
        // Still in the map means the response has not been read: leave a marker so that the
        // reader knows the frame is expected. Gone means it was delivered (or the connection
        // was poisoned); nothing to do.
        if let Some(slot) = self.shared.lock().waiters.get_mut(&self.correlation_id) {
            *slot = Slot::Abandoned;
        }
    }
}

impl<R: Request> PendingResponse<R> {
    /// Waits at most `timeout` for this response instead of the connection's request.timeout.ms:
    /// for requests the broker holds on purpose (a Fetch for max_wait, a JoinGroup until the
    /// group has rejoined), which must not be cut short, or the connection poisoned, by the
    /// default.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// let version = conn.version_for::<ListGroupsRequest>(None)?;
    /// let pending = conn.start_request(&ListGroupsRequest::default(), version)?;
    /// let answer = pending.with_timeout(std::time::Duration::from_secs(120)).response().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Waits for the response (at most request.timeout.ms) and decodes it.
    ///
    /// # Errors
    /// [`Error::ConnectionClosed`] (also for a response that cannot be decoded, which poisons
    /// the connection) or [`Error::Timeout`] (which poisons it too).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// let version = conn.version_for::<ListGroupsRequest>(None)?;
    /// let pending = conn.start_request(&ListGroupsRequest::default(), version)?;
    /// // ... other work while the request is on its way ...
    /// let answer = pending.response().await?;
    /// println!("{} groups", answer.groups.len());
    /// # Ok(()) }
    /// ```
    pub async fn response(mut self) -> Result<R::Response> {
        let api = frame::api_key::<R>();
        let addr = self.shared.addr.clone();
        let frame = match tokio::time::timeout(self.timeout, &mut self.rx).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => {
                return Err(self
                    .shared
                    .closed_error()
                    .unwrap_or(Error::ConnectionClosed {
                        broker: addr,
                        reason: "reader stopped".into(),
                    }))
            }
            Err(_) => {
                let what = format!("{api:?} request to broker {addr}");
                self.shared.poison(format!("{what} timed out"));
                return Err(Error::Timeout {
                    what,
                    after: self.timeout,
                });
            }
        };
        // An undecodable response is handled as a lost connection, as the Java client does:
        // the bytes may be damaged anywhere, so nothing more read from this connection can be
        // trusted. It is poisoned (every request on it fails as closed with this reason) and
        // the caller gets ConnectionClosed, which every caller retries under its usual rules
        // (a produce as a request whose answer was lost, which idempotence makes safe to send
        // again), rather than a protocol error that would fail this request alone for good.
        let (_, body) = frame::decode_response::<R>(frame, self.version).map_err(|e| {
            let reason = e.to_string();
            self.shared.poison(reason.clone());
            Error::ConnectionClosed {
                broker: addr.clone(),
                reason,
            }
        })?;
        Ok(body)
    }
}

/// A connection to one broker.
///
/// Not generic over its transport, although it runs over any: callers never touch the
/// transport, only the writer task (through a channel of encoded frames) and the reader task
/// (through the pending map) do, so the transport type is fixed when those two tasks are
/// spawned, each monomorphised for its half. A type parameter on `Connection` would have
/// spread into the broker pool, the producer, the consumer and every signature that holds a
/// connection, and boxing the halves (`Box<dyn AsyncRead>`) would have put a virtual call on
/// every read and write; this way the hot path is exactly what it was for TCP (no allocation
/// or indirection per request beyond the frame buffer and the waiter), and TCP keeps its
/// lock-free `into_split` halves.
pub struct Connection {
    shared: Arc<Shared>,
    writer: mpsc::UnboundedSender<OutFrame>,
    client_id: String,
    request_timeout: Duration,
    versions: ApiVersions,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("broker", &self.shared.addr)
            .finish()
    }
}

impl Connection {
    /// Connects, negotiates API versions, and returns a ready connection.
    ///
    /// # Errors
    /// [`Error::Io`] when the TCP connect fails, [`Error::Timeout`] when it takes longer than
    /// `connect_timeout`, or an error from the ApiVersions exchange.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// use onceflow::client::connection::Connection;
    /// use std::time::Duration;
    /// // One plaintext connection, outside any broker pool.
    /// let conn = Connection::connect("127.0.0.1:9092", "ops-tool", Duration::from_secs(10), Duration::from_secs(30)).await?;
    /// let answer = conn.request(&ListGroupsRequest::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(
        addr: &str,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Connection> {
        let span = debug_span!("connect", broker = %addr);
        async {
            let stream = tcp_connect(addr, connect_timeout).await?;
            let (read, write) = stream.into_split();
            Self::start(read, write, addr, client_id, request_timeout).await
        }
        .instrument(span)
        .await
    }

    /// Connects as `secured` says (TCP, then TLS for SSL and SASL_SSL, then ApiVersions, then
    /// SASL for SASL_PLAINTEXT and SASL_SSL), and returns a ready connection.
    ///
    /// # Errors
    /// As [`Self::connect`], and [`Error::Tls`] or [`Error::Authentication`] (both fatal).
    pub(crate) async fn connect_secured(
        addr: &str,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
        secured: &Secured,
    ) -> Result<Connection> {
        if secured.tls.is_none() && !secured.config.protocol.sasl() {
            return Self::connect(addr, client_id, connect_timeout, request_timeout).await;
        }
        let span =
            debug_span!("connect", broker = %addr, security = secured.config.protocol.as_str());
        async {
            // socket.connection.setup.timeout.ms bounds the TCP connect and the TLS handshake
            // together, as in the Java client.
            let deadline = tokio::time::Instant::now() + connect_timeout;
            let stream = tcp_connect(addr, connect_timeout).await?;
            let conn = match &secured.tls {
                None => {
                    let (read, write) = stream.into_split();
                    Self::start(read, write, addr, client_id, request_timeout).await?
                }
                Some(tls) => {
                    let host = host_of(addr);
                    let tls_stream = tokio::time::timeout_at(deadline, tls.connect(stream, host))
                        .await
                        .map_err(|_| Error::Timeout {
                            what: format!("the TLS handshake with broker {addr}"),
                            after: connect_timeout,
                        })?
                        .map_err(|message| Error::Tls {
                            broker: addr.to_owned(),
                            message,
                        })?;
                    let (read, write) = tokio::io::split(tls_stream);
                    Self::start(read, write, addr, client_id, request_timeout)
                        .await
                        .map_err(|e| not_this_listener(e, secured))?
                }
            };
            if secured.config.protocol.sasl() {
                conn.authenticate(&secured.config)
                    .await
                    .map_err(|e| not_this_listener(e, secured))?;
            }
            Ok(conn)
        }
        .instrument(span)
        .await
    }

    /// SASL authentication, and the session's re-authentication deadline if the broker sets
    /// one.
    async fn authenticate(&self, security: &SecurityConfig) -> Result<()> {
        let version = self.version_for::<SaslAuthenticateRequest>(Some(2))?;
        let lifetime = security::sasl::authenticate(&mut &*self, security, version).await?;
        if let (Some(lifetime), false) = (lifetime, security.skip_reauthentication) {
            *self
                .shared
                .session
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(Session {
                reauth_at: Instant::now() + security::sasl::reauth_after(lifetime),
                security: Arc::new(security.clone()),
                client_id: self.client_id.clone(),
                request_timeout: self.request_timeout,
                version,
            });
        }
        Ok(())
    }

    /// Runs a connection over an already-open transport (a TLS stream, an in-memory duplex in
    /// tests): negotiates API versions and returns a ready connection. `addr` only names the
    /// broker in errors and logs.
    ///
    /// # Errors
    /// An error from the ApiVersions exchange.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use onceflow::client::connection::Connection;
    /// use std::time::Duration;
    /// // Any AsyncRead + AsyncWrite stream: a TCP stream opened (or tunnelled) by the caller.
    /// let stream = tokio::net::TcpStream::connect("127.0.0.1:9092").await?;
    /// let conn = Connection::over(stream, "127.0.0.1:9092", "ops-tool", Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn over<T>(
        transport: T,
        addr: &str,
        client_id: &str,
        request_timeout: Duration,
    ) -> Result<Connection>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (read, write) = tokio::io::split(transport);
        Self::start(read, write, addr, client_id, request_timeout)
            .instrument(debug_span!("connect", broker = %addr))
            .await
    }

    /// Spawns the writer and reader tasks over the two halves, then negotiates versions.
    async fn start<R, W>(
        read: R,
        write: W,
        addr: &str,
        client_id: &str,
        request_timeout: Duration,
    ) -> Result<Connection>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let shared = Arc::new(Shared {
            addr: addr.to_owned(),
            pending: Mutex::new(Pending {
                waiters: HashMap::new(),
                poisoned: None,
            }),
            next_correlation_id: AtomicI32::new(0),
            session: Mutex::new(None),
            reauthentications: AtomicU64::new(0),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(write, rx, shared.clone()));
        tokio::spawn(read_loop(read, shared.clone()));
        let mut conn = Connection {
            shared,
            writer: tx,
            client_id: client_id.to_owned(),
            request_timeout,
            versions: ApiVersions::default(),
        };
        conn.versions = conn.negotiate().await?;
        Ok(conn)
    }

    /// ApiVersions v3 first (it carries finalized features); a broker too old for it answers
    /// UNSUPPORTED_VERSION, and then v0 is used.
    async fn negotiate(&self) -> Result<ApiVersions> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("onceflow"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let resp: ApiVersionsResponse = self.request_at(&req, 3).await?;
        if resp.error_code == 35 {
            let resp: ApiVersionsResponse = self.request_at(&req, 0).await?;
            return Ok(ApiVersions::from_response(&resp));
        }
        crate::protocol::ErrorCode::check(resp.error_code)
            .map_err(|code| Error::broker(format!("ApiVersions from {}", self.addr()), code))?;
        Ok(ApiVersions::from_response(&resp))
    }

    /// host:port of the broker.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(conn: &onceflow::client::connection::Connection) {
    /// println!("connected to {}", conn.addr());
    /// # }
    /// ```
    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// What the broker supports.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(conn: &onceflow::client::connection::Connection) {
    /// use kafka_protocol::messages::ApiKey;
    /// println!("{} answers Produce v{:?}", conn.addr(), conn.versions().broker_range(ApiKey::Produce as i16));
    /// # }
    /// ```
    pub fn versions(&self) -> &ApiVersions {
        &self.versions
    }

    /// request.timeout.ms: how long a response may take unless the request sets its own.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// // Twice the usual patience for one request.
    /// let patience = conn.request_timeout() * 2;
    /// conn.request_with_timeout(&ListGroupsRequest::default(), patience).await?;
    /// # Ok(()) }
    /// ```
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The version to send `R` at in a KIP-890 (transaction.version 2) transaction: `needed`
    /// or more. A broker that offers less has not caught up with the cluster's features (it
    /// has just restarted): the connection is retired, so the retry reconnects and negotiates
    /// again, rather than sending a classic-protocol request in the middle of a KIP-890
    /// transaction.
    ///
    /// # Errors
    /// [`Error::ConnectionClosed`] (retriable) when the broker offers less than `needed`.
    pub(crate) fn tv2_version_for<R: Request>(&self, needed: i16) -> Result<i16> {
        let v = self.version_for::<R>(None)?;
        if v >= needed {
            return Ok(v);
        }
        Err(self.retire_stale(format!(
            "it offers {:?} v{v} but the transaction uses transaction.version 2 (v{needed}): it has not caught up with the cluster's features yet (just restarted?)",
            frame::api_key::<R>()
        )))
    }

    /// Retires a connection whose ApiVersions answer is stale (a broker that had not caught up
    /// with the cluster's features when it answered, e.g. just restarted): every request on it
    /// fails as closed, so the next attempt reconnects and negotiates again. Returns that
    /// error, naming `reason`.
    pub(crate) fn retire_stale(&self, reason: String) -> Error {
        self.shared.poison(reason.clone());
        Error::ConnectionClosed {
            broker: self.addr().to_owned(),
            reason,
        }
    }

    /// How many times this connection re-authenticated because its SASL session was ending
    /// (KIP-368, brokers with `connections.max.reauth.ms`).
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(conn: &onceflow::client::connection::Connection) {
    /// println!("{}: re-authenticated {} times", conn.addr(), conn.reauthentications());
    /// # }
    /// ```
    pub fn reauthentications(&self) -> u64 {
        self.shared.reauthentications.load(Ordering::Relaxed)
    }

    /// Whether the connection has failed and must be replaced.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(conn: &onceflow::client::connection::Connection) {
    /// if conn.is_poisoned() {
    ///     // Every request on it fails: get a new one from the Cluster (cluster.broker(node)).
    /// }
    /// # }
    /// ```
    pub fn is_poisoned(&self) -> bool {
        self.shared.lock().poisoned.is_some()
    }

    /// Picks the highest version of `R` both sides support.
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] when there is none.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// // At most v4 (the caller fills only v4's fields), lower if the broker is older.
    /// let version = conn.version_for::<ListGroupsRequest>(Some(4))?;
    /// let answer = conn.request_at(&ListGroupsRequest::default(), version).await?;
    /// # Ok(()) }
    /// ```
    pub fn version_for<R: Request>(&self, cap: Option<i16>) -> Result<i16> {
        self.versions
            .version_for::<R>(cap)
            .ok_or_else(|| Error::UnsupportedVersion {
                broker: self.addr().to_owned(),
                api: format!("{:?}", frame::api_key::<R>()),
            })
    }

    /// Sends `req` at the highest common version and waits for its response.
    ///
    /// # Errors
    /// [`Error::ConnectionClosed`], [`Error::Timeout`] (which also poisons the connection), or
    /// a decode error. Error codes inside the response are the caller's to inspect.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// use onceflow::protocol::ErrorCode;
    /// let answer = conn.request(&ListGroupsRequest::default()).await?;
    /// if answer.error_code != 0 {
    ///     println!("refused: {:?}", ErrorCode(answer.error_code));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn request<R: Request>(&self, req: &R) -> Result<R::Response> {
        let version = self.version_for::<R>(None)?;
        self.request_at(req, version).await
    }

    /// As [`Self::request`] at a given version.
    ///
    /// # Errors
    /// As [`Self::request`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// use kafka_protocol::protocol::StrBytes;
    /// // The states filter exists from v4: the version decides what the request can say.
    /// let version = conn.version_for::<ListGroupsRequest>(None)?;
    /// let mut req = ListGroupsRequest::default();
    /// if version >= 4 {
    ///     req = req.with_states_filter(vec![StrBytes::from_static_str("Stable")]);
    /// }
    /// let answer = conn.request_at(&req, version).await?;
    /// # Ok(()) }
    /// ```
    pub async fn request_at<R: Request>(&self, req: &R, version: i16) -> Result<R::Response> {
        self.start_request(req, version)?.response().await
    }

    /// As [`Self::request`], waiting up to `timeout` rather than request.timeout.ms (see
    /// [`PendingResponse::with_timeout`]).
    ///
    /// # Errors
    /// As [`Self::request`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// let answer = conn.request_with_timeout(&ListGroupsRequest::default(), std::time::Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn request_with_timeout<R: Request>(
        &self,
        req: &R,
        timeout: Duration,
    ) -> Result<R::Response> {
        let version = self.version_for::<R>(None)?;
        self.start_request(req, version)?
            .with_timeout(timeout)
            .response()
            .await
    }

    /// Puts the request on the wire now and returns a handle for its response.
    ///
    /// Requests started one after the other from one task reach the broker in that order,
    /// which is what keeps a partition's batches in sequence order when several are in flight;
    /// `request` from several spawned tasks would not guarantee it.
    ///
    /// # Errors
    /// [`Error::ConnectionClosed`] when the connection has failed, or an encoding error.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(conn: std::sync::Arc<onceflow::client::connection::Connection>) -> onceflow::client::Result<()> {
    /// use kafka_protocol::messages::ListGroupsRequest;
    /// let version = conn.version_for::<ListGroupsRequest>(None)?;
    /// // Both on the wire, in this order, before either answer is awaited.
    /// let first = conn.start_request(&ListGroupsRequest::default(), version)?;
    /// let second = conn.start_request(&ListGroupsRequest::default(), version)?;
    /// let (a, b) = (first.response().await?, second.response().await?);
    /// # Ok(()) }
    /// ```
    pub fn start_request<R: Request>(&self, req: &R, version: i16) -> Result<PendingResponse<R>> {
        let correlation_id = self.next_correlation_id();
        let mut buf = BytesMut::new();
        frame::encode_request(&mut buf, correlation_id, &self.client_id, version, req)?;
        self.start_frame(OutFrame::Whole(buf), correlation_id, version)
    }

    /// Sends a request that the broker will not answer (Produce with acks=0).
    ///
    /// # Errors
    /// [`Error::ConnectionClosed`] when the connection has failed.
    pub fn send_no_response<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        let correlation_id = self.next_correlation_id();
        let mut buf = BytesMut::new();
        frame::encode_request(&mut buf, correlation_id, &self.client_id, version, req)?;
        self.send_out(OutFrame::Whole(buf), correlation_id, false)
            .map(|_| ())
    }

    /// Starts a Produce request like [`Self::start_request`], sharing the record batches'
    /// bytes with the frame instead of copying them into it (`protocol::produce_frame`).
    ///
    /// # Errors
    /// As [`Self::start_request`].
    pub fn start_produce(
        &self,
        req: &ProduceRequest,
        version: i16,
    ) -> Result<PendingResponse<ProduceRequest>> {
        let correlation_id = self.next_correlation_id();
        let Some(chunks) =
            produce_frame::encode_produce_frame(correlation_id, &self.client_id, version, req)?
        else {
            return self.start_request(req, version);
        };
        self.start_frame(OutFrame::Chunks(chunks), correlation_id, version)
    }

    /// Queues an encoded request frame and returns the wait for its response.
    fn start_frame<R: Request>(
        &self,
        frame: OutFrame,
        correlation_id: i32,
        version: i16,
    ) -> Result<PendingResponse<R>> {
        let rx = self
            .send_out(frame, correlation_id, true)?
            .ok_or_else(|| Error::Internal("expected a response waiter".into()))?;
        Ok(PendingResponse {
            shared: self.shared.clone(),
            rx,
            correlation_id,
            version,
            timeout: self.request_timeout,
            _request: std::marker::PhantomData,
        })
    }

    fn next_correlation_id(&self) -> i32 {
        self.shared.next_correlation_id()
    }

    /// Registers the response waiter (if any) and queues the frame for the writer, in that
    /// order: a response can never arrive before its waiter exists.
    fn send_out(
        &self,
        frame: OutFrame,
        correlation_id: i32,
        expect_response: bool,
    ) -> Result<Option<oneshot::Receiver<Result<Bytes>>>> {
        let rx = match expect_response {
            true => Some(self.shared.register(correlation_id)?),
            false => {
                if let Some(e) = self.shared.closed_error() {
                    return Err(e);
                }
                None
            }
        };
        if self.writer.send(frame).is_err() {
            self.shared.poison("writer stopped".into());
            return Err(self
                .shared
                .closed_error()
                .unwrap_or(Error::ConnectionClosed {
                    broker: self.addr().to_owned(),
                    reason: "writer stopped".into(),
                }));
        }
        Ok(rx)
    }
}

/// A TCP connection to `addr` within `connect_timeout`, Nagle off.
async fn tcp_connect(addr: &str, connect_timeout: Duration) -> Result<TcpStream> {
    let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| Error::Timeout {
            what: format!("connecting to broker {addr}"),
            after: connect_timeout,
        })?
        .map_err(|e| Error::Io {
            broker: addr.to_owned(),
            message: e.to_string(),
        })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The host of `host:port` (`[v6]:port` too), for TLS's server name.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// A connection closed right after TLS or during SASL is how a broker answers a client that
/// speaks the wrong protocol to a listener: say so.
fn not_this_listener(e: Error, secured: &Secured) -> Error {
    match e {
        Error::ConnectionClosed { broker, reason } => Error::ConnectionClosed {
            reason: format!(
                "{reason} (while setting up {}: does this listener expect security.protocol={}? check the port and security.protocol)",
                secured.config.protocol.as_str(),
                secured.config.protocol.as_str()
            ),
            broker,
        },
        other => other,
    }
}

impl security::sasl::SaslChannel for &Connection {
    fn broker(&self) -> &str {
        self.addr()
    }

    async fn call<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        self.request_at(req, version).await
    }
}

/// The writer task's own requests (re-authentication): written straight to the socket between
/// two queued frames, their responses read by the reader task like any other.
struct WriterChannel<'a, W: AsyncWrite + Unpin> {
    w: &'a mut BufWriter<W>,
    shared: &'a Arc<Shared>,
    client_id: &'a str,
    timeout: Duration,
}

impl<W: AsyncWrite + Send + Unpin> security::sasl::SaslChannel for WriterChannel<'_, W> {
    fn broker(&self) -> &str {
        &self.shared.addr
    }

    async fn call<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        let correlation_id = self.shared.next_correlation_id();
        let mut buf = BytesMut::new();
        frame::encode_request(&mut buf, correlation_id, self.client_id, version, req)?;
        let rx = self.shared.register(correlation_id)?;
        let io = |e: std::io::Error| Error::Io {
            broker: self.shared.addr.clone(),
            message: e.to_string(),
        };
        self.w.write_all(&buf).await.map_err(io)?;
        self.w.flush().await.map_err(io)?;
        let frame = tokio::time::timeout(self.timeout, rx)
            .await
            .map_err(|_| Error::Timeout {
                what: format!("re-authentication with broker {}", self.shared.addr),
                after: self.timeout,
            })?
            .map_err(|_| Error::ConnectionClosed {
                broker: self.shared.addr.clone(),
                reason: "reader stopped".into(),
            })??;
        Ok(frame::decode_response::<R>(frame, version)?.1)
    }
}

/// Re-authenticates (KIP-368) if the session's deadline has passed; the writer calls it before
/// writing. Frames queued meanwhile wait in the channel; responses to requests already on the
/// wire keep coming and the reader hands them out as usual.
async fn reauthenticate_if_due<W: AsyncWrite + Send + Unpin>(
    w: &mut BufWriter<W>,
    shared: &Arc<Shared>,
) -> Result<()> {
    let due = {
        let session = shared.session.lock().unwrap_or_else(|p| p.into_inner());
        match session.as_ref() {
            Some(s) if Instant::now() >= s.reauth_at => Some((
                s.security.clone(),
                s.client_id.clone(),
                s.request_timeout,
                s.version,
            )),
            _ => None,
        }
    };
    let Some((security, client_id, timeout, version)) = due else {
        return Ok(());
    };
    let mut chan = WriterChannel {
        w,
        shared,
        client_id: &client_id,
        timeout,
    };
    let lifetime = security::sasl::authenticate(&mut chan, &security, version).await?;
    shared.reauthentications.fetch_add(1, Ordering::Relaxed);
    debug!(broker = %shared.addr, ?lifetime, "re-authenticated");
    let mut session = shared.session.lock().unwrap_or_else(|p| p.into_inner());
    match (lifetime, session.as_mut()) {
        (Some(l), Some(s)) => s.reauth_at = Instant::now() + security::sasl::reauth_after(l),
        _ => *session = None,
    }
    Ok(())
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Ends the writer task, which shuts the socket down, which ends the reader.
        self.shared.poison("connection dropped".into());
    }
}

async fn write_loop<W: AsyncWrite + Send + Unpin>(
    write: W,
    mut rx: mpsc::UnboundedReceiver<OutFrame>,
    shared: Arc<Shared>,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, write);
    while let Some(frame) = rx.recv().await {
        if let Err(e) = reauthenticate_if_due(&mut w, &shared).await {
            shared.poison(format!("re-authentication failed: {e}"));
            return;
        }
        if let Err(e) = frame.write_to(&mut w).await {
            shared.poison(format!("write failed: {e}"));
            return;
        }
        // Coalesce whatever else is queued into the same flush.
        while let Ok(frame) = rx.try_recv() {
            if let Err(e) = frame.write_to(&mut w).await {
                shared.poison(format!("write failed: {e}"));
                return;
            }
        }
        if let Err(e) = w.flush().await {
            shared.poison(format!("write failed: {e}"));
            return;
        }
        if shared.lock().poisoned.is_some() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

/// A request frame for the writer: one buffer, or chunks that share the record batches' bytes
/// (`protocol::produce_frame`). Chunks of 64 KiB or more go past the write buffer to the
/// socket; smaller ones are gathered in it.
pub(crate) enum OutFrame {
    Whole(BytesMut),
    Chunks(Vec<Bytes>),
}

impl OutFrame {
    async fn write_to<W: AsyncWrite + Unpin>(&self, w: &mut W) -> std::io::Result<()> {
        match self {
            OutFrame::Whole(buf) => w.write_all(buf).await,
            OutFrame::Chunks(chunks) => {
                // One gathering write for the whole frame where the socket takes it (a write
                // per chunk doubled the system time of a 1 KiB produce run).
                let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
                let mut rest = &mut slices[..];
                while !rest.is_empty() {
                    let n = w.write_vectored(rest).await?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::WriteZero.into());
                    }
                    IoSlice::advance_slices(&mut rest, n);
                }
                Ok(())
            }
        }
    }
}

async fn read_loop<R: AsyncRead + Send + Unpin>(mut read: R, shared: Arc<Shared>) {
    let reason = loop {
        let mut prefix = [0u8; 4];
        if let Err(e) = read.read_exact(&mut prefix).await {
            break format!("read failed: {e}");
        }
        let len = match frame::frame_length(prefix) {
            Ok(len) => len,
            Err(e) => break e.to_string(),
        };
        match read_body(&mut read, len).await {
            Ok(body) => {
                let Some(cid) = frame::peek_correlation_id(&body) else {
                    break FrameError::BadLength(len as i64).to_string();
                };
                let waiter = shared.lock().waiters.remove(&cid);
                match waiter {
                    Some(Slot::Waiting(w)) => {
                        let _ = w.send(Ok(body));
                    }
                    // Its caller was cancelled: the frame was read whole, so the stream is
                    // still in step. Drop it and go on (see the module comment).
                    Some(Slot::Abandoned) => {
                        debug!(broker = %shared.addr, correlation_id = cid, "discarded the response to a cancelled request");
                    }
                    // A response for a request never sent, or whose caller timed out (and
                    // poisoned us already): the broker is confused or we are. Stop trusting
                    // the stream.
                    None => {
                        if shared.lock().poisoned.is_some() {
                            return;
                        }
                        break format!("response with unknown correlation id {cid}");
                    }
                }
            }
            Err(e) => break format!("read failed: {e}"),
        }
        if shared.lock().poisoned.is_some() {
            return;
        }
    };
    shared.poison(reason);
}

/// Reads `len` bytes, growing the buffer as bytes arrive rather than trusting `len` up front.
async fn read_body<R: AsyncRead + Unpin>(read: &mut R, len: usize) -> std::io::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(len.min(1024 * 1024));
    while buf.len() < len {
        let want = (len - buf.len()).min(4 * 1024 * 1024);
        buf.reserve(want);
        let n = (&mut *read).take(want as u64).read_buf(&mut buf).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "broker closed the connection mid-frame",
            ));
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
#[path = "connection_tests.rs"]
mod tests;
