//! `onceflow topics create|delete|list`.

use super::props;
use onceflow::client::admin::NewTopic;
use onceflow::client::config::split_property;
use onceflow::client::{Admin, Error};
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
        /// Bootstrap broker(s).
        #[arg(short = 'b', long = "brokers", default_value = "127.0.0.1:9092")]
        broker: String,
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
        /// A client property, key=value.
        #[arg(short = 'X', value_name = "KEY=VALUE")]
        props: Vec<String>,
    },
    /// Delete a topic.
    Delete {
        /// Bootstrap broker(s).
        #[arg(short = 'b', long = "brokers", default_value = "127.0.0.1:9092")]
        broker: String,
        /// Topic name.
        #[arg(short = 't', long)]
        topic: String,
        /// A client property, key=value.
        #[arg(short = 'X', value_name = "KEY=VALUE")]
        props: Vec<String>,
    },
    /// List topics with their partition counts.
    List {
        /// Bootstrap broker(s).
        #[arg(short = 'b', long = "brokers", default_value = "127.0.0.1:9092")]
        broker: String,
        /// A client property, key=value.
        #[arg(short = 'X', value_name = "KEY=VALUE")]
        props: Vec<String>,
    },
}

pub async fn run(args: Args) -> Result<ExitCode, Error> {
    match args.action {
        Action::Create {
            broker,
            topic,
            partitions,
            replication_factor,
            configs,
            props,
        } => {
            if partitions < 1 {
                return Err(Error::Usage(format!(
                    "--partitions must be at least 1, got {partitions}"
                )));
            }
            let admin = Admin::new(props::client(&broker, &props)?).await?;
            let mut t = NewTopic::new(topic.clone(), partitions);
            t.replication_factor = replication_factor;
            for c in &configs {
                let (k, v) = split_property(c)?;
                t = t.with_config(k, v);
            }
            admin.create_topics(&[t]).await?;
            eprintln!("onceflow: created topic {topic} with {partitions} partition(s)");
        }
        Action::Delete {
            broker,
            topic,
            props,
        } => {
            let admin = Admin::new(props::client(&broker, &props)?).await?;
            admin.delete_topics(&[topic.as_str()]).await?;
            eprintln!("onceflow: deleted topic {topic}");
        }
        Action::List { broker, props } => {
            let admin = Admin::new(props::client(&broker, &props)?).await?;
            for (name, partitions) in admin.list_topics().await? {
                println!("{name}\t{partitions}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
