//! AMQP field tables as the management API's JSON (RabbitMQ's `rabbit_mgmt_format` rules):
//! strings as strings, integers and floats as numbers, tables as objects, arrays as arrays,
//! byte arrays and non-UTF-8 strings as strings (lossy). JSON coming in: integers become signed
//! 64-bit (`l`), floats doubles, strings long strings, objects tables, `null` void.

use charon_protocol::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use serde_json::{Map, Value};

/// One AMQP value as JSON.
pub fn value_to_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(i) => Value::from(*i),
        AMQPValue::ShortShortUInt(i) => Value::from(*i),
        AMQPValue::ShortInt(i) => Value::from(*i),
        AMQPValue::ShortUInt(i) => Value::from(*i),
        AMQPValue::LongInt(i) => Value::from(*i),
        AMQPValue::LongUInt(i) => Value::from(*i),
        AMQPValue::LongLongInt(i) => Value::from(*i),
        AMQPValue::Float(f) => Value::from(f64::from(*f)),
        AMQPValue::Double(f) => Value::from(*f),
        AMQPValue::DecimalValue(d) => {
            Value::from(f64::from(d.value) / 10f64.powi(i32::from(d.scale)))
        }
        AMQPValue::ShortString(s) => Value::String(s.as_str().to_string()),
        AMQPValue::LongString(s) => Value::String(String::from_utf8_lossy(s.as_bytes()).into()),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(value_to_json).collect()),
        AMQPValue::Timestamp(t) => Value::from(*t),
        AMQPValue::FieldTable(t) => table_to_json(t),
        AMQPValue::ByteArray(b) => Value::String(String::from_utf8_lossy(b.as_slice()).into()),
        AMQPValue::Void => Value::Null,
    }
}

/// A field table as a JSON object (keys sorted, as the table keeps them).
pub fn table_to_json(t: &FieldTable) -> Value {
    Value::Object(
        t.inner()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), value_to_json(v)))
            .collect(),
    )
}

/// A JSON value as an AMQP value.
pub fn json_to_value(v: &Value) -> AMQPValue {
    match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        Value::Array(a) => AMQPValue::FieldArray(FieldArray::from(
            a.iter().map(json_to_value).collect::<Vec<_>>(),
        )),
        Value::Object(o) => AMQPValue::FieldTable(json_to_table(o)),
    }
}

/// A JSON object as a field table.
pub fn json_to_table(o: &Map<String, Value>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in o {
        t.insert(ShortString::from(k.as_str()), json_to_value(v));
    }
    t
}

/// A JSON value that should be an object (absent/null: empty table).
pub fn json_to_table_opt(v: Option<&Value>) -> Result<FieldTable, String> {
    match v {
        None | Some(Value::Null) => Ok(FieldTable::default()),
        Some(Value::Object(o)) => Ok(json_to_table(o)),
        Some(other) => Err(format!("arguments must be an object, got {other}")),
    }
}
