//! `onceflow txn list|describe|abort|commit`: find and end transactions.

use super::error::{CliError, Result};
use super::props::Conn;
use onceflow::client::transactions::{
    resume_transaction, ActiveProducer, ListTransactionsFilter, PreparedTransaction, ResumeOutcome,
    TransactionDescription, TxnEnd, TxnState, TRANSACTION_STATES,
};
use onceflow::client::ErrorCode;
use onceflow::client::{Admin, IsolationLevel, Offset, TopicPartition};
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List transactional ids (every broker is asked): id, producer id, state.
    List {
        #[command(flatten)]
        conn: Conn,
        /// Only transactions in this state (Empty, Ongoing, PrepareCommit, PrepareAbort,
        /// CompleteCommit, CompleteAbort, PrepareEpochFence, Dead). Repeatable.
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// Only open transactions that started more than MS milliseconds ago.
        #[arg(long = "older-than-ms", value_name = "MS")]
        older_than_ms: Option<u64>,
    },
    /// Describe a transactional id: state, producer id/epoch, timeout, start time, partitions,
    /// and per partition the producers whose open transaction holds the LSO back.
    Describe {
        #[command(flatten)]
        conn: Conn,
        /// The transactional id.
        #[arg(long = "transactional-id", value_name = "ID")]
        transactional_id: String,
    },
    /// End a stale open transaction by fencing its transactional id (InitProducerId): the
    /// coordinator aborts it and bumps the epoch. A live producer using the id is fenced too.
    Abort {
        #[command(flatten)]
        conn: Conn,
        /// The transactional id.
        #[arg(long = "transactional-id", value_name = "ID")]
        transactional_id: String,
    },
    /// Commit (or abort) a transaction prepared by `onceflow produce --prepare-only` or
    /// `Producer::prepare_commit`, from any process. Safe to repeat.
    Commit {
        #[command(flatten)]
        conn: Conn,
        /// The prepared transaction: its JSON, or @FILE holding it.
        #[arg(long, value_name = "JSON|@FILE")]
        prepared: String,
        /// Abort it instead of committing.
        #[arg(long)]
        abort: bool,
    },
}

pub async fn run(args: Args) -> Result<ExitCode> {
    match args.action {
        Action::List {
            conn,
            states,
            older_than_ms,
        } => list(conn, states, older_than_ms).await,
        Action::Describe {
            conn,
            transactional_id,
        } => describe(conn, &transactional_id).await,
        Action::Abort {
            conn,
            transactional_id,
        } => abort(conn, &transactional_id).await,
        Action::Commit {
            conn,
            prepared,
            abort,
        } => commit(conn, &prepared, abort).await,
    }
}

async fn admin(conn: &Conn) -> Result<Admin> {
    Ok(Admin::new(conn.client()?).await?)
}

