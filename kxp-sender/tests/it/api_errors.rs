//! Every refusal under `/v1/` is the API's JSON (`{"error","message"}`, `application/json`),
//! including those axum decides before a handler runs, and the `Bearer` scheme is read in any
//! case.

use serde_json::Value;

use crate::support::sender;

/// Sends a raw request and insists on a JSON error body with `code` and `status`.
async fn refused(request: reqwest::RequestBuilder, status: u16, code: &str) -> reqwest::Response {
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), status, "{code}");
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert_eq!(content_type, "application/json", "{code}");
    response
}

async fn body(response: reqwest::Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

#[tokio::test]
async fn axums_own_refusals_answer_in_the_apis_json() {
    let s = sender("0s").await;
    let http = &s.api.http;
    let url = |path: &str| format!("{}{path}", s.api.base);
    let key = &s.api.key;

    let bad_query = refused(
        http.get(url("/v1/endpoints?limit=abc")).bearer_auth(key),
        400,
        "invalid_query",
    )
    .await;
    let error = body(bad_query).await;
    assert_eq!(error["error"], "invalid_query");
    assert!(
        error["message"].as_str().unwrap().contains("limit"),
        "{error}"
    );

    let wrong_method = refused(
        http.put(url("/v1/endpoints")).bearer_auth(key),
        405,
        "method_not_allowed",
    )
    .await;
    let allow = wrong_method
        .headers()
        .get("allow")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    assert_eq!(body(wrong_method).await["error"], "method_not_allowed");

    let too_large = refused(
        http.post(url("/v1/events"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(vec![b' '; 3 * 1024 * 1024]),
        413,
        "payload_too_large",
    )
    .await;
    assert_eq!(body(too_large).await["error"], "payload_too_large");

    let nowhere = refused(
        http.get(url("/v1/nowhere")).bearer_auth(key),
        404,
        "not_found",
    )
    .await;
    assert_eq!(body(nowhere).await["error"], "not_found");
    s.server.shutdown().await;
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let s = sender("0s").await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let response = s
            .api
            .http
            .get(format!("{}/v1/endpoints", s.api.base))
            .header("authorization", format!("{scheme} {}", s.api.key))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{scheme}");
    }
    // The token itself is not: a key in another case names no account.
    let upper = s.api.key.to_uppercase();
    refused(
        s.api
            .http
            .get(format!("{}/v1/endpoints", s.api.base))
            .header("authorization", format!("Bearer {upper}")),
        401,
        "unauthorized",
    )
    .await;
    s.server.shutdown().await;
}
