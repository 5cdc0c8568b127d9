//! SQL scalar expressions into the engine's ([`crate::engine::job::expr::Expr`]): column
//! references resolved by the query's scope, literals, operators, CASE, CAST and the built-in
//! functions; anything else is refused naming what is supported.

use serde_json::Value as Json;
use sqlparser::ast::{
    BinaryOperator, CastKind, CeilFloorKind, DateTimeField, Expr as Sql, Function as SqlFunction,
    FunctionArg, FunctionArgExpr, FunctionArguments, Ident, InTarget, Spanned, UnaryOperator,
    Value,
};
use sqlparser::tokenizer::Span;

use super::error::{fail, SqlError};
use crate::engine::job::expr::{BinOp, Expr, Function, SqlType, TimeField};
use crate::engine::job::path::FieldPath;

/// What names mean where an expression is planned.
pub(super) trait Scope {
    /// The field a column reference (`col`, `t.col`, `t.col.nested`) reads.
    ///
    /// # Errors
    /// No such column, or an ambiguous one.
    fn column(&self, parts: &[Ident], span: Span) -> Result<FieldPath, SqlError>;

    /// A function call the scope computes itself (an aggregate or a window bound in a
    /// grouped query): the expression that reads its result, or `None` for a scalar function.
    ///
    /// # Errors
    /// The call is not allowed here.
    fn call(&mut self, f: &SqlFunction) -> Result<Option<Expr>, SqlError> {
        let _ = f;
        Ok(None)
    }
}

/// The supported functions, for messages.
const FUNCTIONS: &str = "UPPER, LOWER, CHAR_LENGTH, TRIM, CONCAT, SUBSTRING, ABS, ROUND, FLOOR, CEIL, COALESCE, EXTRACT, TO_TIMESTAMP_LTZ";

/// A column-free constant (an INTERVAL, a number), in milliseconds for an INTERVAL.
pub(super) fn interval_ms(e: &Sql) -> Result<i64, SqlError> {
    let Sql::Interval(i) = e else {
        return fail(
            e.span(),
            "an INTERVAL is needed here, e.g. INTERVAL '30' MINUTE",
        );
    };
    let text = match i.value.as_ref() {
        Sql::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::Number(s, _) => s.clone(),
            _ => {
                return fail(
                    e.span(),
                    "an INTERVAL's value is a number, e.g. INTERVAL '30' MINUTE",
                )
            }
        },
        _ => {
            return fail(
                e.span(),
                "an INTERVAL's value is a number, e.g. INTERVAL '30' MINUTE",
            )
        }
    };
    // `INTERVAL '30' MINUTE` or `INTERVAL '30 minutes'`.
    let (number, unit) = match &i.leading_field {
        Some(f) => (text.trim().to_owned(), Some(f.clone())),
        None => {
            let mut words = text.split_whitespace();
            let n = words.next().unwrap_or_default().to_owned();
            let unit = match words.next().map(str::to_ascii_lowercase).as_deref() {
                Some("second" | "seconds") => Some(DateTimeField::Second),
                Some("minute" | "minutes") => Some(DateTimeField::Minute),
                Some("hour" | "hours") => Some(DateTimeField::Hour),
                Some("day" | "days") => Some(DateTimeField::Day),
                _ => None,
            };
            (n, unit)
        }
    };
    let scale =
        match unit {
            Some(DateTimeField::Second | DateTimeField::Seconds) => 1_000,
            Some(DateTimeField::Minute | DateTimeField::Minutes) => 60_000,
            Some(DateTimeField::Hour | DateTimeField::Hours) => 3_600_000,
            Some(DateTimeField::Day | DateTimeField::Days) => 86_400_000,
            _ => return fail(
                e.span(),
                "an INTERVAL is in SECOND, MINUTE, HOUR or DAY units, e.g. INTERVAL '30' MINUTE",
            ),
        };
    match number
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
    {
        Some(ms) => Ok(ms),
        None => fail(
            e.span(),
            format!("INTERVAL '{number}': a whole number is needed"),
        ),
    }
}

fn literal(v: &Value, span: Span) -> Result<Json, SqlError> {
    Ok(match v {
        Value::Number(n, _) => match n.parse::<i64>() {
            Ok(i) => Json::from(i),
            Err(_) => match n.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                Some(f) => Json::Number(f),
                None => return fail(span, format!("{n} is not a number")),
            },
        },
        Value::SingleQuotedString(s) => Json::String(s.clone()),
        Value::Boolean(b) => Json::Bool(*b),
        Value::Null => Json::Null,
        other => {
            return fail(
                span,
                format!(
                "the literal {other} is not supported: use numbers, 'strings', TRUE, FALSE or NULL"
            ),
            )
        }
    })
}

