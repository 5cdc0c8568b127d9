//! Window Top-N, as Flink SQL writes it: the N rows of each window with the largest value of
//! a column, over a grouped query's results.
//!
//! ```sql
//! SELECT * FROM (
//!   SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start ORDER BY tips DESC) AS `rank`
//!   FROM (SELECT driver_id, TUMBLE_START(event_time, INTERVAL '1' HOUR) AS window_start, ...
//!         FROM fares GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' HOUR))
//! ) WHERE `rank` <= 3
//! ```
//!
//! Planned as a second keyed stage after the grouped query's: key_by the window's start
//! column, a tumbling window of the grouped query's size on it (its watermark the first
//! stage's), and the `top` stage (`job::top`), whose rows are the grouped query's with the
//! rank; then the outer SELECT list. Equal values rank by the rest of the row (its JSON
//! text), so the ranks do not depend on arrival order.

use std::collections::BTreeMap;

use sqlparser::ast::{
    BinaryOperator, Expr as Sql, Function as SqlFunction, GroupByExpr, Ident, OrderBySort, Query,
    Select, SelectItem, SetExpr, Spanned, TableFactor, TableWithJoins, Value, WindowType,
};
use sqlparser::tokenizer::Span;

use super::catalog::Table;
use super::error::{fail, SqlError};
use super::scalar::Scope;
use super::scope::{from_of, path_of, select_list};
use crate::engine::job::aggregate::{AggFn, AggregateSpec, WindowAggregate};
use crate::engine::job::path::FieldPath;
use crate::engine::job::project::KeyBy;
use crate::engine::job::top::TopN;
use crate::engine::job::Operator;
use crate::engine::time::WindowKind;

/// The form, for messages.
const FORM: &str = "a window Top-N reads SELECT ... FROM (SELECT *, ROW_NUMBER() OVER \
    (PARTITION BY window_start ORDER BY <column> DESC) AS rownum FROM (<a GROUP BY with \
    TUMBLE>)) WHERE rownum <= N";

/// The columns of a derived table: the rows of the ranked query.
struct Derived {
    columns: Vec<String>,
}

impl Scope for Derived {
    fn column(&self, parts: &[Ident], span: Span) -> Result<FieldPath, SqlError> {
        let Some(first) = parts.first() else {
            return fail(span, "a column is needed here");
        };
        if !self.columns.contains(&first.value) {
            return fail(
                span,
                format!(
                    "the ranked rows have no column {}: they have {}",
                    first.value,
                    self.columns.join(", ")
                ),
            );
        }
        path_of(parts, span)
    }
}

/// The one SELECT of a subquery.
fn select_of(query: &Query) -> Result<&Select, SqlError> {
    match query.body.as_ref() {
        SetExpr::Select(s)
            if query.order_by.is_none() && query.limit_clause.is_none() && query.with.is_none() =>
        {
            Ok(s)
        }
        other => fail(other.span(), FORM),
    }
}

/// The derived table of a FROM, if it is one.
fn derived(factor: &TableFactor) -> Option<&Query> {
    match factor {
        TableFactor::Derived { subquery, .. } => Some(subquery),
        _ => None,
    }
}

/// The one table (or derived table) of a SELECT's FROM.
fn only_from(select: &Select) -> Result<&TableFactor, SqlError> {
    match select.from.as_slice() {
        [TableWithJoins { relation, joins }] if joins.is_empty() => Ok(relation),
        _ => fail(select.span(), FORM),
    }
}

