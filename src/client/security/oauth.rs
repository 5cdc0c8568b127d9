//! OAUTHBEARER (RFC 7628), the client's side: the token from its source, and the one message
//! that carries it.

use super::{Secret, TokenSource};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a token command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The token, read from its source now (a file or command again at every authentication, so a
/// refreshed token is picked up on reconnect and re-authentication).
///
/// # Errors
/// What failed, naming the property to check (never the token).
pub(crate) async fn token(source: &TokenSource) -> Result<Secret, String> {
    let token = match source {
        TokenSource::Static(t) => t.expose().trim().to_owned(),
        // A token file is small and local: read it in place (tokio's fs feature is not on).
        TokenSource::File(path) => std::fs::read_to_string(path)
            .map_err(|e| {
                format!(
                    "cannot read sasl.oauthbearer.token.file {}: {e}",
                    path.display()
                )
            })?
            .trim()
            .to_owned(),
        TokenSource::Command(cmd) => {
            let run = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .kill_on_drop(true)
                .output();
            let out = tokio::time::timeout(COMMAND_TIMEOUT, run)
                .await
                .map_err(|_| {
                    format!(
                        "sasl.oauthbearer.token.command did not finish within {COMMAND_TIMEOUT:?}"
                    )
                })?
                .map_err(|e| format!("cannot run sasl.oauthbearer.token.command: {e}"))?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                return Err(format!(
                    "sasl.oauthbearer.token.command failed ({}): {}",
                    out.status,
                    stderr.lines().next().unwrap_or("").trim()
                ));
            }
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
        TokenSource::Unsecured {
            subject,
            lifetime_s,
        } => unsecured_jwt(subject, *lifetime_s, now_s()),
    };
    if token.is_empty() {
        return Err("the OAUTHBEARER token is empty".into());
    }
    if token.contains(|c: char| c.is_whitespace() || c == '\u{1}') {
        return Err("the OAUTHBEARER token contains whitespace or control characters".into());
    }
    Ok(Secret::new(token))
}

/// The client's initial response: GS2 header without authorization id, then `auth=Bearer`.
pub(crate) fn initial_response(token: &Secret) -> Vec<u8> {
    format!("n,,\u{1}auth=Bearer {}\u{1}\u{1}", token.expose()).into_bytes()
}

/// What the client answers to an error challenge (RFC 7628 3.2.3): a lone %x01, after which
/// the server fails the exchange.
pub(crate) const ERROR_ACK: &[u8] = b"\x01";

/// The error a server's challenge carries (a JSON object: `{"status":"invalid_token",...}`).
pub(crate) fn challenge_error(challenge: &[u8]) -> String {
    let text = String::from_utf8_lossy(challenge);
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => {
            let status = v
                .get("status")
                .and_then(|s| s.as_str())
                .unwrap_or("unknown");
            let scope = v.get("scope").and_then(|s| s.as_str());
            match scope {
                Some(scope) => format!("token refused: {status} (scope needed: {scope})"),
                None => format!("token refused: {status}"),
            }
        }
        Err(_) => format!(
            "token refused: {}",
            text.chars().take(200).collect::<String>()
        ),
    }
}

/// An unsigned JWT (`alg: none`) for `subject`, as Java's unsecured login module makes, for
/// brokers configured to accept them (test clusters).
pub(crate) fn unsecured_jwt(subject: &str, lifetime_s: u64, now_s: u64) -> String {
    let header = B64URL.encode(br#"{"alg":"none"}"#);
    let claims = serde_json::json!({
        "sub": subject,
        "iat": now_s,
        "exp": now_s + lifetime_s,
    });
    let payload = B64URL.encode(claims.to_string());
    format!("{header}.{payload}.")
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_response_carries_the_bearer_token() {
        assert_eq!(
            initial_response(&Secret::new("abc.def.")),
            b"n,,\x01auth=Bearer abc.def.\x01\x01"
        );
    }

    #[test]
    fn an_unsecured_jwt_has_an_unsigned_header_and_the_claims() {
        let jwt = unsecured_jwt("alice", 60, 1_000);
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2], "");
        assert_eq!(B64URL.decode(parts[0]).unwrap(), br#"{"alg":"none"}"#);
        let claims: serde_json::Value =
            serde_json::from_slice(&B64URL.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["sub"], "alice");
        assert_eq!(claims["iat"], 1_000);
        assert_eq!(claims["exp"], 1_060);
    }

    #[test]
    fn challenge_errors_name_the_status() {
        assert_eq!(
            challenge_error(br#"{"status":"invalid_token"}"#),
            "token refused: invalid_token"
        );
        assert_eq!(
            challenge_error(br#"{"status":"insufficient_scope","scope":"kafka"}"#),
            "token refused: insufficient_scope (scope needed: kafka)"
        );
        assert_eq!(challenge_error(b"nope"), "token refused: nope");
    }

    #[tokio::test]
    async fn tokens_come_from_files_and_commands_and_bad_ones_are_named() {
        let dir = std::env::temp_dir().join(format!("onceflow-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "tok.en.\n").unwrap();
        let t = token(&TokenSource::File(file.clone())).await.unwrap();
        assert_eq!(t.expose(), "tok.en.");
        let t = token(&TokenSource::Command("echo from.command.".into()))
            .await
            .unwrap();
        assert_eq!(t.expose(), "from.command.");
        let e = token(&TokenSource::Command("echo oops >&2; exit 3".into()))
            .await
            .unwrap_err();
        assert!(
            e.contains("token.command failed") && e.contains("oops"),
            "{e}"
        );
        let e = token(&TokenSource::File(dir.join("missing")))
            .await
            .unwrap_err();
        assert!(e.contains("sasl.oauthbearer.token.file"), "{e}");
        std::fs::write(&file, "two words").unwrap();
        let e = token(&TokenSource::File(file)).await.unwrap_err();
        assert!(e.contains("whitespace"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
