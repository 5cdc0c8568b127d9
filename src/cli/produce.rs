//! `onceflow produce`: stdin lines to records, optionally in transactions.

use super::error::{CliError, Result};
use super::props::Conn;
use super::schema::{serializer, Encoder, RegistryArgs};
use bytes::Bytes;
use onceflow::client::config::split_property;
use onceflow::client::{DeliveryFuture, Producer, ProducerRecord};
use onceflow::schema::Part;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: Conn,
    /// Topic to write to.
    #[arg(short = 't', long)]
    topic: String,
    /// Partition (default: the partitioner decides).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
    /// Key separator: each line is KEY<SEP>VALUE.
    #[arg(short = 'K', long = "key-delimiter")]
    key_delimiter: Option<String>,
    /// Write in transactions under this transactional.id (fences older producers using it).
    #[arg(long = "transactional-id", value_name = "ID")]
    transactional_id: Option<String>,
    /// With --transactional-id: one transaction per N records (default: all of stdin in one).
    #[arg(long = "txn-records", value_name = "N")]
    txn_records: Option<u64>,
    /// With --transactional-id: abort each transaction instead of committing it (the records
    /// reach the log; read_committed consumers never see them).
    #[arg(long)]
    abort: bool,
    /// With --transactional-id: write all of stdin in one transaction, prepare it, print it as
    /// one JSON line on stdout and wait (up to transaction.timeout.ms) without committing;
    /// finish it from any process with `onceflow txn commit --prepared`.
    #[arg(long = "prepare-only")]
    prepare_only: bool,
    /// Write each value (a JSON line) in the schema registry's wire format with this schema:
    /// Avro (.avsc; the line in the Avro JSON encoding), Protobuf (.proto, its first message
    /// or FILE.proto#Message; the line in the proto3 JSON mapping; imports read from the
    /// file's directory and registered as references) or JSON Schema (.json; the line
    /// validated against it). Registered under the topic's subject unless
    /// -X auto.register.schemas=false. Needs -r.
    #[arg(long = "value-schema", value_name = "FILE")]
    value_schema: Option<String>,
    /// The same for keys (with -K).
    #[arg(long = "key-schema", value_name = "FILE")]
    key_schema: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// The serializers of keys and values, from --key-schema / --value-schema.
#[derive(Default)]
struct Serializers {
    key: Option<Encoder>,
    value: Option<Encoder>,
}

impl Serializers {
    fn new(args: &Args) -> Result<Serializers> {
        let needed = match (&args.value_schema, &args.key_schema) {
            (Some(_), _) => Some("--value-schema"),
            (None, Some(_)) => Some("--key-schema"),
            (None, None) => None,
        };
        if args.key_schema.is_some() && args.key_delimiter.is_none() {
            return Err(CliError::Usage(
                "--key-schema needs -K: each line is KEY<SEP>VALUE".into(),
            ));
        }
        let Some(registry) = args.registry.registry(&args.conn, needed)? else {
            return Ok(Serializers::default());
        };
        let make = |path: &Option<String>, part| {
            path.as_deref()
                .map(|p| serializer(&registry, p, part))
                .transpose()
        };
        Ok(Serializers {
            key: make(&args.key_schema, Part::Key)?,
            value: make(&args.value_schema, Part::Value)?,
        })
    }
}

/// What was delivered: (acknowledged, failed, first error).
type Checked = (u64, u64, Option<String>);

pub async fn run(args: Args) -> Result<ExitCode> {
    let serializers = Serializers::new(&args)?;
    let args = Args {
        conn: args.conn.without_registry_properties()?,
        ..args
    };
    let txn_id = transactional_id(&args)?;
    if args.key_delimiter.as_deref() == Some("") {
        return Err(CliError::Usage(
            "-K needs a non-empty separator, e.g. -K :".into(),
        ));
    }
    // transactional_id() checked that -X transactional.id, if given, says the same.
    let from_flags: Vec<String> = txn_id
        .iter()
        .map(|id| format!("transactional.id={id}"))
        .collect();
    let config = args.conn.producer(&from_flags)?;
    let producer = Producer::new(config.clone()).await?;
    // Fail fast on a missing topic, before reading stdin (looked up as the producer does:
    // the broker may create it).
    producer.partition_count(&args.topic).await?;
    let (tx, rx) = mpsc::channel::<DeliveryFuture>(100_000);
    let checker = tokio::spawn(check_deliveries(rx));
    let start = Instant::now();
    let mut input = Input {
        lines: BufReader::new(tokio::io::stdin()).lines(),
        args: &args,
        serializers,
        line: 0,
    };
    match txn_id {
        None => {
            let send_error = input.send_all(&producer, &tx, None).await.err();
            drop(tx);
            producer.flush().await?;
            let (ok, failed, first_error) = join(checker).await?;
            eprintln!("{}", summary(&args.topic, ok, failed, start));
            finish(send_error.or(first_error), failed)
        }
        Some(id) if args.prepare_only => {
            prepare_only(&producer, input, tx, checker, &id, &config).await
        }
        Some(_) => transactional(&producer, input, tx, checker, start).await,
    }
}

