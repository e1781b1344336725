//! Redeclaration equivalence checks (`rabbit_misc:assert_field_equivalence`
//! and `assert_args_equivalence`) with RabbitMQ's exact texts.

use charon_protocol::FieldTable;

use crate::error::CoreError;
use crate::value::{describe_arg, erlang_eq, lookup, quoted_value, type_class};

/// `exchange 'x' in vhost '/'` (RabbitMQ's `rs/1`).
pub(crate) fn resource(kind: &str, name: &str, vhost: &str) -> String {
    format!("{kind} '{name}' in vhost '{vhost}'")
}

/// Compare one property; `received 'true' but current is 'false'`.
pub(crate) fn field<T: PartialEq + std::fmt::Display>(
    current: T,
    received: T,
    resource: &str,
    arg: &str,
) -> Result<(), CoreError> {
    if current == received {
        return Ok(());
    }
    Err(CoreError::Inequivalent {
        arg: arg.to_string(),
        resource: resource.to_string(),
        received: format!("'{received}'"),
        current: format!("'{current}'"),
    })
}

/// Compare the listed argument keys of two tables: equal when both absent,
/// or same type class and Erlang-equal value.
pub(crate) fn args(
    current: &FieldTable,
    received: &FieldTable,
    resource: &str,
    keys: &[&str],
) -> Result<(), CoreError> {
    for key in keys {
        let (c, r) = (lookup(current, key), lookup(received, key));
        let same = match (c, r) {
            (None, None) => true,
            (Some(c), Some(r)) => type_class(c) == type_class(r) && erlang_eq(c, r),
            _ => false,
        };
        if !same {
            // RabbitMQ's `val/1`: both present → bare values; one absent → typed value.
            let (received, current) = match (r, c) {
                (Some(r), Some(c)) => (quoted_value(r), quoted_value(c)),
                _ => (describe_arg(r), describe_arg(c)),
            };
            return Err(CoreError::Inequivalent {
                arg: (*key).to_string(),
                resource: resource.to_string(),
                received,
                current,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_protocol::AMQPValue;

    fn table(v: Option<i32>) -> FieldTable {
        let mut t = FieldTable::default();
        if let Some(v) = v {
            t.insert("x-max-length".into(), AMQPValue::LongInt(v));
        }
        t
    }

    fn text(current: Option<i32>, received: Option<i32>) -> String {
        match args(
            &table(current),
            &table(received),
            "queue 'q' in vhost '/'",
            &["x-max-length"],
        ) {
            Err(e) => e.to_string(),
            Ok(()) => String::new(),
        }
    }

    #[test]
    fn both_present_shows_bare_values_one_absent_shows_typed_value() {
        assert!(text(Some(10), Some(20)).ends_with("received '20' but current is '10'"));
        assert!(
            text(Some(10), None)
                .ends_with("received none but current is the value '10' of type 'signedint'")
        );
        assert_eq!(text(Some(10), Some(10)), "");
    }
}
