//! `opencode-bridge`: with no arguments, an MCP server on stdio; with a subcommand, the same
//! views for a person at a terminal.

mod app;
mod config;
mod server;
mod tools;

use std::sync::Arc;

fn main() -> anyhow::Result<()> {
    init_logging();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let app = Arc::new(app::App::new(config::Settings::from_env(), true));
    runtime.block_on(server::serve(app))
}

/// Logs go to stderr only (stdout carries MCP); `RUST_LOG` filters them, default `warn`.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
