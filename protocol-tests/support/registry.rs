//! The shared schema registry (`protocol-tests/schema-registry.sh`: Apicurio Registry with
//! in-memory storage, its Confluent-compatible API under `/apis/ccompat/v7`). One per
//! transaction version's run (port 19740 at TV2, 19741 at TV1; ONCEFLOW_REGISTRY_PORT
//! overrides it), started by the first test that needs it and left running (scripts/test
//! stops it at the end). Tests use unique subjects, so they share it.

use super::repo;
use std::process::Command;
use tokio::sync::OnceCell;

fn port() -> u16 {
    if let Some(p) = std::env::var("ONCEFLOW_REGISTRY_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        return p;
    }
    match std::env::var("ONCEFLOW_EXPECT_TV").as_deref() {
        Ok("1") => 19741,
        _ => 19740,
    }
}

/// The registry's Confluent-compatible base URL, the registry started on first use.
pub async fn registry_url() -> &'static str {
    static URL: OnceCell<String> = OnceCell::const_new();
    URL.get_or_init(|| async {
        super::init_logging();
        tokio::task::spawn_blocking(|| registry_script("start", port()))
            .await
            .expect("start the schema registry")
    })
    .await
}

/// Runs the registry script; its last line of output (the base URL for `start`).
pub fn registry_script(action: &str, port: u16) -> String {
    let dir = repo().join(format!("target/schema-registry-{port}"));
    let env = [
        ("REGISTRY_PORT", port.to_string()),
        ("REGISTRY_DIR", dir.display().to_string()),
    ];
    script("protocol-tests/schema-registry.sh", action, &env)
}

/// Runs `script action` with `env`; its last line of output, or the test fails with its
/// stderr.
fn script(script: &str, action: &str, env: &[(&str, String)]) -> String {
    let out = Command::new("bash")
        .arg(repo().join(script))
        .arg(action)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {action} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The registry behind nginx (protocol-tests/registry-proxy.sh): basic authentication, over
/// HTTP and over TLS.
#[derive(Debug)]
pub struct Proxied {
    pub http_url: String,
    pub https_url: String,
    /// The CA that signed the proxy's certificate.
    pub ca: std::path::PathBuf,
    /// `user:password` it takes.
    pub user_info: String,
}

/// 19750 (and 19751 for TLS) at TV2, 19752 (19753) at TV1: 19750 + 2 × (the registry's port
/// − 19740), so an ONCEFLOW_REGISTRY_PORT moves it too.
fn proxy_port() -> u16 {
    (19750 + 2 * (i32::from(port()) - 19740)).clamp(1024, 65534) as u16
}

/// The proxied registry, started on first use (the registry too).
pub async fn proxied() -> &'static Proxied {
    static PROXY: OnceCell<Proxied> = OnceCell::const_new();
    let url = registry_url().await.to_owned();
    PROXY
        .get_or_init(|| async move {
            tokio::task::spawn_blocking(move || {
                let port = proxy_port();
                let dir = repo().join(format!("target/registry-proxy-{port}"));
                let env = [
                    ("REGISTRY_URL", url),
                    ("PROXY_PORT", port.to_string()),
                    ("PROXY_DIR", dir.display().to_string()),
                ];
                script("protocol-tests/registry-proxy.sh", "start", &env);
                let env = std::fs::read_to_string(dir.join("proxy.env")).expect("proxy.env");
                let get = |k: &str| {
                    env.lines()
                        .find_map(|l| l.strip_prefix(&format!("{k}=")))
                        .unwrap_or_else(|| panic!("{k} missing from proxy.env"))
                        .to_owned()
                };
                Proxied {
                    http_url: get("HTTP_URL"),
                    https_url: get("HTTPS_URL"),
                    ca: get("CA_PEM").into(),
                    user_info: format!("{}:{}", get("USER"), get("PASSWORD")),
                }
            })
            .await
            .expect("start the registry proxy")
        })
        .await
}
