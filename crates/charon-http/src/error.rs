//! The management API's errors and their JSON shape (`{"error": ..., "reason": ...}`, as
//! RabbitMQ's management plugin answers), with RabbitMQ's status codes: 401 for a failed login
//! (`not_authorized`) and for a missing tag or vhost access (`not_authorised`), 404 for unknown
//! objects, 400 for bad input.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use charon_server::admin::users::AdminError;

/// An error answered to an HTTP client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Missing or wrong credentials.
    #[error("Login failed")]
    LoginFailed,
    /// The user lacks the tag or vhost access the endpoint needs ("Not administrator user",
    /// "Access refused.", ...).
    #[error("{0}")]
    NotAuthorised(String),
    /// No such object (vhost, policy, queue...).
    #[error("Not Found")]
    NotFound,
    /// A named object is missing (`{"error":"not_found","reason":...}`).
    #[error("{0}")]
    Missing(String),
    /// The request is malformed or fails validation.
    #[error("{0}")]
    BadRequest(String),
    /// A health check failed (503 with its own body).
    #[error("{0}")]
    Unavailable(serde_json::Value),
}

impl ApiError {
    /// The user lacks a tag: "Not management user", "Not administrator user", ...
    pub fn not_authorised(reason: &str) -> Self {
        ApiError::NotAuthorised(reason.to_string())
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::NotFound => ApiError::NotFound,
            AdminError::Missing(r) => ApiError::Missing(r),
            AdminError::BadRequest(r) => ApiError::BadRequest(r),
            AdminError::AccessRefused(r) => ApiError::NotAuthorised(r),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Unavailable(body) = self {
            return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
        }
        let (status, error) = match &self {
            ApiError::LoginFailed => (StatusCode::UNAUTHORIZED, "not_authorized"),
            ApiError::NotAuthorised(_) => (StatusCode::UNAUTHORIZED, "not_authorised"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "Object Not Found"),
            ApiError::Missing(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "failed"),
        };
        let body = Json(serde_json::json!({"error": error, "reason": self.to_string()}));
        let mut resp = (status, body).into_response();
        if matches!(self, ApiError::LoginFailed) {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        resp
    }
}

/// A DELETE's answer: 204 when something was deleted, RabbitMQ's 404 when there was nothing.
pub(crate) fn deleted(found: bool) -> Result<axum::http::StatusCode, ApiError> {
    if found {
        Ok(axum::http::StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound)
    }
}
