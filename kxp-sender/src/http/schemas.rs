//! `/v1/schemas`: registering, reading and deleting JSON Schemas per event type and version.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{ErrorCode, Page, Schema, SchemaDeleted};
use serde_json::Value;

use super::pagination::whole;
use super::{ApiBody, ApiError, AppState, Authed, parse};
use crate::app::checks::check_name;

/// The largest schema document accepted.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 * 1024;

pub(super) fn schema_key(event_type: &str, api_version: &str) -> Result<(), ApiError> {
    check_name("type", event_type, 128)?;
    Ok(check_name("api_version", api_version, 64)?)
}

/// Registers (or replaces) the JSON Schema that events of this type and version must match;
/// events that do not are refused with 400 `schema_violation`.
#[utoipa::path(put, path = "/v1/schemas/{type}/{api_version}", tag = "schemas",
    params(
        ("type" = String, Path, description = "The event type"),
        ("api_version" = String, Path, description = "The version of `data` it describes"),
    ),
    request_body(content = Object, description = "A JSON Schema (draft 2020-12), at most 64 KiB"),
    responses(
        (status = 201, description = "Registered", body = Schema),
        (status = 200, description = "Replaced", body = Schema),
        (status = 422, description = "`invalid_schema`", body = kxp_api::ErrorBody),
    ))]
pub(super) async fn put_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    schema_key(&event_type, &api_version)?;
    if body.len() > MAX_SCHEMA_BYTES {
        return Err(ApiError::new(
            ErrorCode::InvalidSchema,
            format!("a schema is at most {MAX_SCHEMA_BYTES} bytes"),
        ));
    }
    let document: Value = parse(&body)?;
    if !document.is_object() && !document.is_boolean() {
        return Err(ApiError::new(
            ErrorCode::InvalidSchema,
            "a JSON Schema is an object or a boolean",
        ));
    }
    crate::engine::schemas::compile(&document)
        .map_err(|e| ApiError::new(ErrorCode::InvalidSchema, e))?;
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
    Ok((status, Json(Schema::from(stored))).into_response())
}

/// Every schema of the account.
#[utoipa::path(get, path = "/v1/schemas", tag = "schemas",
    responses((status = 200, description = "All of them (never more than one page)", body = Page<Schema>)))]
pub(super) async fn list_schemas(
    State(state): State<AppState>,
    Authed(account): Authed,
) -> Result<Json<Page<Schema>>, ApiError> {
    let schemas = state.db.schemas(&account.id).await?;
    Ok(Json(whole(schemas.into_iter().map(Schema::from).collect())))
}

/// One schema.
#[utoipa::path(get, path = "/v1/schemas/{type}/{api_version}", tag = "schemas",
    params(
        ("type" = String, Path, description = "The event type"),
        ("api_version" = String, Path, description = "The version of `data` it describes"),
    ),
    responses((status = 200, description = "The schema", body = Schema)))]
pub(super) async fn get_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
) -> Result<Json<Schema>, ApiError> {
    let schema = state
        .db
        .schema(&account.id, &event_type, &api_version)
        .await?;
    Ok(Json(Schema::from(schema)))
}

/// Removes a schema: events of this type and version are no longer checked.
#[utoipa::path(delete, path = "/v1/schemas/{type}/{api_version}", tag = "schemas",
    params(
        ("type" = String, Path, description = "The event type"),
        ("api_version" = String, Path, description = "The version of `data` it describes"),
    ),
    responses((status = 200, description = "Deleted", body = SchemaDeleted)))]
pub(super) async fn delete_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
) -> Result<Json<SchemaDeleted>, ApiError> {
    state
        .db
        .delete_schema(&account.id, &event_type, &api_version)
        .await?;
    state.schemas.forget(&account.id, &event_type, &api_version);
    Ok(Json(SchemaDeleted {
        deleted: true,
        event_type,
        api_version,
    }))
}
