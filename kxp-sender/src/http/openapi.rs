//! The OpenAPI 3.1 document of this API, built from the handlers' own annotations (paths,
//! parameters, statuses) and [`kxp_api`]'s types (schemas, examples, the contract's prose), and
//! served at `GET /v1/openapi.json`. `docs/openapi.json` is this document, checked by a test.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa::openapi::path::Operation;
use utoipa::openapi::{Ref, RefOr, Response as ApiResponse, ResponseBuilder};

use super::{
    account, accounts, deliveries, endpoint_actions, endpoints, erasures, events, feed, health,
    listen_tokens, notifications, portal_links, schemas, thin,
};

#[derive(OpenApi)]
#[openapi(
    paths(
        endpoints::create_endpoint, endpoints::list_endpoints, endpoints::get_endpoint,
        endpoints::patch_endpoint, endpoints::delete_endpoint,
        endpoint_actions::pause_endpoint, endpoint_actions::resume_endpoint,
        endpoint_actions::rotate_secret, endpoint_actions::replay_endpoint,
        endpoint_actions::test_filter,
        endpoint_actions::public_key, endpoint_actions::jwks,
        health::endpoint_health, feed::feed, feed::cursor, feed::commit_cursor,
        feed::create_feed_token, thin::fetch_event, listen_tokens::create_listen_token,
        events::create_event, events::list_events, events::get_event,
        erasures::create_erasure, erasures::get_erasure,
        deliveries::event_deliveries, deliveries::list_deliveries,
        deliveries::delivery_attempts, deliveries::replay_delivery,
        account::get_account, account::patch_account, notifications::list_notifications,
        accounts::create_account, accounts::list_accounts,
        portal_links::create_portal_link,
        schemas::list_schemas, schemas::get_schema, schemas::put_schema, schemas::delete_schema,
        health::livez, health::readyz, health::healthz, health::metrics, openapi_json,
    ),
    tags(
        (name = "endpoints", description = "Where events are delivered, and how each endpoint is doing"),
        (name = "events", description = "Emitting events, and reading them back"),
        (name = "deliveries", description = "One event to one endpoint: attempts, the dead-letter queue, replay"),
        (name = "account", description = "The account and its operational notices"),
        (name = "operators", description = "Creating and listing accounts; operator keys only"),
        (name = "portal", description = "One-time sign-in links to the console, for merchants"),
        (name = "schemas", description = "JSON Schemas events must match"),
        (name = "operations", description = "Health, metrics and this document; no key"),
    ),
)]
struct Paths;

/// The whole document: the paths above, with the types and prose of [`kxp_api::openapi`],
/// and the errors every route can answer.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = kxp_api::openapi();
    doc.merge(Paths::openapi());
    for (path, item) in doc.paths.paths.iter_mut() {
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            add_common_errors(path, operation);
        }
    }
    doc
}

/// The errors any route under `/v1/` can answer, written once here rather than on every
/// handler: 401 without a valid key, 404 for an id the account does not have, 400/422 for a
/// body that is not JSON or not of the right shape, 503 when the database is unreachable; and
/// on the routes of one account, the `X-Kxp-Account` header and what it can answer.
fn add_common_errors(path: &str, operation: &mut Operation) {
    if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
        return;
    }
    if path == FEED_ROUTE {
        // Not an API route: the receiver's own credential, no account, and an unknown
        // endpoint answers 401 like a wrong signature. Its handler lists its answers.
        operation.responses.responses.entry("503".to_owned()).or_insert_with(|| {
            error("`store_unavailable`: the database is unreachable, or the endpoint's items cannot be signed now; retry")
        });
        return;
    }
    let responses = &mut operation.responses.responses;
    let mut add = |status: &str, description: &str| {
        responses
            .entry(status.to_owned())
            .or_insert_with(|| error(description));
    };
    if path == OPERATOR_ROUTES {
        add(
            "401",
            "`unauthorized`: no valid operator key in `Authorization: Bearer <key>` (an \
             account key is refused too)",
        );
    } else {
        add(
            "401",
            "`unauthorized`: no valid `Authorization: Bearer <api key>`",
        );
    }
    if path.contains('{') {
        add(
            "404",
            "`not_found`: no such resource in this account (another account's ids look the same)",
        );
    }
    if operation.request_body.is_some() {
        add("400", "`invalid_json`: the body is not JSON");
        add(
            "422",
            "`invalid_request`: a field is missing, unknown, or not acceptable",
        );
    } else if operation.parameters.as_ref().is_some_and(|p| {
        p.iter().any(|p| {
            matches!(p, RefOr::T(p) if p.parameter_in == utoipa::openapi::path::ParameterIn::Query)
        })
    }) {
        add(
            "422",
            "`invalid_request`: a query parameter is not acceptable",
        );
    }
    add(
        "503",
        "`store_unavailable`: the database is unreachable; retry",
    );
    if path != OPERATOR_ROUTES {
        add_account_header(operation);
    }
}

/// An error answer with the [`kxp_api::ErrorBody`] schema.
fn error(description: &str) -> RefOr<ApiResponse> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build(),
    )
}

/// The path of the operator routes, which act for no one account.
const OPERATOR_ROUTES: &str = "/v1/accounts";

/// The catch-up feed, which the merchant's receiver reads with the endpoint's credential.
const FEED_ROUTE: &str = "/v1/endpoints/{id}/feed";

/// `X-Kxp-Account` on a route of one account: optional for an account key (its own id only),
/// required for an operator key (400 `account_required` without it, 404 for an id of no
/// account).
fn add_account_header(operation: &mut Operation) {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    let header = ParameterBuilder::new()
        .name(kxp_api::ACCOUNT_HEADER)
        .parameter_in(ParameterIn::Header)
        .required(utoipa::openapi::Required::False)
        .description(Some(
            "The account an operator key acts for (required with one); an account key may \
             name only its own account (another id answers 404)",
        ))
        .schema(Some(Ref::from_schema_name("AccountId")))
        .build();
    operation
        .parameters
        .get_or_insert_with(Vec::new)
        .push(RefOr::T(header));
    let responses = &mut operation.responses.responses;
    for (status, code, why) in [
        (
            "400",
            "`account_required`",
            "an operator key without `X-Kxp-Account`",
        ),
        (
            "404",
            "`not_found`",
            "`X-Kxp-Account` names no account (or, with an account key, another account)",
        ),
    ] {
        match responses.get_mut(status) {
            // The same code already described: only the new reason is added.
            Some(RefOr::T(response)) if response.description.starts_with(code) => {
                response.description = format!("{}; or {why}", response.description);
            }
            Some(RefOr::T(response)) => {
                response.description = format!("{}; or {code}: {why}", response.description);
            }
            Some(RefOr::Ref(_)) => {}
            None => {
                responses.insert(status.to_owned(), error(&format!("{code}: {why}")));
            }
        }
    }
}

static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    document()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot render the document: {e}\"}}"))
});

/// This document, as JSON. No key: it describes the API, not an account.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "operations", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
pub(super) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}