fn bin_op(op: &BinaryOperator, span: Span) -> Result<BinOp, SqlError> {
    Ok(match op {
        BinaryOperator::Plus => BinOp::Add,
        BinaryOperator::Minus => BinOp::Sub,
        BinaryOperator::Multiply => BinOp::Mul,
        BinaryOperator::Divide => BinOp::Div,
        BinaryOperator::Modulo => BinOp::Mod,
        BinaryOperator::Eq => BinOp::Eq,
        BinaryOperator::NotEq => BinOp::NotEq,
        BinaryOperator::Lt => BinOp::Lt,
        BinaryOperator::LtEq => BinOp::LtEq,
        BinaryOperator::Gt => BinOp::Gt,
        BinaryOperator::GtEq => BinOp::GtEq,
        BinaryOperator::And => BinOp::And,
        BinaryOperator::Or => BinOp::Or,
        BinaryOperator::StringConcat => BinOp::Concat,
        other => return fail(span, format!("the operator {other} is not supported: use + - * / %, = <> < <= > >=, AND, OR, NOT or ||")),
    })
}

/// The CAST target type.
pub(super) fn cast_type(t: &sqlparser::ast::DataType, span: Span) -> Result<SqlType, SqlError> {
    use sqlparser::ast::DataType as T;
    Ok(match t {
        T::BigInt(_) | T::Int(_) | T::Integer(_) | T::SmallInt(_) | T::TinyInt(_) | T::Int64 => {
            SqlType::Integer
        }
        T::Double(_) | T::Float(_) | T::Float64 | T::Real | T::Decimal(_) => SqlType::Double,
        T::Varchar(_) | T::Char(_) | T::Text | T::String(_) => SqlType::String,
        T::Boolean | T::Bool => SqlType::Boolean,
        other => return fail(span, format!("CAST to {other} is not supported: use BIGINT, INT, DOUBLE, STRING, VARCHAR or BOOLEAN")),
    })
}

fn time_field(f: &DateTimeField, span: Span) -> Result<TimeField, SqlError> {
    Ok(match f {
        DateTimeField::Year | DateTimeField::Years => TimeField::Year,
        DateTimeField::Month | DateTimeField::Months => TimeField::Month,
        DateTimeField::Day | DateTimeField::Days => TimeField::Day,
        DateTimeField::Hour | DateTimeField::Hours => TimeField::Hour,
        DateTimeField::Minute | DateTimeField::Minutes => TimeField::Minute,
        DateTimeField::Second | DateTimeField::Seconds => TimeField::Second,
        other => {
            return fail(
                span,
                format!(
                "EXTRACT({other} ...) is not supported: YEAR, MONTH, DAY, HOUR, MINUTE or SECOND"
            ),
            )
        }
    })
}

/// A function call's plain arguments (no `*`, no named ones).
pub(super) fn call_args(f: &SqlFunction) -> Result<Vec<&Sql>, SqlError> {
    let FunctionArguments::List(list) = &f.args else {
        return match &f.args {
            FunctionArguments::None => Ok(Vec::new()),
            _ => fail(
                f.span(),
                format!("{}: a list of arguments is needed", f.name),
            ),
        };
    };
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
            _ => fail(
                f.span(),
                format!("{}: plain arguments are needed here", f.name),
            ),
        })
        .collect()
}

fn box_of(e: &Sql, scope: &mut dyn Scope) -> Result<Box<Expr>, SqlError> {
    Ok(Box::new(plan_expr(e, scope)?))
}

