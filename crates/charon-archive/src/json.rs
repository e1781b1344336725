//! AMQP field values and basic properties as JSON, and back.
//!
//! The JSON view is RabbitMQ management's (strings, numbers, booleans, arrays, objects). Going
//! back, a value equal to the original's JSON keeps the original's AMQP type; anything new gets
//! the natural type (string → longstr, integer → long, float → double).

use charon_protocol::{
    AMQPValue, BasicProperties, FieldArray, FieldTable, LongString, ShortString,
};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value, json};

/// A field value as JSON.
pub fn value_to_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => json!(b),
        AMQPValue::ShortShortInt(i) => json!(i),
        AMQPValue::ShortShortUInt(i) => json!(i),
        AMQPValue::ShortInt(i) => json!(i),
        AMQPValue::ShortUInt(i) => json!(i),
        AMQPValue::LongInt(i) => json!(i),
        AMQPValue::LongUInt(i) => json!(i),
        AMQPValue::LongLongInt(i) => json!(i),
        AMQPValue::Timestamp(t) => json!(t),
        AMQPValue::Float(f) => json!(f),
        AMQPValue::Double(d) => json!(d),
        AMQPValue::DecimalValue(d) => {
            json!(f64::from(d.value) / 10f64.powi(i32::from(d.scale)))
        }
        AMQPValue::ShortString(s) => json!(s.as_str()),
        AMQPValue::LongString(s) => json!(String::from_utf8_lossy(s.as_bytes())),
        AMQPValue::ByteArray(b) => json!(String::from_utf8_lossy(b.as_slice())),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(value_to_json).collect()),
        AMQPValue::FieldTable(t) => table_to_json(t),
        AMQPValue::Void => Value::Null,
    }
}

/// A field table as a JSON object.
pub fn table_to_json(t: &FieldTable) -> Value {
    let mut m = Map::new();
    for (k, v) in t {
        m.insert(k.as_str().to_string(), value_to_json(v));
    }
    Value::Object(m)
}

/// A field value serialized as [`value_to_json`] shows it, without building a [`Value`].
struct ValueSer<'a>(&'a AMQPValue);

impl Serialize for ValueSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let float = |s: S, f: f64| {
            if f.is_finite() {
                s.serialize_f64(f)
            } else {
                s.serialize_unit()
            }
        };
        match self.0 {
            AMQPValue::Boolean(b) => s.serialize_bool(*b),
            AMQPValue::ShortShortInt(i) => s.serialize_i64(i64::from(*i)),
            AMQPValue::ShortShortUInt(i) => s.serialize_u64(u64::from(*i)),
            AMQPValue::ShortInt(i) => s.serialize_i64(i64::from(*i)),
            AMQPValue::ShortUInt(i) => s.serialize_u64(u64::from(*i)),
            AMQPValue::LongInt(i) => s.serialize_i64(i64::from(*i)),
            AMQPValue::LongUInt(i) => s.serialize_u64(u64::from(*i)),
            AMQPValue::LongLongInt(i) => s.serialize_i64(*i),
            AMQPValue::Timestamp(t) => s.serialize_u64(*t),
            AMQPValue::Float(f) => float(s, f64::from(*f)),
            AMQPValue::Double(d) => float(s, *d),
            AMQPValue::DecimalValue(d) => {
                float(s, f64::from(d.value) / 10f64.powi(i32::from(d.scale)))
            }
            AMQPValue::ShortString(v) => s.serialize_str(v.as_str()),
            AMQPValue::LongString(v) => s.serialize_str(&String::from_utf8_lossy(v.as_bytes())),
            AMQPValue::ByteArray(b) => s.serialize_str(&String::from_utf8_lossy(b.as_slice())),
            AMQPValue::FieldArray(a) => {
                let mut seq = s.serialize_seq(Some(a.as_slice().len()))?;
                for v in a.as_slice() {
                    seq.serialize_element(&ValueSer(v))?;
                }
                seq.end()
            }
            AMQPValue::FieldTable(t) => TableSer(t).serialize(s),
            AMQPValue::Void => s.serialize_unit(),
        }
    }
}

struct TableSer<'a>(&'a FieldTable);

impl Serialize for TableSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.0 {
            m.serialize_entry(k.as_str(), &ValueSer(v))?;
        }
        m.end()
    }
}

/// A field table as JSON text: the text of [`table_to_json`], written in one pass (the archive
/// stores it for every record).
pub fn table_to_json_text(t: &FieldTable) -> String {
    serde_json::to_string(&TableSer(t)).unwrap_or_else(|_| table_to_json(t).to_string())
}