/// `ROW_NUMBER() OVER (PARTITION BY ... ORDER BY <column> DESC)`: the partition columns and
/// the ranking column.
fn row_number(f: &SqlFunction) -> Result<(Vec<String>, String), SqlError> {
    if !f.name.to_string().eq_ignore_ascii_case("ROW_NUMBER") {
        return fail(f.span(), FORM);
    }
    let Some(WindowType::WindowSpec(spec)) = &f.over else {
        return fail(
            f.span(),
            "ROW_NUMBER() needs OVER (PARTITION BY ... ORDER BY ... DESC)",
        );
    };
    if spec.window_frame.is_some() {
        return fail(f.span(), "ROW_NUMBER() OVER (...) takes no window frame");
    }
    let name = |e: &Sql| match e {
        Sql::Identifier(i) => Ok(i.value.clone()),
        other => fail(
            other.span(),
            "PARTITION BY and ORDER BY name columns of the grouped query",
        ),
    };
    let partition = spec
        .partition_by
        .iter()
        .map(name)
        .collect::<Result<_, _>>()?;
    let [order] = spec.order_by.as_slice() else {
        return fail(f.span(), "ROW_NUMBER() OVER (... ORDER BY one column DESC)");
    };
    if !matches!(order.options.sort, Some(OrderBySort::Desc)) {
        return fail(
            order.span(),
            "ORDER BY ... DESC: the Top-N keeps the largest values (the smallest are not supported yet)",
        );
    }
    Ok((partition, name(&order.expr)?))
}

/// `WHERE rownum <= N` (or `< N + 1`, `= 1`): N.
fn limit(selection: Option<&Sql>, rank: &str, span: Span) -> Result<usize, SqlError> {
    let Some(Sql::BinaryOp { left, op, right }) = selection else {
        return fail(
            span,
            format!("WHERE {rank} <= N: a Top-N keeps N rows per window"),
        );
    };
    let is_rank = matches!(left.as_ref(), Sql::Identifier(i) if i.value == rank);
    let n = match right.as_ref() {
        Sql::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse::<usize>().ok(),
            _ => None,
        },
        _ => None,
    };
    let n = match (is_rank, op, n) {
        (true, BinaryOperator::LtEq, Some(n)) => n,
        (true, BinaryOperator::Lt, Some(n)) => n.saturating_sub(1),
        (true, BinaryOperator::Eq, Some(1)) => 1,
        _ => {
            return fail(
                left.span().union(&right.span()),
                format!("WHERE {rank} <= N, with N a whole number"),
            )
        }
    };
    if n == 0 {
        return fail(right.span(), "N must be at least 1");
    }
    Ok(n)
}

/// The middle query of a window Top-N: `SELECT *, ROW_NUMBER() OVER (...) AS rownum FROM
/// (<grouped>)`.
struct Ranking<'a> {
    partition: Vec<String>,
    order: String,
    /// The row number's name.
    rank: String,
    /// Where ROW_NUMBER is written.
    span: Span,
    /// The grouped query it ranks.
    grouped: &'a Query,
}

fn ranking(ranked: &Select) -> Result<Ranking<'_>, SqlError> {
    let (partition, order, rank, span) = match ranked.projection.as_slice() {
        [SelectItem::Wildcard(_), SelectItem::ExprWithAlias {
            expr: Sql::Function(f),
            alias,
        }] => {
            let (p, o) = row_number(f)?;
            (p, o, alias.value.clone(), f.span())
        }
        _ => return fail(ranked.span(), FORM),
    };
    if ranked.selection.is_some() || ranked.having.is_some() {
        return fail(ranked.span(), format!("filter the ranks outside: {FORM}"));
    }
    if !matches!(&ranked.group_by, GroupByExpr::Expressions(e, _) if e.is_empty()) {
        return fail(ranked.span(), FORM);
    }
    let Some(grouped) = derived(only_from(ranked)?) else {
        return fail(
            ranked.span(),
            format!("{FORM}: the innermost query groups a table"),
        );
    };
    Ok(Ranking {
        partition,
        order,
        rank,
        span,
        grouped,
    })
}

