//! Operator keys (`kxp_op_…`): they create and list accounts, act for the one account a request
//! names in `X-Kxp-Account` and for no other, are refused without it; account keys never reach
//! the operator routes nor another account. One scenario, run on SQLite and on PostgreSQL.

use std::collections::BTreeSet;

use kxp_api::{AccountId, ClientError, EndpointId, NewAccount, NewEndpoint, PageQuery};
use serde_json::json;

use crate::support::{Api, Database, Receiver, sender_with, typed};

/// The status and code of a failed call.
fn refused<T: std::fmt::Debug>(result: Result<T, ClientError>) -> (Option<u16>, String) {
    let error = result.expect_err("the call must be refused");
    (
        error.status(),
        error.code().map(ToString::to_string).unwrap_or_default(),
    )
}

/// An endpoint of the client's account at `url`, without the challenge.
async fn endpoint(client: &kxp_api::Client, url: &str) -> EndpointId {
    let mut new = NewEndpoint::new(url);
    new.skip_challenge = true;
    client.create_endpoint(&new).await.unwrap().endpoint.id
}

/// Every account, walked a page of `limit` at a time.
async fn all_accounts(op: &Api, limit: u32) -> Vec<AccountId> {
    let mut ids = Vec::new();
    let mut query = PageQuery::limit(limit);
    loop {
        let page = op.client.accounts(&query).await.unwrap();
        ids.extend(page.data.into_iter().map(|a| a.id));
        match page.next_cursor {
            None => return ids,
            cursor => query = query.after(cursor),
        }
    }
}

each_backend!(operators_act_for_one_named_account_at_a_time);
on_citus!(operators_act_for_one_named_account_at_a_time);

