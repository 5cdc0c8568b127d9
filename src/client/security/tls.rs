//! The TLS client: rustls over graviola's pure-Rust cryptography, trust and keys from PEM
//! files, built once per cluster (the files are read when the client starts, so a bad path
//! fails there with its name, not at each connect).

use super::SecurityConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpStream;

/// Where the system's CA bundle usually is, when `ssl.truststore.location` is not set (the Java
/// client uses the JVM's cacerts; these are the same CAs as the OS packages them).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine
    "/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
    "/etc/ssl/ca-bundle.pem",             // openSUSE
    "/etc/ssl/cert.pem",                  // macOS, BSD
];

/// A TLS client configuration ready to wrap connections.
#[derive(Clone)]
pub(crate) struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConnector")
    }
}

impl TlsConnector {
    /// Reads the trust store and the client's key and certificate.
    ///
    /// # Errors
    /// A one-line message naming the property and the file.
    pub(crate) fn new(sec: &SecurityConfig) -> Result<TlsConnector, String> {
        let provider = Arc::new(rustls_graviola::default_provider());
        let roots = Arc::new(trust_store(sec.truststore.as_deref())?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| format!("cannot use the trust store: {e}"))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?;
        let builder = if sec.verify_hostname {
            builder.with_webpki_verifier(webpki)
        } else {
            tracing::warn!(
                "ssl.endpoint.identification.algorithm is empty: brokers' certificates are not checked against their host names (any certificate the trusted CAs signed is accepted for any broker)"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyHostName(webpki)))
        };
        let config = match client_identity(sec)? {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate and key do not fit together: {e}"))?,
            None => builder.with_no_client_auth(),
        };
        Ok(TlsConnector {
            config: Arc::new(config),
        })
    }

    /// The TLS handshake over `tcp` for the broker at `host` (SNI and hostname verification use
    /// it; an IP address is checked against the certificate's IP addresses).
    ///
    /// # Errors
    /// The handshake's failure, worded for the user (`describe_tls_error`).
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
        host: &str,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| format!("'{host}' is not a valid TLS server name"))?;
        tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| describe_tls_error(&e, host))
    }
}

/// The handshake error in words that say what to change.
fn describe_tls_error(e: &std::io::Error, host: &str) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            "TLS: the broker's certificate is not signed by a trusted CA; set ssl.truststore.location (ssl.ca.location) to the PEM of the CA that signed it".to_owned()
        }
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "TLS: the broker's certificate is not valid for '{host}' (hostname verification); connect by a name the certificate lists, or set ssl.endpoint.identification.algorithm= (empty) to turn the check off"
        ),
        Some(rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => "TLS: the broker's certificate has expired".to_owned(),
        Some(rustls::Error::AlertReceived(alert)) => format!(
            "TLS: the broker refused the handshake ({alert:?}); if it requires a client certificate, set ssl.keystore.location (or ssl.certificate.location and ssl.key.location)"
        ),
        Some(other) => format!("TLS: {other}"),
        None => match e.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => format!(
                "TLS: the broker closed the connection during the handshake ({e}); is this a TLS listener? check security.protocol and the port"
            ),
            _ => format!("TLS: {e}"),
        },
    }
}

fn trust_store(path: Option<&Path>) -> Result<RootCertStore, String> {
    let (path, property) = match path {
        Some(p) => (p.to_path_buf(), "ssl.truststore.location"),
        None => (
            std::env::var_os("SSL_CERT_FILE")
                .map(PathBuf::from)
                .or_else(|| {
                    SYSTEM_BUNDLES
                        .iter()
                        .map(PathBuf::from)
                        .find(|p| p.is_file())
                })
                .ok_or("no ssl.truststore.location set and no system CA bundle found; set ssl.truststore.location to a PEM file of the CAs to trust")?,
            "the system CA bundle",
        ),
    };
    let certs = read_certs(&path, property)?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "{property} {}: no usable CA certificate in it",
            path.display()
        ));
    }
    Ok(roots)
}

/// The file a property names, or an error naming both.
fn read_file(path: &Path, property: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {property} {}: {e}", path.display()))
}

fn read_certs(path: &Path, property: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read_file(path, property)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{property} {}: not PEM certificates: {e:?}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{property} {}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path, property: &str) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read_file(path, property)?;
    if bytes
        .windows(b"ENCRYPTED PRIVATE KEY".len())
        .any(|w| w == b"ENCRYPTED PRIVATE KEY")
    {
        return Err(format!(
            "{property} {}: the private key is encrypted; decrypt it (openssl pkcs8 -topk8 -nocrypt)",
            path.display()
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
        format!(
            "{property} {}: no PEM private key in it (expected -----BEGIN PRIVATE KEY-----, RSA or EC)",
            path.display()
        )
    })
}

/// The client's certificate chain and key for mutual TLS, if configured.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn client_identity(sec: &SecurityConfig) -> Result<Option<Identity>, String> {
    if let Some(store) = &sec.keystore {
        let chain = read_certs(store, "ssl.keystore.location")?;
        let key = read_key(store, "ssl.keystore.location")?;
        return Ok(Some((chain, key)));
    }
    match (&sec.certificate, &sec.key) {
        (Some(cert), Some(key)) => Ok(Some((
            read_certs(cert, "ssl.certificate.location")?,
            read_key(key, "ssl.key.location")?,
        ))),
        _ => Ok(None),
    }
}

/// Checks the chain as usual but accepts any host name
/// (`ssl.endpoint.identification.algorithm=` empty).
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
