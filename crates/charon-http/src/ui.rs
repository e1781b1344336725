//! The web UI: static files embedded in the binary (`crates/charon-http/ui/`, hand-written
//! HTML/CSS/JS, no build step), served at `/` and `/ui/{file}`. The UI is a client of the
//! management API only (basic auth, RabbitMQ's paths and shapes).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// (file name, content type, contents).
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../ui/index.html"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../ui/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/app.js"),
    ),
    (
        "lib.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/lib.js"),
    ),
    (
        "pages.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/pages.js"),
    ),
    (
        "admin.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/admin.js"),
    ),
    (
        "dlq.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/dlq.js"),
    ),
    (
        "flow.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/flow.js"),
    ),
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