/// A state name as the coordinator spells it, whatever the case it was typed in.
fn canonical_state(s: &str) -> Result<String> {
    TRANSACTION_STATES
        .iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(s))
        .map(|k| k.as_str().to_owned())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "unknown transaction state '{s}' for --state; use one of {}",
                TRANSACTION_STATES
                    .iter()
                    .map(TxnState::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

fn not_found(id: &str) -> CliError {
    CliError::Failed(format!(
        "transactional id '{id}' is not known to its coordinator (never used, or expired after transactional.id.expiration.ms); check --transactional-id"
    ))
}

async fn list(conn: Conn, states: Vec<String>, older_than_ms: Option<u64>) -> Result<ExitCode> {
    let filter = ListTransactionsFilter {
        states: states
            .iter()
            .map(|s| canonical_state(s))
            .collect::<Result<_>>()?,
        producer_ids: Vec::new(),
        open_longer_than: older_than_ms.map(Duration::from_millis),
    };
    let admin = admin(&conn).await?;
    for t in admin.list_transactions(&filter).await? {
        println!("{}\t{}\t{}", t.transactional_id, t.producer_id, t.state);
    }
    Ok(ExitCode::SUCCESS)
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn print_description(d: &TransactionDescription) {
    println!("transactional id: {}", d.transactional_id);
    println!("state: {}", d.state);
    println!("producer id: {}", d.producer_id);
    println!("producer epoch: {}", d.producer_epoch);
    println!("timeout ms: {}", d.timeout.as_millis());
    match (d.start_time_ms, d.age()) {
        (Some(start), Some(age)) if d.is_open() => {
            println!("start time ms: {start} (open for {})", secs(age))
        }
        (Some(start), _) => println!("start time ms: {start}"),
        (None, _) => println!("start time ms: none"),
    }
    println!("coordinator: {}", d.coordinator);
    let parts: Vec<String> = d.partitions.iter().map(|tp| tp.to_string()).collect();
    println!("partitions: {}", parts.join(" "));
}

/// (last stable offset, high watermark) of each partition.
async fn stable_offsets(
    admin: &Admin,
    tps: &[TopicPartition],
) -> Result<HashMap<TopicPartition, (i64, i64)>> {
    let lso = admin
        .list_offsets(tps, Offset::End, IsolationLevel::ReadCommitted)
        .await?;
    let hw = admin
        .list_offsets(tps, Offset::End, IsolationLevel::ReadUncommitted)
        .await?;
    Ok(tps
        .iter()
        .filter_map(|tp| Some((tp.clone(), (*lso.get(tp)?, *hw.get(tp)?))))
        .collect())
}

fn print_producer(p: &ActiveProducer, now_ms: i64) {
    let open = match p.current_txn_start_offset {
        Some(o) => format!("transaction open since offset {o}"),
        None => "no open transaction".to_owned(),
    };
    let last = if p.last_timestamp_ms >= 0 {
        let ago = u64::try_from(now_ms.saturating_sub(p.last_timestamp_ms)).unwrap_or(0);
        format!(", last write {} ago", secs(Duration::from_millis(ago)))
    } else {
        String::new()
    };
    println!(
        "  producer {} epoch {}: {open} (last sequence {}{last})",
        p.producer_id, p.producer_epoch, p.last_sequence
    );
}

async fn describe(conn: Conn, id: &str) -> Result<ExitCode> {
    let admin = admin(&conn).await?;
    let d = admin
        .describe_transaction(id)
        .await?
        .ok_or_else(|| not_found(id))?;
    print_description(&d);
    if d.partitions.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let producers = admin.describe_producers(&d.partitions).await?;
    let offsets = stable_offsets(&admin, &d.partitions).await?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
    for tp in &d.partitions {
        match offsets.get(tp) {
            Some((lso, hw)) => println!(
                "partition {tp}: last stable offset {lso}, high watermark {hw}{}",
                if lso < hw {
                    " (read_committed consumers stop at the LSO)"
                } else {
                    ""
                }
            ),
            None => println!("partition {tp}:"),
        }
        for p in producers.iter().filter(|p| &p.partition == tp) {
            print_producer(p, now_ms);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn one_line(d: Option<&TransactionDescription>) -> String {
    match d {
        Some(d) => format!(
            "state {}, producer id {}, epoch {}, partitions [{}]",
            d.state,
            d.producer_id,
            d.producer_epoch,
            d.partitions
                .iter()
                .map(|tp| tp.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ),
        None => "unknown to the coordinator".to_owned(),
    }
}

async fn abort(conn: Conn, id: &str) -> Result<ExitCode> {
    let admin = admin(&conn).await?;
    let before = admin
        .describe_transaction(id)
        .await?
        .ok_or_else(|| not_found(id))?;
    println!("before: {}", one_line(Some(&before)));
    if before.state != TxnState::Ongoing {
        // PrepareCommit/PrepareAbort finish on their own (fencing would wait for them and not
        // change the outcome); the other states have nothing open.
        println!(
            "nothing to abort: transactional id '{id}' has no ongoing transaction (state {})",
            before.state
        );
        return Ok(ExitCode::SUCCESS);
    }
    let timeout = if before.timeout.is_zero() {
        Duration::from_secs(60)
    } else {
        before.timeout
    };
    let fenced = admin.fence_transactional_id(id, timeout).await?;
    println!(
        "fenced: producer id {} now at epoch {}; the open transaction was aborted",
        fenced.producer_id, fenced.producer_epoch
    );
    println!("after: {}", one_line(fenced.after.as_ref()));
    Ok(ExitCode::SUCCESS)
}

fn parse_prepared(arg: &str) -> Result<PreparedTransaction> {
    let (text, source) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| {
                CliError::Input(format!("cannot read --prepared file '{path}': {e}"))
            })?,
            format!("file '{path}'"),
        ),
        None => (arg.to_owned(), "--prepared".to_owned()),
    };
    serde_json::from_str(text.trim()).map_err(|e| {
        CliError::Input(format!(
            "{source} is not a prepared transaction ({e}); expected the JSON line `onceflow produce --prepare-only` prints, e.g. {{\"transactional_id\":\"t\",\"producer_id\":1,\"producer_epoch\":0,\"transaction_version\":2}}"
        ))
    })
}

async fn commit(conn: Conn, prepared: &str, abort: bool) -> Result<ExitCode> {
    let prepared = parse_prepared(prepared)?;
    let admin = admin(&conn).await?;
    let id = &prepared.transactional_id;
    let outcome = match resume_transaction(admin.cluster(), &prepared, if abort { TxnEnd::Abort } else { TxnEnd::Commit }).await {
        Err(e) if e.code() == Some(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND) => {
            ResumeOutcome::NotCommitted {
                reason: "the coordinator does not know the transactional id (never used, or expired after transactional.id.expiration.ms)".into(),
            }
        }
        other => other?,
    };
    match outcome {
        ResumeOutcome::Completed => {
            println!(
                "completed: transaction '{id}' {}",
                if abort { "aborted" } else { "committed" }
            );
            Ok(ExitCode::SUCCESS)
        }
        ResumeOutcome::AlreadyCommitted => {
            println!(
                "already committed: transaction '{id}' had been committed; nothing written twice"
            );
            Ok(ExitCode::SUCCESS)
        }
        ResumeOutcome::NothingToCommit => {
            println!(
                "nothing to commit: transaction '{id}' was prepared with no records or offsets"
            );
            Ok(ExitCode::SUCCESS)
        }
        ResumeOutcome::NotCommitted { reason } => {
            println!("not committed: transaction '{id}': {reason}");
            Ok(ExitCode::FAILURE)
        }
        other => {
            println!("not committed: transaction '{id}': {other:?}");
            Ok(ExitCode::FAILURE)
        }
    }
}
