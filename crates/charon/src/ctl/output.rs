//! rabbitmqctl's output: an informational line ("Listing queues for vhost / ...", left out with
//! `--quiet`), then a tab-separated table with a header row (`--no-table-headers` drops it), or
//! with `--formatter json` a JSON array of objects with the requested columns.

use serde_json::{Map, Value};

/// Output options shared by every command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    pub(crate) quiet: bool,
    pub(crate) json: bool,
    pub(crate) headers: bool,
}

impl Style {
    /// Prints an informational line unless quiet (or JSON).
    pub(crate) fn info(&self, line: &str) {
        if !self.quiet && !self.json {
            println!("{line}");
        }
    }
}

/// A column value as rabbitmqctl prints it: strings bare, lists as `[a, b]`, others as JSON.
pub(crate) fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => format!(
            "[{}]",
            a.iter()
                .map(|x| cell(Some(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(v) => v.to_string(),
    }
}

/// Looks a column up, following dots (`queue.name`).
pub(crate) fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Prints rows (each a map column → value) in `columns` order.
pub(crate) fn table(style: Style, columns: &[String], rows: &[Map<String, Value>]) {
    if style.json {
        let list: Vec<Value> = rows.iter().cloned().map(Value::Object).collect();
        println!("{}", Value::Array(list));
        return;
    }
    if style.headers {
        println!("{}", columns.join("\t"));
    }
    for r in rows {
        let line: Vec<String> = columns.iter().map(|c| cell(r.get(c))).collect();
        println!("{}", line.join("\t"));
    }
}
