//! Scalar expressions over a JSON record, SQL's: what a SQL job's `WHERE` and `SELECT` compute
//! (the SQL front end compiles its syntax into [`Expr`]; evaluation is pure).
//!
//! The rules (SQL's, pinned by the table test):
//! - A missing field, or a JSON `null`, is NULL. Most operators and functions give NULL when
//!   an operand is NULL; `IS [NOT] NULL`, `COALESCE`, `AND`, `OR` and `CASE` are the
//!   exceptions (three-valued logic: `FALSE AND NULL` is FALSE, `TRUE OR NULL` is TRUE).
//! - Integers stay exact (i64); `/` of two integers truncates toward zero, as SQL's integer
//!   division; an integer overflow, a division by zero, or an operand of the wrong type is an
//!   error ([`EvalError`]): the record is one the job cannot process, and its
//!   `errors.tolerance` decides. An integer meets a float as a float.
//! - Comparisons: numbers with numbers, strings with strings (by code point), booleans with
//!   booleans; anything else is an error.
//! - Times are epoch milliseconds (the engine's event times): `EXTRACT(HOUR FROM t)` and the
//!   like read a UTC calendar field of one; `TO_TIMESTAMP_LTZ(n, 0|3)` reads seconds or
//!   milliseconds as one.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Value};

use super::num::Num;
use super::path::FieldPath;

/// Why an expression could not be computed for a record (the record is bad, not the job).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError(message.into()))
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `=`
    Eq,
    /// `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
    /// `AND`
    And,
    /// `OR`
    Or,
    /// `||`: string concatenation.
    Concat,
}

impl BinOp {
    /// The operator as SQL writes it.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Eq => "=",
            BinOp::NotEq => "<>",
            BinOp::Lt => "<",
            BinOp::LtEq => "<=",
            BinOp::Gt => ">",
            BinOp::GtEq => ">=",
            BinOp::And => "AND",
            BinOp::Or => "OR",
            BinOp::Concat => "||",
        }
    }
}

/// The type of a `CAST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqlType {
    /// `BIGINT`, `INT`, `SMALLINT`, `TINYINT`: a 64-bit integer.
    Integer,
    /// `DOUBLE`, `FLOAT`, `REAL`, `DECIMAL`: a float.
    Double,
    /// `VARCHAR`, `STRING`, `CHAR`, `TEXT`.
    String,
    /// `BOOLEAN`.
    Boolean,
}

impl SqlType {
    /// Its name in SQL.
    pub fn name(self) -> &'static str {
        match self {
            SqlType::Integer => "BIGINT",
            SqlType::Double => "DOUBLE",
            SqlType::String => "STRING",
            SqlType::Boolean => "BOOLEAN",
        }
    }
}

/// A UTC calendar field of an epoch-milliseconds time (`EXTRACT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeField {
    /// The year.
    Year,
    /// 1–12.
    Month,
    /// 1–31.
    Day,
    /// 0–23.
    Hour,
    /// 0–59.
    Minute,
    /// 0–59.
    Second,
}

/// A built-in scalar function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Function {
    /// `UPPER(s)`
    Upper,
    /// `LOWER(s)`
    Lower,
    /// `CHAR_LENGTH(s)` (in characters).
    CharLength,
    /// `TRIM(s)`: without leading and trailing whitespace.
    Trim,
    /// `CONCAT(a, b, ...)`: NULL arguments are skipped (as Flink's `CONCAT_WS` does not, and
    /// MySQL's `CONCAT` does not either: this follows PostgreSQL).
    Concat,
    /// `SUBSTRING(s FROM start [FOR length])`, 1-based.
    Substring,
    /// `ABS(n)`
    Abs,
    /// `ROUND(n [, digits])`, half away from zero.
    Round,
    /// `FLOOR(n)`
    Floor,
    /// `CEIL(n)`
    Ceil,
    /// `COALESCE(a, b, ...)`: the first that is not NULL.
    Coalesce,
    /// `EXTRACT(field FROM t)` with `t` in epoch milliseconds.
    Extract(TimeField),
    /// `TO_TIMESTAMP_LTZ(n, precision)`: `n` seconds (precision 0) or milliseconds (3) as
    /// epoch milliseconds.
    ToTimestampLtz,
}

