//! The management API over real HTTP: a broker without a store, the router served on a local
//! port, and requests written by hand on a TCP socket (HTTP/1.1, `Connection: close`), asserting
//! on status, headers and JSON as RabbitMQ's management API shapes them.

use std::sync::Arc;

use base64::Engine;
use charon_server::Config;
use charon_server::broker::Broker;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

struct Api {
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for Api {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start() -> Api {
    let broker = Arc::new(Broker::new(Config::default()).expect("default config is valid"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let shutdown = CancellationToken::new();
    tokio::spawn(charon_http::run(listener, broker, shutdown.clone()));
    Api { addr, shutdown }
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn basic(user: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {token}")
}

async fn request(
    api: &Api,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&Value>,
) -> Response {
    let mut stream = TcpStream::connect(api.addr).await.expect("connect");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(a) = auth {
        req.push_str(&format!("Authorization: {a}\r\n"));
    }
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str("\r\n");
    req.push_str(&body);
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    parse(&raw)
}

fn parse(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(raw.get(..split).unwrap_or_default()).into_owned();
    let mut body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(data.get(..eol).unwrap_or_default())
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let chunk = data.get(eol + 2..eol + 2 + size).unwrap_or_default();
        out.extend_from_slice(chunk);
        data = data.get(eol + 2 + size + 2..).unwrap_or_default();
    }
    out
}

#[tokio::test]
async fn health_answers_without_credentials() {
    let api = start().await;
    let r = request(&api, "GET", "/api/health", None, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"status": "ok"}));
}

#[tokio::test]
async fn the_api_wants_a_valid_login() {
    let api = start().await;
    let r = request(&api, "GET", "/api/policies", None, None).await;
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some());
    assert_eq!(r.json()["error"], "not_authorized");
    let wrong = basic("guest", "wrong");
    let r = request(&api, "GET", "/api/policies", Some(&wrong), None).await;
    assert_eq!(r.status, 401);
    let guest = basic("guest", "guest");
    let r = request(&api, "GET", "/api/policies", Some(&guest), None).await;
    assert_eq!((r.status, r.json()), (200, json!([])));
}

#[tokio::test]
async fn a_policy_is_created_updated_listed_and_cleared() {
    let api = start().await;
    let guest = basic("guest", "guest");
    let auth = Some(guest.as_str());
    let path = "/api/policies/%2F/limit";
    let policy = json!({
        "pattern": "^orders",
        "definition": {"max-length": 10},
        "priority": 3,
        "apply-to": "queues",
    });
    let r = request(&api, "PUT", path, auth, Some(&policy)).await;
    assert_eq!(r.status, 201);
    let r = request(&api, "PUT", path, auth, Some(&policy)).await;
    assert_eq!(r.status, 204);
    let r = request(&api, "GET", path, auth, None).await;
    assert_eq!(r.status, 200);
    let got = r.json();
    assert_eq!(got["vhost"], "/");
    assert_eq!(got["name"], "limit");
    assert_eq!(got["pattern"], "^orders");
    assert_eq!(got["apply-to"], "queues");
    assert_eq!(got["priority"], 3);
    assert_eq!(got["definition"], json!({"max-length": 10}));
    let r = request(&api, "GET", "/api/policies/%2F", auth, None).await;
    assert_eq!(r.json().as_array().map(Vec::len), Some(1));
    let r = request(&api, "DELETE", path, auth, None).await;
    assert_eq!(r.status, 204);
    let r = request(&api, "GET", path, auth, None).await;
    assert_eq!(r.status, 404);
    let r = request(&api, "DELETE", path, auth, None).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn bad_policies_are_refused_with_rabbitmq_texts() {
    let api = start().await;
    let guest = basic("guest", "guest");
    let auth = Some(guest.as_str());
    let no_pattern = json!({"definition": {"max-length": 1}});
    let r = request(&api, "PUT", "/api/policies/%2F/p", auth, Some(&no_pattern)).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"], "bad_request");
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\npattern is missing"
    );
    let fine = json!({"pattern": ".*", "definition": {"max-length": 1}});
    let r = request(&api, "PUT", "/api/policies/nowhere/p", auth, Some(&fine)).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn queues_are_listed_per_vhost() {
    let api = start().await;
    let guest = basic("guest", "guest");
    let auth = Some(guest.as_str());
    let r = request(&api, "GET", "/api/queues", auth, None).await;
    assert_eq!((r.status, r.json()), (200, json!([])));
    let r = request(&api, "GET", "/api/queues/%2F/missing", auth, None).await;
    assert_eq!(r.status, 404);
}
