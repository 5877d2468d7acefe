//! `kxp serve`'s settings, from four sources: flags > environment (`KXP_…`) > a TOML file
//! (`--config kxp.toml`) > defaults.
//!
//! One struct, [`Settings`], is at once the flags (clap, with each flag's `env`), the file
//! (serde, unknown keys refused by name) and the `--print-config` output, so a setting cannot
//! exist in one source and be missing from another. Every field is optional: "not given here"
//! must be told apart from "given as the default" for the layers to stack. The defaults are
//! [`kxp_sender::Config::default`] and nowhere else.

use std::net::SocketAddr;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;
use std::{fmt, fs};

use clap::Args;
use clap::builder::BoolishValueParser;
use kxp_sender::Cidr;
use kxp_sender::EgressProxy;
use kxp_sender::IngestSource;
use kxp_sender::Protection;
use kxp_sender::redact_passwords;
use kxp_sender::{Config, LOCK_TIMEOUT, Migrations, Schedule};
use kxp_sender::{format_duration, parse_duration};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Every setting of `kxp serve`. Flags and environment variables are named after the keys:
/// `delivery_timeout` is `--delivery-timeout` and `KXP_DELIVERY_TIMEOUT`.
#[derive(Args, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Settings {
    /// `sqlite://path` (created if missing) or `postgres://user@host/db`.
    #[arg(
        long,
        env = "KXP_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// Apply the migrations this version has and a PostgreSQL database lacks at start, each
    /// statement waiting at most 5s for a lock. Without it, `serve` refuses to start while one
    /// is pending: `kxp migrate plan|apply` first (docs/upgrading.md). SQLite always migrates.
    #[arg(long, env = "KXP_MIGRATE", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migrate: Option<bool>,
    /// Where the API listens.
    #[arg(long, env = "KXP_LISTEN", value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// The origin people reach this server at, e.g. `https://kxp.example.com`: portal links
    /// (console sign-in URLs) are built on it. Required when listening on an address other
    /// than loopback; default `http://<listen address>`.
    #[arg(long, env = "KXP_PUBLIC_URL", value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Development mode: accept http:// endpoint URLs and let deliveries reach loopback
    /// (127.0.0.0/8, ::1) — loopback only. Never in production.
    #[arg(long, env = "KXP_DEV", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<bool>,
    /// Serve the API only: no workers, notifier or purger in this process. For PostgreSQL, with
    /// other processes on the same database delivering; it announces new events to them.
    #[arg(long, env = "KXP_API_ONLY", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_only: Option<bool>,
    /// Let deliveries reach this block although the address guard refuses it (private,
    /// loopback, link-local…), e.g. `10.20.0.0/16` or `fd00:1::/64`. Repeatable; in the
    /// environment, comma-separated.
    #[arg(
        long = "allow-address",
        env = "KXP_ALLOW_ADDRESS",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    #[serde(default, with = "text_list", skip_serializing_if = "Option::is_none")]
    pub allow_address: Option<Vec<Cidr>>,
    /// The reverse proxies in front of this server, whose `X-Forwarded-For` names the client
    /// the console's failed sign-in limit counts (default: loopback only), e.g. `10.0.3.0/24`.
    /// Repeatable; in the environment, comma-separated.
    #[arg(
        long = "trusted-proxy",
        env = "KXP_TRUSTED_PROXIES",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    #[serde(default, with = "text_list", skip_serializing_if = "Option::is_none")]
    pub trusted_proxy: Option<Vec<Cidr>>,
    /// Send every delivery, endpoint challenge and OAuth2 token request through this forward
    /// proxy, `http://[user:password@]host:port`, for a static source address receivers can
    /// allow-list. kxp resolves and vets each destination itself and asks the proxy for a
    /// tunnel to the vetted address. A failing proxy holds deliveries back without counting
    /// attempts. Its user and password are never printed.
    #[arg(
        long,
        env = "KXP_EGRESS_PROXY",
        value_name = "URL",
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_proxy: Option<String>,
    /// A destination known to accept connections (`host:port`) that kxp asks the egress proxy
    /// for a tunnel to, every 10 s and when the proxy answers an endpoint's tunnel with an
    /// error: how a failing proxy is told from a failing endpoint. Without it, the probe only
    /// connects to the proxy.
    #[arg(long, env = "KXP_EGRESS_PROXY_PROBE", value_name = "HOST:PORT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_proxy_probe: Option<String>,
    /// Offsets from the first try, comma-separated.
    #[arg(long, env = "KXP_RETRY_SCHEDULE", value_name = "OFFSETS")]
    #[serde(default, with = "text", skip_serializing_if = "Option::is_none")]
    pub retry_schedule: Option<Schedule>,
    /// How much each gap between tries is randomly stretched or shrunk (0 to 1).
    #[arg(long, env = "KXP_JITTER", value_name = "FRACTION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter: Option<f64>,
    /// Per-attempt timeout of endpoints that do not set their own (100ms to 30s).
    #[arg(long, env = "KXP_DELIVERY_TIMEOUT", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_timeout: Option<Dur>,
    /// Attempts in flight at once in this process.
    #[arg(long, env = "KXP_WORKERS", value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// The most attempts in flight at once to one endpoint, from this process: the ceiling of
    /// its adaptive limit, which starts at 4 and grows while the endpoint keeps up.
    #[arg(long, env = "KXP_PER_ENDPOINT_CONCURRENCY", value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_endpoint_concurrency: Option<usize>,
    /// How long a claimed delivery's lease outlives its endpoint's timeout: after a crash, its
    /// deliveries are taken over this long after their attempts could have ended.
    #[arg(long, env = "KXP_LEASE_EXTRA", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_extra: Option<Dur>,
    /// Deliveries per second to one endpoint, for endpoints without their own
    /// `rate_limit_per_second` (per process; 0: no default limit).
    #[arg(long, env = "KXP_RATE_LIMIT", value_name = "PER_SECOND")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
    /// Consecutive failed attempts that open an endpoint's circuit breaker (1 or more).
    #[arg(long, env = "KXP_BREAKER_FAILURES", value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_failures: Option<u32>,
    /// How long an open circuit holds deliveries before probing with one; doubles after each
    /// failed probe, up to breaker_cooldown_max.
    #[arg(long, env = "KXP_BREAKER_COOLDOWN", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_cooldown: Option<Dur>,
    /// The longest wait between two probes of an open circuit.
    #[arg(long, env = "KXP_BREAKER_COOLDOWN_MAX", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_cooldown_max: Option<Dur>,
    /// Disable an endpoint that has failed every attempt for this long.
    #[arg(long, env = "KXP_DISABLE_AFTER", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_after: Option<Dur>,
    /// SMTP server for e-mail notifications: `smtp://host:25` (plain, e.g. a local relay),
    /// `smtp://user:pass@host:587?tls=required` (STARTTLS) or `smtps://user:pass@host:465`.
    #[arg(long, env = "KXP_SMTP_URL", hide_env_values = true, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smtp_url: Option<String>,
    /// The From of e-mail notifications.
    #[arg(long, env = "KXP_SMTP_FROM", value_name = "MAILBOX")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smtp_from: Option<String>,
    /// How long finished deliveries (delivered, erased, expired, or dead and replayed), their
    /// events and notifications are kept; `0` keeps them forever. Dead deliveries never
    /// replayed follow `--dead-letter-retention`.
    #[arg(long, env = "KXP_RETENTION", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<Dur>,
    /// How long a dead delivery never replayed (the dead-letter queue) is kept after it died,
    /// at least a day (default 30 days); `0` keeps it until it is replayed. The account is
    /// notified a day before (`endpoint.dead_letters_expiring`).
    #[arg(long, env = "KXP_DEAD_LETTER_RETENTION", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_retention: Option<Dur>,
    /// Due deliveries an account may have waiting before its ingestion answers 503
    /// `backlog_full` (held deliveries of paused, disabled or open-circuit endpoints do not
    /// count); 0: no limit.
    #[arg(long, env = "KXP_BACKLOG_LIMIT", value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog_limit: Option<u64>,
    /// How long an API client has to send a request header, counted from when it connects or
    /// its last response was sent: also the idle timeout of kept-alive connections.
    #[arg(long, env = "KXP_HEADER_TIMEOUT", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_timeout: Option<Dur>,
    /// The most API connections open at once; lowered at start so the file limit keeps room
    /// for the workers' deliveries and the database. Beyond it, connections wait to be accepted.
    #[arg(long, env = "KXP_MAX_CONNECTIONS", value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// API requests one account's key may make per second in each process (bursts of one
    /// second's worth); beyond it, 429 `rate_limited` with `Retry-After`. 0: no limit.
    #[arg(long, env = "KXP_API_RATE_LIMIT", value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_rate_limit: Option<u32>,
    /// On SIGTERM or Ctrl-C, how long the attempts in flight may take to finish (`/readyz`
    /// answers 503 and new work is refused meanwhile); what is still running after it is
    /// stopped and released for another process, never lost.
    #[arg(long, env = "KXP_SHUTDOWN_GRACE", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_grace: Option<Dur>,
    /// The longest a database statement may run (PostgreSQL and Citus) before it is
    /// cancelled and the request answered 503 `store_unavailable` with `Retry-After`: a Citus
    /// worker down, or a lock held too long, costs a request this long, never a hang. `0`: no
    /// limit. Migrations are never cut short by it.
    #[arg(long, env = "KXP_STATEMENT_TIMEOUT", value_name = "DURATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement_timeout: Option<Dur>,
    /// The largest event `data` accepted, in bytes of JSON (413 beyond it). The default keeps
    /// the delivered body under the 1 MiB receivers accept; raise it only with receivers set
    /// for more.
    #[arg(long, env = "KXP_MAX_EVENT_BYTES", value_name = "BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_event_bytes: Option<usize>,
    /// Consume events from a broker besides the API: a RabbitMQ queue
    /// (`amqp://user:pass@host:5672/vhost?queue=<name>&account=<account id>`) or a NATS
    /// JetStream stream (`nats://host:4222?stream=<name>&subject=<subject>&durable=<consumer>&account=<account id>`).
    /// Each message's body is what `POST /v1/events` takes; it is acknowledged once stored.
    /// Repeatable; in the environment, separated by spaces. See docs/sender.md, "Ingesting
    /// from a broker".
    #[arg(
        long,
        env = "KXP_INGEST",
        value_name = "URL",
        value_delimiter = ' ',
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest: Option<Vec<String>>,
    /// Export traces (a span per ingestion and per delivery attempt) over OTLP/HTTP with
    /// protobuf to this collector (`http://127.0.0.1:4318`; spans are POSTed to
    /// `<URL>/v1/traces`). Unset: no spans are made. The other `OTEL_*` variables (service
    /// name, resource attributes, sampler, headers, timeout) are read by the exporter.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Log lines as JSON objects instead of text.
    #[arg(long, env = "KXP_JSON_LOGS", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = BoolishValueParser::new())]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_logs: Option<bool>,
    /// The first account's API key (the same key on every start); without one, a key is made
    /// on the very first start and printed once. Environment (`KXP_API_KEY`) or file only: a
    /// flag would show it to every `ps` on the machine.
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The key ring endpoint secrets are sealed under at rest: `<id>:<base64 of 32 bytes>`,
    /// comma-separated, newest first (`kxp secrets-key generate` makes one). Environment
    /// (`KXP_SECRETS_KEY`) or file only, like the API key. See docs/security.md.
    #[arg(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets_key: Option<String>,
}

