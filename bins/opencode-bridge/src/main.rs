//! `opencode-bridge`: with no arguments, an MCP server on stdio; with a subcommand, the same
//! views for a person at a terminal.
//!
//! Module map:
//! - `server`: the only MCP-aware code (rmcp `ServerHandler`: identity, instructions, tool list,
//!   calls, cancellation, shutdown on stdin EOF / SIGTERM / SIGINT);
//! - `stdio_guard`: the line-level guard between stdin/stdout and rmcp (parse errors, batches,
//!   invalid requests and unknown methods get one short JSON-RPC error each), reading and
//!   writing pipes and sockets on the runtime's own thread;
//! - `tools`: the thirteen tool definitions (hand-written JSON Schemas, annotations) and the argument
//!   validation that runs before anything else;
//! - `app`: what each tool does, in plain Rust: policy (bridge-policy), sessions
//!   (opencode-client), tasks and processes (run-supervisor), text (bridge-render);
//! - `cli`: clap subcommands and `doctor`, going through `tools` and `app` like the server;
//! - `config`: the binary's own settings and the table of every environment variable.
//!
//! Invariants: stdout carries only MCP messages (logs go to stderr); every argument is validated
//! before work starts; a tool failure is a one-line `isError` text, an unknown tool a JSON-RPC
//! error; the process never exits while a task it started is still running.

mod app;
mod audit_reader;
mod check_secrets;
mod cli;
mod config;
mod hook;
mod mcp_prompts;
mod mcp_resources;
mod mcp_tasks;
mod roster;
mod server;
mod session_uri;
mod statusline;
mod stdio_guard;
mod structured;
mod tools;

use std::sync::Arc;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    // The relocation table is the loader's alone, read before this line: its pages go back
    // before the server allocates anything (docs/PERFORMANCE.md, "Cold-start memory").
    bridge_proc::image::release_loader_tables();
    bridge_proc::image::release_load_time_code();
    // With no argument (how Claude Code starts the server) there is nothing for clap to parse:
    // building its command tree and the environment help would cost a cold start memory.
    let cli = if std::env::args_os().len() <= 1 {
        cli::Cli { command: None }
    } else {
        cli::Cli::parse()
    };
    init_logging();
    // One thread is enough: tool calls are short, blocking reads go to the blocking pool.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cli.command {
        None | Some(cli::Command::Serve) => {
            use std::io::IsTerminal as _;
            if cli.command.is_none() && std::io::stdin().is_terminal() {
                eprintln!(
                    "opencode-bridge: serving MCP on stdin/stdout for Claude Code (waiting for JSON-RPC; Ctrl-D ends). At a terminal try `opencode-bridge doctor` or `opencode-bridge --help`."
                );
            }
            // This thread runs the runtime, so it answers every call: a short slice lets it
            // take a core sooner from runs and output followers when a call arrives.
            if let Err(e) = bridge_proc::sched::short_slice_for_this_thread() {
                tracing::debug!("no short scheduler slice for the answering thread: {e}");
            }
            let settings = config::Settings::from_env();
            if let Err(e) = &settings.file {
                // A broken config file could hold a budget or a server the user relies on: the
                // server stays up, says so here and in doctor, and refuses every start.
                eprintln!(
                    "opencode-bridge: {e}; every opencode_start is refused until it is fixed"
                );
            }
            let app = Arc::new(app::App::new(settings, true));
            for e in app.env_errors() {
                eprintln!("{}", bridge_render::tasks::env_error_at_start(e));
            }
            let outcome = runtime.block_on(server::serve(app));
            // Every task is stopped by now; a blocking read still waiting on a hung service
            // (abandoned by a cancelled call) must not keep the process alive.
            runtime.shutdown_timeout(std::time::Duration::from_millis(200));
            // Such a read may hold an opencode serve of ours (a roster ask, a doctor probe): it
            // is stopped here rather than left running after the bridge.
            bridge_proc::group::stop_all_groups(std::time::Duration::from_secs(3));
            outcome
        }
        // A warm server's watcher reads its note and asks the server, nothing else.
        Some(cli::Command::ServeWatch { note }) => {
            std::process::exit(run_supervisor::serve_watch(&note))
        }
        // The status line reads the ledger's end and the registry's files, nothing else.
        Some(cli::Command::Statusline) => std::process::exit(statusline::run()),
        // A hook reads the registry and nothing else: no App (which would open and sweep it).
        Some(cli::Command::Hook {
            hook: cli::Hook::Stop,
        }) => std::process::exit(hook::stop()),
        Some(command) => {
            let app = app::App::new(config::Settings::from_env(), false);
            let code = runtime.block_on(async {
                let code = cli::run(&app, command).await;
                app.shutdown().await;
                code
            });
            bridge_proc::group::stop_all_groups(std::time::Duration::from_secs(3));
            std::process::exit(code);
        }
    }
}

/// Logs go to stderr only (stdout carries MCP); `RUST_LOG` filters them (default in
/// [`bridge_env::RUST_LOG`]).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env(bridge_env::RUST_LOG.name)
        // rmcp logs every error response at WARN; an unknown tool or a cancelled call is the
        // client's ordinary business, answered to it, so rmcp's own service log starts at ERROR.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(bridge_env::RUST_LOG.default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
