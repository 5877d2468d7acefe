//! `/v1/schemas`: registering, reading and deleting JSON Schemas per event type and version.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::checks::check_name;
use super::{ApiError, AppState, Authed, parse};
use crate::model::{Schema, rfc3339};

/// The largest schema document accepted.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

pub(super) fn schema_json(schema: Schema) -> Value {
    let document: Value = serde_json::from_str(&schema.schema).unwrap_or(Value::Null);
    json!({
        "id": schema.id,
        "type": schema.event_type,
        "api_version": schema.api_version,
        "schema": document,
        "created_at": rfc3339(schema.created_at),
        "updated_at": rfc3339(schema.updated_at),
    })
}

pub(super) fn schema_key(event_type: &str, api_version: &str) -> Result<(), ApiError> {
    check_name("type", event_type, 128)?;
    check_name("api_version", api_version, 64)
}

pub(super) async fn put_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    schema_key(&event_type, &api_version)?;
    if body.len() > MAX_SCHEMA_BYTES {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_schema",
            format!("a schema is at most {MAX_SCHEMA_BYTES} bytes"),
        ));
    }
    let document: Value = parse(&body)?;
    if !document.is_object() && !document.is_boolean() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_schema",
            "a JSON Schema is an object or a boolean",
        ));
    }
    crate::engine::schemas::compile(&document)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_schema", e))?;
    let (stored, created) = state
        .db
        .put_schema(
            &account.id,
            &event_type,
            &api_version,
            &document.to_string(),
        )
        .await?;
    state.schemas.forget(&account.id, &event_type, &api_version);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(schema_json(stored))).into_response())
}

pub(super) async fn list_schemas(
    State(state): State<AppState>,
    Authed(account): Authed,
) -> Result<Json<Value>, ApiError> {
    let schemas: Vec<Value> = state
        .db
        .schemas(&account.id)
        .await?
        .into_iter()
        .map(schema_json)
        .collect();
    Ok(Json(json!({"data": schemas, "next_cursor": null})))
}

pub(super) async fn get_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(schema_json(
        state
            .db
            .schema(&account.id, &event_type, &api_version)
            .await?,
    )))
}

pub(super) async fn delete_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    state
        .db
        .delete_schema(&account.id, &event_type, &api_version)
        .await?;
    state.schemas.forget(&account.id, &event_type, &api_version);
    Ok(Json(
        json!({"deleted": true, "type": event_type, "api_version": api_version}),
    ))
}
