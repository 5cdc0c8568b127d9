//! `onceflow groups list|describe`: the consumer groups of a cluster, their members and lag,
//! as `kafka-consumer-groups.sh --list` / `--describe` show them.

use super::error::{CliError, Result};
use super::props::Conn;
use onceflow::client::group::{ConsumerGroupDescription, GroupType};
use onceflow::client::Admin;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List every group in the cluster (every broker is asked): group id, type (classic, or
    /// consumer for KIP-848's consumer protocol), protocol type, state and coordinator.
    List {
        #[command(flatten)]
        conn: Conn,
        /// Only groups in this state (e.g. Stable, Empty, PreparingRebalance, Assigning,
        /// Reconciling; any case). Repeatable.
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// Only groups of this type: classic or consumer (any case). Repeatable.
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
    },
    /// Describe groups: type, state, assignor, coordinator, and one row per partition with a
    /// committed offset or an owner: CURRENT-OFFSET (committed), LOG-END-OFFSET (the high
    /// watermark: ListOffsets latest at read_uncommitted, also for read_committed groups),
    /// LAG (LOG-END-OFFSET − CURRENT-OFFSET; '-' when either is unknown) and the owner's
    /// member id, host and client id.
    Describe {
        #[command(flatten)]
        conn: Conn,
        /// The group to describe. Repeatable.
        #[arg(short = 'G', long = "group", value_name = "GROUP")]
        groups: Vec<String>,
        /// Describe every classic and consumer-protocol group instead.
        #[arg(long = "all-groups", conflicts_with = "groups")]
        all_groups: bool,
        /// Also list the members: member id, instance id, client id, host and the partitions
        /// assigned to each.
        #[arg(long)]
        members: bool,
    },
}

pub async fn run(args: Args) -> Result<ExitCode> {
    match args.action {
        Action::List {
            conn,
            states,
            types,
        } => list(conn, &states, &types).await,
        Action::Describe {
            conn,
            groups,
            all_groups,
            members,
        } => describe(conn, groups, all_groups, members).await,
    }
}

/// Prints `rows` under `header` with each column padded to its widest cell (two spaces
/// between columns, the last column unpadded).
fn print_table(header: &[&str], rows: &[Vec<String>]) {
    for line in table(header, rows) {
        println!("{line}");
    }
}

fn table(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out
}

