//! The management API's errors and their JSON shape (`{"error": ..., "reason": ...}`, as
//! RabbitMQ's management plugin answers).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An error answered to an HTTP client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing or wrong credentials.
    #[error("Login failed")]
    LoginFailed,
    /// The user lacks the tag the endpoint needs.
    #[error("Not management user")]
    NotAuthorised,
    /// No such object (vhost, policy, queue...).
    #[error("Not Found")]
    NotFound,
    /// The request is malformed or fails validation.
    #[error("{0}")]
    BadRequest(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error) = match &self {
            ApiError::LoginFailed => (StatusCode::UNAUTHORIZED, "not_authorized"),
            ApiError::NotAuthorised => (StatusCode::UNAUTHORIZED, "not_authorized"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "Object Not Found"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
        };
        let body = Json(serde_json::json!({"error": error, "reason": self.to_string()}));
        let mut resp = (status, body).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        resp
    }
}