/// The settings as `--print-config` would show them: passwords and the API key redacted.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = Settings {
            database_url: self.database_url.as_deref().map(redact_passwords),
            smtp_url: self.smtp_url.as_deref().map(redact_passwords),
            egress_proxy: self.egress_proxy.as_deref().map(redact_passwords),
            ingest: self
                .ingest
                .as_ref()
                .map(|urls| urls.iter().map(|url| redact_passwords(url)).collect()),
            api_key: self.api_key.as_ref().map(|_| "[redacted]".to_owned()),
            secrets_key: self.secrets_key.as_ref().map(|_| "[redacted]".to_owned()),
            ..self.clone()
        };
        f.write_str(&shown.to_toml())
    }
}

/// What stops a configuration from being used: the message names the setting.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML, has an unknown key or a value of the wrong form.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// toml's message: it names the key and the line.
        message: String,
    },
    /// A value of the right form but outside what the setting allows.
    #[error("{key}: {why}")]
    Invalid {
        /// The setting, as the file names it.
        key: &'static str,
        /// Why.
        why: String,
    },
}

/// Appends `[default: …]` to the help of every setting of `serve`, from
/// [`Config::default`] itself (through the same form `--print-config` shows), so `--help`
/// cannot drift from the defaults in force.
pub(crate) fn defaults_in_help(command: clap::Command) -> clap::Command {
    let defaults = Settings::effective(&Config::default(), false);
    let table: toml::Table = toml::from_str(&defaults.to_toml()).unwrap_or_default();
    command.mut_subcommand("serve", |serve| {
        let ids: Vec<String> = serve
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        ids.into_iter().fold(serve, |serve, id| {
            let shown = match table.get(&id) {
                Some(toml::Value::String(text)) => text.clone(),
                Some(toml::Value::Array(items)) if items.is_empty() => return serve,
                Some(value) => value.to_string(),
                None => return serve,
            };
            serve.mut_arg(&id, |arg| {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                arg.help(format!("{help} [default: {shown}]"))
            })
        })
    })
}

