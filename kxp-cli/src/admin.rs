//! `kxp dlq` and `kxp replay`: the dead-letter queue from the command line, through a running
//! server's API ([`kxp_api::Client`]), or straight on the database when no server is up. Both
//! print the same type, [`kxp_api::Delivery`]: a row converts into it as the API's answer does.

use std::process::ExitCode;

use clap::Args;
use kxp_api::{
    BulkReplay, Client, ClientError, Delivery, DeliveryQuery, DeliveryStatus, Timestamp,
};
use kxp_sender::{AccountId, Admin, DeliveryFilter, DeliveryId, EndpointId};

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
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
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
        let deliveries: Vec<Delivery> = match &args.target.database_url {
            Some(url) => {
                let (db, account) = open(url, &args.target.api_key).await?;
                let filter = DeliveryFilter {
                    status: Some("dead".into()),
                    endpoint_id: args.endpoint.map(EndpointId::from),
                    ..Default::default()
                };
                let rows = db
                    .deliveries(&account, &filter, None, i64::from(args.limit))
                    .await
                    .map_err(|e| e.to_string())?;
                rows.into_iter().map(Delivery::from).collect()
            }
            None => {
                let mut query = DeliveryQuery::dead().limit(args.limit);
                if let Some(endpoint) = args.endpoint {
                    query = query.endpoint(endpoint.into());
                }
                let client = client(&args.target)?;
                let page = client
                    .deliveries(&query)
                    .await
                    .map_err(|e| failure(&args.target, &e))?;
                page.data
            }
        };
        if args.json {
            for d in &deliveries {
                println!("{}", serde_json::to_string(d).map_err(|e| e.to_string())?);
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
                    d.id.as_str(),
                    d.event_id.as_str(),
                    d.endpoint_id.as_str(),
                    d.attempts,
                    d.last_error.as_deref().unwrap_or_default(),
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
                        Delivery::from(
                            db.replay(&account, &DeliveryId::from(id.as_str()))
                                .await
                                .map_err(|e| e.to_string())?,
                        )
                    }
                    None => client(&args.target)?
                        .replay_delivery(&id.as_str().into())
                        .await
                        .map_err(|e| failure(&args.target, &e))?,
                };
                println!(
                    "Queued {} (event {}) as delivery {}.",
                    id, new.event_id, new.id
                );
            }
            (None, Some(endpoint)) => {
                let since = args.since.as_deref().map(parse_time).transpose()?;
                let until = args.until.as_deref().map(parse_time).transpose()?;
                let queued = match &args.target.database_url {
                    Some(url) => {
                        let (db, account) = open(url, &args.target.api_key).await?;
                        let filter = DeliveryFilter {
                            status: Some(args.status.clone()),
                            since: since.as_ref().and_then(Timestamp::unix_ms),
                            until: until.as_ref().and_then(Timestamp::unix_ms),
                            ..Default::default()
                        };
                        db.replay_endpoint(&account, &EndpointId::from(endpoint.as_str()), &filter)
                            .await
                            .map_err(|e| e.to_string())?
                    }
                    None => {
                        let mut which = BulkReplay::status(DeliveryStatus::parse(&args.status));
                        which.since = since;
                        which.until = until;
                        client(&args.target)?
                            .replay_endpoint(&endpoint.as_str().into(), &which)
                            .await
                            .map_err(|e| failure(&args.target, &e))?
                            .queued
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

/// The typed client of the server `target` names.
fn client(target: &Target) -> Result<Client, String> {
    Client::new(&target.server, target.api_key.as_str()).map_err(|e| e.to_string())
}

/// A failed call as the command prints it: `<status>: <message>` for the API's own errors
/// (their code stays in the [`ClientError`] for code that needs it).
fn failure(target: &Target, e: &ClientError) -> String {
    match e {
        ClientError::Api {
            status, message, ..
        } => {
            // `401 Unauthorized`, as reqwest writes a status.
            let status = reqwest::StatusCode::from_u16(*status)
                .map_or_else(|_| status.to_string(), |s| s.to_string());
            format!("{status}: {message}")
        }
        ClientError::Transport(e) => format!("cannot reach {}: {e}", target.server),
        e => e.to_string(),
    }
}

/// Connects to the database, with any password redacted from the error.
pub(crate) async fn connect(url: &str) -> Result<Admin, String> {
    Admin::connect(url)
        .await
        .map_err(|e| format!("database: {}", kxp_sender::redact_passwords(&e.to_string())))
}

async fn open(url: &str, api_key: &str) -> Result<(Admin, AccountId), String> {
    let db = connect(url).await?;
    let account = db
        .account_by_key(api_key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no account has this API key")?;
    Ok((db, account.id))
}

fn parse_time(text: &str) -> Result<Timestamp, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not an RFC 3339 time such as 2026-11-30T01:02:03Z"))
}
