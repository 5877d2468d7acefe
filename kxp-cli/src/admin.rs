//! `kxp dlq` and `kxp replay`: the dead-letter queue from the command line, through a running
//! server's API, or straight on the database when no server is up.

use std::process::ExitCode;

use clap::Args;
use kxp_sender::Db;
use kxp_sender::{Delivery, DeliveryFilter, parse_rfc3339, rfc3339};
use serde_json::{Value, json};

/// Where the command acts.
#[derive(Args)]
pub(crate) struct Target {
    /// The running server's base URL (ignored with --database-url).
    #[arg(long, env = "KXP_SERVER", default_value = "http://127.0.0.1:8080")]
    server: String,
    /// The account's API key.
    #[arg(long, env = "KXP_API_KEY", hide_env_values = true)]
    api_key: String,
    /// Act on the database directly instead of through a server (`sqlite://…` or `postgres://…`).
    #[arg(long, env = "KXP_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

#[derive(Args)]
pub(crate) struct DlqArgs {
    #[command(flatten)]
    target: Target,
    /// Only this endpoint's deliveries.
    #[arg(long)]
    endpoint: Option<String>,
    /// How many to list at most.
    #[arg(long, default_value_t = 100)]
    limit: i64,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["delivery", "endpoint"]))]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    target: Target,
    /// The delivery to replay.
    delivery: Option<String>,
    /// Replay this endpoint's deliveries in bulk instead.
    #[arg(long)]
    endpoint: Option<String>,
    /// With --endpoint: which deliveries (`dead` or `delivered`).
    #[arg(long, default_value = "dead", requires = "endpoint", value_parser = ["dead", "delivered"])]
    status: String,
    /// With --endpoint: only deliveries created at or after this RFC 3339 time.
    #[arg(long, requires = "endpoint")]
    since: Option<String>,
    /// With --endpoint: only deliveries created before this RFC 3339 time.
    #[arg(long, requires = "endpoint")]
    until: Option<String>,
}

pub(crate) fn dlq(args: DlqArgs) -> ExitCode {
    run(async move {
        let query = [
            ("status", Some("dead".to_owned())),
            ("endpoint_id", args.endpoint.clone()),
        ];
        let deliveries: Vec<Value> = match &args.target.database_url {
            Some(url) => {
                let (db, account) = open(url, &args.target.api_key).await?;
                let filter = DeliveryFilter {
                    status: Some("dead".into()),
                    endpoint_id: args.endpoint,
                    ..Default::default()
                };
                let rows = db
                    .deliveries(&account, &filter, None, args.limit)
                    .await
                    .map_err(|e| e.to_string())?;
                rows.into_iter().map(view).collect()
            }
            None => {
                let mut path = format!("/v1/deliveries?limit={}", args.limit);
                for (key, value) in query {
                    if let Some(value) = value {
                        path.push_str(&format!("&{key}={value}"));
                    }
                }
                let page = api(&args.target, reqwest::Method::GET, &path, None).await?;
                page["data"].as_array().cloned().unwrap_or_default()
            }
        };
        if args.json {
            for d in &deliveries {
                println!("{d}");
            }
        } else if deliveries.is_empty() {
            println!("The dead-letter queue is empty.");
        } else {
            println!(
                "{:<32}  {:<36}  {:<30}  {:>8}  LAST ERROR",
                "DELIVERY", "EVENT", "ENDPOINT", "ATTEMPTS"
            );
            for d in &deliveries {
                println!(
                    "{:<32}  {:<36}  {:<30}  {:>8}  {}",
                    text(&d["id"]),
                    text(&d["event_id"]),
                    text(&d["endpoint_id"]),
                    d["attempts"],
                    text(&d["last_error"]),
                );
            }
            println!(
                "{} dead deliveries. Replay one with `kxp replay <DELIVERY>`, or an endpoint's with `kxp replay --endpoint <ID>`.",
                deliveries.len()
            );
        }
        Ok(())
    })
}

