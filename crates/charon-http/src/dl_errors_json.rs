//! A queue's dead-lettered counts by error fingerprint as the queue JSON's `dead_lettered_errors`
//! (docs/archive.md "Failure reasons without archiving").

use charon_server::admin::{ErrorCount, REASONS};
use serde_json::{Value, json};

/// `[{"fingerprint", "count", "sample_message", "by_reason": {reason: n}}]`, most frequent first.
pub fn errors_json(errors: &[ErrorCount]) -> Value {
    Value::Array(
        errors
            .iter()
            .map(|e| {
                let by_reason: serde_json::Map<String, Value> = REASONS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| e.by_reason[*i] > 0)
                    .map(|(i, r)| (r.as_str().to_string(), Value::from(e.by_reason[i])))
                    .collect();
                json!({
                    "fingerprint": e.fingerprint,
                    "count": e.count,
                    "sample_message": e.sample_message,
                    "by_reason": by_reason,
                })
            })
            .collect(),
    )
}