/// The transactional id from --transactional-id or -X transactional.id, and the checks that
/// the transactional flags are used together sensibly.
fn transactional_id(args: &Args) -> Result<Option<String>> {
    let mut from_props = None;
    for p in &args.conn.props {
        let (k, v) = split_property(p)?;
        if k == "transactional.id" {
            from_props = Some(v);
        }
    }
    let id = match (&args.transactional_id, from_props) {
        (Some(a), Some(b)) if *a != b => {
            return Err(CliError::Usage(format!(
                "--transactional-id '{a}' contradicts -X transactional.id={b}; give one"
            )))
        }
        (Some(a), _) => Some(a.clone()),
        (None, b) => b,
    };
    let flag = if args.prepare_only {
        Some("--prepare-only")
    } else if args.abort {
        Some("--abort")
    } else if args.txn_records.is_some() {
        Some("--txn-records")
    } else {
        None
    };
    if let (Some(flag), None) = (flag, &id) {
        return Err(CliError::Usage(format!("{flag} needs --transactional-id")));
    }
    if args.txn_records == Some(0) {
        return Err(CliError::Usage("--txn-records must be at least 1".into()));
    }
    if args.prepare_only && (args.abort || args.txn_records.is_some()) {
        return Err(CliError::Usage(
            "--prepare-only writes one transaction and leaves it open; it cannot be combined with --abort or --txn-records".into(),
        ));
    }
    Ok(id)
}

struct Input<'a> {
    lines: Lines<BufReader<Stdin>>,
    args: &'a Args,
    serializers: Serializers,
    /// The number of the last line read.
    line: u64,
}

impl Input<'_> {
    /// Sends stdin lines as records until EOF, or until `limit` records were sent. Returns how
    /// many were sent; an error stops sending (records already sent stay sent).
    async fn send_all(
        &mut self,
        producer: &Producer,
        tx: &mpsc::Sender<DeliveryFuture>,
        limit: Option<u64>,
    ) -> std::result::Result<u64, String> {
        let mut sent = 0u64;
        while limit.is_none_or(|l| sent < l) {
            let line = match self.lines.next_line().await {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(e) => return Err(format!("reading stdin: {e}")),
            };
            self.line += 1;
            let record = self.record(line).await?;
            let f = producer.send(record).await.map_err(|e| e.to_string())?;
            sent += 1;
            if tx.send(f).await.is_err() {
                return Err("the delivery checker stopped".into());
            }
        }
        Ok(sent)
    }

    /// The record for one line: KEY<SEP>VALUE with -K, the value otherwise; a part with a
    /// schema is read as JSON and written in the registry's wire format.
    async fn record(&self, line: String) -> std::result::Result<ProducerRecord, String> {
        let topic = self.args.topic.clone();
        let (key, value) = match &self.args.key_delimiter {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.to_owned()), v.to_owned()),
                None if self.serializers.key.is_some() => {
                    return Err(format!(
                        "line {}: no key separator '{sep}' (--key-schema needs KEY{sep}VALUE on every line)",
                        self.line
                    ))
                }
                None => (None, line),
            },
            None => (None, line),
        };
        let value = self.encode(&self.serializers.value, value, "value").await?;
        let mut record = ProducerRecord::new(topic, value);
        if let Some(k) = key {
            record = record.with_key(self.encode(&self.serializers.key, k, "key").await?);
        }
        record.partition = self.args.partition;
        Ok(record)
    }

    async fn encode(
        &self,
        serializer: &Option<Encoder>,
        text: String,
        part: &str,
    ) -> std::result::Result<Bytes, String> {
        let Some(s) = serializer else {
            return Ok(Bytes::from(text));
        };
        s.encode(&self.args.topic, &text)
            .await
            .map(Bytes::from)
            .map_err(|e| format!("line {}: the {part}: {e}", self.line))
    }

    fn topic(&self) -> &str {
        &self.args.topic
    }
}