pub(crate) fn replay(args: ReplayArgs) -> ExitCode {
    run(async move {
        match (&args.delivery, &args.endpoint) {
            (Some(id), _) => {
                let new = match &args.target.database_url {
                    Some(url) => {
                        let (db, account) = open(url, &args.target.api_key).await?;
                        view(db.replay(&account, id).await.map_err(|e| e.to_string())?)
                    }
                    None => {
                        api(
                            &args.target,
                            reqwest::Method::POST,
                            &format!("/v1/deliveries/{id}/replay"),
                            None,
                        )
                        .await?
                    }
                };
                println!(
                    "Queued {} (event {}) as delivery {}.",
                    id,
                    text(&new["event_id"]),
                    text(&new["id"])
                );
            }
            (None, Some(endpoint)) => {
                let queued = match &args.target.database_url {
                    Some(url) => {
                        let (db, account) = open(url, &args.target.api_key).await?;
                        let filter = DeliveryFilter {
                            status: Some(args.status.clone()),
                            since: args.since.as_deref().map(parse_time).transpose()?,
                            until: args.until.as_deref().map(parse_time).transpose()?,
                            ..Default::default()
                        };
                        db.replay_endpoint(&account, endpoint, &filter)
                            .await
                            .map_err(|e| e.to_string())?
                    }
                    None => {
                        let body = json!({"status": args.status, "since": args.since, "until": args.until});
                        let answer = api(
                            &args.target,
                            reqwest::Method::POST,
                            &format!("/v1/endpoints/{endpoint}/replay"),
                            Some(body),
                        )
                        .await?;
                        answer["queued"].as_u64().unwrap_or_default()
                    }
                };
                println!("Queued {queued} deliveries of endpoint {endpoint} again.");
            }
            (None, None) => return Err("give a delivery id or --endpoint".to_owned()),
        }
        Ok(())
    })
}

/// Runs `work` on a runtime; an error is printed and exits 1.
pub(crate) fn run(work: impl std::future::Future<Output = Result<(), String>>) -> ExitCode {
    let result = tokio::runtime::Runtime::new()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(work));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn api(
    target: &Target,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let url = format!("{}{path}", target.server.trim_end_matches('/'));
    let mut request = reqwest::Client::new()
        .request(method, &url)
        .bearer_auth(&target.api_key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("cannot reach {}: {e}", target.server))?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!(
            "{status}: {}",
            body["message"]
                .as_str()
                .or(body["error"].as_str())
                .unwrap_or("no details")
        ))
    }
}

/// Connects to the database, with any password redacted from the error.
pub(crate) async fn connect(url: &str) -> Result<Db, String> {
    Db::connect(url)
        .await
        .map_err(|e| format!("database: {}", kxp_sender::redact_passwords(&e.to_string())))
}

async fn open(url: &str, api_key: &str) -> Result<(Db, String), String> {
    let db = connect(url).await?;
    let account = db
        .account_by_key(api_key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no account has this API key")?;
    Ok((db, account.id.into_string()))
}

fn view(d: Delivery) -> Value {
    json!({
        "id": d.id, "event_id": d.event_id, "endpoint_id": d.endpoint_id, "status": d.status,
        "attempts": d.attempts, "last_status": d.last_status, "last_error": d.last_error,
        "replayed_by": d.replayed_by, "created_at": rfc3339(d.created_at), "updated_at": rfc3339(d.updated_at),
    })
}

fn text(value: &Value) -> String {
    value.as_str().map_or_else(
        || {
            if value.is_null() {
                String::new()
            } else {
                value.to_string()
            }
        },
        str::to_owned,
    )
}

fn parse_time(text: &str) -> Result<i64, String> {
    parse_rfc3339(text)
        .ok_or_else(|| format!("`{text}` is not an RFC 3339 time such as 2026-11-30T01:02:03Z"))
}