/// A compiled scalar expression (module docs).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Expr {
    /// A field of the record (NULL when missing).
    Field(FieldPath),
    /// A constant.
    Literal(Value),
    /// `-e`
    Neg(Box<Expr>),
    /// `NOT e`
    Not(Box<Expr>),
    /// `a op b`
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `e IS NULL` (`negated`: `IS NOT NULL`).
    IsNull {
        /// The operand.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `e [NOT] BETWEEN low AND high` (both ends inclusive).
    Between {
        /// The operand.
        expr: Box<Expr>,
        /// The low end.
        low: Box<Expr>,
        /// The high end.
        high: Box<Expr>,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// `e [NOT] IN (a, b, ...)`.
    InList {
        /// The operand.
        expr: Box<Expr>,
        /// The list.
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `CASE [operand] WHEN .. THEN .. [ELSE ..] END`.
    Case {
        /// With an operand, each WHEN is compared to it; without, each WHEN is a condition.
        operand: Option<Box<Expr>>,
        /// (WHEN, THEN) in order.
        whens: Vec<(Expr, Expr)>,
        /// ELSE (NULL when absent).
        otherwise: Option<Box<Expr>>,
    },
    /// `CAST(e AS type)`.
    Cast(Box<Expr>, SqlType),
    /// A function call.
    Call(Function, Vec<Expr>),
}

impl Expr {
    /// The expression's value for `record` (`Value::Null` for NULL).
    ///
    /// # Errors
    /// An operand of the wrong type, an integer overflow, a division by zero, a CAST that
    /// cannot convert the value.
    pub fn eval(&self, record: &Value) -> Result<Value, EvalError> {
        match self {
            Expr::Field(path) => Ok(path.lookup(record).cloned().unwrap_or(Value::Null)),
            Expr::Literal(v) => Ok(v.clone()),
            Expr::Neg(e) => match e.eval(record)? {
                Value::Null => Ok(Value::Null),
                v => arithmetic(BinOp::Sub, &Value::from(0), &v),
            },
            Expr::Not(e) => Ok(match truth(&e.eval(record)?, "NOT")? {
                None => Value::Null,
                Some(b) => Value::Bool(!b),
            }),
            Expr::Binary(op, a, b) => binary(*op, a, b, record),
            Expr::IsNull { expr, negated } => {
                Ok(Value::Bool(expr.eval(record)?.is_null() != *negated))
            }
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => {
                let v = expr.eval(record)?;
                let lo = compare_values(&v, &low.eval(record)?)?;
                let hi = compare_values(&v, &high.eval(record)?)?;
                Ok(match (lo, hi) {
                    (Some(lo), Some(hi)) => Value::Bool((lo.is_ge() && hi.is_le()) != *negated),
                    _ => Value::Null,
                })
            }
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let v = expr.eval(record)?;
                let mut unknown = v.is_null();
                for item in list {
                    match compare_values(&v, &item.eval(record)?)? {
                        Some(Ordering::Equal) => return Ok(Value::Bool(!*negated)),
                        None => unknown = true,
                        Some(_) => {}
                    }
                }
                Ok(if unknown {
                    Value::Null
                } else {
                    Value::Bool(*negated)
                })
            }
            Expr::Case {
                operand,
                whens,
                otherwise,
            } => {
                let operand = operand.as_ref().map(|o| o.eval(record)).transpose()?;
                for (when, then) in whens {
                    let w = when.eval(record)?;
                    let hit = match &operand {
                        Some(o) => compare_values(o, &w)? == Some(Ordering::Equal),
                        None => truth(&w, "CASE WHEN")? == Some(true),
                    };
                    if hit {
                        return then.eval(record);
                    }
                }
                otherwise
                    .as_ref()
                    .map_or(Ok(Value::Null), |e| e.eval(record))
            }
            Expr::Cast(e, ty) => cast(e.eval(record)?, *ty),
            Expr::Call(f, args) => {
                let args = args
                    .iter()
                    .map(|a| a.eval(record))
                    .collect::<Result<Vec<_>, _>>()?;
                call(*f, &args)
            }
        }
    }

    /// Whether the expression is TRUE for `record` (a `WHERE`: NULL and FALSE both leave the
    /// record out).
    ///
    /// # Errors
    /// As [`Expr::eval`], and a value that is not a boolean.
    pub fn holds(&self, record: &Value) -> Result<bool, EvalError> {
        Ok(truth(&self.eval(record)?, "WHERE")? == Some(true))
    }
}

/// A boolean, NULL, or an error naming where a boolean was needed.
fn truth(v: &Value, at: &str) -> Result<Option<bool>, EvalError> {
    match v {
        Value::Bool(b) => Ok(Some(*b)),
        Value::Null => Ok(None),
        other => err(format!("{at} needs a boolean, got {}", shown(other))),
    }
}

/// A value as an error message shows it (long ones cut).
fn shown(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

fn binary(op: BinOp, a: &Expr, b: &Expr, record: &Value) -> Result<Value, EvalError> {
    match op {
        BinOp::And | BinOp::Or => {
            let x = truth(&a.eval(record)?, op.symbol())?;
            // Short-circuit as SQL may: FALSE AND .., TRUE OR .. need not look further.
            match (op, x) {
                (BinOp::And, Some(false)) => return Ok(Value::Bool(false)),
                (BinOp::Or, Some(true)) => return Ok(Value::Bool(true)),
                _ => {}
            }
            let y = truth(&b.eval(record)?, op.symbol())?;
            Ok(match (op, x, y) {
                (BinOp::And, _, Some(false)) => Value::Bool(false),
                (BinOp::Or, _, Some(true)) => Value::Bool(true),
                (_, Some(x), Some(y)) => {
                    Value::Bool(if op == BinOp::And { x && y } else { x || y })
                }
                _ => Value::Null,
            })
        }
        _ => {
            let (x, y) = (a.eval(record)?, b.eval(record)?);
            if x.is_null() || y.is_null() {
                return Ok(Value::Null);
            }
            match op {
                BinOp::Eq | BinOp::NotEq | BinOp::Lt | BinOp::LtEq | BinOp::Gt | BinOp::GtEq => {
                    let ord = compare_values(&x, &y)?;
                    Ok(ord.map_or(Value::Null, |o| Value::Bool(holds(op, o))))
                }
                BinOp::Concat => Ok(Value::String(format!("{}{}", text(&x)?, text(&y)?))),
                _ => arithmetic(op, &x, &y),
            }
        }
    }
}

fn holds(op: BinOp, o: Ordering) -> bool {
    match op {
        BinOp::Eq => o.is_eq(),
        BinOp::NotEq => o.is_ne(),
        BinOp::Lt => o.is_lt(),
        BinOp::LtEq => o.is_le(),
        BinOp::Gt => o.is_gt(),
        _ => o.is_ge(),
    }
}

/// How `a` orders against `b`: `None` when either is NULL; an error for types that do not
/// compare.
pub(crate) fn compare_values(a: &Value, b: &Value) -> Result<Option<Ordering>, EvalError> {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => Ok(None),
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (Num::from_json(x), Num::from_json(y));
            Ok(x.zip(y).and_then(|(x, y)| x.cmp_num(&y)))
        }
        (Value::String(x), Value::String(y)) => Ok(Some(x.cmp(y))),
        (Value::Bool(x), Value::Bool(y)) => Ok(Some(x.cmp(y))),
        _ => err(format!("cannot compare {} with {}", shown(a), shown(b))),
    }
}