async fn check_deliveries(mut rx: mpsc::Receiver<DeliveryFuture>) -> Checked {
    let (mut ok, mut failed, mut first_error) = (0u64, 0u64, None);
    while let Some(f) = rx.recv().await {
        match f.await {
            Ok(_) => ok += 1,
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    (ok, failed, first_error)
}

async fn join(checker: JoinHandle<Checked>) -> Result<Checked> {
    checker
        .await
        .map_err(|e| CliError::Failed(format!("delivery checker failed: {e}")))
}

fn summary(topic: &str, ok: u64, failed: u64, start: Instant) -> String {
    let secs = start.elapsed().as_secs_f64();
    format!(
        "onceflow: produced {ok} record(s) to {topic} in {secs:.2}s ({:.0} records/s); {failed} failed",
        ok as f64 / secs.max(1e-9)
    )
}

fn finish(error: Option<String>, failed: u64) -> Result<ExitCode> {
    if let Some(e) = error {
        eprintln!("onceflow: error: {e}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One transaction per --txn-records records (or one for all of stdin), each committed, or
/// aborted with --abort.
async fn transactional(
    producer: &Producer,
    mut input: Input<'_>,
    tx: mpsc::Sender<DeliveryFuture>,
    checker: JoinHandle<Checked>,
    start: Instant,
) -> Result<ExitCode> {
    let args = input.args;
    producer.init_transactions().await?;
    let (mut committed, mut committed_records) = (0u64, 0u64);
    let (mut aborted, mut aborted_records) = (0u64, 0u64);
    let mut error = None;
    loop {
        producer.begin_transaction()?;
        let sent = input.send_all(producer, &tx, args.txn_records).await;
        let (n, send_error) = match sent {
            Ok(n) => (n, None),
            Err(e) => (0, Some(e)),
        };
        if n == 0 && send_error.is_none() {
            // EOF at a transaction boundary: nothing was written in this one.
            producer.abort_transaction().await?;
            break;
        }
        if let Some(e) = send_error {
            // Whatever this transaction wrote must not become visible.
            error = Some(e);
            let _ = producer.abort_transaction().await;
            aborted += 1;
            break;
        }
        if args.abort {
            // Let the records reach the log before the abort marker, so the abort is real.
            producer.flush().await?;
            producer.abort_transaction().await?;
            aborted += 1;
            aborted_records += n;
        } else {
            match producer.commit_transaction().await {
                Ok(()) => {
                    committed += 1;
                    committed_records += n;
                }
                Err(e) => {
                    error = Some(format!(
                        "committing transaction {}: {e}",
                        committed + aborted + 1
                    ));
                    let _ = producer.abort_transaction().await;
                    aborted += 1;
                    aborted_records += n;
                    break;
                }
            }
        }
        if args.txn_records.is_none_or(|limit| n < limit) {
            break; // EOF
        }
    }
    drop(tx);
    let (ok, failed, first_error) = join(checker).await?;
    eprintln!(
        "{}; {committed} transaction(s) committed ({committed_records} records), {aborted} aborted ({aborted_records} records)",
        summary(input.topic(), ok, failed, start)
    );
    finish(error.or(first_error), failed)
}

/// The first phase of a two-phase commit: one transaction with all of stdin, prepared and left
/// open; the committable goes to stdout as one JSON line.
async fn prepare_only(
    producer: &Producer,
    mut input: Input<'_>,
    tx: mpsc::Sender<DeliveryFuture>,
    checker: JoinHandle<Checked>,
    id: &str,
    config: &onceflow::client::ProducerConfig,
) -> Result<ExitCode> {
    producer.init_transactions().await?;
    producer.begin_transaction()?;
    let sent = input.send_all(producer, &tx, None).await;
    drop(tx);
    let prepared = match sent {
        Ok(0) => Err("--prepare-only needs at least one record on stdin".to_owned()),
        Ok(_) => producer.prepare_commit().await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    let (ok, failed, first_error) = join(checker).await?;
    let prepared = match (prepared, first_error) {
        (Ok(p), None) if failed == 0 => p,
        (Err(e), _) | (Ok(_), Some(e)) => {
            let _ = producer.abort_transaction().await;
            return Err(CliError::Failed(format!(
                "transaction '{id}' not prepared (aborted): {e}"
            )));
        }
        (Ok(_), None) => {
            let _ = producer.abort_transaction().await;
            return Err(CliError::Failed(format!(
                "transaction '{id}' not prepared (aborted): {failed} record(s) failed"
            )));
        }
    };
    let json = serde_json::to_string(&prepared)
        .map_err(|e| CliError::Failed(format!("encoding the prepared transaction: {e}")))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{json}")
            .and_then(|()| out.flush())
            .map_err(|e| {
                CliError::Failed(format!("writing the prepared transaction to stdout: {e}"))
            })?;
    }
    let timeout = config.transaction_timeout;
    eprintln!(
        "onceflow: prepared transaction '{id}' with {ok} record(s) to {} (producer id {}, epoch {}); \
         commit it with `onceflow txn commit --prepared '{json}'` within transaction.timeout.ms={} ms; waiting",
        input.topic(),
        prepared.producer_id,
        prepared.producer_epoch,
        timeout.as_millis()
    );
    // Neither commit nor abort: the process only waits, to be killed or to outlive the
    // transaction (after which the coordinator aborts it unless someone committed it).
    tokio::time::sleep(timeout).await;
    eprintln!(
        "onceflow: transaction.timeout.ms={} ms passed; unless it was committed, the coordinator aborts transaction '{id}'",
        timeout.as_millis()
    );
    Ok(ExitCode::SUCCESS)
}
