//! `INSERT INTO sink SELECT …`: the query planned onto the job file's operators (the same
//! topology a job file or a typed job runs): `WHERE` and the `SELECT` list as expression
//! operators; `GROUP BY` a column and `TUMBLE` / `HOP` / `SESSION` as key_by and the window
//! aggregate (`group`); `JOIN … ON` an equality and a time bound as the interval join (`join`);
//! `ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY … DESC)` over a grouped subquery as a
//! second keyed stage, the window Top-N (`top_n`).

use std::collections::BTreeMap;

use sqlparser::ast::{
    GroupByExpr, Insert, Query, Select, SetExpr, Spanned, TableFactor, TableObject, TableWithJoins,
};

use super::catalog::{simple_name, Table};
use super::error::{fail, SqlError};
use super::scalar::plan_expr;
use super::scope::{from_of, select_list, From, OneTable};
use crate::engine::job::Operator;

/// What a query reads, writes and computes.
#[derive(Debug)]
pub(super) struct Planned {
    /// The source tables, in FROM order (two for a join).
    pub sources: Vec<String>,
    /// The sink table.
    pub sink: String,
    /// The operators.
    pub pipeline: Vec<Operator>,
}

/// The query of an INSERT, planned.
///
/// # Errors
/// A form the engine does not run, each naming where and what is supported.
pub(super) fn plan_insert(
    insert: &Insert,
    tables: &BTreeMap<String, Table>,
) -> Result<Planned, SqlError> {
    let TableObject::TableName(name) = &insert.table else {
        return fail(
            insert.table.span(),
            "INSERT INTO a table declared by CREATE TABLE",
        );
    };
    let sink = simple_name(name)?;
    if !tables.contains_key(&sink) {
        return fail(name.span(), format!("no table {sink}: declare the sink with CREATE TABLE {sink} WITH ('connector' = 'kafka', 'topic' = '...')"));
    }
    if let Some(c) = insert.columns.first() {
        return fail(
            c.span(),
            "INSERT INTO a table without a column list: the SELECT list names the output's fields",
        );
    }
    let Some(query) = &insert.source else {
        return fail(
            name.span(),
            "INSERT INTO ... SELECT ...: the query is missing",
        );
    };
    let select = the_select(query)?;
    let [TableWithJoins { relation, joins }] = select.from.as_slice() else {
        return fail(
            select.span(),
            "FROM reads one table, or two joined with JOIN ... ON",
        );
    };
    if matches!(relation, TableFactor::Derived { .. }) && joins.is_empty() {
        let Some((source, pipeline)) = super::top_n::plan_top_n(select, tables)? else {
            return fail(
                relation.span(),
                "FROM reads a table declared by CREATE TABLE",
            );
        };
        return planned(vec![source], sink, name, pipeline);
    }
    let left = from_of(relation, tables)?;
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    let (sources, pipeline) = match joins.as_slice() {
        [] if grouped => (
            vec![left.table.name.clone()],
            super::group::plan_grouped(select, &left)?,
        ),
        [] => (vec![left.table.name.clone()], plan_plain(select, &left)?),
        [join] => {
            if grouped {
                return fail(select.span(), "GROUP BY over a join is not supported yet");
            }
            let right = from_of(&join.relation, tables)?;
            let ops = super::join::plan_join(select, join, &left, &right)?;
            (vec![left.table.name.clone(), right.table.name.clone()], ops)
        }
        _ => return fail(select.span(), "a query joins at most two tables"),
    };
    planned(sources, sink, name, pipeline)
}

/// The planned query, unless it reads the table it writes.
fn planned(
    sources: Vec<String>,
    sink: String,
    name: &sqlparser::ast::ObjectName,
    pipeline: Vec<Operator>,
) -> Result<Planned, SqlError> {
    if sources.contains(&sink) {
        return fail(
            name.span(),
            format!("table {sink} is both read and written"),
        );
    }
    Ok(Planned {
        sources,
        sink,
        pipeline,
    })
}

/// The query's one SELECT, with what a streaming job cannot run refused.
fn the_select(query: &Query) -> Result<&Select, SqlError> {
    let refused = [
        (query.with.is_some(), "WITH"),
        (query.order_by.is_some(), "ORDER BY"),
        (query.limit_clause.is_some(), "LIMIT"),
    ];
    if let Some((_, what)) = refused.iter().find(|(r, _)| *r) {
        return fail(
            query.span(),
            format!("{what} is not supported in a streaming job"),
        );
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return fail(
            query.body.span(),
            "one SELECT is supported (no UNION, VALUES or nesting)",
        );
    };
    if let Some(d) = &select.distinct {
        return fail(select.span(), format!("SELECT {d} is not supported yet"));
    }
    Ok(select)
}

/// WHERE and the SELECT list of one table.
fn plan_plain(select: &Select, from: &From<'_>) -> Result<Vec<Operator>, SqlError> {
    if let Some(h) = &select.having {
        return fail(h.span(), "HAVING needs a GROUP BY");
    }
    let mut ops = Vec::new();
    let mut scope = OneTable(from);
    if let Some(w) = &select.selection {
        ops.push(Operator::Where(plan_expr(w, &mut scope)?));
    }
    if let Some(s) = select_list(&select.projection, &mut scope)? {
        ops.push(Operator::Select(s));
    }
    Ok(ops)
}