fn number(v: &Value, at: &str) -> Result<Num, EvalError> {
    Num::from_value(v).map_or_else(|| err(format!("{at} needs a number, got {}", shown(v))), Ok)
}

fn text(v: &Value) -> Result<String, EvalError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(if *b { "TRUE" } else { "FALSE" }.to_owned()),
        other => err(format!("a string is needed, got {}", shown(other))),
    }
}

fn int_result(i: Option<i128>, op: BinOp) -> Result<Value, EvalError> {
    match i.and_then(|i| i64::try_from(i).ok()) {
        Some(i) => Ok(Value::from(i)),
        None => err(format!("integer overflow in {}", op.symbol())),
    }
}

fn arithmetic(op: BinOp, a: &Value, b: &Value) -> Result<Value, EvalError> {
    let (x, y) = (number(a, op.symbol())?, number(b, op.symbol())?);
    match (x, y) {
        (Num::Int(x), Num::Int(y)) => match op {
            BinOp::Add => int_result(x.checked_add(y), op),
            BinOp::Sub => int_result(x.checked_sub(y), op),
            BinOp::Mul => int_result(x.checked_mul(y), op),
            BinOp::Div | BinOp::Mod if y == 0 => err("division by zero"),
            BinOp::Div => int_result(x.checked_div(y), op),
            _ => int_result(x.checked_rem(y), op),
        },
        _ => {
            let (x, y) = (x.as_f64(), y.as_f64());
            let r = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div | BinOp::Mod if y == 0.0 => return err("division by zero"),
                BinOp::Div => x / y,
                _ => x % y,
            };
            Ok(Num::Float(r).to_json())
        }
    }
}

