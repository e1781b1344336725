//! Dead-lettered counts by failure reason, for every queue that dead-letters, archived or not
//! (issue 9, docs/archive.md "Failure reasons without archiving"): the error headers consumers
//! set (`archive_error_message_headers` / `archive_error_stacktrace_headers`, Spring AMQP's
//! `x-exception-message` / `x-exception-stacktrace` by default) are read with the archive's own
//! extraction and grouped by the archive's fingerprint, with a sample message and per-reason
//! counts. At most [`MAX_FINGERPRINTS`] distinct fingerprints per queue; later new ones are
//! counted under [`OTHER`].
//!
//! Cheap on the dead-letter path: a message without headers costs one flag test, one with headers
//! a byte search of its property bytes for the configured header names; only a message that
//! carries one is decoded.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use charon_archive::ExtractConfig;
use charon_core::DeadLetter;
use charon_protocol::RawProperties;

use super::admin::REASONS;

/// Distinct fingerprints counted per queue.
pub const MAX_FINGERPRINTS: usize = 100;
/// The fingerprint under which the rest is counted.
pub(crate) const OTHER: &str = "other";

/// Which headers carry the error, and their encoded names to look for.
#[derive(Debug)]
struct Probe {
    cfg: ExtractConfig,
    /// Each header name as a field-table key (length byte + name), its searcher built once.
    needles: Vec<memchr::memmem::Finder<'static>>,
}

static PROBE: LazyLock<RwLock<Arc<Probe>>> =
    LazyLock::new(|| RwLock::new(Arc::new(probe_of(ExtractConfig::default()))));

/// Sets the error headers (from the config, at start; the defaults until then).
pub(crate) fn configure(message_headers: &[String], stacktrace_headers: &[String]) {
    let p = Arc::new(probe_of(ExtractConfig {
        key_header: None,
        error_message_headers: message_headers.to_vec(),
        error_stacktrace_headers: stacktrace_headers.to_vec(),
    }));
    *PROBE.write().unwrap_or_else(|e| e.into_inner()) = p;
}

fn probe_of(cfg: ExtractConfig) -> Probe {
    let needles = cfg
        .error_message_headers
        .iter()
        .chain(&cfg.error_stacktrace_headers)
        .filter(|n| !n.is_empty() && n.len() < 256)
        .map(|n| {
            let mut v = vec![n.len() as u8];
            v.extend_from_slice(n.as_bytes());
            memchr::memmem::Finder::new(&v).into_owned()
        })
        .collect();
    Probe { cfg, needles }
}

fn probe() -> Arc<Probe> {
    PROBE.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The headers property's flag bit.
const HEADERS_FLAG: u16 = 1 << 13;

/// (fingerprint, message) of a message's error headers, if it carries one.
pub(crate) fn error_of(props: &RawProperties) -> Option<(String, Option<String>)> {
    if props.flags() & HEADERS_FLAG == 0 {
        return None;
    }
    let p = probe();
    let bytes = props.0.as_ref();
    if !p.needles.iter().any(|n| n.find(bytes).is_some()) {
        return None;
    }
    let decoded = props.decode().ok()?;
    let headers = decoded.headers().as_ref()?;
    let (message, _, fingerprint) = charon_archive::extract::error_of(&p.cfg, headers);
    fingerprint.map(|f| (f, message))
}

/// One fingerprint's count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorCount {
    /// The fingerprint (or [`OTHER`]).
    pub fingerprint: String,
    /// The error message of the first dead letter counted under it.
    pub sample_message: Option<String>,
    /// Dead letters counted.
    pub count: u64,
    /// Of those, by reason in [`REASONS`] order.
    pub by_reason: [u64; 4],
}

/// A queue's error counts (its actor is the only writer).
#[derive(Debug, Default)]
pub(crate) struct DlErrors {
    counts: HashMap<String, ErrorCount>,
}

impl DlErrors {
    /// Counts the dead letters of `dead` that carry an error.
    pub(crate) fn note(&mut self, dead: &[DeadLetter]) {
        for d in dead {
            if let Some((fp, message)) = error_of(&d.message.properties) {
                let i = REASONS.iter().position(|r| *r == d.reason).unwrap_or(0);
                self.add(fp, message, i);
            }
        }
    }

    fn add(&mut self, fp: String, message: Option<String>, reason: usize) {
        let key = if self.counts.contains_key(&fp) || self.distinct() < MAX_FINGERPRINTS {
            fp
        } else {
            OTHER.to_string()
        };
        let e = self.counts.entry(key).or_insert_with_key(|k| ErrorCount {
            fingerprint: k.clone(),
            sample_message: if k == OTHER { None } else { message },
            ..ErrorCount::default()
        });
        e.count += 1;
        e.by_reason[reason] += 1;
    }

    fn distinct(&self) -> usize {
        self.counts.len() - usize::from(self.counts.contains_key(OTHER))
    }

    /// The counts, most frequent first.
    pub(crate) fn snapshot(&self) -> Vec<ErrorCount> {
        let mut v: Vec<ErrorCount> = self.counts.values().cloned().collect();
        v.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.fingerprint.cmp(&b.fingerprint))
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use charon_core::Message;
    use charon_core::dead_letter::Reason;
    use charon_protocol::{AMQPValue, BasicProperties, FieldTable, LongString};

    fn dead(headers: Option<&[(&str, &str)]>, reason: Reason) -> DeadLetter {
        let mut p = BasicProperties::default();
        if let Some(h) = headers {
            let mut t = FieldTable::default();
            for (k, v) in h {
                t.insert(
                    (*k).into(),
                    AMQPValue::LongString(LongString::from(v.as_bytes().to_vec())),
                );
            }
            p = p.with_headers(t);
        }
        DeadLetter {
            message: Arc::new(Message::new(
                Arc::from("x"),
                Arc::from("k"),
                RawProperties::encode(&p),
                bytes::Bytes::from_static(b"b"),
            )),
            reason,
            id: None,
        }
    }

    #[test]
    fn counts_by_fingerprint_with_a_sample_and_caps_the_distinct_ones() {
        let mut e = DlErrors::default();
        e.note(&[
            dead(None, Reason::Rejected),
            dead(Some(&[("tenant", "a")]), Reason::Rejected),
            dead(
                Some(&[("x-exception-message", "Order 1 not found")]),
                Reason::Rejected,
            ),
            dead(
                Some(&[("x-exception-message", "Order 2 not found")]),
                Reason::Expired,
            ),
        ]);
        let s = e.snapshot();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].count, 2);
        assert_eq!(s[0].by_reason, [1, 1, 0, 0]);
        assert_eq!(s[0].sample_message.as_deref(), Some("Order 1 not found"));
        let msgs: Vec<String> = (0..MAX_FINGERPRINTS + 10)
            .map(|i| format!("cause {}", "z".repeat(i + 1)))
            .collect();
        let batch: Vec<DeadLetter> = msgs
            .iter()
            .map(|m| dead(Some(&[("x-exception-message", m)]), Reason::Rejected))
            .collect();
        e.note(&batch);
        let s = e.snapshot();
        assert_eq!(s.len(), MAX_FINGERPRINTS + 1);
        let other = s.iter().find(|c| c.fingerprint == OTHER).expect("other");
        assert_eq!(other.count, 11);
        assert_eq!(other.sample_message, None);
    }
}
