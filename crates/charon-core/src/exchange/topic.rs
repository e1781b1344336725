//! Topic exchange: binding keys are `.`-separated word patterns where `*`
//! matches exactly one word and `#` zero or more words. As in RabbitMQ's
//! `split_topic_key/1`, the empty key has zero words and `"a."` is
//! `["a", ""]`.

use charon_protocol::FieldTable;

use super::{Binding, BindingTable, Destination};

/// Split a routing or binding key into words (`""` → no words).
pub fn split_words(key: &str) -> Vec<&str> {
    if key.is_empty() {
        Vec::new()
    } else {
        key.split('.').collect()
    }
}

/// Does `pattern` (a binding key) match `key` (a routing key)?
/// Dynamic programming over words, linear in `pattern × key`.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    let pat = split_words(pattern);
    let words = split_words(key);
    matches_words(&pat, &words)
}

/// [`topic_matches`] on pre-split words.
pub fn matches_words(pat: &[&str], words: &[&str]) -> bool {
    // reach[j]: the pattern prefix processed so far can consume exactly
    // the first j words.
    let mut reach = vec![false; words.len() + 1];
    reach[0] = true;
    for p in pat {
        let mut next = vec![false; words.len() + 1];
        match *p {
            "#" => {
                let mut any = false;
                for (j, slot) in next.iter_mut().enumerate() {
                    any |= reach[j];
                    *slot = any;
                }
            }
            _ => {
                for (j, w) in words.iter().enumerate() {
                    if reach[j] && (*p == "*" || p == w) {
                        next[j + 1] = true;
                    }
                }
            }
        }
        if !next.iter().any(|r| *r) {
            return false;
        }
        reach = next;
    }
    reach[words.len()]
}

/// A binding with its key pre-split.
#[derive(Debug)]
struct Entry {
    words: Vec<String>,
    binding: Binding,
}

/// Topic bindings.
#[derive(Debug, Default)]
pub struct TopicBindings {
    entries: Vec<Entry>,
}

impl BindingTable for TopicBindings {
    fn add(&mut self, binding: Binding) -> bool {
        if self.entries.iter().any(|e| e.binding == binding) {
            return false;
        }
        let mut words: Vec<String> = Vec::new();
        for w in split_words(&binding.routing_key) {
            // "#.#" is the same as "#"
            if !(w == "#" && words.last().is_some_and(|l| l == "#")) {
                words.push(w.to_string());
            }
        }
        self.entries.push(Entry { words, binding });
        true
    }

    fn remove(&mut self, binding: &Binding) -> bool {
        match self.entries.iter().position(|e| &e.binding == binding) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    fn remove_destination(&mut self, destination: &Destination) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|e| &e.binding.destination != destination);
        before - self.entries.len()
    }

    fn route<'a>(&'a self, keys: &[&str], _h: Option<&FieldTable>, out: &mut Vec<&'a Destination>) {
        for key in keys {
            let words = split_words(key);
            for e in &self.entries {
                let pat: Vec<&str> = e.words.iter().map(String::as_str).collect();
                if matches_words(&pat, &words) {
                    out.push(&e.binding.destination);
                }
            }
        }
    }

    fn bindings(&self) -> Box<dyn Iterator<Item = &Binding> + '_> {
        Box::new(self.entries.iter().map(|e| &e.binding))
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reference matcher: naive recursion straight from the definition.
    fn reference(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => reference(rest, k) || (!k.is_empty() && reference(p, &k[1..])),
            Some((w, rest)) => match k.split_first() {
                Some((kw, krest)) => (*w == "*" || w == kw) && reference(rest, krest),
                None => false,
            },
        }
    }

    #[test]
    fn star_matches_exactly_one_word() {
        assert!(topic_matches("*", "a"));
        assert!(!topic_matches("*", ""));
        assert!(!topic_matches("*", "a.b"));
        assert!(topic_matches("*.*", "a.b"));
        assert!(topic_matches("a.*", "a."));
    }

    #[test]
    fn hash_matches_zero_or_more_words() {
        assert!(topic_matches("#", ""));
        assert!(topic_matches("#", "a.b.c"));
        assert!(topic_matches("a.#", "a"));
        assert!(topic_matches("a.#.b", "a.b"));
        assert!(topic_matches("a.#.b", "a.x.y.b"));
        assert!(!topic_matches("a.#.b", "a.x.y"));
        assert!(topic_matches("#.#", "a"));
        assert!(topic_matches("#.#", ""));
    }

    #[test]
    fn empty_binding_key_matches_only_empty_routing_key() {
        assert!(topic_matches("", ""));
        assert!(!topic_matches("", "a"));
        assert!(!topic_matches("a", ""));
    }

    #[test]
    fn empty_words_are_words() {
        assert!(topic_matches("a.", "a."));
        assert!(topic_matches("a.*", "a."));
        assert!(!topic_matches("a", "a."));
        assert!(topic_matches("*.*", "."));
    }

    #[test]
    fn many_hashes_do_not_blow_up() {
        let p = "#.a.#.a.#.a.#.a.#.a.#.a.#.a.#.a.#.b";
        let k = ["a"; 60].join(".");
        assert!(!topic_matches(p, &k));
    }

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just(String::new())
        ]
    }

    fn pword() -> impl Strategy<Value = String> {
        prop_oneof![word(), Just("*".to_string()), Just("#".to_string())]
    }

    proptest! {
        #[test]
        fn topic_matching_agrees_with_reference(
            p in proptest::collection::vec(pword(), 0..6),
            k in proptest::collection::vec(word(), 0..6),
        ) {
            let pattern = p.join(".");
            let key = k.join(".");
            let pw = split_words(&pattern);
            let kw = split_words(&key);
            prop_assert_eq!(topic_matches(&pattern, &key), reference(&pw, &kw));

            // and through the binding table (which collapses "#.#")
            let mut t = TopicBindings::default();
            t.add(Binding {
                destination: Destination::Queue("q".into()),
                routing_key: pattern.clone(),
                arguments: FieldTable::default(),
            });
            let mut out = Vec::new();
            t.route(&[key.as_str()], None, &mut out);
            prop_assert_eq!(!out.is_empty(), reference(&pw, &kw));
        }
    }
}