fn cast(v: Value, ty: SqlType) -> Result<Value, EvalError> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    let fail = |v: &Value| {
        err(format!(
            "CAST({} AS {}) is not possible",
            shown(v),
            ty.name()
        ))
    };
    match ty {
        SqlType::String => Ok(Value::String(match &v {
            Value::String(s) => s.clone(),
            other => text(other).or_else(|_| Ok::<_, EvalError>(other.to_string()))?,
        })),
        SqlType::Boolean => match &v {
            Value::Bool(_) => Ok(v),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(Value::Bool(true)),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(Value::Bool(false)),
            Value::Number(n) => Ok(Value::Bool(n.as_f64() != Some(0.0))),
            _ => fail(&v),
        },
        SqlType::Integer => match &v {
            Value::Number(n) => match Num::from_json(n) {
                Some(Num::Int(i)) => int_result(Some(i), BinOp::Add).or_else(|_| fail(&v)),
                // Toward zero, as SQL's CAST of a float to an integer.
                Some(Num::Float(f)) if f.is_finite() && f.abs() < 9.2e18 => {
                    Ok(Value::from(f.trunc() as i64))
                }
                _ => fail(&v),
            },
            Value::String(s) => s
                .trim()
                .parse::<i64>()
                .map_or_else(|_| fail(&v), |i| Ok(Value::from(i))),
            Value::Bool(b) => Ok(Value::from(i64::from(*b))),
            _ => fail(&v),
        },
        SqlType::Double => match &v {
            Value::Number(n) => Ok(Num::Float(n.as_f64().unwrap_or(f64::NAN)).to_json()),
            Value::String(s) => match s.trim().parse::<f64>() {
                Ok(f) if f.is_finite() => Ok(Num::Float(f).to_json()),
                _ => fail(&v),
            },
            _ => fail(&v),
        },
    }
}

