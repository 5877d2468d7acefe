//! `kxp`: the command line of kxp-webhooks. This file only parses arguments; each subcommand
//! lives in its own module.

mod accounts;
mod admin;
mod check;
mod config;
mod debug;
mod demo;
mod encryption_key;
mod healthcheck;
mod keyholders;
mod listen;
mod migrate;
mod operators;
mod secrets_key;
mod send;
mod serve;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// kxp-webhooks: sign, verify and deliver payment webhooks.
#[derive(Parser)]
#[command(name = "kxp", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the sender and a deliberately flaky receiver end to end, and check that every event
    /// is processed exactly once.
    ///
    /// Everything runs in this process on 127.0.0.1, with temporary SQLite files. Exits 0
    /// when every emitted event was processed exactly once, 1 otherwise.
    Demo(demo::DemoArgs),
    /// Print the X-Kxp-Signature value for a body, as the sender would compute it.
    Sign(debug::SignArgs),
    /// Check an X-Kxp-Signature value against a body, as a receiver would.
    ///
    /// Exits 0 and prints `ok` when valid; otherwise exits 1 and prints the error kind and why.
    Verify(debug::VerifyArgs),
    /// Build a test event, sign it and POST it to an endpoint; print each answer.
    ///
    /// `--repeat N` sends the same event (same id, same bytes) N times, to test the receiver's
    /// dedup. Exits 0 when every send got a 2xx answer, 1 otherwise.
    Send(send::SendArgs),
    /// Forward a platform's real events to a receiver on this machine, with no tunnel and no
    /// public URL: through a temporary pull endpoint of the account, deleted on Ctrl-C.
    ///
    /// Prints `Signing secret: <secret>` first (start the local receiver with it), then one
    /// line per forwarded event (or a JSON object, with --json). Exits 0 on Ctrl-C or SIGTERM.
    Listen(listen::ListenArgs),
    /// Grade a webhook endpoint, in any language, against the receiver contract: a valid event,
    /// a duplicate, forgeries, stale and future timestamps, limits, the challenge, rotation, a
    /// burst.
    ///
    /// Prints a report card (a table, or `--json`), each check with what was sent, what came
    /// back, why it matters and where the fix is explained. Exits 0 when no check failed, 1
    /// when one did, 2 for a usage error.
    Check(check::CheckArgs),
    /// Run the delivery service: the HTTP API and the workers.
    ///
    /// On first start with no KXP_API_KEY, an account is created and its API key printed once.
    // Boxed: its settings are most of the enum's size, and every other command pays for it.
    Serve(Box<serve::ServeArgs>),
    /// List the dead-letter queue: deliveries that failed every try and await a replay.
    Dlq(admin::DlqArgs),
    /// Replay deliveries: one by id, or in bulk for an endpoint (dead ones by default).
    ///
    /// A replay is a new delivery of the same event id.
    Replay(admin::ReplayArgs),
    /// Create accounts (each with its own API key, printed once) and list them, straight on
    /// the database.
    Accounts(accounts::AccountsArgs),
    /// Create operators (the platform's own people: their key, printed once, creates accounts
    /// and acts for any one of them) and list them, straight on the database.
    Operators(operators::OperatorsArgs),
    /// Seal endpoint secrets at rest under a key ring (KXP_SECRETS_KEY): generate a key,
    /// seal what was stored before or under an older key, and count what is sealed how.
    SecretsKey(secrets_key::SecretsKeyArgs),
    /// A merchant's key pair for payload encryption: generate the private JWK the receiver
    /// keeps, and print the public JWK to register as the endpoint's `encryption_jwk`.
    EncryptionKey(encryption_key::EncryptionKeyArgs),
    /// The sender's schema: list applied and pending migrations, print the SQL of the pending
    /// ones, apply them. `kxp serve` on PostgreSQL refuses to start with one pending.
    Migrate(migrate::MigrateArgs),
    /// GET a probe (default: this machine's `kxp serve` at http://127.0.0.1:8080/readyz) and
    /// exit 0 when it answers 2xx, 1 otherwise: the container image's health check, which has
    /// no shell or curl to run.
    Healthcheck(healthcheck::HealthcheckArgs),
}

fn main() -> ExitCode {
    let matches = config::defaults_in_help(Cli::command()).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Demo(args) => demo::demo(args),
        Command::Sign(args) => debug::sign(args),
        Command::Verify(args) => debug::verify(args),
        Command::Send(args) => send::send(args),
        Command::Check(args) => check::check(args),
        Command::Listen(args) => listen::listen(args),
        Command::Serve(args) => serve::serve(*args),
        Command::Dlq(args) => admin::dlq(args),
        Command::Replay(args) => admin::replay(args),
        Command::Accounts(args) => accounts::accounts(args),
        Command::Operators(args) => operators::operators(args),
        Command::SecretsKey(args) => secrets_key::secrets_key(args),
        Command::EncryptionKey(args) => encryption_key::encryption_key(args),
        Command::Migrate(args) => migrate::migrate(args),
        Command::Healthcheck(args) => healthcheck::healthcheck(args),
    }
}
