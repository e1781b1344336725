//! Redeclaration equivalence checks (`rabbit_misc:assert_field_equivalence`
//! and `assert_args_equivalence`) with RabbitMQ's exact texts.

use charon_protocol::FieldTable;

use crate::error::CoreError;
use crate::value::{describe_arg, erlang_eq, lookup, type_class};

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
            return Err(CoreError::Inequivalent {
                arg: (*key).to_string(),
                resource: resource.to_string(),
                received: describe_arg(r),
                current: describe_arg(c),
            });
        }
    }
    Ok(())
}