async fn operators_act_for_one_named_account_at_a_time(database: Database) {
    let s = database.sender("0s").await;
    let (_, op_key) = s.server.db().create_operator("ops").await.unwrap();
    assert!(
        op_key.starts_with("kxp_op_") && op_key.len() == 7 + 64,
        "{op_key}"
    );
    let op = s.api.with_key(&op_key);

    // Accounts made through the API: 201, with an account key (not an operator's), once.
    let (status, c) = op
        .call("POST", "/v1/accounts", Some(json!({"name": "Shop C"})))
        .await;
    assert_eq!(status, 201, "{c}");
    let c_key = c["api_key"].as_str().unwrap();
    assert!(
        c_key.starts_with("kxp_") && !c_key.starts_with("kxp_op_"),
        "{c_key}"
    );
    let a = op
        .client
        .create_account(&NewAccount::new("Shop A"))
        .await
        .unwrap();
    let b = op
        .client
        .create_account(&NewAccount::new("Shop B"))
        .await
        .unwrap();
    assert_eq!(a.account.name, "Shop A");
    let (status, bad) = op
        .call("POST", "/v1/accounts", Some(json!({"name": ""})))
        .await;
    assert_eq!(
        (status, bad["error"].as_str()),
        (422, Some("invalid_request"))
    );

    // Listed, a page at a time, with the default account: each once, oldest first.
    let listed = all_accounts(&op, 1).await;
    assert_eq!(listed, all_accounts(&op, 500).await);
    let default = s.api.client.account().await.unwrap().id;
    let expected = [
        default,
        c["id"].as_str().unwrap().into(),
        a.account.id.clone(),
        b.account.id.clone(),
    ];
    assert_eq!(listed, expected);

    // The answered key is the account's own.
    let a_own = s.api.with_key(a.api_key.expose());
    let b_own = s.api.with_key(b.api_key.expose());
    assert_eq!(a_own.client.account().await.unwrap(), a.account);

    // Acting for A, then for B: each sees and changes only its own.
    let for_a = op.client.clone().for_account(a.account.id.clone());
    let for_b = op.client.clone().for_account(b.account.id.clone());
    assert_eq!(for_a.account().await.unwrap(), a.account);
    let rx = Receiver::start(vec![]).await;
    let a_endpoint = endpoint(&for_a, &rx.url).await;
    let b_endpoint = endpoint(&for_b, &rx.url).await;
    let a_event = for_a
        .create_event(
            &typed(json!({"type": "payment.succeeded", "data": {"n": 1}})),
            None,
        )
        .await
        .unwrap();
    let ids = |endpoints: Vec<kxp_api::Endpoint>| -> Vec<EndpointId> {
        endpoints.into_iter().map(|e| e.id).collect()
    };
    assert_eq!(
        ids(for_a.all_endpoints().await.unwrap()),
        std::slice::from_ref(&a_endpoint)
    );
    assert_eq!(
        ids(a_own.client.all_endpoints().await.unwrap()),
        std::slice::from_ref(&a_endpoint)
    );
    assert_eq!(
        ids(for_b.all_endpoints().await.unwrap()),
        std::slice::from_ref(&b_endpoint)
    );
    assert_eq!(for_a.event(&a_event.id).await.unwrap().id, a_event.id);
    let delivered_to: BTreeSet<EndpointId> = for_a
        .all_deliveries(&typed(json!({})))
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.endpoint_id)
        .collect();
    assert_eq!(delivered_to, BTreeSet::from([a_endpoint.clone()]));
    assert_eq!(for_b.all_deliveries(&typed(json!({}))).await.unwrap(), []);
    assert_eq!(
        refused(for_b.event(&a_event.id).await),
        (Some(404), "not_found".into())
    );
    assert_eq!(
        refused(for_b.endpoint(&a_endpoint).await),
        (Some(404), "not_found".into())
    );

    // Without the header: 400 `account_required` on every route of one account, and nothing
    // is created anywhere.
    for (method, path, body) in [
        ("GET", "/v1/endpoints".to_owned(), None),
        ("GET", format!("/v1/endpoints/{a_endpoint}"), None),
        ("GET", "/v1/deliveries".to_owned(), None),
        ("GET", "/v1/account".to_owned(), None),
        (
            "POST",
            "/v1/events".to_owned(),
            Some(json!({"type": "t", "data": {}})),
        ),
        (
            "POST",
            "/v1/endpoints".to_owned(),
            Some(json!({"url": rx.url, "skip_challenge": true})),
        ),
    ] {
        let (status, body) = op.call(method, &path, body).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("account_required")),
            "{method} {path}: {body}"
        );
    }
    assert_eq!(
        ids(for_a.all_endpoints().await.unwrap()),
        std::slice::from_ref(&a_endpoint)
    );
    assert_eq!(
        for_a.all_deliveries(&typed(json!({}))).await.unwrap().len(),
        1
    );

    // An account that does not exist: 404.
    let nobody = op
        .client
        .clone()
        .for_account("acc_00000000000000000000000000000000".into());
    assert_eq!(
        refused(nobody.all_endpoints().await),
        (Some(404), "not_found".into())
    );

    // Account keys: refused on the operator routes (401), and naming another account gets
    // 404 and changes nothing of it; naming its own account is what it always did.
    assert_eq!(
        refused(a_own.client.accounts(&PageQuery::default()).await),
        (Some(401), "unauthorized".into())
    );
    assert_eq!(
        refused(a_own.client.create_account(&NewAccount::new("mine")).await),
        (Some(401), "unauthorized".into())
    );
    assert_eq!(
        all_accounts(&op, 500).await,
        expected,
        "nothing was created"
    );
    let a_as_b = a_own.client.clone().for_account(b.account.id.clone());
    let before = for_b.endpoint(&b_endpoint).await.unwrap();
    assert_eq!(
        refused(a_as_b.all_endpoints().await),
        (Some(404), "not_found".into())
    );
    assert_eq!(
        refused(a_as_b.endpoint(&b_endpoint).await),
        (Some(404), "not_found".into())
    );
    assert_eq!(
        refused(
            a_as_b
                .update_endpoint(&b_endpoint, &typed(json!({"description": "taken"})))
                .await
        ),
        (Some(404), "not_found".into())
    );
    assert_eq!(
        refused(a_as_b.delete_endpoint(&b_endpoint).await),
        (Some(404), "not_found".into())
    );
    assert_eq!(for_b.endpoint(&b_endpoint).await.unwrap(), before);
    assert_eq!(
        ids(b_own.client.all_endpoints().await.unwrap()),
        [b_endpoint]
    );
    let a_as_a = a_own.client.clone().for_account(a.account.id.clone());
    assert_eq!(ids(a_as_a.all_endpoints().await.unwrap()), [a_endpoint]);
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_operator_key_has_its_own_request_budget_whichever_account_it_acts_for() {
    let s = sender_with("0s", |config| config.api_rate_limit = 5).await;
    let (_, op_key) = s.server.db().create_operator("ops").await.unwrap();
    let (_, other_key) = s.server.db().create_operator("other").await.unwrap();
    let account = s.api.client.account().await.unwrap().id;
    let op = s.api.with_key(&op_key).client.for_account(account.clone());
    // 20 quick calls cannot all pass at 5 a second; the first 5 do.
    let mut statuses = Vec::new();
    for _ in 0..20 {
        statuses.push(match op.list_endpoints(&PageQuery::default()).await {
            Ok(_) => 200,
            Err(e) => e.status().unwrap(),
        });
    }
    assert!(statuses[..5].iter().all(|s| *s == 200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    // The account's own key, and another operator's for the same account, are not charged.
    s.api
        .client
        .list_endpoints(&PageQuery::default())
        .await
        .unwrap();
    let other = s.api.with_key(&other_key).client.for_account(account);
    other.list_endpoints(&PageQuery::default()).await.unwrap();
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_account_key_with_the_operator_prefix_is_refused_at_start() {
    // It would be looked up among the operators' keys, and never let the account in.
    let dir = tempfile::tempdir().unwrap();
    let config = kxp_sender::Config {
        database_url: format!("sqlite://{}", dir.path().join("kxp.db").display()),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        api_key: Some("kxp_op_mine".to_owned()),
        ..kxp_sender::Config::default()
    };
    let refused = kxp_sender::start(config).await.err();
    assert!(
        matches!(refused, Some(kxp_sender::StartError::OperatorPrefix)),
        "{refused:?}"
    );
}
