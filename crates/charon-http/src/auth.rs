//! HTTP basic authentication against the broker's users. Every management endpoint takes an
//! [`AuthUser`]; endpoints that change configuration also check its tags, as RabbitMQ does
//! (`policymaker` or `administrator` for policies).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use base64::Engine;
use charon_server::broker::Broker;

use crate::error::ApiError;

/// The authenticated user of a request and its tags.
#[derive(Debug, Clone)]
pub struct AuthUser {
    /// User name.
    pub name: String,
    /// Tags (`administrator`, `policymaker`, `management`, ...).
    pub tags: Vec<String>,
}

impl AuthUser {
    /// Whether the user may change policies.
    pub fn may_set_policies(&self) -> Result<(), ApiError> {
        if self
            .tags
            .iter()
            .any(|t| t == "administrator" || t == "policymaker")
        {
            Ok(())
        } else {
            Err(ApiError::NotAuthorised)
        }
    }
}

impl FromRequestParts<Arc<Broker>> for AuthUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        broker: &Arc<Broker>,
    ) -> Result<Self, Self::Rejection> {
        let value = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(ApiError::LoginFailed)?;
        let encoded = value.strip_prefix("Basic ").ok_or(ApiError::LoginFailed)?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| ApiError::LoginFailed)?;
        let text = String::from_utf8(decoded).map_err(|_| ApiError::LoginFailed)?;
        let (user, password) = text.split_once(':').ok_or(ApiError::LoginFailed)?;
        let tags = broker
            .management_login(user, password)
            .ok_or(ApiError::LoginFailed)?;
        if tags.is_empty() {
            return Err(ApiError::NotAuthorised);
        }
        Ok(AuthUser {
            name: user.to_string(),
            tags,
        })
    }
}