/// Takes each field from `$high`, else from `$low`.
macro_rules! layer {
    ($high:ident over $low:ident: $($field:ident),* $(,)?) => {
        Settings { $($field: $high.$field.or($low.$field),)* }
    };
}

impl Settings {
    /// Reads a settings file; unknown keys are refused with their name.
    pub(crate) fn from_file(path: &Path) -> Result<Settings, ConfigError> {
        let shown = path.display().to_string();
        let text = fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        // toml's own Display quotes the offending line, which may hold a secret (a misspelt
        // `api_key`, an unquoted database URL): say the line number and the problem only.
        toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().trim_end().replace('\n', " ");
            ConfigError::File {
                path: match line {
                    Some(line) => format!("{shown}, line {line}"),
                    None => shown,
                },
                message,
            }
        })
    }

    /// `self` where it says something, `lower` elsewhere.
    pub(crate) fn over(self, lower: Settings) -> Settings {
        let high = self;
        layer!(high over lower: database_url, migrate, listen, public_url, dev, api_only, allow_address, trusted_proxy, egress_proxy,
            egress_proxy_probe, retry_schedule, jitter, delivery_timeout, workers, per_endpoint_concurrency, lease_extra, rate_limit,
            breaker_failures, breaker_cooldown, breaker_cooldown_max, disable_after, smtp_url,
            smtp_from, retention, dead_letter_retention, backlog_limit, header_timeout, max_connections, api_rate_limit, shutdown_grace,
            statement_timeout, max_event_bytes, ingest, otlp_endpoint, json_logs, api_key,
            secrets_key)
    }

    /// Whether logs are JSON lines.
    pub(crate) fn json_logs(&self) -> bool {
        self.json_logs.unwrap_or(false)
    }

    /// The sender's configuration: the defaults, with what these settings say on top.
    pub(crate) fn to_config(&self) -> Result<Config, ConfigError> {
        let d = Config::default();
        let p = Protection::default();
        let schedule = self.retry_schedule.clone().unwrap_or(d.schedule.clone());
        let jitter = self.jitter.unwrap_or(d.schedule.jitter());
        let schedule = schedule
            .with_jitter(jitter)
            .map_err(|e| invalid("jitter", e))?;
        let delivery_timeout = self.delivery_timeout.map_or(d.delivery_timeout, |t| t.0);
        if delivery_timeout < Duration::from_millis(100)
            || delivery_timeout > kxp_sender::MAX_TIMEOUT
        {
            return Err(invalid("delivery_timeout", "must be between 100ms and 30s"));
        }
        let positive = |key: &'static str, value: Option<Dur>, default: Duration| match value {
            Some(Dur(Duration::ZERO)) => Err(invalid(key, "must be above zero")),
            Some(Dur(d)) => Ok(d),
            None => Ok(default),
        };
        let breaker_failures = self.breaker_failures.unwrap_or(p.breaker_failures);
        if breaker_failures == 0 {
            return Err(invalid("breaker_failures", "must be 1 or more"));
        }
        let retention = self
            .retention
            .map_or(d.retention, |r| (!r.0.is_zero()).then_some(r.0));
        let dead_letter_retention = self
            .dead_letter_retention
            .map_or(d.dead_letter_retention, |r| (!r.0.is_zero()).then_some(r.0));
        if dead_letter_retention.is_some_and(|kept| kept < Duration::from_secs(24 * 60 * 60)) {
            return Err(invalid(
                "dead_letter_retention",
                "must be a day or more (its notice comes a day before), or 0 to keep dead deliveries until replayed",
            ));
        }
        Ok(Config {
            database_url: self.database_url.clone().unwrap_or(d.database_url),
            migrations: match self.migrate {
                Some(true) => Migrations::Apply {
                    lock_timeout: LOCK_TIMEOUT,
                },
                Some(false) | None => d.migrations,
            },
            listen: self.listen.unwrap_or(d.listen),
            public_url: self.public_url.clone().filter(|url| !url.is_empty()),
            dev: self.dev.unwrap_or(d.dev),
            run_workers: !self.api_only.unwrap_or(!d.run_workers),
            allow_addresses: self.allow_address.clone().unwrap_or(d.allow_addresses),
            trusted_proxies: self.trusted_proxy.clone().unwrap_or(d.trusted_proxies),
            egress_proxy: self.egress_proxy()?,
            schedule,
            delivery_timeout,
            workers: self.workers.unwrap_or(d.workers).max(1),
            per_endpoint_concurrency: self
                .per_endpoint_concurrency
                .unwrap_or(d.per_endpoint_concurrency)
                .max(1),
            lease_extra: self.lease_extra.map_or(d.lease_extra, |l| l.0),
            api_key: self.api_key.clone().filter(|k| !k.is_empty()),
            protection: Protection {
                breaker_failures,
                breaker_cooldown: positive(
                    "breaker_cooldown",
                    self.breaker_cooldown,
                    p.breaker_cooldown,
                )?,
                breaker_cooldown_max: positive(
                    "breaker_cooldown_max",
                    self.breaker_cooldown_max,
                    p.breaker_cooldown_max,
                )?,
                disable_after: positive("disable_after", self.disable_after, p.disable_after)?,
                rate_limit: self.rate_limit.unwrap_or(p.rate_limit),
            },
            smtp_url: self.smtp_url.clone().filter(|url| !url.is_empty()),
            smtp_from: self.smtp_from.clone().unwrap_or(d.smtp_from),
            retention,
            dead_letter_retention,
            backlog_limit: self.backlog_limit.unwrap_or(d.backlog_limit),
            api_limits: d
                .api_limits
                .header_timeout(positive(
                    "header_timeout",
                    self.header_timeout,
                    d.api_limits.header_read_timeout(),
                )?)
                .max_connections(self.max_connections.unwrap_or(d.api_limits.connections())),
            api_rate_limit: self.api_rate_limit.unwrap_or(d.api_rate_limit),
            shutdown_grace: self.shutdown_grace.map_or(d.shutdown_grace, |g| g.0),
            statement_timeout: self.statement_timeout.map_or(d.statement_timeout, |t| t.0),
            max_event_data: self.max_event_bytes.unwrap_or(d.max_event_data).max(1),
            ingest: self
                .ingest
                .iter()
                .flatten()
                .filter(|url| !url.is_empty())
                .map(|url| {
                    url.parse::<IngestSource>()
                        .map_err(|e| invalid("ingest", format!("{}: {e}", redact_passwords(url))))
                })
                .collect::<Result<_, _>>()?,
            secrets_key: self
                .secrets_key
                .as_deref()
                .filter(|ring| !ring.trim().is_empty())
                .map(|ring| ring.parse().map_err(|e| invalid("secrets_key", e)))
                .transpose()?,
            otlp_endpoint: self.otlp_endpoint.clone().filter(|url| !url.is_empty()),
            ..d
        })
    }

    /// The egress proxy and its probe target, when a proxy is set.
    fn egress_proxy(&self) -> Result<Option<EgressProxy>, ConfigError> {
        let Some(url) = self.egress_proxy.as_deref().filter(|url| !url.is_empty()) else {
            if self
                .egress_proxy_probe
                .as_deref()
                .is_some_and(|p| !p.is_empty())
            {
                return Err(invalid("egress_proxy_probe", "is set without egress_proxy"));
            }
            return Ok(None);
        };
        let proxy: EgressProxy = url.parse().map_err(|e| invalid("egress_proxy", e))?;
        match self.egress_proxy_probe.as_deref().filter(|p| !p.is_empty()) {
            Some(target) => proxy
                .with_probe(target)
                .map(Some)
                .map_err(|e| invalid("egress_proxy_probe", e)),
            None => Ok(Some(proxy)),
        }
    }

    /// Every setting of `config`, in the file's form, with secrets redacted: what
    /// `--print-config` shows.
    pub(crate) fn effective(config: &Config, json_logs: bool) -> Settings {
        Settings {
            database_url: Some(redact_passwords(&config.database_url)),
            migrate: Some(matches!(config.migrations, Migrations::Apply { .. })),
            listen: Some(config.listen),
            public_url: config.public_url.clone(),
            dev: Some(config.dev),
            api_only: Some(!config.run_workers),
            allow_address: Some(config.allow_addresses.clone()),
            trusted_proxy: Some(config.trusted_proxies.clone()),
            egress_proxy: config.egress_proxy.as_ref().map(ToString::to_string),
            egress_proxy_probe: config
                .egress_proxy
                .as_ref()
                .and_then(|proxy| proxy.probe().map(str::to_owned)),
            retry_schedule: Some(config.schedule.clone()),
            jitter: Some(config.schedule.jitter()),
            delivery_timeout: Some(Dur(config.delivery_timeout)),
            workers: Some(config.workers),
            per_endpoint_concurrency: Some(config.per_endpoint_concurrency),
            lease_extra: Some(Dur(config.lease_extra)),
            rate_limit: Some(config.protection.rate_limit),
            breaker_failures: Some(config.protection.breaker_failures),
            breaker_cooldown: Some(Dur(config.protection.breaker_cooldown)),
            breaker_cooldown_max: Some(Dur(config.protection.breaker_cooldown_max)),
            disable_after: Some(Dur(config.protection.disable_after)),
            smtp_url: config.smtp_url.as_deref().map(redact_passwords),
            smtp_from: Some(config.smtp_from.clone()),
            retention: Some(Dur(config.retention.unwrap_or(Duration::ZERO))),
            dead_letter_retention: Some(Dur(config
                .dead_letter_retention
                .unwrap_or(Duration::ZERO))),
            backlog_limit: Some(config.backlog_limit),
            header_timeout: Some(Dur(config.api_limits.header_read_timeout())),
            max_connections: Some(config.api_limits.connections()),
            api_rate_limit: Some(config.api_rate_limit),
            shutdown_grace: Some(Dur(config.shutdown_grace)),
            statement_timeout: Some(Dur(config.statement_timeout)),
            max_event_bytes: Some(config.max_event_data),
            ingest: Some(config.ingest.iter().map(IngestSource::redacted).collect()),
            otlp_endpoint: config.otlp_endpoint.clone(),
            json_logs: Some(json_logs),
            api_key: config.api_key.as_ref().map(|_| "[redacted]".to_owned()),
            secrets_key: config.secrets_key.as_ref().map(|ring| {
                format!(
                    "[redacted: keys {}]",
                    ring.key_ids().collect::<Vec<_>>().join(", ")
                )
            }),
        }
    }

    /// The settings as a TOML file.
    pub(crate) fn to_toml(&self) -> String {
        // Serialising plain strings, numbers and arrays cannot fail.
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot show the settings: {e}\n"))
    }
}

