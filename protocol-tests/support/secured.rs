//! The shared secured broker (`KAFKA_SECURITY=1 protocol-tests/kafka-broker.sh`): one node with
//! PLAINTEXT (setup, a super user), SSL (client certificates requested), SASL_SSL and
//! SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) listeners, certificates made by the
//! script, the users alice (ACLs for everything), bob (no ACLs) and admin (super user), and
//! `connections.max.reauth.ms` short enough that long tests re-authenticate (KIP-368). One per
//! transaction version (ports 19720–19724 at TV2, 19730–19734 at TV1), started by the first
//! test that needs it and left running (scripts/test stops it at the end).

use super::broker::broker_script;
use super::repo;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tokio::sync::OnceCell;

/// The broker's SASL session lifetime: short, so that a test running a few seconds
/// re-authenticates, and long enough for a loaded machine to finish an exchange well inside it.
pub const REAUTH_MS: u64 = 6000;

/// The secured broker's addresses and the certificates' paths.
#[derive(Debug)]
pub struct Secured {
    pub plaintext: String,
    pub ssl: String,
    pub sasl_ssl: String,
    pub sasl_plaintext: String,
    pub ca: PathBuf,
    pub client_pem: PathBuf,
    pub client_key: PathBuf,
    pub other_ca: PathBuf,
    /// The broker's log of failed authentications and authorization denials.
    pub security_log: PathBuf,
}

/// 19720 at TV2, 19730 at TV1; ONCEFLOW_SECURED_PORT overrides it (a developer running the
/// tests beside a CI dry run on the same machine).
fn port() -> u16 {
    if let Some(p) = std::env::var("ONCEFLOW_SECURED_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        return p;
    }
    match std::env::var("ONCEFLOW_EXPECT_TV").as_deref() {
        Ok("1") => 19730,
        _ => 19720,
    }
}

/// The secured broker of this run's transaction version, started on first use.
pub async fn secured() -> &'static Secured {
    static BROKER: OnceCell<Secured> = OnceCell::const_new();
    BROKER
        .get_or_init(|| async {
            super::init_logging();
            tokio::task::spawn_blocking(start)
                .await
                .expect("start the secured broker")
        })
        .await
}

fn start() -> Secured {
    let port = port();
    let tv = std::env::var("ONCEFLOW_EXPECT_TV").unwrap_or_else(|_| "2".into());
    let dir = repo().join(format!("target/kafka-secured-{port}"));
    let extra = format!("connections.max.reauth.ms={REAUTH_MS}");
    broker_script(
        "start",
        &[
            ("KAFKA_SECURITY", "1"),
            ("KAFKA_PORT", &port.to_string()),
            ("KAFKA_TV", &tv),
            ("KAFKA_DIR", &dir.display().to_string()),
            ("KAFKA_EXTRA_PROPS", &extra),
        ],
    );
    let env = std::fs::read_to_string(dir.join("security.env")).expect("security.env");
    let vars: BTreeMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| -> String {
        vars.get(k)
            .unwrap_or_else(|| panic!("{k} missing from security.env"))
            .to_string()
    };
    Secured {
        plaintext: get("PLAINTEXT_BOOTSTRAP"),
        ssl: get("SSL_BOOTSTRAP"),
        sasl_ssl: get("SASL_SSL_BOOTSTRAP"),
        sasl_plaintext: get("SASL_PLAINTEXT_BOOTSTRAP"),
        ca: get("CA_PEM").into(),
        client_pem: get("CLIENT_PEM").into(),
        client_key: get("CLIENT_KEY").into(),
        other_ca: get("OTHER_CA_PEM").into(),
        security_log: dir.join("logs/security.log"),
    }
}

/// The properties of one way in: bootstrap.servers and the security settings.
pub type Props = Vec<(String, String)>;

fn props(pairs: &[(&str, &str)]) -> Props {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Secured {
    /// TLS, the broker's certificate checked against the script's CA; no client certificate.
    pub fn ssl_props(&self) -> Props {
        props(&[
            ("bootstrap.servers", &self.ssl),
            ("security.protocol", "SSL"),
            ("ssl.truststore.location", &self.ca.display().to_string()),
        ])
    }

    /// Mutual TLS: the client certificate (principal User:onceflow-client).
    pub fn mtls_props(&self) -> Props {
        let mut p = self.ssl_props();
        p.extend(props(&[
            (
                "ssl.certificate.location",
                &self.client_pem.display().to_string(),
            ),
            ("ssl.key.location", &self.client_key.display().to_string()),
        ]));
        p
    }

    /// SASL_SSL with `mechanism` as `user`/`password` (librdkafka's names).
    pub fn sasl_ssl_props(&self, mechanism: &str, user: &str, password: &str) -> Props {
        props(&[
            ("bootstrap.servers", &self.sasl_ssl),
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.location", &self.ca.display().to_string()),
            ("sasl.mechanism", mechanism),
            ("sasl.username", user),
            ("sasl.password", password),
        ])
    }

    /// SASL_SSL with OAUTHBEARER: Java's unsecured login module for `subject`.
    pub fn oauth_props(&self, subject: &str) -> Props {
        props(&[
            ("bootstrap.servers", &self.sasl_ssl),
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.location", &self.ca.display().to_string()),
            ("sasl.mechanism", "OAUTHBEARER"),
            (
                "sasl.jaas.config",
                &format!(
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"{subject}\";"
                ),
            ),
        ])
    }

    /// SASL_PLAINTEXT with `mechanism`, credentials in `sasl.jaas.config` (Java's way).
    pub fn sasl_plaintext_props(&self, mechanism: &str, user: &str, password: &str) -> Props {
        let module = match mechanism {
            "PLAIN" => "org.apache.kafka.common.security.plain.PlainLoginModule",
            _ => "org.apache.kafka.common.security.scram.ScramLoginModule",
        };
        props(&[
            ("bootstrap.servers", &self.sasl_plaintext),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", mechanism),
            (
                "sasl.jaas.config",
                &format!("{module} required username=\"{user}\" password=\"{password}\";"),
            ),
        ])
    }

    /// The PLAINTEXT listener (a super user): for setting up what a test needs.
    pub fn plaintext_props(&self) -> Props {
        props(&[("bootstrap.servers", &self.plaintext)])
    }

    /// How many failed authentications the broker has logged so far.
    pub fn failed_authentications(&self) -> usize {
        std::fs::read_to_string(&self.security_log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Failed authentication"))
            .count()
    }
}