/// A SQL expression as the engine computes it. Long: one arm per SQL form the engine takes,
/// each a few lines; it reads as the table of supported syntax.
///
/// # Errors
/// An unknown column, an unsupported operator, function or form, each naming where.
pub(super) fn plan_expr(e: &Sql, scope: &mut dyn Scope) -> Result<Expr, SqlError> {
    let span = e.span();
    Ok(match e {
        Sql::Identifier(i) => Expr::Field(scope.column(std::slice::from_ref(i), span)?),
        Sql::CompoundIdentifier(parts) => Expr::Field(scope.column(parts, span)?),
        Sql::Value(v) => Expr::Literal(literal(&v.value, span)?),
        Sql::Nested(inner) => plan_expr(inner, scope)?,
        Sql::UnaryOp { op, expr } => match op {
            UnaryOperator::Minus => Expr::Neg(box_of(expr, scope)?),
            UnaryOperator::Plus => plan_expr(expr, scope)?,
            UnaryOperator::Not => Expr::Not(box_of(expr, scope)?),
            other => return fail(span, format!("the operator {other} is not supported")),
        },
        Sql::BinaryOp { left, op, right } => {
            Expr::Binary(bin_op(op, span)?, box_of(left, scope)?, box_of(right, scope)?)
        }
        Sql::IsNull(x) | Sql::IsNotNull(x) => Expr::IsNull {
            expr: box_of(x, scope)?,
            negated: matches!(e, Sql::IsNotNull(_)),
        },
        Sql::Between {
            expr,
            negated,
            low,
            high,
        } => Expr::Between {
            expr: box_of(expr, scope)?,
            low: box_of(low, scope)?,
            high: box_of(high, scope)?,
            negated: *negated,
        },
        Sql::In {
            expr,
            target: InTarget::List(list),
            negated,
            ..
        } => Expr::InList {
            expr: box_of(expr, scope)?,
            list: list.iter().map(|x| plan_expr(x, scope)).collect::<Result<_, _>>()?,
            negated: *negated,
        },
        Sql::Case {
            operand,
            conditions,
            else_result,
            ..
        } => Expr::Case {
            operand: operand.as_ref().map(|o| box_of(o, scope)).transpose()?,
            whens: conditions
                .iter()
                .map(|w| Ok((plan_expr(&w.condition, scope)?, plan_expr(&w.result, scope)?)))
                .collect::<Result<_, SqlError>>()?,
            otherwise: else_result.as_ref().map(|o| box_of(o, scope)).transpose()?,
        },
        Sql::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            ..
        } => Expr::Cast(box_of(expr, scope)?, cast_type(data_type, span)?),
        Sql::Extract { field, expr, .. } => Expr::Call(
            Function::Extract(time_field(field, span)?),
            vec![plan_expr(expr, scope)?],
        ),
        Sql::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            let mut args = vec![plan_expr(expr, scope)?];
            args.push(match substring_from {
                Some(f) => plan_expr(f, scope)?,
                None => Expr::Literal(Json::from(1)),
            });
            if let Some(n) = substring_for {
                args.push(plan_expr(n, scope)?);
            }
            Expr::Call(Function::Substring, args)
        }
        Sql::Trim {
            expr,
            trim_where: None,
            trim_what: None,
            trim_characters: None,
        } => Expr::Call(Function::Trim, vec![plan_expr(expr, scope)?]),
        Sql::Floor {
            expr,
            field: CeilFloorKind::DateTimeField(DateTimeField::NoDateTime),
        } => Expr::Call(Function::Floor, vec![plan_expr(expr, scope)?]),
        Sql::Ceil {
            expr,
            field: CeilFloorKind::DateTimeField(DateTimeField::NoDateTime),
        } => Expr::Call(Function::Ceil, vec![plan_expr(expr, scope)?]),
        Sql::Function(f) => match scope.call(f)? {
            Some(read) => read,
            None => plan_call(f, scope)?,
        },
        other => return fail(span, format!("{other} is not supported in a SQL job: use columns, literals, arithmetic, comparisons, AND/OR/NOT, IS NULL, BETWEEN, IN, CASE, CAST and the functions {FUNCTIONS}")),
    })
}

/// A scalar function call.
fn plan_call(f: &SqlFunction, scope: &mut dyn Scope) -> Result<Expr, SqlError> {
    let name = f.name.to_string().to_ascii_uppercase();
    let function = match name.as_str() {
        "UPPER" => Function::Upper,
        "LOWER" => Function::Lower,
        "CHAR_LENGTH" | "CHARACTER_LENGTH" => Function::CharLength,
        "TRIM" => Function::Trim,
        "CONCAT" => Function::Concat,
        "SUBSTRING" | "SUBSTR" => Function::Substring,
        "ABS" => Function::Abs,
        "ROUND" => Function::Round,
        "FLOOR" => Function::Floor,
        "CEIL" | "CEILING" => Function::Ceil,
        "COALESCE" => Function::Coalesce,
        "TO_TIMESTAMP_LTZ" => Function::ToTimestampLtz,
        _ => {
            return fail(
                f.span(),
                format!(
                "the function {name} is not supported here: the scalar functions are {FUNCTIONS}"
            ),
            )
        }
    };
    let args = call_args(f)?;
    let (min, max) = match function {
        Function::Concat | Function::Coalesce => (1, usize::MAX),
        Function::Substring => (2, 3),
        Function::Round | Function::ToTimestampLtz => (1, 2),
        _ => (1, 1),
    };
    if args.len() < min || args.len() > max {
        return fail(
            f.span(),
            format!(
                "{name} takes {min}{} arguments, got {}",
                if max == min {
                    String::new()
                } else if max == usize::MAX {
                    " or more".into()
                } else {
                    format!(" to {max}")
                },
                args.len()
            ),
        );
    }
    let args = args
        .into_iter()
        .map(|a| plan_expr(a, scope))
        .collect::<Result<_, _>>()?;
    Ok(Expr::Call(function, args))
}
