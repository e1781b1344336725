//! Headers exchange: bindings match on message headers (`x-match` = `all`
//! (default), `any`, `all-with-x`, `any-with-x`), following
//! `rabbit_exchange_type_headers`: binding keys starting with `x-` are
//! ignored except for the `-with-x` variants, a `void` binding value only
//! requires presence, other values compare with Erlang `==` (numbers by
//! value, strings by bytes).

use charon_protocol::{AMQPValue, FieldTable};

use super::{Binding, BindingTable, Destination, remove_from};
use crate::error::CoreError;
use crate::value::{as_longstr, erlang_eq, format_binary, format_value, lookup, type_name};

/// The `x-match` mode of a headers binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    /// Every (non `x-`) binding header must match.
    All,
    /// At least one (non `x-`) binding header must match.
    Any,
    /// Every binding header, `x-` ones included.
    AllWithX,
    /// At least one binding header, `x-` ones included.
    AnyWithX,
}

/// Parse `x-match` the way routing does (anything unknown is `all`).
pub fn match_kind(args: &FieldTable) -> MatchKind {
    match lookup(args, "x-match").and_then(as_longstr) {
        Some(b"any") => MatchKind::Any,
        Some(b"all-with-x") => MatchKind::AllWithX,
        Some(b"any-with-x") => MatchKind::AnyWithX,
        _ => MatchKind::All,
    }
}

/// Validate `x-match` at bind time (`validate_binding/2`).
pub fn validate_x_match(args: &FieldTable) -> Result<(), CoreError> {
    match lookup(args, "x-match") {
        None => Ok(()),
        Some(AMQPValue::LongString(s)) => match s.as_bytes() {
            b"all" | b"any" | b"all-with-x" | b"any-with-x" => Ok(()),
            other => Err(CoreError::Precondition(format!(
                "Invalid x-match field value {}; expected all, any, all-with-x, or any-with-x",
                format_binary(other)
            ))),
        },
        Some(v) => Err(CoreError::Precondition(format!(
            "Invalid x-match field type {} (value {}); expected longstr",
            type_name(v),
            format_value(v)
        ))),
    }
}

/// Does a binding (its arguments) match the message headers?
pub fn headers_match(binding_args: &FieldTable, headers: Option<&FieldTable>) -> bool {
    let kind = match_kind(binding_args);
    let with_x = matches!(kind, MatchKind::AllWithX | MatchKind::AnyWithX);
    let all = matches!(kind, MatchKind::All | MatchKind::AllWithX);
    let mut any_matched = false;
    for (k, pv) in binding_args.inner() {
        if k.as_str() == "x-match" || (!with_x && k.as_str().starts_with("x-")) {
            continue;
        }
        let dv = headers.and_then(|h| lookup(h, k.as_str()));
        let ok = match (pv, dv) {
            (_, None) => false,
            (AMQPValue::Void, Some(_)) => true,
            (p, Some(d)) => erlang_eq(p, d),
        };
        if ok {
            any_matched = true;
            if !all {
                return true;
            }
        } else if all {
            return false;
        }
    }
    all || any_matched
}

/// Headers bindings in a list.
#[derive(Debug, Default)]
pub struct HeadersBindings {
    all: Vec<Binding>,
}

impl BindingTable for HeadersBindings {
    fn validate(&self, binding: &Binding) -> Result<(), CoreError> {
        validate_x_match(&binding.arguments)
    }

    fn add(&mut self, binding: Binding) -> bool {
        if self.all.contains(&binding) {
            return false;
        }
        self.all.push(binding);
        true
    }

    fn remove(&mut self, binding: &Binding) -> bool {
        remove_from(&mut self.all, binding)
    }

    fn remove_destination(&mut self, destination: &Destination) -> usize {
        let before = self.all.len();
        self.all.retain(|b| &b.destination != destination);
        before - self.all.len()
    }

    fn route<'a>(
        &'a self,
        _k: &[&str],
        headers: Option<&FieldTable>,
        out: &mut Vec<&'a Destination>,
    ) {
        for b in &self.all {
            if headers_match(&b.arguments, headers) {
                out.push(&b.destination);
            }
        }
    }

    fn bindings(&self) -> Box<dyn Iterator<Item = &Binding> + '_> {
        Box::new(self.all.iter())
    }

    fn len(&self) -> usize {
        self.all.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_protocol::{LongString, ShortString};

    fn t(entries: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in entries {
            t.insert(ShortString::from(*k), v.clone());
        }
        t
    }
    fn s(v: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(v))
    }

    #[test]
    fn all_requires_every_non_x_header() {
        let b = t(&[("a", s("1")), ("b", s("2"))]);
        assert!(headers_match(
            &b,
            Some(&t(&[("a", s("1")), ("b", s("2")), ("c", s("3"))]))
        ));
        assert!(!headers_match(&b, Some(&t(&[("a", s("1"))]))));
        assert!(!headers_match(&b, None));
    }

    #[test]
    fn all_with_no_headers_in_binding_matches_everything() {
        assert!(headers_match(&t(&[]), None));
        assert!(headers_match(&t(&[("x-match", s("all"))]), None));
        assert!(!headers_match(&t(&[("x-match", s("any"))]), None));
    }

    #[test]
    fn any_requires_one_header() {
        let b = t(&[("x-match", s("any")), ("a", s("1")), ("b", s("2"))]);
        assert!(headers_match(&b, Some(&t(&[("b", s("2"))]))));
        assert!(!headers_match(&b, Some(&t(&[("b", s("3"))]))));
    }

    #[test]
    fn x_prefixed_binding_args_are_ignored_unless_with_x() {
        let b = t(&[("x-match", s("any")), ("x-foo", s("1"))]);
        assert!(!headers_match(&b, Some(&t(&[("x-foo", s("1"))]))));
        let b = t(&[("x-match", s("any-with-x")), ("x-foo", s("1"))]);
        assert!(headers_match(&b, Some(&t(&[("x-foo", s("1"))]))));
    }

    #[test]
    fn void_binding_value_matches_presence() {
        let b = t(&[("a", AMQPValue::Void)]);
        assert!(headers_match(&b, Some(&t(&[("a", s("anything"))]))));
        assert!(!headers_match(&b, Some(&t(&[("b", s("x"))]))));
    }

    #[test]
    fn numbers_compare_by_value_strings_by_type() {
        let b = t(&[("a", AMQPValue::LongInt(1))]);
        assert!(headers_match(
            &b,
            Some(&t(&[("a", AMQPValue::LongLongInt(1))]))
        ));
        assert!(!headers_match(&b, Some(&t(&[("a", s("1"))]))));
    }

    #[test]
    fn invalid_x_match_is_precondition_failed() {
        let e = validate_x_match(&t(&[("x-match", s("foo"))])).err();
        assert_eq!(
            e.map(|e| e.reply_text()).as_deref(),
            Some(
                "PRECONDITION_FAILED - Invalid x-match field value <<\"foo\">>; expected all, any, all-with-x, or any-with-x"
            )
        );
        let e = validate_x_match(&t(&[("x-match", AMQPValue::LongInt(1))])).err();
        assert_eq!(
            e.map(|e| e.reply_text()).as_deref(),
            Some(
                "PRECONDITION_FAILED - Invalid x-match field type signedint (value 1); expected longstr"
            )
        );
    }
}
