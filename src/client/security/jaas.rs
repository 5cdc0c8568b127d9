//! `sasl.jaas.config` as Java users write it:
//! `<LoginModule class> required key="value" key2=value;`
//!
//! Only what a client needs is read: `username` and `password` (PLAIN and SCRAM login
//! modules), and Java's unsecured OAUTHBEARER login options (`unsecuredLoginStringClaim_sub`,
//! `unsecuredLoginLifetimeSeconds`). Other options are accepted and ignored, as the Java client
//! ignores options its login module does not know.

use super::{Secret, SecurityConfig, TokenSource};
use std::collections::BTreeMap;

/// A parsed JAAS entry.
#[derive(Debug)]
pub(super) struct Jaas {
    /// The login module class (e.g. `org.apache.kafka.common.security.plain.PlainLoginModule`).
    module: String,
    options: BTreeMap<String, String>,
}

impl Jaas {
    /// Sets what the entry says on `config`.
    pub(super) fn apply(mut self, config: &mut SecurityConfig) {
        if let Some(u) = self.options.remove("username") {
            config.username = Some(u);
        }
        if let Some(p) = self.options.remove("password") {
            config.password = Some(Secret::new(p));
        }
        if self.module.ends_with("OAuthBearerLoginModule") {
            if let Some(subject) = self.options.remove("unsecuredLoginStringClaim_sub") {
                let lifetime_s = self
                    .options
                    .get("unsecuredLoginLifetimeSeconds")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(3600);
                config.token = Some(TokenSource::Unsecured {
                    subject,
                    lifetime_s,
                });
            }
        }
    }
}

/// Parses one JAAS entry. The error says what is wrong without quoting the text (it holds a
/// password).
pub(super) fn parse(text: &str) -> Result<Jaas, String> {
    let mut rest = text.trim();
    let module_end = rest
        .find(char::is_whitespace)
        .ok_or("no control flag after the login module class")?;
    let module = rest[..module_end].to_owned();
    rest = rest[module_end..].trim_start();
    let flag_end = rest
        .find(|c: char| c.is_whitespace() || c == ';')
        .unwrap_or(rest.len());
    let flag = &rest[..flag_end];
    if !matches!(flag, "required" | "requisite" | "sufficient" | "optional") {
        return Err(format!(
            "expected the control flag `required` after the login module class, found '{}'",
            flag.chars().take(20).collect::<String>()
        ));
    }
    rest = rest[flag_end..].trim_start();
    let mut options = BTreeMap::new();
    loop {
        if let Some(after) = rest.strip_prefix(';') {
            if !after.trim().is_empty() {
                return Err("text after the closing ';' (one login module only)".into());
            }
            return Ok(Jaas { module, options });
        }
        if rest.is_empty() {
            return Err("no closing ';'".into());
        }
        let eq = rest
            .find('=')
            .ok_or("an option without '=' (options are key=\"value\")")?;
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err("an option without a name before '='".into());
        }
        rest = rest[eq + 1..].trim_start();
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            // A quoted value runs to the next unescaped quote; \" and \\ are escapes.
            let mut v = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, e)) => v.push(e),
                        None => break,
                    },
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => v.push(c),
                }
            }
            let end = end.ok_or_else(|| format!("the value of '{key}' has no closing quote"))?;
            value = v;
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == ';')
                .unwrap_or(rest.len());
            value = rest[..end].to_owned();
            rest = rest[end..].trim_start();
        }
        options.insert(key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_as_java_users_write_them() {
        // (text, username, password)
        let table: &[(&str, Option<&str>, Option<&str>)] = &[
            (
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";"#,
                Some("alice"),
                Some("alice-secret"),
            ),
            (
                "org.apache.kafka.common.security.scram.ScramLoginModule required\n  username=bob\n  password=\"p w;\\\"x\";",
                Some("bob"),
                Some("p w;\"x"),
            ),
            (
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="";"#,
                Some("u"),
                Some(""),
            ),
            (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
                None,
                None,
            ),
        ];
        for (text, user, password) in table {
            let j = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                j.options.get("username").map(String::as_str),
                *user,
                "{text}"
            );
            assert_eq!(
                j.options.get("password").map(String::as_str),
                *password,
                "{text}"
            );
        }
    }

    #[test]
    fn malformed_entries_say_what_is_wrong_without_the_text() {
        let table: &[(&str, &str)] = &[
            ("PlainLoginModule", "no control flag"),
            (
                "PlainLoginModule maybe username=\"a\";",
                "control flag `required`",
            ),
            ("PlainLoginModule required username=\"a\"", "no closing ';'"),
            (
                "PlainLoginModule required password=\"secret;",
                "'password' has no closing quote",
            ),
            ("PlainLoginModule required username;", "without '='"),
            (
                "PlainLoginModule required a=b; Other required;",
                "one login module only",
            ),
        ];
        for (text, want) in table {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn the_unsecured_oauthbearer_login_gives_a_token_for_its_subject() {
        let mut c = SecurityConfig::new();
        parse(r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";"#)
            .unwrap()
            .apply(&mut c);
        assert_eq!(
            c.token,
            Some(TokenSource::Unsecured {
                subject: "alice".into(),
                lifetime_s: 3600
            })
        );
    }
}
