//! The schema registry client: the Confluent-compatible REST API (which Confluent Schema
//! Registry, Apicurio Registry under `/apis/ccompat/v7`, Karapace and Redpanda serve),
//! with every schema and id it learns cached for the life of the client.
//!
//! Every call goes through the client's one retry executor: an unreachable registry, a 5xx
//! or a 429 is retried with backoff until `default.api.timeout.ms`; the other URLs of
//! `schema.registry.url` are tried in order within each attempt. Any other answer is final
//! and named: an unknown id, an unknown subject, an incompatible or invalid schema, refused
//! credentials.

use super::cache::lock;
use super::config::RegistryConfig;
use super::error::{Result, SchemaError};
use super::http::{Answer, Endpoint, Http};
use crate::client::error::Op;
use crate::client::retry::{self, Policy, Step};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How deep schema references may nest (a cycle or a runaway chain is an error, not a hang).
pub(crate) const MAX_REFERENCE_DEPTH: usize = 32;

/// The kind of a schema (the registry's `schemaType`; absent means Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
#[non_exhaustive]
pub enum SchemaType {
    /// Apache Avro.
    #[default]
    Avro,
    /// Protocol Buffers (the schema is a `.proto` file).
    Protobuf,
    /// JSON Schema.
    Json,
}

impl SchemaType {
    /// The name for messages: `Avro`, `Protobuf`, `JSON Schema`.
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "Avro",
            SchemaType::Protobuf => "Protobuf",
            SchemaType::Json => "JSON Schema",
        }
    }
}

/// Another subject's schema a schema refers to (an Avro named type, a Protobuf import).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchemaReference {
    /// The name it is referred to by (the Avro full name, the imported file name).
    pub name: String,
    /// The subject it is registered under.
    pub subject: String,
    /// Its version there.
    pub version: i32,
}

/// A schema as the registry stores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schema {
    /// Its kind.
    pub schema_type: SchemaType,
    /// Its text: Avro JSON, a `.proto` file, a JSON Schema document.
    pub text: String,
    /// The schemas it refers to.
    pub references: Vec<SchemaReference>,
}

impl Schema {
    /// A schema of `schema_type` without references.
    pub fn new(schema_type: SchemaType, text: impl Into<String>) -> Schema {
        Schema {
            schema_type,
            text: text.into(),
            references: Vec::new(),
        }
    }
}

/// A schema registered under a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredSchema {
    /// The global id records carry.
    pub id: u32,
    /// The subject.
    pub subject: String,
    /// The version within the subject.
    pub version: i32,
    /// The schema.
    pub schema: Arc<Schema>,
}

/// The registry's JSON for a schema (requests and answers).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    schema: String,
    #[serde(default, skip_serializing_if = "is_avro")]
    schema_type: SchemaType,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    references: Vec<SchemaReference>,
    // Answers of the subject calls.
    #[serde(default, skip_serializing)]
    id: Option<u32>,
    #[serde(default, skip_serializing)]
    version: Option<i32>,
    #[serde(default, skip_serializing)]
    subject: Option<String>,
}

fn is_avro(t: &SchemaType) -> bool {
    *t == SchemaType::Avro
}

impl Wire {
    fn of(s: &Schema) -> Wire {
        Wire {
            schema: s.text.clone(),
            schema_type: s.schema_type,
            references: s.references.clone(),
            id: None,
            version: None,
            subject: None,
        }
    }

    fn schema(self) -> Schema {
        Schema {
            schema_type: self.schema_type,
            text: self.schema,
            references: self.references,
        }
    }
}

/// A client of one schema registry (several URLs of the same registry allowed). Cheap to
/// clone: clones share the connection settings and the caches.
///
/// # Examples
/// ```no_run
/// use onceflow::schema::{RegistryConfig, Schema, SchemaRegistry, SchemaType};
/// # async fn f() -> Result<(), onceflow::schema::SchemaError> {
/// let registry = SchemaRegistry::new(RegistryConfig::from_properties([
///     ("schema.registry.url", "http://127.0.0.1:8081"),
/// ])?)?;
/// let schema = Schema::new(SchemaType::Avro, r#"{"type":"record","name":"Ride","fields":[{"name":"id","type":"long"}]}"#);
/// let id = registry.register("rides-value", &schema).await?;
/// assert_eq!(*registry.schema_by_id(id).await?, schema);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: RegistryConfig,
    endpoints: Vec<Endpoint>,
    http: Http,
    by_id: Mutex<HashMap<u32, Arc<Schema>>>,
    ids: Mutex<HashMap<(String, Schema), u32>>,
}

