//! Field-table values seen the way RabbitMQ (Erlang) sees them: type names
//! (`signedint`, `longstr`, …), type classes, `==` equality (numbers compare
//! by value across types) and `~p`/`~s` formatting used in error texts.

use charon_protocol::{AMQPValue, FieldTable};

/// RabbitMQ's name for the type of a field value (`rabbit_binary_parser`).
pub fn type_name(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "bool",
        AMQPValue::ShortShortInt(_) => "byte",
        AMQPValue::ShortShortUInt(_) => "unsignedbyte",
        AMQPValue::ShortInt(_) => "short",
        AMQPValue::ShortUInt(_) => "unsignedshort",
        AMQPValue::LongInt(_) => "signedint",
        AMQPValue::LongUInt(_) => "unsignedint",
        AMQPValue::LongLongInt(_) => "long",
        AMQPValue::Float(_) => "float",
        AMQPValue::Double(_) => "double",
        AMQPValue::DecimalValue(_) => "decimal",
        AMQPValue::ShortString(_) | AMQPValue::LongString(_) => "longstr",
        AMQPValue::FieldArray(_) => "array",
        AMQPValue::Timestamp(_) => "timestamp",
        AMQPValue::FieldTable(_) => "table",
        AMQPValue::ByteArray(_) => "binary",
        AMQPValue::Void => "void",
    }
}

/// RabbitMQ's `type_class/1`: all integer types are `int`, float/double are
/// `float`, everything else is its own class.
pub fn type_class(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::ShortShortInt(_)
        | AMQPValue::ShortInt(_)
        | AMQPValue::LongInt(_)
        | AMQPValue::LongLongInt(_) => "int",
        AMQPValue::Float(_) | AMQPValue::Double(_) => "float",
        other => type_name(other),
    }
}

/// The value as an integer when it has one of RabbitMQ's integer argument
/// types (`?INTEGER_ARG_TYPES`: byte, short, signedint, long, unsignedbyte,
/// unsignedshort, unsignedint).
pub fn as_int_arg(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::ShortShortInt(x) => Some(i64::from(*x)),
        AMQPValue::ShortShortUInt(x) => Some(i64::from(*x)),
        AMQPValue::ShortInt(x) => Some(i64::from(*x)),
        AMQPValue::ShortUInt(x) => Some(i64::from(*x)),
        AMQPValue::LongInt(x) => Some(i64::from(*x)),
        AMQPValue::LongUInt(x) => Some(i64::from(*x)),
        AMQPValue::LongLongInt(x) => Some(*x),
        _ => None,
    }
}

/// The value as a byte string when it is a string (`longstr`).
pub fn as_longstr(v: &AMQPValue) -> Option<&[u8]> {
    match v {
        AMQPValue::LongString(s) => Some(s.as_bytes()),
        AMQPValue::ShortString(s) => Some(s.as_str().as_bytes()),
        _ => None,
    }
}

enum Num {
    Int(i128),
    Float(f64),
}

fn as_number(v: &AMQPValue) -> Option<Num> {
    match v {
        AMQPValue::Timestamp(t) => Some(Num::Int(i128::from(*t))),
        AMQPValue::Float(f) => Some(Num::Float(f64::from(*f))),
        AMQPValue::Double(d) => Some(Num::Float(*d)),
        other => as_int_arg(other).map(|i| Num::Int(i128::from(i))),
    }
}

fn as_binary(v: &AMQPValue) -> Option<&[u8]> {
    match v {
        AMQPValue::ByteArray(b) => Some(b.as_slice()),
        other => as_longstr(other),
    }
}

/// Erlang `==` on the *values* of two field entries (types ignored at the
/// top level, as in `rabbit_exchange_type_headers`): `1` (signedint) equals
/// `1` (long) and `1.0` (double); a longstr equals a binary of the same
/// bytes. Nested arrays/tables compare with their types.
pub fn erlang_eq(a: &AMQPValue, b: &AMQPValue) -> bool {
    if let (Some(x), Some(y)) = (as_number(a), as_number(b)) {
        return match (x, y) {
            (Num::Int(x), Num::Int(y)) => x == y,
            (Num::Float(x), Num::Float(y)) => x == y,
            (Num::Int(i), Num::Float(f)) | (Num::Float(f), Num::Int(i)) => (i as f64) == f,
        };
    }
    if let (Some(x), Some(y)) = (as_binary(a), as_binary(b)) {
        return x == y;
    }
    match (a, b) {
        (AMQPValue::Boolean(x), AMQPValue::Boolean(y)) => x == y,
        (AMQPValue::Void, AMQPValue::Void) => true,
        (AMQPValue::DecimalValue(x), AMQPValue::DecimalValue(y)) => x == y,
        (AMQPValue::FieldArray(x), AMQPValue::FieldArray(y)) => {
            x.as_slice().len() == y.as_slice().len()
                && x.as_slice()
                    .iter()
                    .zip(y.as_slice())
                    .all(|(p, q)| typed_eq(p, q))
        }
        (AMQPValue::FieldTable(x), AMQPValue::FieldTable(y)) => tables_typed_eq(x, y),
        _ => false,
    }
}

