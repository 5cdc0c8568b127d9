//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the client's side, as Kafka speaks
//! it: no channel binding (`n,,`), no authorization id.
//!
//! A pure state machine, [`ScramClient`]: `first` gives the client-first message, `respond`
//! takes the server-first and gives the client-final, `verify` checks the server's signature
//! (the broker proves it knows the password too; a server that cannot is refused).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};

/// The fewest PBKDF2 iterations accepted from a server, as the Java client's minimum: fewer
/// would make a stolen exchange cheap to brute-force.
pub(crate) const MIN_ITERATIONS: u32 = 4096;

/// SHA-256 or SHA-512.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    fn hmac(self, key: &[u8], msg: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length, so `new_from_slice` cannot fail; were it to, the empty
        // MAC would fail the exchange, never panic.
        match self {
            Hash::Sha256 => <Hmac<Sha256> as KeyInit>::new_from_slice(key)
                .map(|mut m| {
                    m.update(msg);
                    m.finalize().into_bytes().to_vec()
                })
                .unwrap_or_default(),
            Hash::Sha512 => <Hmac<Sha512> as KeyInit>::new_from_slice(key)
                .map(|mut m| {
                    m.update(msg);
                    m.finalize().into_bytes().to_vec()
                })
                .unwrap_or_default(),
        }
    }

    fn hash(self, msg: &[u8]) -> Vec<u8> {
        match self {
            Hash::Sha256 => Sha256::digest(msg).to_vec(),
            Hash::Sha512 => Sha512::digest(msg).to_vec(),
        }
    }

    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Hash::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            Hash::Sha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }
}

/// Where the exchange stands.
#[derive(Debug)]
enum Step {
    /// The client-first message went out.
    SentFirst,
    /// The client-final went out; the server's signature must be this.
    SentFinal { server_signature: Vec<u8> },
    /// Verified, or failed.
    Done,
}

/// The client's side of one SCRAM exchange.
#[derive(Debug)]
pub(crate) struct ScramClient {
    hash: Hash,
    password: String,
    nonce: String,
    client_first_bare: String,
    step: Step,
}

impl ScramClient {
    /// Starts an exchange for `username` with a client nonce; returns the client and its
    /// client-first message.
    pub(crate) fn first(
        hash: Hash,
        username: &str,
        password: &str,
        nonce: String,
    ) -> (Self, Vec<u8>) {
        let client_first_bare = format!("n={},r={nonce}", sasl_name(username));
        let msg = format!("n,,{client_first_bare}").into_bytes();
        (
            ScramClient {
                hash,
                password: password.to_owned(),
                nonce,
                client_first_bare,
                step: Step::SentFirst,
            },
            msg,
        )
    }

    /// Takes the broker's next message: the server-first (returns the client-final) or the
    /// server-final (verified; returns None).
    ///
    /// # Errors
    /// As [`Self::respond`] and [`Self::verify`].
    pub(crate) fn next(&mut self, msg: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self.step {
            Step::SentFirst => self.respond(msg).map(Some),
            Step::SentFinal { .. } => self.verify(msg).map(|()| None),
            Step::Done => Err("a SCRAM message after the exchange ended".into()),
        }
    }

    /// Takes the server-first message; returns the client-final.
    ///
    /// # Errors
    /// What is wrong with the server's message (an `e=` error, a nonce that does not extend
    /// ours, too few iterations, a malformed attribute).
    pub(crate) fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        if !matches!(self.step, Step::SentFirst) {
            return Err("a second server-first message".into());
        }
        self.step = Step::Done;
        let (text, attrs) = server_message(server_first, "server-first")?;
        let nonce = *attrs
            .get("r")
            .ok_or("the server-first message has no nonce (r=)")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() <= self.nonce.len() {
            return Err("the server's nonce does not extend the client's".into());
        }
        let salt = base64_attribute(&attrs, "s", "server-first", "salt")?;
        let iterations: u32 = attrs
            .get("i")
            .ok_or("the server-first message has no iteration count (i=)")?
            .parse()
            .map_err(|_| "the iteration count (i=) is not a number".to_owned())?;
        if iterations < MIN_ITERATIONS {
            return Err(format!(
                "the broker asks for {iterations} iterations, fewer than the minimum {MIN_ITERATIONS}"
            ));
        }
        let h = self.hash;
        let salted = h.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let client_signature = h.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = h.hmac(&salted, b"Server Key");
        self.step = Step::SentFinal {
            server_signature: h.hmac(&server_key, auth_message.as_bytes()),
        };
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Takes the server-final message and checks the server's signature.
    ///
    /// # Errors
    /// The broker's `e=` error, or a signature that does not match (a server that does not
    /// know the password: refused).
    pub(crate) fn verify(&mut self, server_final: &[u8]) -> Result<(), String> {
        let Step::SentFinal { server_signature } = std::mem::replace(&mut self.step, Step::Done)
        else {
            return Err("a server-final message out of turn".into());
        };
        let (_, attrs) = server_message(server_final, "server-final")?;
        let v = base64_attribute(&attrs, "v", "server-final", "signature")?;
        if v != server_signature {
            return Err("the broker's signature is wrong: it does not know the password (a man in the middle?)".into());
        }
        Ok(())
    }
}

