//! SASL over a Kafka connection (KIP-152): SaslHandshake v1 names the mechanism, then the
//! mechanism's messages travel in SaslAuthenticate requests, framed like any other request.
//!
//! The broker's session lifetime (SaslAuthenticate v1+, set when it has
//! `connections.max.reauth.ms`) comes back to the caller, who re-authenticates before it ends
//! (KIP-368; the connection's writer does it between two requests).

use super::oauth;
use super::scram::{self, Hash, ScramClient};
use super::{SaslMechanism, SecurityConfig};
use crate::client::error::{Error, Result};
use crate::protocol::ErrorCode;
use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use std::time::Duration;
use tracing::debug;

/// Where the SASL requests go: the connection itself for the first authentication, the
/// connection's writer task for a re-authentication (KIP-368).
pub(crate) trait SaslChannel {
    /// host:port, for errors.
    fn broker(&self) -> &str;
    /// Sends `req` at `version` and waits for its response.
    async fn call<R: Request>(&mut self, req: &R, version: i16) -> Result<R::Response>;
}

/// Authenticates over `chan` as `sec` says (SaslAuthenticate at `version`). Returns the
/// session's lifetime when the broker limits it (re-authenticate before it ends), None
/// otherwise.
///
/// # Errors
/// [`Error::Authentication`] (fatal: a wrong password does not get better by retrying) naming
/// the mechanism and the user; a connection error (retriable) if the connection fails.
pub(crate) async fn authenticate<C: SaslChannel>(
    chan: &mut C,
    sec: &SecurityConfig,
    version: i16,
) -> Result<Option<Duration>> {
    let mechanism = sec.mechanism;
    let broker = chan.broker().to_owned();
    let fail = |message: String| Error::Authentication {
        broker: broker.clone(),
        mechanism: mechanism.as_str(),
        who: sec.who(),
        message,
    };
    let handshake = SaslHandshakeRequest::default()
        .with_mechanism(StrBytes::from_static_str(mechanism.as_str()));
    let resp = chan.call(&handshake, 1).await?;
    if resp.error_code != 0 {
        let enabled: Vec<String> = resp.mechanisms.iter().map(|m| m.to_string()).collect();
        return Err(fail(match ErrorCode(resp.error_code) {
            ErrorCode::UNSUPPORTED_SASL_MECHANISM => format!(
                "the broker does not enable {} on this listener (it enables: {}); set sasl.mechanism to one of them",
                mechanism.as_str(),
                enabled.join(", ")
            ),
            code => format!("SaslHandshake refused: {code}"),
        }));
    }
    let (mut exchange, mut to_send) = Exchange::start(sec).await.map_err(&fail)?;
    loop {
        let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(to_send));
        let resp: SaslAuthenticateResponse = chan.call(&req, version).await?;
        if resp.error_code != 0 {
            let said = resp
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .filter(|m| !m.is_empty());
            let code = ErrorCode(resp.error_code);
            return Err(fail(match (code, said) {
                (ErrorCode::SASL_AUTHENTICATION_FAILED, Some(m)) => {
                    format!("{m}; check the user name and password (or token)")
                }
                (ErrorCode::SASL_AUTHENTICATION_FAILED, None) => {
                    "authentication failed; check the user name and password (or token)".into()
                }
                (code, Some(m)) => format!("{code}: {m}"),
                (code, None) => format!("{code}"),
            }));
        }
        match exchange.next(&resp.auth_bytes).map_err(&fail)? {
            Next::Send(bytes) => to_send = bytes,
            Next::Done => {
                let lifetime = (resp.session_lifetime_ms > 0)
                    .then(|| Duration::from_millis(resp.session_lifetime_ms as u64));
                debug!(mechanism = mechanism.as_str(), ?lifetime, "authenticated");
                return Ok(lifetime);
            }
        }
    }
}

/// When to re-authenticate a session of `lifetime`: at 85 % of it plus up to 10 % jitter, as
/// the Java client does (so that many connections do not re-authenticate at once, and the
/// exchange ends before the broker's clock, which started before ours, runs out).
pub(crate) fn reauth_after(lifetime: Duration) -> Duration {
    use rand::Rng;
    let share = 0.85 + rand::rng().random_range(0.0..0.10);
    lifetime.mul_f64(share)
}

/// What the mechanism does next.
enum Next {
    Send(Vec<u8>),
    Done,
}

/// One mechanism's exchange, a state machine fed the broker's messages.
enum Exchange {
    Plain,
    Scram(Box<ScramClient>),
    OAuth {
        /// The broker sent an error challenge and we acknowledged it: the next answer fails.
        refused: Option<String>,
    },
}

impl Exchange {
    /// The mechanism's state and its first message.
    async fn start(sec: &SecurityConfig) -> std::result::Result<(Exchange, Vec<u8>), String> {
        let user = sec.username.clone().unwrap_or_default();
        let password = sec.password.as_ref().map(|p| p.expose()).unwrap_or("");
        Ok(match sec.mechanism {
            SaslMechanism::Plain => {
                // RFC 4616: [authzid] NUL authcid NUL passwd.
                let mut msg = Vec::with_capacity(user.len() + password.len() + 2);
                msg.push(0);
                msg.extend_from_slice(user.as_bytes());
                msg.push(0);
                msg.extend_from_slice(password.as_bytes());
                (Exchange::Plain, msg)
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let hash = match sec.mechanism {
                    SaslMechanism::ScramSha512 => Hash::Sha512,
                    _ => Hash::Sha256,
                };
                let (client, first) = ScramClient::first(hash, &user, password, scram::nonce());
                (Exchange::Scram(Box::new(client)), first)
            }
            SaslMechanism::OAuthBearer => {
                let source = sec
                    .token
                    .as_ref()
                    .ok_or("no OAUTHBEARER token configured")?;
                let token = oauth::token(source).await?;
                (
                    Exchange::OAuth { refused: None },
                    oauth::initial_response(&token),
                )
            }
        })
    }

    /// Takes the broker's answer to the last message.
    fn next(&mut self, answer: &[u8]) -> std::result::Result<Next, String> {
        match self {
            Exchange::Plain => Ok(Next::Done),
            Exchange::Scram(client) => Ok(match client.next(answer)? {
                Some(final_message) => Next::Send(final_message),
                None => Next::Done,
            }),
            Exchange::OAuth { refused, .. } => {
                if let Some(why) = refused.take() {
                    return Err(why);
                }
                if answer.is_empty() {
                    return Ok(Next::Done);
                }
                // An error challenge: acknowledge it; the broker then fails the exchange (and
                // its error message is what we report, or this one if it says nothing).
                *refused = Some(oauth::challenge_error(answer));
                Ok(Next::Send(oauth::ERROR_ACK.to_vec()))
            }
        }
    }
}