/// Equality of `{Type, Value}` pairs (nested values keep their type tags).
fn typed_eq(a: &AMQPValue, b: &AMQPValue) -> bool {
    type_name(a) == type_name(b) && erlang_eq(a, b)
}

fn tables_typed_eq(a: &FieldTable, b: &FieldTable) -> bool {
    a.inner().len() == b.inner().len()
        && a.inner()
            .iter()
            .zip(b.inner())
            .all(|((ka, va), (kb, vb))| ka == kb && typed_eq(va, vb))
}

/// Erlang `~p` rendering of a value (`~s` for binaries, as RabbitMQ's
/// `val/1` does).
pub fn format_value(v: &AMQPValue) -> String {
    match v {
        AMQPValue::Boolean(b) => b.to_string(),
        AMQPValue::Float(f) => format!("{:?}", f64::from(*f)),
        AMQPValue::Double(d) => format!("{d:?}"),
        AMQPValue::DecimalValue(d) => format!("{{{},{}}}", d.scale, d.value),
        AMQPValue::Timestamp(t) => t.to_string(),
        AMQPValue::Void => "undefined".to_string(),
        AMQPValue::FieldArray(a) => {
            let items: Vec<String> = a
                .as_slice()
                .iter()
                .map(|x| format!("{{{},{}}}", type_name(x), format_term(x)))
                .collect();
            format!("[{}]", items.join(","))
        }
        AMQPValue::FieldTable(t) => format_table(t),
        other => match (as_int_arg(other), as_binary(other)) {
            (Some(i), _) => i.to_string(),
            (None, Some(b)) => String::from_utf8_lossy(b).into_owned(),
            (None, None) => String::new(),
        },
    }
}

/// `~p` of a nested value: binaries render as `<<"...">>`.
fn format_term(v: &AMQPValue) -> String {
    match as_binary(v) {
        Some(b) => format_binary(b),
        None => format_value(v),
    }
}

fn format_table(t: &FieldTable) -> String {
    let items: Vec<String> = t
        .inner()
        .iter()
        .map(|(k, v)| {
            format!(
                "{{{},{},{}}}",
                format_binary(k.as_str().as_bytes()),
                type_name(v),
                format_term(v)
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// Erlang `~p` of a binary: `<<"abc">>`.
pub fn format_binary(b: &[u8]) -> String {
    format!("<<\"{}\">>", String::from_utf8_lossy(b))
}

/// RabbitMQ `val/1` for a table entry: `the value 'V' of type 'T'`, or
/// `none` when absent.
pub fn describe_arg(v: Option<&AMQPValue>) -> String {
    match v {
        None => "none".to_string(),
        Some(v) => format!("the value '{}' of type '{}'", format_value(v), type_name(v)),
    }
}

/// RabbitMQ `val/1` for a bare value (both sides of a comparison present): `'V'`.
pub fn quoted_value(v: &AMQPValue) -> String {
    format!("'{}'", format_value(v))
}

/// Look up a key in a field table.
pub fn lookup<'a>(t: &'a FieldTable, key: &str) -> Option<&'a AMQPValue> {
    t.inner().get(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_protocol::LongString;

    #[test]
    fn integers_of_different_width_are_erlang_equal() {
        assert!(erlang_eq(
            &AMQPValue::LongInt(1),
            &AMQPValue::LongLongInt(1)
        ));
        assert!(erlang_eq(&AMQPValue::LongInt(1), &AMQPValue::Double(1.0)));
        assert!(!erlang_eq(
            &AMQPValue::LongInt(1),
            &AMQPValue::LongString(LongString::from("1"))
        ));
    }

    #[test]
    fn describe_arg_uses_rabbitmq_val_format() {
        assert_eq!(
            describe_arg(Some(&AMQPValue::LongInt(2000))),
            "the value '2000' of type 'signedint'"
        );
        assert_eq!(
            describe_arg(Some(&AMQPValue::LongString(LongString::from("x")))),
            "the value 'x' of type 'longstr'"
        );
        assert_eq!(describe_arg(None), "none");
    }

    #[test]
    fn int_types_share_a_class() {
        assert_eq!(type_class(&AMQPValue::ShortInt(1)), "int");
        assert_eq!(type_class(&AMQPValue::LongLongInt(1)), "int");
        assert_eq!(type_class(&AMQPValue::ShortUInt(1)), "unsignedshort");
    }
}
