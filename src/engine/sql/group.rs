//! `GROUP BY key, TUMBLE(t, size) | HOP(t, slide, size) | SESSION(t, gap)` with COUNT(*),
//! SUM, MIN, MAX and AVG: key_by the column and the window aggregate, then HAVING and the
//! SELECT list over the window's result record (key, `window_start`, `window_end` and one
//! field per aggregate call).

use sqlparser::ast::{
    DuplicateTreatment, Expr as Sql, Function as SqlFunction, FunctionArg, FunctionArgExpr,
    FunctionArguments, GroupByExpr, Ident, Spanned,
};
use sqlparser::tokenizer::Span;

use super::error::{fail, SqlError};
use super::scalar::{call_args, interval_ms, plan_expr, Scope};
use super::scope::{select_list, From, OneTable};
use crate::engine::job::aggregate::{AggFn, AggregateSpec, WindowAggregate};
use crate::engine::job::expr::Expr;
use crate::engine::job::path::FieldPath;
use crate::engine::job::project::KeyBy;
use crate::engine::job::Operator;
use crate::engine::time::WindowKind;

/// The GROUP BY's window: its kind and the SQL that wrote it (to match `TUMBLE_START(...)`).
struct GroupWindow {
    kind: WindowKind,
    /// TUMBLE, HOP or SESSION.
    name: &'static str,
    /// Its arguments as written (compared with the bound functions' arguments).
    args: Vec<String>,
}

/// The window function of a GROUP BY item, if it is one.
fn group_window(e: &Sql, from: &From<'_>) -> Result<Option<GroupWindow>, SqlError> {
    let Sql::Function(f) = e else { return Ok(None) };
    let name = f.name.to_string().to_ascii_uppercase();
    let name: &'static str = match name.as_str() {
        "TUMBLE" => "TUMBLE",
        "HOP" => "HOP",
        "SESSION" => "SESSION",
        _ => return Ok(None),
    };
    let args = call_args(f)?;
    let time = args.first().copied();
    let Some(time) = time else {
        return fail(
            f.span(),
            format!("{name}(time, ...): the event-time column first"),
        );
    };
    let (event_time, _) = event_time_of(from, f.span())?;
    let mut scope = OneTable(from);
    let Expr::Field(path) = plan_expr(time, &mut scope)? else {
        return fail(
            time.span(),
            format!("{name}'s first argument is the table's event-time column"),
        );
    };
    if path != event_time {
        return fail(time.span(), format!("{name} runs on table {}'s event time {event_time} (its 'event_time' option), not {path}", from.table.name));
    }
    let kind = match (name, &args[1..]) {
        ("TUMBLE", [size]) => WindowKind::Tumbling {
            size: positive(size)?,
        },
        ("HOP", [slide, size]) => {
            let (slide, size) = (positive(slide)?, positive(size)?);
            if slide > size {
                return fail(
                    f.span(),
                    "HOP(time, slide, size): the slide is at most the size",
                );
            }
            WindowKind::Sliding { size, slide }
        }
        ("SESSION", [gap]) => WindowKind::Session {
            gap: positive(gap)?,
        },
        _ => {
            let form = match name {
                "TUMBLE" => "TUMBLE(time, INTERVAL '1' HOUR)",
                "HOP" => "HOP(time, INTERVAL '5' MINUTE, INTERVAL '1' HOUR) (slide, then size)",
                _ => "SESSION(time, INTERVAL '30' MINUTE)",
            };
            return fail(f.span(), format!("write {form}"));
        }
    };
    let args = args.iter().map(ToString::to_string).collect();
    Ok(Some(GroupWindow { kind, name, args }))
}

fn positive(e: &Sql) -> Result<i64, SqlError> {
    let ms = interval_ms(e)?;
    if ms <= 0 {
        return fail(e.span(), "the interval must be more than 0");
    }
    Ok(ms)
}

/// The table's event-time column and bounded out-of-orderness (ms).
pub(super) fn event_time_of(from: &From<'_>, span: Span) -> Result<(FieldPath, i64), SqlError> {
    let t = from.table;
    let Some(col) = t.option("event_time") else {
        return fail(span, format!("table {} has no event time: add 'event_time' = '<column>' and 'watermark' = '60s' to its WITH options", t.name));
    };
    let path = FieldPath::parse(&col.value).map_or_else(|e| fail(col.span, e.to_string()), Ok)?;
    let watermark = match t.option("watermark") {
        None => 0,
        Some(w) => match crate::engine::job::parse_duration_text(&w.value) {
            Some(ms) if ms >= 0 => ms,
            _ => return fail(w.span, format!("'watermark' = '{}': a duration like '60s', '5m' or '250ms' (the bounded out-of-orderness)", w.value)),
        },
    };
    Ok((path, watermark))
}

/// What the SELECT list and HAVING of a grouped query may read: the key, the window's bounds,
/// aggregate calls (each computed once by the window, under a generated name).
struct Grouped<'a> {
    from: &'a From<'a>,
    key: FieldPath,
    key_name: String,
    window: &'a GroupWindow,
    aggregates: Vec<(String, AggFn, String)>,
}

