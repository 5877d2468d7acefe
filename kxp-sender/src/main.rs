//! `kxp`: the command line of kxp-webhooks. This file only parses arguments; each subcommand
//! lives in its own module.

mod debug;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kxp-webhooks: sign, verify and deliver payment webhooks.
#[derive(Parser)]
#[command(name = "kxp", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the X-Kxp-Signature value for a body, as the sender would compute it.
    Sign(debug::SignArgs),
    /// Check an X-Kxp-Signature value against a body, as a receiver would.
    ///
    /// Exits 0 and prints `ok` when valid; otherwise exits 1 and prints the error kind and why.
    Verify(debug::VerifyArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Sign(args) => debug::sign(args),
        Command::Verify(args) => debug::verify(args),
    }
}
