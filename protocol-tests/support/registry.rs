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
    let out = Command::new("bash")
        .arg(repo().join("protocol-tests/schema-registry.sh"))
        .arg(action)
        .env("REGISTRY_PORT", port.to_string())
        .env(
            "REGISTRY_DIR",
            repo().join(format!("target/schema-registry-{port}")),
        )
        .output()
        .expect("run protocol-tests/schema-registry.sh");
    assert!(
        out.status.success(),
        "schema-registry.sh {action} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}