impl Grouped<'_> {
    fn aggregate(&mut self, f: &SqlFunction, name: &str) -> Result<Expr, SqlError> {
        let FunctionArguments::List(list) = &f.args else {
            return fail(f.span(), format!("{name}(...) needs an argument"));
        };
        let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
        if distinct && name != "COUNT" {
            return fail(
                f.span(),
                format!("{name}(DISTINCT ...) is not supported: COUNT(DISTINCT column) is"),
            );
        }
        let written = f.to_string();
        if let Some((field, _, _)) = self.aggregates.iter().find(|(_, _, w)| *w == written) {
            return Ok(Expr::Field(
                FieldPath::parse(field).map_err(|e| super::error::at(f.span(), e.to_string()))?,
            ));
        }
        let agg = match (name, list.args.as_slice()) {
            ("COUNT", [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)]) if !distinct => {
                AggFn::Count
            }
            (_, [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))]) => {
                let mut scope = OneTable(self.from);
                let Expr::Field(path) = plan_expr(arg, &mut scope)? else {
                    return fail(arg.span(), format!("{name}'s argument is a column (compute others in a query before this one)"));
                };
                match name {
                    "COUNT" if distinct => AggFn::CountDistinct(path),
                    "COUNT" => AggFn::CountOf(path),
                    "SUM" => AggFn::Sum(path),
                    "MIN" => AggFn::Min(path),
                    "MAX" => AggFn::Max(path),
                    _ => AggFn::Avg(path),
                }
            }
            _ => return fail(f.span(), format!("{name} takes one column")),
        };
        let field = format!("__agg{}", self.aggregates.len());
        self.aggregates.push((field.clone(), agg, written));
        Ok(Expr::Field(
            FieldPath::parse(&field).map_err(|e| super::error::at(f.span(), e.to_string()))?,
        ))
    }

    fn bound(&self, f: &SqlFunction, name: &str) -> Result<Expr, SqlError> {
        let (kind, bound) = name.split_once('_').unwrap_or_default();
        if kind != self.window.name {
            return fail(
                f.span(),
                format!("{name}: the GROUP BY's window is {}", self.window.name),
            );
        }
        let args: Vec<String> = call_args(f)?.iter().map(ToString::to_string).collect();
        if args != self.window.args {
            return fail(
                f.span(),
                format!(
                    "{name}'s arguments are the GROUP BY's: {}({})",
                    self.window.name,
                    self.window.args.join(", ")
                ),
            );
        }
        let field = if bound == "START" {
            "window_start"
        } else {
            "window_end"
        };
        Ok(Expr::Field(
            FieldPath::parse(field).map_err(|e| super::error::at(f.span(), e.to_string()))?,
        ))
    }
}

impl Scope for Grouped<'_> {
    fn column(&self, parts: &[Ident], span: Span) -> Result<FieldPath, SqlError> {
        let path = OneTable(self.from).column(parts, span)?;
        if path != self.key {
            return fail(span, format!("column {path} is neither grouped nor aggregated: GROUP BY {} and a window, and aggregate the other columns", self.key));
        }
        FieldPath::parse(&self.key_name).map_or_else(|e| fail(span, e.to_string()), Ok)
    }

    fn call(&mut self, f: &SqlFunction) -> Result<Option<Expr>, SqlError> {
        let name = f.name.to_string().to_ascii_uppercase();
        match name.as_str() {
            "COUNT" | "SUM" | "MIN" | "MAX" | "AVG" => self.aggregate(f, &name).map(Some),
            "TUMBLE_START" | "TUMBLE_END" | "HOP_START" | "HOP_END" | "SESSION_START"
            | "SESSION_END" => self.bound(f, &name).map(Some),
            _ => Ok(None),
        }
    }
}

/// A grouped query of one table (module docs).
pub(super) fn plan_grouped(
    select: &sqlparser::ast::Select,
    from: &From<'_>,
) -> Result<Vec<Operator>, SqlError> {
    let GroupByExpr::Expressions(items, _) = &select.group_by else {
        return fail(
            select.span(),
            "GROUP BY ALL is not supported: name the key column and the window",
        );
    };
    let mut window = None;
    let mut keys = Vec::new();
    for item in items {
        match group_window(item, from)? {
            Some(w) if window.is_none() => window = Some(w),
            Some(_) => return fail(item.span(), "one window per GROUP BY"),
            None => keys.push(item),
        }
    }
    let (Some(window), [key]) = (window, keys.as_slice()) else {
        return fail(select.span(), "GROUP BY one key column and one window: GROUP BY driver_id, TUMBLE(event_time, INTERVAL '1' HOUR) (or HOP, SESSION)");
    };
    let mut scope = OneTable(from);
    let Expr::Field(key) = plan_expr(key, &mut scope)? else {
        return fail(key.span(), "the GROUP BY key is a column");
    };
    let (time, out_of_orderness) = event_time_of(from, select.span())?;
    let mut ops = Vec::new();
    if let Some(w) = &select.selection {
        ops.push(Operator::Where(plan_expr(w, &mut OneTable(from))?));
    }
    let key_name = key.last().to_owned();
    let mut grouped = Grouped {
        from,
        key: key.clone(),
        key_name: key_name.clone(),
        window: &window,
        aggregates: Vec::new(),
    };
    let having = select
        .having
        .as_ref()
        .map(|h| plan_expr(h, &mut grouped))
        .transpose()?;
    let Some(list) = select_list(&select.projection, &mut grouped)? else {
        return fail(select.span(), "a grouped query names its columns (no *)");
    };
    if grouped.aggregates.is_empty() {
        grouped
            .aggregates
            .push(("__agg0".into(), AggFn::Count, String::new()));
    }
    ops.push(Operator::KeyBy(KeyBy { field: key }));
    ops.push(Operator::WindowAggregate(WindowAggregate {
        kind: window.kind,
        time,
        out_of_orderness,
        allowed_lateness: 0,
        late_topic: None,
        key_name,
        aggregate: AggregateSpec {
            outputs: grouped
                .aggregates
                .into_iter()
                .map(|(n, f, _)| (n, f))
                .collect(),
        },
    }));
    if let Some(h) = having {
        ops.push(Operator::Where(h));
    }
    ops.push(Operator::Select(list));
    Ok(ops)
}