/// A built-in function of computed arguments. Long: one arm per function, in the order of
/// [`Function`]'s variants; it reads as the table of what each computes.
fn call(f: Function, args: &[Value]) -> Result<Value, EvalError> {
    if f == Function::Coalesce {
        return Ok(args
            .iter()
            .find(|a| !a.is_null())
            .cloned()
            .unwrap_or(Value::Null));
    }
    if f == Function::Concat {
        let mut out = String::new();
        for a in args.iter().filter(|a| !a.is_null()) {
            out.push_str(&text(a)?);
        }
        return Ok(Value::String(out));
    }
    if args.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    let arg = |i: usize| args.get(i).unwrap_or(&Value::Null);
    let string = |i: usize| text(arg(i));
    let num = |i: usize, name: &str| number(arg(i), name);
    match f {
        Function::Upper => Ok(Value::String(string(0)?.to_uppercase())),
        Function::Lower => Ok(Value::String(string(0)?.to_lowercase())),
        Function::Trim => Ok(Value::String(string(0)?.trim().to_owned())),
        Function::CharLength => Ok(Value::from(string(0)?.chars().count() as u64)),
        Function::Substring => {
            let s = string(0)?;
            let start = integer(&num(1, "SUBSTRING")?)?;
            let len = match args.get(2) {
                Some(_) => Some(integer(&num(2, "SUBSTRING")?)?.max(0)),
                None => None,
            };
            // 1-based; characters before the first are counted against the length, as SQL's.
            let (skip, take) = if start < 1 {
                (0, len.map(|l| (l + start - 1).max(0)))
            } else {
                (start - 1, len)
            };
            let chars = s.chars().skip(usize::try_from(skip).unwrap_or(usize::MAX));
            let out: String = match take {
                Some(t) => chars.take(usize::try_from(t).unwrap_or(0)).collect(),
                None => chars.collect(),
            };
            Ok(Value::String(out))
        }
        Function::Abs => match num(0, "ABS")? {
            Num::Int(i) => int_result(Some(i.abs()), BinOp::Sub),
            Num::Float(x) => Ok(Num::Float(x.abs()).to_json()),
        },
        Function::Floor | Function::Ceil => match num(0, "FLOOR")? {
            Num::Int(i) => int_result(Some(i), BinOp::Add),
            Num::Float(x) => {
                let r = if f == Function::Floor {
                    x.floor()
                } else {
                    x.ceil()
                };
                Ok(Num::Float(r).to_json())
            }
        },
        Function::Round => {
            let digits = match args.get(1) {
                Some(_) => integer(&num(1, "ROUND")?)?,
                None => 0,
            };
            match num(0, "ROUND")? {
                Num::Int(i) if digits >= 0 => int_result(Some(i), BinOp::Add),
                n => {
                    let scale = 10f64.powi(i32::try_from(digits.clamp(-15, 15)).unwrap_or(0));
                    Ok(Num::Float((n.as_f64() * scale).round() / scale).to_json())
                }
            }
        }
        Function::Extract(field) => {
            let ms = integer(&num(0, "EXTRACT")?)?;
            Ok(Value::from(calendar_field(ms, field)))
        }
        Function::ToTimestampLtz => {
            let n = integer(&num(0, "TO_TIMESTAMP_LTZ")?)?;
            let precision = match args.get(1) {
                Some(_) => integer(&num(1, "TO_TIMESTAMP_LTZ")?)?,
                None => 3,
            };
            match precision {
                0 => int_result(i128::from(n).checked_mul(1000), BinOp::Mul),
                3 => Ok(Value::from(n)),
                p => err(format!(
                    "TO_TIMESTAMP_LTZ takes precision 0 (seconds) or 3 (milliseconds), got {p}"
                )),
            }
        }
        Function::Coalesce | Function::Concat => Ok(Value::Null),
    }
}