fn dash(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

/// Whether `value` is one of `wanted` (any case); an empty filter lets everything through.
fn wanted(filter: &[String], value: &str) -> bool {
    filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
}

async fn list(conn: Conn, states: &[String], types: &[String]) -> Result<ExitCode> {
    let admin = Admin::new(conn.client()?).await?;
    let rows: Vec<Vec<String>> = admin
        .list_groups()
        .await?
        .into_iter()
        .filter(|g| wanted(states, g.state.as_str()) && wanted(types, g.group_type.as_str()))
        .map(|g| {
            vec![
                g.group,
                g.group_type.to_string(),
                or_dash(&g.protocol_type),
                g.state.to_string(),
                g.coordinator.to_string(),
            ]
        })
        .collect();
    print_table(
        &["GROUP", "TYPE", "PROTOCOL-TYPE", "STATE", "COORDINATOR"],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

fn unknown_group(group: &str) -> CliError {
    CliError::Failed(format!(
        "no group '{group}' on the cluster; `onceflow groups list` shows the groups"
    ))
}

fn print_group(d: &ConsumerGroupDescription, members: bool) {
    println!(
        "GROUP {}: type {}, state {}, protocol {}/{}, coordinator {}, {} member(s)",
        d.group,
        d.group_type,
        d.state,
        or_dash(&d.protocol_type),
        or_dash(&d.assignor),
        d.coordinator,
        d.members.len()
    );
    let rows: Vec<Vec<String>> = d
        .partitions
        .iter()
        .map(|p| {
            let owner = p
                .owner
                .as_deref()
                .and_then(|id| d.members.iter().find(|m| m.member_id == id));
            vec![
                p.partition.topic.clone(),
                p.partition.partition.to_string(),
                dash(p.committed),
                dash(p.log_end),
                dash(p.lag),
                owner.map_or_else(|| "-".to_owned(), |m| m.member_id.clone()),
                owner.map_or_else(|| "-".to_owned(), |m| or_dash(&m.client_host)),
                owner.map_or_else(|| "-".to_owned(), |m| or_dash(&m.client_id)),
            ]
        })
        .collect();
    println!();
    print_table(
        &[
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "MEMBER-ID",
            "HOST",
            "CLIENT-ID",
        ],
        &rows,
    );
    if members {
        print_members(d);
    }
}

/// The `--members` table: one row per member with its assignment.
fn print_members(d: &ConsumerGroupDescription) {
    let rows: Vec<Vec<String>> = d
        .members
        .iter()
        .map(|m| {
            vec![
                m.member_id.clone(),
                m.instance_id
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), or_dash),
                or_dash(&m.client_id),
                or_dash(&m.client_host),
                m.assignment.len().to_string(),
                if m.assignment.is_empty() {
                    "-".to_owned()
                } else {
                    m.assignment
                        .iter()
                        .map(|tp| tp.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ]
        })
        .collect();
    println!();
    print_table(
        &[
            "MEMBER-ID",
            "INSTANCE-ID",
            "CLIENT-ID",
            "HOST",
            "#PARTITIONS",
            "ASSIGNMENT",
        ],
        &rows,
    );
}

async fn describe(
    conn: Conn,
    groups: Vec<String>,
    all_groups: bool,
    members: bool,
) -> Result<ExitCode> {
    if groups.is_empty() && !all_groups {
        return Err(CliError::Usage(
            "name the group(s) with -G GROUP (repeatable), or give --all-groups; `onceflow groups list` shows the groups".into(),
        ));
    }
    let admin = Admin::new(conn.client()?).await?;
    let groups = if all_groups {
        admin
            .list_groups()
            .await?
            .into_iter()
            .filter(|g| matches!(g.group_type, GroupType::Classic | GroupType::Consumer))
            .map(|g| g.group)
            .collect()
    } else {
        groups
    };
    let mut unknown = None;
    let mut first = true;
    for group in &groups {
        match admin.describe_consumer_group(group).await? {
            Some(d) => {
                if !first {
                    println!();
                }
                first = false;
                print_group(&d, members);
            }
            // With --all-groups a group may go away between listing and describing it.
            None if all_groups => {}
            None => {
                unknown.get_or_insert_with(|| group.clone());
            }
        }
    }
    match unknown {
        Some(group) => Err(unknown_group(&group)),
        None => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_the_widest_cell() {
        let rows = vec![
            vec!["rides".to_owned(), "0".into(), "-".into()],
            vec!["a-much-longer-topic".to_owned(), "12".into(), "7".into()],
        ];
        assert_eq!(
            table(&["TOPIC", "PARTITION", "LAG"], &rows),
            vec![
                "TOPIC                PARTITION  LAG",
                "rides                0          -",
                "a-much-longer-topic  12         7",
            ]
        );
    }

    #[test]
    fn an_empty_table_is_its_header() {
        assert_eq!(table(&["GROUP", "STATE"], &[]), vec!["GROUP  STATE"]);
    }

    #[test]
    fn list_filters_match_any_case_and_an_empty_filter_matches_all() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cases = [
            (f(&[]), "Stable", true),
            (f(&["stable"]), "Stable", true),
            (f(&["Empty", "STABLE"]), "Stable", true),
            (f(&["Empty"]), "Stable", false),
            (f(&["consumer"]), "classic", false),
        ];
        for (filter, value, want) in cases {
            assert_eq!(wanted(&filter, value), want, "{filter:?} {value}");
        }
    }

    #[test]
    fn unknowns_print_as_a_dash() {
        assert_eq!(dash(None), "-");
        assert_eq!(dash(Some(0)), "0");
        assert_eq!(or_dash(""), "-");
        assert_eq!(or_dash("range"), "range");
    }

    #[test]
    fn the_unknown_group_error_names_the_group_and_the_way_to_find_one() {
        assert_eq!(
            unknown_group("x").to_string(),
            "no group 'x' on the cluster; `onceflow groups list` shows the groups"
        );
    }
}