impl SchemaRegistry {
    /// A client with these settings (TLS files are read now; nothing is sent yet).
    ///
    /// # Errors
    /// [`SchemaError::Config`] for a bad URL or TLS file.
    pub fn new(config: RegistryConfig) -> Result<SchemaRegistry> {
        config.validate()?;
        let endpoints = config
            .urls
            .iter()
            .map(|u| Endpoint::parse(u))
            .collect::<Result<Vec<_>>>()?;
        let http = Http::new(&config, &endpoints)?;
        Ok(SchemaRegistry {
            inner: Arc::new(Inner {
                config,
                endpoints,
                http,
                by_id: Mutex::new(HashMap::new()),
                ids: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> &RegistryConfig {
        &self.inner.config
    }

    /// The schema with global id `id` (cached: asked once per id).
    ///
    /// # Errors
    /// [`SchemaError::UnknownId`] when the registry does not know it; the errors of a call.
    pub async fn schema_by_id(&self, id: u32) -> Result<Arc<Schema>> {
        if let Some(s) = lock(&self.inner.by_id).get(&id) {
            return Ok(s.clone());
        }
        let what = format!("schema id {id}");
        let wire: Wire = self
            .call(&what, "GET", &format!("/schemas/ids/{id}"), None)
            .await
            .map_err(|e| match e {
                SchemaError::Registry {
                    url, status: 404, ..
                } => SchemaError::UnknownId { id, url },
                e => e,
            })?;
        let schema = Arc::new(wire.schema());
        lock(&self.inner.by_id).insert(id, schema.clone());
        Ok(schema)
    }

    /// Registers `schema` under `subject` (or finds it there already) and returns its global
    /// id (cached per subject and schema).
    ///
    /// # Errors
    /// [`SchemaError::Registry`] with status 409 when the subject's compatibility rule refuses
    /// it, 422 when the registry finds it invalid; the errors of a call.
    pub async fn register(&self, subject: &str, schema: &Schema) -> Result<u32> {
        let key = (subject.to_owned(), schema.clone());
        if let Some(id) = lock(&self.inner.ids).get(&key) {
            return Ok(*id);
        }
        let what = format!(
            "register the {} schema under subject '{subject}'",
            schema.schema_type.name()
        );
        let body = serde_json::to_vec(&Wire::of(schema))
            .map_err(|e| SchemaError::Config(e.to_string()))?;
        let answer: IdAnswer = self
            .call(
                &what,
                "POST",
                &format!("/subjects/{}/versions", segment(subject)),
                Some(body),
            )
            .await?;
        self.remember(key, answer.id);
        Ok(answer.id)
    }

    /// The registration of `schema` under `subject`, if it is registered there.
    ///
    /// # Errors
    /// [`SchemaError::UnknownSubject`] when the subject or the schema is not there.
    pub async fn lookup(&self, subject: &str, schema: &Schema) -> Result<RegisteredSchema> {
        let key = (subject.to_owned(), schema.clone());
        let what = format!(
            "look up the {} schema under subject '{subject}'",
            schema.schema_type.name()
        );
        let body = serde_json::to_vec(&Wire::of(schema))
            .map_err(|e| SchemaError::Config(e.to_string()))?;
        let wire: Wire = self
            .call(
                &what,
                "POST",
                &format!("/subjects/{}", segment(subject)),
                Some(body),
            )
            .await
            .map_err(|e| self.not_found(e, subject, "matching schema"))?;
        let found = self.registered(subject, wire, &what)?;
        self.remember(key, found.id);
        Ok(found)
    }

    /// The latest version registered under `subject`.
    ///
    /// # Errors
    /// [`SchemaError::UnknownSubject`] when nothing is registered there.
    pub async fn latest(&self, subject: &str) -> Result<RegisteredSchema> {
        self.version(subject, None).await
    }

    /// Version `version` of `subject` (the latest with `None`).
    ///
    /// # Errors
    /// [`SchemaError::UnknownSubject`] when the subject or that version is not there.
    pub async fn version(&self, subject: &str, version: Option<i32>) -> Result<RegisteredSchema> {
        let v = version.map_or("latest".to_owned(), |v| v.to_string());
        let what = format!("version {v} of subject '{subject}'");
        let wire: Wire = self
            .call(
                &what,
                "GET",
                &format!("/subjects/{}/versions/{v}", segment(subject)),
                None,
            )
            .await
            .map_err(|e| self.not_found(e, subject, &format!("version {v}")))?;
        self.registered(subject, wire, &what)
    }

    /// Whether `schema` may be registered under `subject` by the subject's compatibility rule
    /// (checked against its latest version; a subject with nothing registered accepts any).
    ///
    /// # Errors
    /// The errors of a call.
    pub async fn is_compatible(&self, subject: &str, schema: &Schema) -> Result<bool> {
        #[derive(Deserialize)]
        struct Compatibility {
            is_compatible: bool,
        }
        let what = format!(
            "check the {} schema against subject '{subject}'",
            schema.schema_type.name()
        );
        let body = serde_json::to_vec(&Wire::of(schema))
            .map_err(|e| SchemaError::Config(e.to_string()))?;
        let path = format!(
            "/compatibility/subjects/{}/versions/latest",
            segment(subject)
        );
        match self
            .call::<Compatibility>(&what, "POST", &path, Some(body))
            .await
        {
            Ok(c) => Ok(c.is_compatible),
            // Nothing registered yet: anything is compatible.
            Err(SchemaError::Registry {
                status: 404,
                code: Some(40401 | 40402),
                ..
            }) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Every subject.
    ///
    /// # Errors
    /// The errors of a call.
    pub async fn subjects(&self) -> Result<Vec<String>> {
        self.call("list subjects", "GET", "/subjects", None).await
    }

    /// The versions registered under `subject`.
    ///
    /// # Errors
    /// [`SchemaError::UnknownSubject`] when nothing is registered there.
    pub async fn versions(&self, subject: &str) -> Result<Vec<i32>> {
        let what = format!("versions of subject '{subject}'");
        self.call(
            &what,
            "GET",
            &format!("/subjects/{}/versions", segment(subject)),
            None,
        )
        .await
        .map_err(|e| self.not_found(e, subject, "schema"))
    }

    /// The schemas `schema` refers to, transitively, as (name it is referred to by, text),
    /// each after the schemas it refers to itself; a name met twice is listed once.
    ///
    /// # Errors
    /// [`SchemaError::InvalidSchema`] for references nested deeper than
    /// [`MAX_REFERENCE_DEPTH`] (a cycle); the errors of [`Self::version`].
    pub(crate) async fn referenced(
        &self,
        schema: &Schema,
        origin: &str,
    ) -> Result<Vec<(String, String)>> {
        let mut found: Vec<(String, String)> = Vec::new();
        let mut pending: Vec<(SchemaReference, usize)> = schema
            .references
            .iter()
            .rev()
            .map(|r| (r.clone(), 1))
            .collect();
        while let Some((r, depth)) = pending.pop() {
            if depth > MAX_REFERENCE_DEPTH {
                return Err(SchemaError::InvalidSchema {
                    kind: schema.schema_type.name(),
                    origin: Some(origin.to_owned()),
                    message: format!(
                        "references nest deeper than {MAX_REFERENCE_DEPTH} (a cycle?) at '{}'",
                        r.name
                    ),
                });
            }
            let registered = self.version(&r.subject, Some(r.version)).await?;
            pending.extend(
                registered
                    .schema
                    .references
                    .iter()
                    .rev()
                    .map(|x| (x.clone(), depth + 1)),
            );
            found.push((r.name, registered.schema.text.clone()));
        }
        // Dependencies first: the deepest were fetched last.
        found.reverse();
        let mut seen = std::collections::HashSet::new();
        found.retain(|(name, _)| seen.insert(name.clone()));
        Ok(found)
    }

    fn remember(&self, key: (String, Schema), id: u32) {
        lock(&self.inner.by_id)
            .entry(id)
            .or_insert_with(|| Arc::new(key.1.clone()));
        lock(&self.inner.ids).insert(key, id);
    }

    fn registered(&self, subject: &str, wire: Wire, what: &str) -> Result<RegisteredSchema> {
        let (Some(id), Some(version)) = (wire.id, wire.version) else {
            return Err(SchemaError::BadAnswer {
                url: self.inner.endpoints[0].shown.clone(),
                what: what.to_owned(),
                message: "no id or version in the answer".into(),
            });
        };
        let subject = wire.subject.clone().unwrap_or_else(|| subject.to_owned());
        let schema = Arc::new(wire.schema());
        lock(&self.inner.by_id)
            .entry(id)
            .or_insert_with(|| schema.clone());
        Ok(RegisteredSchema {
            id,
            subject,
            version,
            schema,
        })
    }

    fn not_found(&self, e: SchemaError, subject: &str, what: &str) -> SchemaError {
        match e {
            SchemaError::Registry {
                url, status: 404, ..
            } => SchemaError::UnknownSubject {
                subject: subject.to_owned(),
                what: what.to_owned(),
                url,
            },
            e => e,
        }
    }

    /// One API call, retried (see the module docs), its JSON answer parsed.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T> {
        let c = &self.inner.config;
        let policy = Policy::new(c.backoff.0, c.backoff.1, c.api_timeout, Op::General);
        let answer = retry::run(
            what,
            policy,
            || async {},
            |_| async {
                self.attempt(what, method, path, body.clone())
                    .await
                    .map(Step::Done)
            },
        )
        .await?;
        let (url, a) = answer;
        serde_json::from_slice(&a.body).map_err(|e| SchemaError::BadAnswer {
            url,
            what: what.to_owned(),
            message: format!("{e}: {}", excerpt(&a.body)),
        })
    }

    /// One attempt: each URL in order until one answers; an answer other than 2xx is an
    /// error here.
    async fn attempt(
        &self,
        what: &str,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(String, Answer)> {
        let mut last = None;
        for at in &self.inner.endpoints {
            match self.inner.http.send(at, method, path, body.clone()).await {
                Ok(a) if (200..300).contains(&a.status) => return Ok((at.shown.clone(), a)),
                Ok(a) => return Err(refusal(&at.shown, what, &a)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| SchemaError::Config("schema.registry.url is not set".into())))
    }
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u32,
}

/// A refusal from the registry, as an error naming what was asked.
fn refusal(url: &str, what: &str, a: &Answer) -> SchemaError {
    #[derive(Deserialize)]
    struct Body {
        error_code: Option<i64>,
        message: Option<String>,
    }
    let body: Option<Body> = serde_json::from_slice(&a.body).ok();
    let code = body.as_ref().and_then(|b| b.error_code);
    let message = body
        .and_then(|b| b.message)
        .unwrap_or_else(|| excerpt(&a.body));
    if a.status == 401 || a.status == 403 {
        return SchemaError::Unauthorized {
            url: url.to_owned(),
            what: what.to_owned(),
            status: a.status,
            message,
        };
    }
    SchemaError::Registry {
        url: url.to_owned(),
        what: what.to_owned(),
        status: a.status,
        code,
        message,
    }
}

/// The start of a body, on one line, for a message.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A path segment, percent-encoded (a subject may hold any character).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_table() {
        let answer = |status, body: &str| Answer {
            status,
            body: bytes::Bytes::from(body.to_owned()),
        };
        #[rustfmt::skip]
        let cases = [
            (answer(404, r#"{"error_code":40403,"message":"Schema not found"}"#), "HTTP 404 (error_code 40403): Schema not found"),
            (answer(409, r#"{"error_code":409,"message":"incompatible"}"#),      "HTTP 409 (error_code 409): incompatible"),
            (answer(401, r#"{"message":"Unauthorized"}"#),                        "HTTP 401: Unauthorized; check basic.auth.user.info"),
            (answer(502, "<html>\n<body>Bad Gateway</body>"),                     "HTTP 502: <html> <body>Bad Gateway</body>"),
        ];
        for (a, want) in cases {
            let e = refusal("http://r", "schema id 1", &a).to_string();
            assert!(
                e.starts_with("schema registry http://r: schema id 1: "),
                "{e}"
            );
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn subjects_are_percent_encoded_in_paths() {
        assert_eq!(segment("rides-value"), "rides-value");
        assert_eq!(segment("nyc.Ride"), "nyc.Ride");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn the_registrys_json_reads_and_writes_as_its_api_says() {
        let w: Wire = serde_json::from_str(r#"{"schema":"syntax = \"proto3\";","schemaType":"PROTOBUF","references":[{"name":"a.proto","subject":"a","version":1}]}"#).unwrap();
        let s = w.schema();
        assert_eq!(s.schema_type, SchemaType::Protobuf);
        assert_eq!(s.references[0].subject, "a");
        let avro: Wire = serde_json::from_str(r#"{"schema":"\"long\""}"#).unwrap();
        assert_eq!(avro.schema().schema_type, SchemaType::Avro);
        // Avro goes without schemaType, as the Java serializers send it.
        let sent =
            serde_json::to_string(&Wire::of(&Schema::new(SchemaType::Avro, "\"long\""))).unwrap();
        assert_eq!(sent, r#"{"schema":"\"long\""}"#);
        let sent = serde_json::to_string(&Wire::of(&Schema::new(SchemaType::Json, "{}"))).unwrap();
        assert_eq!(sent, r#"{"schema":"{}","schemaType":"JSON"}"#);
    }
}