fn integer(n: &Num) -> Result<i64, EvalError> {
    match n {
        Num::Int(i) => i64::try_from(*i).map_or_else(|_| err("integer overflow"), Ok),
        Num::Float(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Ok(*f as i64),
        Num::Float(f) => err(format!("an integer is needed, got {f}")),
    }
}

/// A UTC calendar field of `ms` since the epoch (the proleptic Gregorian calendar).
fn calendar_field(ms: i64, field: TimeField) -> i64 {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    match field {
        TimeField::Hour => in_day / 3_600_000,
        TimeField::Minute => in_day / 60_000 % 60,
        TimeField::Second => in_day / 1000 % 60,
        TimeField::Year | TimeField::Month | TimeField::Day => {
            let (y, m, d) = crate::engine::time::rfc3339::civil_from_days(days);
            match field {
                TimeField::Year => y,
                TimeField::Month => m,
                _ => d,
            }
        }
    }
}

/// A record of named expressions: what a SQL `SELECT` list makes of its input.
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    /// (output name, expression), in output order.
    pub columns: Vec<(String, Expr)>,
}

impl Select {
    /// The output record: each column's value under its name (NULL as `null`).
    ///
    /// # Errors
    /// The first column whose expression cannot be computed, named.
    pub fn apply(&self, record: &Value) -> Result<Value, EvalError> {
        let mut out = Map::new();
        for (name, e) in &self.columns {
            let v = e
                .eval(record)
                .map_err(|e| EvalError(format!("column {name}: {e}")))?;
            out.insert(name.clone(), v);
        }
        Ok(Value::Object(out))
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Field(p) => write!(f, "{p}"),
            Expr::Literal(v) => write!(f, "{v}"),
            Expr::Neg(e) => write!(f, "-({e})"),
            Expr::Not(e) => write!(f, "NOT ({e})"),
            Expr::Binary(op, a, b) => write!(f, "({a} {} {b})", op.symbol()),
            Expr::IsNull { expr, negated } => {
                write!(f, "{expr} IS {}NULL", if *negated { "NOT " } else { "" })
            }
            Expr::Between {
                expr,
                low,
                high,
                negated,
            } => write!(
                f,
                "{expr} {}BETWEEN {low} AND {high}",
                if *negated { "NOT " } else { "" }
            ),
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let items: Vec<String> = list.iter().map(ToString::to_string).collect();
                let not = if *negated { "NOT " } else { "" };
                write!(f, "{expr} {not}IN ({})", items.join(", "))
            }
            Expr::Case { .. } => write!(f, "CASE … END"),
            Expr::Cast(e, ty) => write!(f, "CAST({e} AS {})", ty.name()),
            Expr::Call(func, args) => {
                let items: Vec<String> = args.iter().map(ToString::to_string).collect();
                write!(f, "{func:?}({})", items.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(p: &str) -> Expr {
        Expr::Field(FieldPath::parse(p).unwrap())
    }
    fn lit(v: Value) -> Expr {
        Expr::Literal(v)
    }
    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    #[test]
    fn sql_semantics_table() {
        let r = json!({"i": 7, "j": 2, "f": 1.5, "s": "Abc", "t": true, "n": null,
                       "ms": 1_735_693_384_000i64, "big": i64::MAX});
        // (expression, want: Ok(value) or Err(part of the message))
        let cases: Vec<(Expr, Result<Value, &str>)> = vec![
            (bin(BinOp::Add, field("i"), field("j")), Ok(json!(9))),
            (bin(BinOp::Div, field("i"), field("j")), Ok(json!(3))),
            (bin(BinOp::Div, lit(json!(-7)), field("j")), Ok(json!(-3))),
            (bin(BinOp::Mod, field("i"), field("j")), Ok(json!(1))),
            (bin(BinOp::Mul, field("i"), field("f")), Ok(json!(10.5))),
            (
                bin(BinOp::Div, field("i"), lit(json!(0))),
                Err("division by zero"),
            ),
            (
                bin(BinOp::Add, field("big"), lit(json!(1))),
                Err("integer overflow in +"),
            ),
            (
                bin(BinOp::Add, field("s"), lit(json!(1))),
                Err("+ needs a number"),
            ),
            (
                bin(BinOp::Add, field("missing"), lit(json!(1))),
                Ok(Value::Null),
            ),
            (bin(BinOp::Gt, field("i"), field("f")), Ok(json!(true))),
            (
                bin(BinOp::Eq, field("s"), lit(json!("Abc"))),
                Ok(json!(true)),
            ),
            (
                bin(BinOp::Eq, field("s"), lit(json!(1))),
                Err("cannot compare"),
            ),
            (bin(BinOp::Eq, field("n"), lit(json!(1))), Ok(Value::Null)),
            // Three-valued logic.
            (
                bin(BinOp::And, lit(json!(false)), field("n")),
                Ok(json!(false)),
            ),
            (
                bin(BinOp::And, field("n"), lit(json!(false))),
                Ok(json!(false)),
            ),
            (
                bin(BinOp::And, field("n"), lit(json!(true))),
                Ok(Value::Null),
            ),
            (
                bin(BinOp::Or, field("n"), lit(json!(true))),
                Ok(json!(true)),
            ),
            (
                bin(BinOp::Or, field("n"), lit(json!(false))),
                Ok(Value::Null),
            ),
            (
                bin(BinOp::And, field("i"), lit(json!(true))),
                Err("AND needs a boolean"),
            ),
            (Expr::Not(Box::new(field("n"))), Ok(Value::Null)),
            (Expr::Neg(Box::new(field("i"))), Ok(json!(-7))),
            (
                Expr::IsNull {
                    expr: Box::new(field("missing")),
                    negated: false,
                },
                Ok(json!(true)),
            ),
            (
                Expr::Between {
                    expr: Box::new(field("i")),
                    low: Box::new(lit(json!(7))),
                    high: Box::new(lit(json!(8))),
                    negated: false,
                },
                Ok(json!(true)),
            ),
            (
                Expr::InList {
                    expr: Box::new(field("j")),
                    list: vec![lit(json!(1)), field("n")],
                    negated: false,
                },
                Ok(Value::Null),
            ),
            (
                Expr::InList {
                    expr: Box::new(field("j")),
                    list: vec![lit(json!(1)), lit(json!(2))],
                    negated: true,
                },
                Ok(json!(false)),
            ),
            (
                Expr::Case {
                    operand: None,
                    whens: vec![
                        (
                            bin(BinOp::Gt, field("i"), lit(json!(10))),
                            lit(json!("big")),
                        ),
                        (bin(BinOp::Gt, field("i"), lit(json!(5))), lit(json!("mid"))),
                    ],
                    otherwise: Some(Box::new(lit(json!("small")))),
                },
                Ok(json!("mid")),
            ),
            (
                Expr::Case {
                    operand: Some(Box::new(field("s"))),
                    whens: vec![(lit(json!("x")), lit(json!(1)))],
                    otherwise: None,
                },
                Ok(Value::Null),
            ),
            (
                Expr::Cast(Box::new(lit(json!("42"))), SqlType::Integer),
                Ok(json!(42)),
            ),
            (
                Expr::Cast(Box::new(field("f")), SqlType::Integer),
                Ok(json!(1)),
            ),
            (
                Expr::Cast(Box::new(field("s")), SqlType::Integer),
                Err("CAST(\"Abc\" AS BIGINT) is not possible"),
            ),
            (
                Expr::Cast(Box::new(field("i")), SqlType::String),
                Ok(json!("7")),
            ),
            (
                Expr::Cast(Box::new(field("i")), SqlType::Double),
                Ok(json!(7.0)),
            ),
            (
                bin(BinOp::Concat, field("s"), field("i")),
                Ok(json!("Abc7")),
            ),
            (
                Expr::Call(Function::Upper, vec![field("s")]),
                Ok(json!("ABC")),
            ),
            (
                Expr::Call(Function::CharLength, vec![field("s")]),
                Ok(json!(3)),
            ),
            (
                Expr::Call(Function::Upper, vec![field("n")]),
                Ok(Value::Null),
            ),
            (
                Expr::Call(
                    Function::Substring,
                    vec![field("s"), lit(json!(2)), lit(json!(1))],
                ),
                Ok(json!("b")),
            ),
            (
                Expr::Call(
                    Function::Substring,
                    vec![field("s"), lit(json!(0)), lit(json!(2))],
                ),
                Ok(json!("A")),
            ),
            (
                Expr::Call(Function::Coalesce, vec![field("n"), field("i")]),
                Ok(json!(7)),
            ),
            (
                Expr::Call(
                    Function::Concat,
                    vec![field("s"), field("n"), lit(json!("!"))],
                ),
                Ok(json!("Abc!")),
            ),
            (
                Expr::Call(Function::Round, vec![lit(json!(2.345)), lit(json!(2))]),
                Ok(json!(2.35)),
            ),
            (
                Expr::Call(Function::Round, vec![lit(json!(-2.5))]),
                Ok(json!(-3.0)),
            ),
            (
                Expr::Call(Function::Abs, vec![lit(json!(-3))]),
                Ok(json!(3)),
            ),
            (
                Expr::Call(Function::Floor, vec![lit(json!(-1.5))]),
                Ok(json!(-2.0)),
            ),
            // 2025-01-01T01:03:04Z
            (
                Expr::Call(Function::Extract(TimeField::Year), vec![field("ms")]),
                Ok(json!(2025)),
            ),
            (
                Expr::Call(Function::Extract(TimeField::Month), vec![field("ms")]),
                Ok(json!(1)),
            ),
            (
                Expr::Call(Function::Extract(TimeField::Day), vec![field("ms")]),
                Ok(json!(1)),
            ),
            (
                Expr::Call(Function::Extract(TimeField::Hour), vec![field("ms")]),
                Ok(json!(1)),
            ),
            (
                Expr::Call(Function::Extract(TimeField::Minute), vec![field("ms")]),
                Ok(json!(3)),
            ),
            (
                Expr::Call(Function::Extract(TimeField::Second), vec![field("ms")]),
                Ok(json!(4)),
            ),
            (
                Expr::Call(Function::Extract(TimeField::Year), vec![lit(json!(-1))]),
                Ok(json!(1969)),
            ),
            (
                Expr::Call(Function::ToTimestampLtz, vec![lit(json!(5)), lit(json!(0))]),
                Ok(json!(5000)),
            ),
            (
                Expr::Call(Function::ToTimestampLtz, vec![lit(json!(5)), lit(json!(6))]),
                Err("precision 0"),
            ),
        ];
        for (e, want) in cases {
            let got = e.eval(&r);
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{e}"),
                (Err(g), Err(w)) => assert!(g.0.contains(w), "{e}: {g:?} lacks {w:?}"),
                _ => panic!("{e}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_where_keeps_only_true_and_a_select_names_its_columns() {
        let r = json!({"a": 1, "n": null});
        assert!(bin(BinOp::Eq, field("a"), lit(json!(1))).holds(&r).unwrap());
        assert!(!bin(BinOp::Eq, field("n"), lit(json!(1))).holds(&r).unwrap());
        assert!(field("a").holds(&r).is_err(), "a number is no condition");
        let s = Select {
            columns: vec![
                ("x".into(), bin(BinOp::Add, field("a"), lit(json!(1)))),
                ("y".into(), field("missing")),
            ],
        };
        assert_eq!(s.apply(&r).unwrap(), json!({"x": 2, "y": null}));
        let bad = Select {
            columns: vec![("z".into(), bin(BinOp::Div, field("a"), lit(json!(0))))],
        };
        assert_eq!(bad.apply(&r).unwrap_err().0, "column z: division by zero");
    }
}
