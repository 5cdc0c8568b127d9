//! `onceflow topics create|delete|list`.

use super::error::{CliError, Result};
use super::props::Conn;
use onceflow::client::admin::NewTopic;
use onceflow::client::config::split_property;
use onceflow::client::Admin;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Create a topic.
    Create {
        #[command(flatten)]
        conn: Conn,
        /// Topic name.
        #[arg(short = 't', long)]
        topic: String,
        /// Partitions.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Replication factor (-1: the broker default).
        #[arg(long, default_value_t = -1)]
        replication_factor: i16,
        /// A topic config, key=value (e.g. --config max.message.bytes=2097152). Repeatable.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Delete a topic.
    Delete {
        #[command(flatten)]
        conn: Conn,
        /// Topic name.
        #[arg(short = 't', long)]
        topic: String,
    },
    /// List topics with their partition counts.
    List {
        #[command(flatten)]
        conn: Conn,
    },
}

pub async fn run(args: Args) -> Result<ExitCode> {
    match args.action {
        Action::Create {
            conn,
            topic,
            partitions,
            replication_factor,
            configs,
        } => {
            if partitions < 1 {
                return Err(CliError::Usage(format!(
                    "--partitions must be at least 1, got {partitions}"
                )));
            }
            let mut t = NewTopic::new(topic.clone(), partitions);
            t.replication_factor = replication_factor;
            for c in &configs {
                let (k, v) = split_property(c)?;
                t = t.with_config(k, v);
            }
            let admin = Admin::new(conn.client()?).await?;
            admin.create_topics(&[t]).await?;
            eprintln!("onceflow: created topic {topic} with {partitions} partition(s)");
        }
        Action::Delete { conn, topic } => {
            let admin = Admin::new(conn.client()?).await?;
            admin.delete_topics(&[topic.as_str()]).await?;
            eprintln!("onceflow: deleted topic {topic}");
        }
        Action::List { conn } => {
            let admin = Admin::new(conn.client()?).await?;
            for (name, partitions) in admin.list_topics().await? {
                println!("{name}\t{partitions}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