/// The outer query of a window Top-N (module docs), whose FROM is `ranked`: the tables it
/// reads and its operators; `None` when the FROM is not a derived table.
///
/// # Errors
/// A derived table that is not this form, naming what is.
pub(super) fn plan_top_n(
    outer: &Select,
    tables: &BTreeMap<String, Table>,
) -> Result<Option<(String, Vec<Operator>)>, SqlError> {
    let Some(ranked) = derived(only_from(outer)?) else {
        return Ok(None);
    };
    let ranked = select_of(ranked)?;
    let Ranking {
        partition,
        order,
        rank,
        span,
        grouped,
    } = ranking(ranked)?;
    let grouped = select_of(grouped)?;
    let from = from_of(only_from(grouped)?, tables)?;
    let mut ops = super::group::plan_grouped(grouped, &from)?;
    let (Some(Operator::Select(list)), Some(Operator::WindowAggregate(first))) = (
        ops.last(),
        ops.iter()
            .find(|op| matches!(op, Operator::WindowAggregate(_))),
    ) else {
        return fail(grouped.span(), FORM);
    };
    let WindowKind::Tumbling { size } = first.kind else {
        return fail(
            grouped.span(),
            "a window Top-N ranks the rows of a TUMBLE window (HOP and SESSION are not supported yet)",
        );
    };
    let columns: Vec<String> = list.columns.iter().map(|(n, _)| n.clone()).collect();
    let start = partition_column(grouped, &columns, &partition, span)?;
    if !columns.contains(&order) {
        return fail(
            span,
            format!(
                "ORDER BY {order}: the grouped query has no such column (it has {})",
                columns.join(", ")
            ),
        );
    }
    let n = limit(outer.selection.as_ref(), &rank, outer.span())?;
    if outer.having.is_some()
        || !matches!(&outer.group_by, GroupByExpr::Expressions(e, _) if e.is_empty())
    {
        return fail(outer.span(), FORM);
    }
    let path = |c: &str| FieldPath::parse(c).map_err(|e| super::error::at(span, e.to_string()));
    let (start_path, by) = (path(&start)?, path(&order)?);
    ops.push(Operator::KeyBy(KeyBy {
        field: start_path.clone(),
    }));
    let top = TopN {
        n,
        by,
        keep: Vec::new(),
        rank: Some(rank.clone()),
    };
    ops.push(Operator::WindowAggregate(WindowAggregate {
        kind: WindowKind::Tumbling { size },
        time: start_path,
        out_of_orderness: 0,
        allowed_lateness: 0,
        late_topic: None,
        key_name: start,
        aggregate: AggregateSpec {
            outputs: vec![(rank.clone(), AggFn::Top(top))],
        },
    }));
    let mut columns = columns;
    columns.push(rank);
    if let Some(list) = select_list(&outer.projection, &mut Derived { columns })? {
        ops.push(Operator::Select(list));
    }
    Ok(Some((from.table.name.clone(), ops)))
}

/// The grouped query's window-start column (its `TUMBLE_START(...)` item), which the
/// partition must name; it may name the window's end too, nothing else.
fn partition_column(
    grouped: &Select,
    columns: &[String],
    partition: &[String],
    span: Span,
) -> Result<String, SqlError> {
    let start = columns
        .iter()
        .find(|c| partition.contains(c) && grouped_column_is(grouped, columns, c, "TUMBLE_START"));
    let Some(start) = start else {
        return fail(span, "PARTITION BY the grouped query's window start (its TUMBLE_START(...) column), and optionally its end");
    };
    if let Some(other) = partition
        .iter()
        .find(|p| *p != start && !grouped_column_is(grouped, columns, p, "TUMBLE_END"))
    {
        return fail(span, format!("PARTITION BY {other}: a window Top-N partitions by the window (its start and end columns) only"));
    }
    Ok(start.clone())
}

/// Whether output column `name` of the grouped query is the window function `bound`'s.
fn grouped_column_is(grouped: &Select, columns: &[String], name: &str, bound: &str) -> bool {
    grouped.projection.iter().zip(columns).any(|(item, c)| {
        let e = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => return false,
        };
        c == name && matches!(e, Sql::Function(f) if f.name.to_string().eq_ignore_ascii_case(bound))
    })
}
