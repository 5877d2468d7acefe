//! The API's errors: `{"error": "<code>", "message": "…"}` with a fixed status per code, and
//! the JSON body parser that produces them.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::store::StoreError;

/// An API error: `{"error": "<code>", "message": "…"}` with its status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": self.code, "message": self.message})),
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
            }
            StoreError::Conflict { code, message } => {
                ApiError::new(StatusCode::CONFLICT, code, message)
            }
            StoreError::Database(e) => {
                tracing::error!(target: "kxp_sender", error = %e, "database error in the API");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the database is unavailable; retry",
                )
            }
        }
    }
}

pub(crate) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let code = if e.is_data() {
            "invalid_request"
        } else {
            "invalid_json"
        };
        let status = if e.is_data() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError::new(status, code, e.to_string())
    })
}
