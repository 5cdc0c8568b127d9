//! `FROM a JOIN b ON a.k = b.k AND b.t BETWEEN a.t - INTERVAL … AND a.t + INTERVAL …`: the
//! interval join. The ON clause needs one key equality between the tables and bounds on both
//! sides of their event times' difference; the other conditions on one table alone (in ON or
//! WHERE) filter that side before the join, the rest filter the joined records. The joined
//! record holds each table's record under its name in the query (`{"r": {...}, "f": {...}}`),
//! so `r.col` reads the same field before and after the join.

use std::cell::RefCell;
use std::collections::BTreeSet;

use sqlparser::ast::{
    BinaryOperator, Expr as Sql, Ident, Join, JoinConstraint, JoinOperator, Spanned,
};
use sqlparser::tokenizer::Span;

use super::error::{fail, SqlError};
use super::group::event_time_of;
use super::scalar::{interval_ms, plan_expr, Scope};
use super::scope::{select_list, From, OneTable};
use crate::engine::job::expr::{BinOp, Expr};
use crate::engine::job::join::{IntervalJoin, JoinSide};
use crate::engine::job::path::FieldPath;
use crate::engine::job::Operator;

/// The joined record's columns: `alias.col` of either table; records which tables an
/// expression read.
struct Both<'a> {
    sides: [&'a From<'a>; 2],
    used: RefCell<BTreeSet<usize>>,
}

impl Both<'_> {
    /// The side and path (within that side's record) a reference names.
    fn resolve(&self, parts: &[Ident], span: Span) -> Result<(usize, FieldPath), SqlError> {
        if let [t, rest @ ..] = parts {
            for (i, side) in self.sides.iter().enumerate() {
                if !rest.is_empty() && t.value.eq_ignore_ascii_case(&side.alias) {
                    return Ok((i, OneTable(side).column(rest, span)?));
                }
            }
        }
        let first = parts.first().map(|p| p.value.as_str()).unwrap_or_default();
        let declared: Vec<usize> = (0..2)
            .filter(|i| self.sides[*i].table.column(first).is_some())
            .collect();
        match declared.as_slice() {
            [i] => Ok((*i, OneTable(self.sides[*i]).column(parts, span)?)),
            [] => fail(span, format!("no column {first} in {} or {}: qualify it with the table's name, e.g. {}.{first}", self.sides[0].alias, self.sides[1].alias, self.sides[0].alias)),
            _ => fail(span, format!("column {first} is in both tables: write {}.{first} or {}.{first}", self.sides[0].alias, self.sides[1].alias)),
        }
    }
}

impl Scope for Both<'_> {
    fn column(&self, parts: &[Ident], span: Span) -> Result<FieldPath, SqlError> {
        let (side, path) = self.resolve(parts, span)?;
        self.used.borrow_mut().insert(side);
        let full = format!("{}.{path}", self.sides[side].alias);
        FieldPath::parse(&full).map_or_else(|e| fail(span, e.to_string()), Ok)
    }
}

/// The conjuncts of an AND chain.
fn conjuncts<'e>(e: &'e Sql, out: &mut Vec<&'e Sql>) {
    match e {
        Sql::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        Sql::Nested(inner) => conjuncts(inner, out),
        other => out.push(other),
    }
}

