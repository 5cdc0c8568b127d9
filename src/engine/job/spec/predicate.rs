//! `filter`: a predicate of the job file, checked (the pipeline's filters and a join side's).

use toml::Spanned;

use crate::engine::job::filter::{BoundingBox, Literal, Predicate};
use crate::engine::job::num::Num;
use crate::engine::job::JobError;

use super::locator::Locator;
use super::raw::*;

/// A filter predicate, checked. Long on purpose: one branch per form the job file allows
/// (comparison, `and`, `or`, `not`, `within`), in the order the docs list them, each naming
/// its own field and line; it reads as the table of filter forms. Split it when a form grows.
pub(super) fn check_pred(loc: &Locator<'_>, raw: Spanned<RawPred>) -> Result<Predicate, JobError> {
    let span = raw.span();
    let p = raw.into_inner();
    let forms = [
        p.field.is_some() || p.op.is_some() || p.value.is_some(),
        p.and.is_some(),
        p.or.is_some(),
        p.not.is_some(),
        p.within.is_some(),
    ];
    if forms.iter().filter(|f| **f).count() != 1 {
        return Err(loc.at(
            &span,
            Some("filter"),
            "give exactly one of: field + op + value, and = [...], or = [...], not = {...}, \
             within = {...}",
        ));
    }
    if let Some((is_and, list)) = p.and.map(|l| (true, l)).or(p.or.map(|l| (false, l))) {
        let lspan = list.span();
        let items = list.into_inner();
        let name = if is_and { "filter.and" } else { "filter.or" };
        if items.is_empty() {
            return Err(loc.at(
                &lspan,
                Some(name),
                "an empty list; give at least one condition",
            ));
        }
        let items = items
            .into_iter()
            .map(|i| check_pred(loc, i))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(if is_and {
            Predicate::And(items)
        } else {
            Predicate::Or(items)
        });
    }
    if let Some(inner) = p.not {
        return Ok(Predicate::Not(Box::new(check_pred(loc, *inner)?)));
    }
    if let Some(w) = p.within {
        let w = w.into_inner();
        let bspan = w.bbox.span();
        let b = w.bbox.into_inner();
        let hint = "expected box = [west, south, east, north] in degrees, e.g. \
                    [-74.05, 40.50, -73.70, 41.00]";
        let [west, south, east, north] = b[..] else {
            return Err(loc.at(
                &bspan,
                Some("filter.within.box"),
                format!("{hint}, got {} numbers", b.len()),
            ));
        };
        if !(-180.0..=180.0).contains(&west)
            || !(-180.0..=180.0).contains(&east)
            || !(-90.0..=90.0).contains(&south)
            || !(-90.0..=90.0).contains(&north)
        {
            return Err(loc.at(
                &bspan,
                Some("filter.within.box"),
                format!("{hint}; longitudes lie in -180..180 and latitudes in -90..90"),
            ));
        }
        if west > east || south > north {
            return Err(loc.at(&bspan, Some("filter.within.box"), format!("{hint}; west must be ≤ east and south ≤ north (a box across the antimeridian is not supported)")));
        }
        return Ok(Predicate::Within(BoundingBox {
            lon: w.lon,
            lat: w.lat,
            west,
            south,
            east,
            north,
        }));
    }
    let (Some(field), Some(op), Some(value)) = (p.field, p.op, p.value) else {
        return Err(loc.at(
            &span,
            Some("filter"),
            "a comparison needs all of field, op and value, e.g. \
             { field = \"passengers\", op = \">=\", value = 1 }",
        ));
    };
    let vspan = value.span();
    let literal = match value.into_inner() {
        toml::Value::Integer(i) => Literal::Number(Num::Int(i128::from(i))),
        toml::Value::Float(f) if f.is_finite() => Literal::Number(Num::Float(f)),
        toml::Value::String(s) => Literal::String(s),
        toml::Value::Boolean(b) => Literal::Bool(b),
        other => {
            return Err(loc.at(
                &vspan,
                Some("filter.value"),
                format!(
                    "expected a number, a string or a boolean, got {} {other}",
                    other.type_str()
                ),
            ));
        }
    };
    if op.is_ordering() && matches!(literal, Literal::Bool(_)) {
        return Err(loc.at(
            &vspan,
            Some("filter.value"),
            format!(
                "`{}` orders values; a boolean only takes = or !=",
                op.as_str()
            ),
        ));
    }
    Ok(Predicate::Compare {
        field,
        op,
        value: literal,
    })
}