fn invalid(key: &'static str, why: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        key,
        why: why.to_string(),
    }
}

/// A duration written as the API writes them: `250ms`, `10s`, `5m`, `6h`, `3d`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Dur(pub Duration);

impl FromStr for Dur {
    type Err = String;

    fn from_str(text: &str) -> Result<Dur, String> {
        parse_duration(text).map(Dur).map_err(|e| e.to_string())
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// An optional value written in the file as its text form (`Display` / `FromStr`).
mod text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<T: Display, S: Serializer>(
        value: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => s.collect_str(value),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(d)?;
        text.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

/// An optional list of values, each written as its text form.
mod text_list {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<T: Display, S: Serializer>(
        value: &Option<Vec<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let Some(items) = value else {
            return s.serialize_none();
        };
        let mut seq = s.serialize_seq(Some(items.len()))?;
        for item in items {
            seq.serialize_element(&item.to_string())?;
        }
        seq.end()
    }

    pub(super) fn deserialize<'de, T, D>(d: D) -> Result<Option<Vec<T>>, D::Error>
    where
        T: FromStr<Err: Display>,
        D: Deserializer<'de>,
    {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| text.parse().map_err(serde::de::Error::custom))
            .collect::<Result<Vec<T>, _>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_an_unknown_key_is_refused_by_that_key() {
        let error = toml::from_str::<Settings>("workers = 3\nwokrers = 4\n").unwrap_err();
        assert!(error.to_string().contains("wokrers"), "{error}");
    }

    #[test]
    fn higher_layers_win_field_by_field() {
        let file = Settings {
            workers: Some(3),
            rate_limit: Some(7),
            ..Settings::default()
        };
        let env = Settings {
            workers: Some(5),
            ..Settings::default()
        };
        let merged = env.over(file);
        assert_eq!(merged.workers, Some(5));
        assert_eq!(merged.rate_limit, Some(7));
        assert_eq!(merged.listen, None);
    }

    #[test]
    fn nothing_given_is_the_library_defaults() {
        let config = Settings::default().to_config().unwrap();
        let defaults = Config::default();
        assert_eq!(
            Settings::effective(&config, false),
            Settings::effective(&defaults, false)
        );
    }

    #[test]
    fn the_printed_configuration_reads_back_as_the_same_configuration() {
        let file = "listen = \"127.0.0.1:9000\"\nallow_address = [\"10.0.0.0/8\"]\n\
                    retry_schedule = \"0s,1s,1m\"\njitter = 0.5\ndelivery_timeout = \"2s\"\n\
                    retention = \"0\"\ndead_letter_retention = \"90d\"\nrate_limit = 0\n\
                    egress_proxy = \"http://127.0.0.1:3128\"\negress_proxy_probe = \"127.0.0.1:443\"\n";
        let settings: Settings = toml::from_str(file).unwrap();
        let config = settings.to_config().unwrap();
        let printed = Settings::effective(&config, true).to_toml();
        let again: Settings = toml::from_str(&printed).unwrap();
        assert_eq!(again.to_config().unwrap().listen, config.listen);
        assert_eq!(
            Settings::effective(&again.to_config().unwrap(), true),
            Settings::effective(&config, true)
        );
        assert_eq!(config.retention, None);
        assert_eq!(
            config.dead_letter_retention,
            Some(Duration::from_secs(90 * 24 * 60 * 60))
        );
        assert_eq!(config.schedule.to_string(), "0s,1s,1m");
        let proxy = config.egress_proxy.as_ref().unwrap();
        assert_eq!(proxy.to_string(), "http://127.0.0.1:3128");
        assert_eq!(proxy.probe(), Some("127.0.0.1:443"));
    }

    #[test]
    fn a_dead_letter_retention_under_a_day_is_refused_and_0_keeps_them() {
        let short: Settings = toml::from_str("dead_letter_retention = \"12h\"").unwrap();
        let error = short.to_config().unwrap_err().to_string();
        assert!(error.contains("dead_letter_retention"), "{error}");
        let forever: Settings = toml::from_str("dead_letter_retention = \"0\"").unwrap();
        assert_eq!(forever.to_config().unwrap().dead_letter_retention, None);
    }

    /// A key ring's key, for the tests only: 32 bytes of base64.
    const KEK: &str = "q83vASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4k=";

    #[test]
    fn secrets_are_redacted_in_the_printed_configuration() {
        let settings = Settings {
            database_url: Some("postgres://kxp:hunter2@db/kxp".to_owned()),
            smtp_url: Some("smtps://ops:s3cret@mail:465".to_owned()),
            api_key: Some("kxp_live_key".to_owned()),
            ingest: Some(vec![
                "amqp://kxp:mqpass@mq/%2f?queue=q&account=acc_1".to_owned(),
                "nats://kxp:natspass@nats:4222?stream=S&subject=s&durable=d&account=acc_1"
                    .to_owned(),
            ]),
            secrets_key: Some(format!("k2:{KEK},k1:{KEK}")),
            egress_proxy: Some("http://egress:proxypass@proxy.internal:3128".to_owned()),
            ..Settings::default()
        };
        assert!(!format!("{settings:?}").contains("proxypass"));
        assert!(!format!("{settings:?}").contains("mqpass"));
        assert!(!format!("{settings:?}").contains(KEK));
        let printed = Settings::effective(&settings.to_config().unwrap(), false).to_toml();
        assert!(printed.contains("queue=q"), "{printed}");
        for secret in [
            "hunter2",
            "s3cret",
            "kxp_live_key",
            "mqpass",
            "natspass",
            "proxypass",
            KEK,
        ] {
            assert!(!printed.contains(secret), "{printed}");
        }
        assert!(printed.contains("[redacted]"), "{printed}");
        assert!(printed.contains("[redacted: keys k2, k1]"), "{printed}");
        assert!(
            printed.contains("egress_proxy = \"http://***@proxy.internal:3128\""),
            "{printed}"
        );
    }

    #[test]
    fn values_outside_their_range_name_their_setting() {
        for (file, key) in [
            ("delivery_timeout = \"31s\"", "delivery_timeout"),
            ("breaker_failures = 0", "breaker_failures"),
            ("breaker_cooldown = \"0\"", "breaker_cooldown"),
            ("jitter = 1.5", "jitter"),
            ("ingest = [\"amqp://u:pw@mq?account=acc_1\"]", "ingest"),
            ("ingest = [\"kafka://k?account=acc_1\"]", "ingest"),
            ("secrets_key = \"k1:c2hvcnQ=\"", "secrets_key"),
            ("egress_proxy = \"https://u:pw@proxy:3128\"", "egress_proxy"),
            (
                "egress_proxy = \"http://u:pw@proxy:3128/path\"",
                "egress_proxy",
            ),
            (
                "egress_proxy_probe = \"status.example.com:443\"",
                "egress_proxy_probe",
            ),
            (
                "egress_proxy = \"http://u:pw@proxy:3128\"\negress_proxy_probe = \"nope\"",
                "egress_proxy_probe",
            ),
        ] {
            let settings: Settings = toml::from_str(file).unwrap();
            let error = settings.to_config().unwrap_err().to_string();
            assert!(error.starts_with(key), "{file}: {error}");
            assert!(!error.contains("pw@"), "{error}");
        }
    }
}
