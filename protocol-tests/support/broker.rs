//! Brokers the tests start themselves (to kill, restart or configure differently from the shared
//! one), through protocol-tests/kafka-broker.sh.

use super::repo;
use std::process::Command;

/// A private broker, wiped when dropped.
pub struct PrivateBroker {
    env: Vec<(String, String)>,
    pub addr: String,
}

/// The port a private broker asked for on `port` gets in a run at transaction.version `tv`:
/// scripts/test runs the two versions' suites at the same time, and a test that runs in both
/// must not meet the other run's broker (or wipe its state directory).
fn port_of_run(port: u16, tv: &str) -> u16 {
    match tv {
        "1" => port + 1000,
        _ => port,
    }
}

impl PrivateBroker {
    pub fn start(port: u16) -> PrivateBroker {
        Self::start_with(port, "")
    }

    /// A private broker with extra server.properties lines (`;`-separated), e.g.
    /// "auto.create.topics.enable=false". The controller uses the port after the broker's,
    /// which is `port` at transaction.version 2 and `port + 1000` at 1 ([`port_of_run`]).
    pub fn start_with(port: u16, extra_props: &str) -> PrivateBroker {
        let tv = std::env::var("ONCEFLOW_EXPECT_TV").unwrap_or_else(|_| "2".into());
        let port = port_of_run(port, &tv);
        let dir = repo().join(format!("target/kafka-private-{port}"));
        let mut env = vec![
            ("KAFKA_TV".to_owned(), tv),
            ("KAFKA_PORT".to_owned(), port.to_string()),
            ("KAFKA_DIR".to_owned(), dir.display().to_string()),
        ];
        if !extra_props.is_empty() {
            env.push(("KAFKA_EXTRA_PROPS".to_owned(), extra_props.to_owned()));
        }
        let mut b = PrivateBroker {
            addr: String::new(),
            env,
        };
        b.run("wipe");
        b.addr = b.run("start");
        b
    }

    pub fn run(&self, action: &str) -> String {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        broker_script(action, &env)
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.run("wipe");
    }
}

/// Runs protocol-tests/kafka-broker.sh with env overrides; `action` may carry arguments
/// ("kill 2").
pub fn broker_script(action: &str, env: &[(&str, &str)]) -> String {
    let port = env
        .iter()
        .find(|(k, _)| *k == "KAFKA_PORT")
        .map_or("", |(_, v)| v);
    let _wait =
        super::watchdog::waiting(format!("kafka-broker.sh {action} (KAFKA_PORT={port})")).entered();
    let out = Command::new("bash")
        .arg(repo().join("protocol-tests/kafka-broker.sh"))
        .args(action.split_whitespace())
        .envs(env.iter().copied())
        .output()
        .expect("run kafka-broker.sh");
    assert!(
        out.status.success(),
        "kafka-broker.sh {action} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::port_of_run;

    #[test]
    fn each_transaction_version_has_its_own_private_ports() {
        for (port, tv, expected) in [
            (19092, "2", 19092),
            (19092, "1", 20092),
            (19522, "2", 19522),
            (19522, "1", 20522),
        ] {
            assert_eq!(port_of_run(port, tv), expected, "{port} at TV{tv}");
        }
    }
}
