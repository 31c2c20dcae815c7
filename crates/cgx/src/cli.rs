//! What every subcommand shares: the one-line error a failed run reports
//! ([`CliError`], [`CliResult`]) and where files are written by default.
//!
//! It depends on no other module of `cgx`, so `main.rs` and the subcommands both point
//! down to it.

use std::path::PathBuf;

/// A failed run: one line for the user.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

/// Result of a subcommand.
pub type CliResult<T = ()> = Result<T, CliError>;

/// Where `cgx` writes files by default.
pub fn default_out_dir() -> PathBuf {
    PathBuf::from("target").join("cgx")
}
