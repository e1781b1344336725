//! The web UI: static files embedded in the binary (`crates/charon-http/ui/`, hand-written
//! HTML/CSS/JS modules, no build step), served at `/` and `/ui/{file}`. The UI is a client of
//! the management API only (basic auth, RabbitMQ's paths and shapes; docs/web-ui.md).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const JS: &str = "text/javascript; charset=utf-8";

/// One embedded file: (name, content type, contents).
macro_rules! asset {
    ($name:literal, $mime:expr) => {
        ($name, $mime, include_str!(concat!("../ui/", $name)))
    };
}

/// Every file of the UI.
const FILES: &[(&str, &str, &str)] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("lib.js", JS),
    asset!("overview.js", JS),
    asset!("connections.js", JS),
    asset!("exchanges.js", JS),
    asset!("queues.js", JS),
    asset!("admin.js", JS),
    asset!("dlq.js", JS),
    asset!("flow.js", JS),
    asset!("archive.js", JS),
];

fn file(name: &str) -> Response {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, mime, body)) => (
            [
                (header::CONTENT_TYPE, *mime),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

/// `GET /`: the UI's page.
pub async fn index() -> Response {
    file("index.html")
}

/// `GET /ui/{file}`: one of the UI's assets.
pub async fn asset(Path(name): Path<String>) -> Response {
    file(&name)
}

#[cfg(test)]
mod tests {
    use super::FILES;

    /// Every `/ui/x` and `./x.js` that an embedded file refers to is embedded too.
    #[test]
    fn every_referenced_file_is_embedded() {
        let names: Vec<&str> = FILES.iter().map(|(n, _, _)| *n).collect();
        for (name, _, body) in FILES {
            for marker in ["\"/ui/", "\"./"] {
                for part in body.split(marker).skip(1) {
                    let referenced = part.split('"').next().unwrap_or_default();
                    assert!(
                        names.contains(&referenced),
                        "{name} refers to {referenced}, which is not embedded"
                    );
                }
            }
        }
    }
}