/// A fresh client nonce: 32 random printable characters (no ',').
pub(crate) fn nonce() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = rand::rng();
    (0..32)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// RFC 5802's saslname: ',' and '=' escaped.
fn sasl_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

type Attributes<'a> = std::collections::BTreeMap<&'a str, &'a str>;

/// A server message (`which`: server-first or server-final) as text and attributes; the
/// broker's `e=` error as an error.
fn server_message<'a>(bytes: &'a [u8], which: &str) -> Result<(&'a str, Attributes<'a>), String> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| format!("the {which} message is not UTF-8"))?;
    let attrs = attributes(text)?;
    if let Some(e) = attrs.get("e") {
        return Err(format!("the broker refused: {e}"));
    }
    Ok((text, attrs))
}

/// The base64 attribute `key` (the `what` of the `which` message), decoded.
fn base64_attribute(
    attrs: &Attributes<'_>,
    key: &str,
    which: &str,
    what: &str,
) -> Result<Vec<u8>, String> {
    let value = attrs
        .get(key)
        .ok_or_else(|| format!("the {which} message has no {what} ({key}=)"))?;
    B64.decode(value)
        .map_err(|_| format!("the {what} ({key}=) is not base64"))
}

/// `a=value,b=value` into a map (values may contain '=').
fn attributes(text: &str) -> Result<Attributes<'_>, String> {
    let mut out = std::collections::BTreeMap::new();
    for part in text.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| "a SCRAM attribute without '='".to_owned())?;
        out.insert(k, v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677, section 3.
    #[test]
    fn rfc_7677_sha256_exchange() {
        let (mut c, first) = ScramClient::first(
            Hash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let fin = c
            .respond(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    #[test]
    fn a_server_that_does_not_know_the_password_is_refused() {
        let (mut c, _) = ScramClient::first(
            Hash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        c.respond(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap();
        let e = c
            .verify(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
            .unwrap_err();
        assert!(e.contains("signature is wrong"), "{e}");
    }

    #[test]
    fn bad_server_first_messages_are_named() {
        let table: &[(&[u8], &str)] = &[
            (b"e=unknown-user", "the broker refused: unknown-user"),
            (b"r=other,s=AAAA,i=4096", "does not extend"),
            (b"r=abcX,s=AAAA,i=10", "fewer than the minimum 4096"),
            (b"r=abcX,s=!!,i=4096", "not base64"),
            (b"r=abcX,i=4096", "no salt"),
            (b"s=AAAA,i=4096", "no nonce"),
            (b"r=abcX,s=AAAA", "no iteration count"),
            (b"r=abcX,s=AAAA,i=many", "not a number"),
            (b"garbage", "without '='"),
            (&[0xff, 0xfe], "not UTF-8"),
        ];
        for (msg, want) in table {
            let (mut c, _) = ScramClient::first(Hash::Sha512, "u", "p", "abc".into());
            let e = c.respond(msg).unwrap_err();
            assert!(e.contains(want), "{:?}: {e}", String::from_utf8_lossy(msg));
        }
    }

    #[test]
    fn user_names_are_escaped() {
        let (_, first) = ScramClient::first(Hash::Sha256, "a=b,c", "p", "n".into());
        assert_eq!(first, b"n,,n=a=3Db=2Cc,r=n");
    }

    #[test]
    fn nonces_are_fresh_and_comma_free() {
        let (a, b) = (nonce(), nonce());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(!a.contains(','));
    }
}