/// A side's event time plus a constant: `r.t`, `r.t - INTERVAL '1' MINUTE`.
fn time_term(e: &Sql, both: &Both<'_>, times: &[FieldPath; 2]) -> Option<(usize, i64)> {
    match e {
        Sql::Nested(inner) => time_term(inner, both, times),
        Sql::Identifier(_) | Sql::CompoundIdentifier(_) => {
            let parts = match e {
                Sql::Identifier(i) => std::slice::from_ref(i),
                Sql::CompoundIdentifier(p) => p.as_slice(),
                _ => return None,
            };
            let (side, path) = both.resolve(parts, e.span()).ok()?;
            (path == times[side]).then_some((side, 0))
        }
        Sql::BinaryOp { left, op, right } => {
            let (side, base) = time_term(left, both, times)?;
            let ms = interval_ms(right).ok()?;
            match op {
                BinaryOperator::Plus => Some((side, base.checked_add(ms)?)),
                BinaryOperator::Minus => Some((side, base.checked_sub(ms)?)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Bounds on right time − left time that a comparison of two time terms sets: (lower, upper).
fn bound_of(
    e: &Sql,
    both: &Both<'_>,
    times: &[FieldPath; 2],
) -> Option<(Option<i64>, Option<i64>)> {
    let (a, op, b) = match e {
        Sql::BinaryOp { left, op, right } => (left.as_ref(), op, right.as_ref()),
        Sql::Between {
            expr,
            negated: false,
            low,
            high,
        } => {
            let (x, lo) = (time_term(expr, both, times)?, time_term(low, both, times)?);
            let hi = time_term(high, both, times)?;
            let l = compare(x, &BinaryOperator::GtEq, lo)?;
            let u = compare(x, &BinaryOperator::LtEq, hi)?;
            return Some((l.0.or(u.0), l.1.or(u.1)));
        }
        _ => return None,
    };
    compare(time_term(a, both, times)?, op, time_term(b, both, times)?)
}

/// `T_s1 + o1 op T_s2 + o2` as bounds on right − left.
fn compare(
    (s1, o1): (usize, i64),
    op: &BinaryOperator,
    (s2, o2): (usize, i64),
) -> Option<(Option<i64>, Option<i64>)> {
    if s1 == s2 {
        return None;
    }
    // T_s1 − T_s2 (op) o2 − o1; right − left is that when s1 is the right side, its negation
    // otherwise.
    let d = o2.checked_sub(o1)?;
    let (at_least, at_most) = match op {
        BinaryOperator::GtEq => (Some(d), None),
        BinaryOperator::Gt => (Some(d.checked_add(1)?), None),
        BinaryOperator::LtEq => (None, Some(d)),
        BinaryOperator::Lt => (None, Some(d.checked_sub(1)?)),
        BinaryOperator::Eq => (Some(d), Some(d)),
        _ => return None,
    };
    Some(if s1 == 1 {
        (at_least, at_most)
    } else {
        (at_most.map(|m| -m), at_least.map(|m| -m))
    })
}

/// The key equality `a.k = b.k`, as (left path, right path).
fn key_of(e: &Sql, both: &Both<'_>) -> Option<(FieldPath, FieldPath)> {
    let Sql::BinaryOp {
        left,
        op: BinaryOperator::Eq,
        right,
    } = e
    else {
        return None;
    };
    let side = |x: &Sql| match x {
        Sql::Identifier(i) => both.resolve(std::slice::from_ref(i), x.span()).ok(),
        Sql::CompoundIdentifier(p) => both.resolve(p, x.span()).ok(),
        _ => None,
    };
    match (side(left)?, side(right)?) {
        ((0, l), (1, r)) | ((1, r), (0, l)) => Some((l, r)),
        _ => None,
    }
}

/// What the join's conditions became.
#[derive(Default)]
struct Conditions {
    key: Option<(FieldPath, FieldPath)>,
    lower: Option<i64>,
    upper: Option<i64>,
    sides: [Vec<Expr>; 2],
    after: Vec<Expr>,
}

fn and_all(mut exprs: Vec<Expr>) -> Option<Expr> {
    let first = exprs.pop()?;
    Some(exprs.into_iter().rev().fold(first, |acc, e| {
        Expr::Binary(BinOp::And, Box::new(e), Box::new(acc))
    }))
}

/// The interval join of `left` and `right` (module docs).
pub(super) fn plan_join(
    select: &sqlparser::ast::Select,
    join: &Join,
    left: &From<'_>,
    right: &From<'_>,
) -> Result<Vec<Operator>, SqlError> {
    let on = match &join.join_operator {
        JoinOperator::Join(JoinConstraint::On(e)) | JoinOperator::Inner(JoinConstraint::On(e)) => e,
        other => {
            return fail(
                join.relation.span(),
                format!(
                "{} is not supported: an inner JOIN ... ON an equality of keys and a time bound is",
                join_name(other)
            ),
            )
        }
    };
    if left.alias.eq_ignore_ascii_case(&right.alias) {
        return fail(
            join.relation.span(),
            format!("both tables are called {}: give one an alias", left.alias),
        );
    }
    let (lt, lw) = event_time_of(left, join.relation.span())?;
    let (rt, rw) = event_time_of(right, join.relation.span())?;
    let times = [lt.clone(), rt.clone()];
    let both = Both {
        sides: [left, right],
        used: RefCell::new(BTreeSet::new()),
    };
    let mut c = conditions(on, select.selection.as_ref(), &both, &times)?;
    let Some((lkey, rkey)) = c.key.take() else {
        return fail(
            on.span(),
            format!(
                "the join needs a key equality in ON: {}.<key> = {}.<key>",
                left.alias, right.alias
            ),
        );
    };
    let (Some(lower), Some(upper)) = (c.lower, c.upper) else {
        return fail(on.span(), format!("an interval join bounds the time on both sides: AND {}.{rt} BETWEEN {}.{lt} - INTERVAL '1' MINUTE AND {}.{lt} + INTERVAL '1' MINUTE", right.alias, left.alias, left.alias));
    };
    if lower > upper {
        return fail(on.span(), format!("the time bounds leave nothing to join: {} − {} must be ≥ {lower} ms and ≤ {upper} ms", right.alias, left.alias));
    }
    let [lc, rc] = std::mem::take(&mut c.sides);
    let mut ops = vec![Operator::Join(Box::new(IntervalJoin {
        left: join_side(left, lkey, lt, lc),
        right: join_side(right, rkey, rt, rc),
        lower,
        upper,
        window: None,
        out_of_orderness: lw.max(rw),
        allowed_lateness: 0,
        late_topic: None,
    }))];
    if let Some(after) = and_all(c.after) {
        ops.push(Operator::Where(after));
    }
    let mut scope = Both {
        sides: [left, right],
        used: RefCell::new(BTreeSet::new()),
    };
    if let Some(s) = select_list(&select.projection, &mut scope)? {
        ops.push(Operator::Select(s));
    }
    Ok(ops)
}

/// The ON clause's and the WHERE clause's conditions, classified.
fn conditions(
    on: &Sql,
    selection: Option<&Sql>,
    both: &Both<'_>,
    times: &[FieldPath; 2],
) -> Result<Conditions, SqlError> {
    let mut c = Conditions::default();
    let mut on_parts = Vec::new();
    conjuncts(on, &mut on_parts);
    let mut where_parts = Vec::new();
    if let Some(w) = selection {
        conjuncts(w, &mut where_parts);
    }
    let parts = on_parts.iter().map(|p| (*p, true));
    for (part, in_on) in parts.chain(where_parts.iter().map(|p| (*p, false))) {
        classify(part, in_on, both, times, &mut c)?;
    }
    Ok(c)
}

/// One side of the join: its table's topic, its name in the query, key, time and condition.
fn join_side(from: &From<'_>, key: FieldPath, time: FieldPath, cond: Vec<Expr>) -> JoinSide {
    JoinSide {
        topic: from
            .table
            .option("topic")
            .map(|t| t.value.clone())
            .unwrap_or_default(),
        name: from.alias.clone(),
        key,
        time,
        filter: None,
        condition: and_all(cond),
    }
}

fn join_name(op: &JoinOperator) -> &'static str {
    match op {
        JoinOperator::Left(_) | JoinOperator::LeftOuter(_) => "LEFT JOIN",
        JoinOperator::Right(_) | JoinOperator::RightOuter(_) => "RIGHT JOIN",
        JoinOperator::FullOuter(_) => "FULL JOIN",
        JoinOperator::CrossJoin(_) => "CROSS JOIN",
        _ => "this join",
    }
}

/// One condition: the key, a time bound, one side's filter, or a filter of the joined records.
fn classify(
    part: &Sql,
    in_on: bool,
    both: &Both<'_>,
    times: &[FieldPath; 2],
    c: &mut Conditions,
) -> Result<(), SqlError> {
    if in_on && c.key.is_none() {
        if let Some(k) = key_of(part, both) {
            c.key = Some(k);
            return Ok(());
        }
    }
    if in_on {
        if let Some((lo, hi)) = bound_of(part, both, times) {
            c.lower = max_opt(c.lower, lo);
            c.upper = min_opt(c.upper, hi);
            return Ok(());
        }
    }
    let mut probe = Both {
        sides: both.sides,
        used: RefCell::new(BTreeSet::new()),
    };
    let planned = plan_expr(part, &mut probe)?;
    let used: Vec<usize> = probe.used.into_inner().into_iter().collect();
    match used.as_slice() {
        [i] => {
            let mut own = OneTable(both.sides[*i]);
            c.sides[*i].push(plan_expr(part, &mut own)?);
        }
        _ => c.after.push(planned),
    }
    Ok(())
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
