//! `POST`/`GET /v1/accounts`: the operator routes. Only an operator key reaches them
//! ([`AsOperator`]); they create accounts (answering the new API key, once) and list them.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_api::{Account, AccountCreated, NewAccount, Page, Secret};

use super::auth::AsOperator;
use super::pagination::{PageParams, page};
use super::{ApiBody, ApiError, ApiQuery, AppState, parse};
use crate::app::checks::check_account_name;

/// Creates an account. The answer holds its API key, which no other answer shows: the server
/// keeps only its SHA-256 hash. An account key answers 401 here.
#[utoipa::path(post, path = "/v1/accounts", tag = "operators",
    request_body = NewAccount,
    responses(
        (status = 201, description = "Created; `api_key` is shown this once", body = AccountCreated),
    ))]
pub(super) async fn create_account(
    State(state): State<AppState>,
    AsOperator(operator): AsOperator,
    ApiBody(body): ApiBody,
) -> Result<Response, ApiError> {
    let new: NewAccount = parse(&body)?;
    check_account_name(&new.name)?;
    let (account, key) = state.db.create_account(&new.name, None).await?;
    tracing::info!(
        target: "kxp_sender", operator_id = %operator.id, account_id = %account.id,
        "an operator created an account"
    );
    let created = AccountCreated {
        account: Account::from(account),
        api_key: Secret::from(key),
    };
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

/// Every account, oldest first, a page at a time. An account key answers 401 here.
#[utoipa::path(get, path = "/v1/accounts", tag = "operators",
    params(PageParams),
    responses((status = 200, description = "A page of accounts", body = Page<Account>)))]
pub(super) async fn list_accounts(
    State(state): State<AppState>,
    AsOperator(_): AsOperator,
    ApiQuery(params): ApiQuery<PageParams>,
) -> Result<Json<Page<Account>>, ApiError> {
    let limit = params.limit()?;
    let accounts = state
        .db
        .accounts_after(params.cursor.as_deref(), limit)
        .await?;
    let views = accounts.into_iter().map(Account::from).collect();
    Ok(Json(page(views, limit, |a| a.id.to_string())))
}