/// `new` as an AMQP value; where `old` (the value it replaces) shows as the same JSON, `old`
/// itself (its exact type).
pub fn json_to_value(new: &Value, old: Option<&AMQPValue>) -> AMQPValue {
    if let Some(o) = old
        && value_to_json(o) == *new
    {
        return o.clone();
    }
    match new {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        Value::Array(items) => {
            let olds: Option<&[AMQPValue]> = match old {
                Some(AMQPValue::FieldArray(a)) => Some(a.as_slice()),
                _ => None,
            };
            let mut out = FieldArray::default();
            for (i, item) in items.iter().enumerate() {
                out.push(json_to_value(item, olds.and_then(|o| o.get(i))));
            }
            AMQPValue::FieldArray(out)
        }
        Value::Object(_) => {
            let olds = match old {
                Some(AMQPValue::FieldTable(t)) => Some(t),
                _ => None,
            };
            AMQPValue::FieldTable(json_to_table(new, olds))
        }
    }
}

/// A JSON object as a field table, keeping the types of `old`'s unchanged entries.
pub fn json_to_table(new: &Value, old: Option<&FieldTable>) -> FieldTable {
    let mut t = FieldTable::default();
    if let Value::Object(m) = new {
        for (k, v) in m {
            let prev = old.and_then(|o| o.inner().get(k.as_str()));
            t.insert(ShortString::from(k.as_str()), json_to_value(v, prev));
        }
    }
    t
}

/// Every basic property but the headers, as JSON (only those present).
pub fn properties_to_json(p: &BasicProperties) -> Value {
    let mut m = Map::new();
    let mut s = |k: &str, v: &Option<ShortString>| {
        if let Some(v) = v {
            m.insert(k.to_string(), json!(v.as_str()));
        }
    };
    s("content_type", p.content_type());
    s("content_encoding", p.content_encoding());
    s("correlation_id", p.correlation_id());
    s("reply_to", p.reply_to());
    s("expiration", p.expiration());
    s("message_id", p.message_id());
    s("type", p.kind());
    s("user_id", p.user_id());
    s("app_id", p.app_id());
    if let Some(d) = p.delivery_mode() {
        m.insert("delivery_mode".into(), json!(d));
    }
    if let Some(pr) = p.priority() {
        m.insert("priority".into(), json!(pr));
    }
    if let Some(t) = p.timestamp() {
        m.insert("timestamp".into(), json!(t));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_values_keep_their_amqp_type() {
        let mut t = FieldTable::default();
        t.insert("a".into(), AMQPValue::ShortInt(7));
        t.insert("b".into(), AMQPValue::Timestamp(1_700_000_000));
        t.insert("c".into(), AMQPValue::LongString("x".into()));
        let mut j = table_to_json(&t);
        assert_eq!(j, json!({"a": 7, "b": 1_700_000_000u64, "c": "x"}));
        j["c"] = json!("y");
        j["d"] = json!(1.5);
        let back = json_to_table(&j, Some(&t));
        assert_eq!(back.inner().get("a"), Some(&AMQPValue::ShortInt(7)));
        assert_eq!(
            back.inner().get("b"),
            Some(&AMQPValue::Timestamp(1_700_000_000))
        );
        assert_eq!(
            back.inner().get("c"),
            Some(&AMQPValue::LongString("y".into()))
        );
        assert_eq!(back.inner().get("d"), Some(&AMQPValue::Double(1.5)));
    }

    #[test]
    fn json_text_is_the_values_text() {
        let mut inner = FieldTable::default();
        inner.insert("count".into(), AMQPValue::LongLongInt(3));
        inner.insert("f".into(), AMQPValue::Float(0.1));
        inner.insert("nan".into(), AMQPValue::Double(f64::NAN));
        let mut t = FieldTable::default();
        t.insert("b".into(), AMQPValue::Boolean(true));
        t.insert("s".into(), AMQPValue::ShortString("é\"x".into()));
        t.insert("l".into(), AMQPValue::LongString(b"a\xffb".to_vec().into()));
        t.insert("neg".into(), AMQPValue::ShortShortInt(-3));
        t.insert("u".into(), AMQPValue::LongUInt(7));
        t.insert("ts".into(), AMQPValue::Timestamp(1_700_000_000));
        t.insert("v".into(), AMQPValue::Void);
        t.insert(
            "a".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::FieldTable(inner),
                AMQPValue::Double(2.5),
            ])),
        );
        assert_eq!(table_to_json_text(&t), table_to_json(&t).to_string());
    }
}
