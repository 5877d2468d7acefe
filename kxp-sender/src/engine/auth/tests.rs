use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

fn client() -> Client<'static> {
    static BASIC: ClientAuth = ClientAuth::Basic;
    Client {
        token_url: "https://auth.example/token",
        client_id: "kxp",
        client_secret: "s3cret",
        scope: None,
        audience: None,
        client_auth: &BASIC,
    }
}

fn fetched(value: &str, seconds: u64) -> Fetched {
    Fetched {
        value: Zeroizing::new(value.to_owned()),
        lifetime: Duration::from_secs(seconds),
    }
}

#[test]
fn token_responses_are_read_as_rfc_6749_says() {
    let t = parse_token(br#"{"access_token":"abc.def","token_type":"Bearer","expires_in":300}"#)
        .unwrap();
    assert_eq!(
        (t.value.as_str(), t.lifetime),
        ("abc.def", Duration::from_secs(300))
    );
    // `expires_in` as a string (Azure AD v1), and no `expires_in` at all.
    let t =
        parse_token(br#"{"access_token":"a","token_type":"bearer","expires_in":"60"}"#).unwrap();
    assert_eq!(t.lifetime, Duration::from_secs(60));
    let t = parse_token(br#"{"access_token":"a"}"#).unwrap();
    assert_eq!(t.lifetime, DEFAULT_LIFETIME);
    for (body, says) in [
        (&b"<html>"[..], "not a token response"),
        (br#"{"token_type":"bearer"}"#, "not a token response"),
        (br#"{"access_token":"has space"}"#, "not a token response"),
        (br#"{"access_token":"a","token_type":"mac"}"#, "type `mac`"),
        (br#"{"access_token":"a","expires_in":-5}"#, "expires_in"),
    ] {
        let e = parse_token(body).err().unwrap();
        assert_eq!(e.kind, FailureKind::AuthFailed);
        assert!(e.detail.contains(says), "{}", e.detail);
    }
}

#[test]
fn an_error_response_shows_its_code_and_nothing_else() {
    assert_eq!(
        oauth_error(br#"{"error":"invalid_client","error_description":"secret s3cret wrong"}"#),
        Some("invalid_client".to_owned())
    );
    assert_eq!(oauth_error(br#"{"error":"the secret is s3cret"}"#), None);
    assert_eq!(oauth_error(b"s3cret"), None);
}

#[test]
fn basic_bearer_and_custom_headers_are_sensitive_values() {
    let credentials: Credentials = serde_json::from_value(serde_json::json!({
        "headers": {"X-Gateway-Key": "gk"},
        "auth": {"type": "basic", "username": "merchant", "password": "pa:ss"},
    }))
    .unwrap();
    let headers = fixed(&credentials).unwrap();
    assert_eq!(headers.len(), 2);
    assert_eq!(headers[0].0.as_str(), "x-gateway-key");
    assert_eq!(headers[1].1.to_str().unwrap(), "Basic bWVyY2hhbnQ6cGE6c3M=");
    assert!(headers.iter().all(|(_, v)| v.is_sensitive()));
    assert!(!format!("{credentials:?}").contains("pa:ss"));
}

/// `n` attempts asking `tokens` for ep_1's token at once, each fetch taking 20 ms and coming to
/// `answer`: what each got, and how many fetches there were.
async fn at_once(
    tokens: &Arc<Tokens>,
    n: usize,
    answer: Result<&'static str, &'static str>,
) -> (Vec<Result<Zeroizing<String>, Failure>>, usize) {
    let fetches = Arc::new(AtomicUsize::new(0));
    let mut waiting = Vec::new();
    for _ in 0..n {
        let (tokens, fetches) = (tokens.clone(), fetches.clone());
        waiting.push(tokio::spawn(async move {
            let endpoint = EndpointId::from("ep_1".to_owned());
            tokens
                .token(&endpoint, &client(), async {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    answer.map(|t| fetched(t, 300)).map_err(failed)
                })
                .await
        }));
    }
    let mut got = Vec::new();
    for task in waiting {
        got.push(task.await.unwrap());
    }
    (got, fetches.load(Ordering::SeqCst))
}

#[tokio::test]
async fn one_fetch_serves_every_waiting_attempt_until_the_token_is_due() {
    let tokens = Arc::new(Tokens::default());
    let (got, fetches) = at_once(&tokens, 20, Ok("t1")).await;
    assert!(got.iter().all(|t| t.as_ref().unwrap().as_str() == "t1"));
    assert_eq!(fetches, 1);
    // Another configuration (a new client secret) fetches anew.
    let mut other = client();
    other.client_secret = "rotated";
    let endpoint = EndpointId::from("ep_1".to_owned());
    let t = tokens
        .token(&endpoint, &other, async { Ok(fetched("t2", 300)) })
        .await
        .unwrap();
    assert_eq!(t.as_str(), "t2");
}

#[tokio::test]
async fn attempts_that_waited_for_a_failed_fetch_share_its_failure() {
    let tokens = Arc::new(Tokens::default());
    let (got, fetches) = at_once(&tokens, 10, Err("token endpoint answered 503")).await;
    assert!(
        got.iter()
            .all(|t| t.as_ref().err().unwrap().kind == FailureKind::AuthFailed)
    );
    assert_eq!(fetches, 1);
    // A later attempt asks again.
    let (got, fetches) = at_once(&tokens, 1, Ok("t")).await;
    assert_eq!((got[0].as_ref().unwrap().as_str(), fetches), ("t", 1));
}

#[tokio::test]
async fn a_401_drops_the_token_it_was_sent_with_and_only_that_one() {
    let tokens = Tokens::default();
    let endpoint = EndpointId::from("ep_1".to_owned());
    let first = tokens
        .token(&endpoint, &client(), async { Ok(fetched("t1", 300)) })
        .await
        .unwrap();
    let refused = Outcome::Rejected {
        status: 401,
        snippet: String::new(),
        retry_after: None,
    };
    let sent = Presented {
        headers: Vec::new(),
        client: None,
        token: Some(first),
    };
    tokens.after(&endpoint, &sent, &refused).await;
    let second = tokens
        .token(&endpoint, &client(), async { Ok(fetched("t2", 300)) })
        .await
        .unwrap();
    assert_eq!(second.as_str(), "t2");
    // A late 401 for the first token leaves the second in place.
    tokens.after(&endpoint, &sent, &refused).await;
    let still = tokens
        .token(&endpoint, &client(), async { Ok(fetched("t3", 300)) })
        .await
        .unwrap();
    assert_eq!(still.as_str(), "t2");
}

#[tokio::test]
async fn a_token_is_fetched_again_shortly_before_it_expires() {
    let tokens = Tokens::default();
    let endpoint = EndpointId::from("ep_1".to_owned());
    // A lifetime of zero is due at once: the next attempt fetches.
    tokens
        .token(&endpoint, &client(), async { Ok(fetched("t1", 0)) })
        .await
        .unwrap();
    let t = tokens
        .token(&endpoint, &client(), async { Ok(fetched("t2", 300)) })
        .await
        .unwrap();
    assert_eq!(t.as_str(), "t2");
}
