//! The names a query sees: the tables of its FROM, the columns of one table, and the SELECT
//! list's output names.

use std::collections::BTreeMap;

use sqlparser::ast::{Expr as Sql, Ident, SelectItem, Spanned, TableFactor};
use sqlparser::tokenizer::Span;

use super::catalog::{simple_name, Table};
use super::error::{fail, SqlError};
use super::scalar::{plan_expr, Scope};
use crate::engine::job::expr::{Expr, Select};
use crate::engine::job::path::FieldPath;

/// A table in FROM: the table and the name the query calls it by.
pub(super) struct From<'a> {
    pub table: &'a Table,
    pub alias: String,
}

/// The columns of one table (a query without a join, or one side's condition in a join).
pub(super) struct OneTable<'a>(pub &'a From<'a>);

/// A dotted path of identifiers.
pub(super) fn path_of(parts: &[Ident], span: Span) -> Result<FieldPath, SqlError> {
    let text: Vec<&str> = parts.iter().map(|i| i.value.as_str()).collect();
    FieldPath::parse(&text.join(".")).map_or_else(|e| fail(span, e.to_string()), Ok)
}

impl Scope for OneTable<'_> {
    fn column(&self, parts: &[Ident], span: Span) -> Result<FieldPath, SqlError> {
        let from = self.0;
        let rest = match parts {
            [t, rest @ ..] if !rest.is_empty() && t.value.eq_ignore_ascii_case(&from.alias) => rest,
            _ => parts,
        };
        let Some(first) = rest.first() else {
            return fail(span, "a column is needed here");
        };
        if !from.table.columns.is_empty() && from.table.column(&first.value).is_none() {
            let names: Vec<&str> = from.table.columns.iter().map(|c| c.name.as_str()).collect();
            return fail(
                span,
                format!(
                    "table {} has no column {}: its columns are {}",
                    from.table.name,
                    first.value,
                    names.join(", ")
                ),
            );
        }
        path_of(rest, span)
    }
}

/// A table of FROM.
pub(super) fn from_of<'a>(
    factor: &TableFactor,
    tables: &'a BTreeMap<String, Table>,
) -> Result<From<'a>, SqlError> {
    let TableFactor::Table { name, alias, .. } = factor else {
        return fail(
            factor.span(),
            "FROM reads a table declared by CREATE TABLE (no subqueries or functions)",
        );
    };
    let n = simple_name(name)?;
    let Some(table) = tables.get(&n) else {
        let known: Vec<&str> = tables.keys().map(String::as_str).collect();
        return fail(
            name.span(),
            format!(
                "no table {n}: declare it with CREATE TABLE (the tables are {})",
                known.join(", ")
            ),
        );
    };
    let alias = alias
        .as_ref()
        .map_or_else(|| n.clone(), |a| a.name.value.clone());
    Ok(From { table, alias })
}

/// The output name of a SELECT item without an alias: a column's last name, else `EXPR$i`
/// (as Flink names them).
fn default_name(e: &Sql, i: usize) -> String {
    match e {
        Sql::Identifier(id) => id.value.clone(),
        Sql::CompoundIdentifier(parts) => {
            parts.last().map_or_else(String::new, |p| p.value.clone())
        }
        _ => format!("EXPR${i}"),
    }
}

/// The SELECT list as named expressions; `None` for `SELECT *` (the record as it is).
pub(super) fn select_list(
    items: &[SelectItem],
    scope: &mut dyn Scope,
) -> Result<Option<Select>, SqlError> {
    if let [SelectItem::Wildcard(_)] = items {
        return Ok(None);
    }
    let mut columns: Vec<(String, Expr)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let (name, e, span) = match item {
            SelectItem::UnnamedExpr(e) => (default_name(e, i), e, e.span()),
            SelectItem::ExprWithAlias { expr, alias } => (alias.value.clone(), expr, alias.span),
            other => {
                return fail(
                    other.span(),
                    "name the columns: * is allowed alone, without a join",
                )
            }
        };
        if columns.iter().any(|(n, _)| *n == name) {
            return fail(
                span,
                format!("two columns are named {name}: give one an alias (AS ...)"),
            );
        }
        columns.push((name, plan_expr(e, scope)?));
    }
    Ok(Some(Select { columns }))
}
