//! The command line: no subcommand serves MCP on stdio; the subcommands show a person at a
//! terminal exactly what the tools return, through the same validation and rendering.

mod doctor;

use crate::app::App;
use crate::tools;
use bridge_render as render;
use clap::{Parser, Subcommand};
use serde_json::{Map, Value, json};
use std::path::Path;

/// MCP server that lets Claude Code delegate easy and medium work to opencode agents under an
/// enforced policy, and see every opencode session on this machine.
///
/// With no subcommand it serves MCP on stdin/stdout (this is what `claude mcp add` runs).
#[derive(Debug, Parser)]
#[command(name = "opencode-bridge", version, about, after_long_help = crate::config::env_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP on stdin/stdout (the default when no subcommand is given).
    Serve,
    /// List opencode sessions of every project, newest first (same text as opencode_sessions).
    Sessions {
        /// Only this state: running, succeeded, failed, interrupted, stale.
        #[arg(long)]
        state: Option<String>,
        /// Only this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only directories containing this text.
        #[arg(long)]
        directory: Option<String>,
        /// Case-insensitive text in titles and messages.
        #[arg(long)]
        search: Option<String>,
        /// Only titles starting with this (e.g. `DOCS/`).
        #[arg(long)]
        title_prefix: Option<String>,
        /// Only sessions updated in the last N minutes.
        #[arg(long)]
        since_minutes: Option<u64>,
        /// At most N sessions (default 30).
        #[arg(long)]
        limit: Option<u64>,
        /// Child sessions: include (default), exclude, only.
        #[arg(long)]
        children: Option<String>,
    },
    /// Show what one session did (same text as opencode_session_output).
    Output {
        /// Session id (ses_...).
        id: String,
        /// last, tail (default) or full.
        #[arg(long)]
        mode: Option<String>,
        /// Messages shown by tail (default 12).
        #[arg(long)]
        messages: Option<u64>,
        /// Cut the text to this many characters, keeping the end (default 20000).
        #[arg(long)]
        max_chars: Option<u64>,
    },
    /// Show the delegation policy for a directory (same text as opencode_policy).
    Policy {
        /// Directory whose project decides the mode (default: OPENCODE_BRIDGE_ROOT).
        #[arg(long)]
        cwd: Option<String>,
        /// Show the policy as if this mode were asked for.
        #[arg(long)]
        mode: Option<String>,
    },
    /// List running opencode processes (same text as opencode_processes).
    Processes,
    /// What delegation cost and saved, from the usage ledger (same text as opencode_usage):
    /// totals and rows by day (with a bar per day), agent, model, lane and engine.
    Usage {
        /// Only from this UTC date on (YYYY-MM-DD).
        #[arg(long)]
        since: Option<String>,
        /// Only the last N UTC days, today included (default: 30, unless --since or --until).
        #[arg(long)]
        since_days: Option<u64>,
        /// Only up to this UTC date, included (YYYY-MM-DD).
        #[arg(long)]
        until: Option<String>,
        /// Show only this grouping: day, week, month, project, model, agent, lane or engine.
        #[arg(long)]
        by: Option<String>,
        /// Only the tasks whose working directory is in this absolute directory.
        #[arg(long)]
        project: Option<String>,
        /// Print the data as JSON (opencode_usage's structured result) instead of the table.
        #[arg(long)]
        json: bool,
        /// Print the grouping (--by, default day) as CSV instead of the table.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
        /// Also write a self-contained HTML page with a chart of cost and savings per day.
        #[arg(long, value_name = "FILE")]
        html: Option<std::path::PathBuf>,
    },
    /// Delegate a job like opencode_start, wait until it ends and print its result (the same
    /// text as opencode_result); exit 0 when it succeeded, 1 otherwise.
    Start {
        /// The complete task for the agent.
        prompt: String,
        /// easy or medium (hard and unsure are refused).
        #[arg(long)]
        tier: String,
        /// Working directory (inside OPENCODE_BRIDGE_ROOT; default: the root).
        #[arg(long)]
        cwd: Option<String>,
        /// The opencode agent.
        #[arg(long)]
        agent: Option<String>,
        /// provider/model[#variant], or a Claude model.
        #[arg(long)]
        model: Option<String>,
        /// Kill the run after this many minutes.
        #[arg(long)]
        timeout_minutes: Option<u64>,
        /// A shell command that checks the work after the agent's turn, in the run's fence.
        #[arg(long)]
        verify: Option<String>,
        /// Follow-ups a failed verify gets before the task fails (0-3, default 1).
        #[arg(long)]
        verify_retries: Option<u64>,
        /// A JSON Schema the final answer must satisfy: JSON text, or @FILE.
        #[arg(long, value_name = "JSON|@FILE")]
        output_schema: Option<String>,
        /// A key that makes a repeated start return the first task (24 h, same state dir).
        #[arg(long)]
        request_id: Option<String>,
    },
    /// Check the installation: opencode, backend, store, server, roster, mode.
    Doctor,
    /// Scan a file (or stdin: `-` or nothing) with the secret guard: one `FILE:LINE: KIND` line
    /// per finding, never the value; exit 0 when clean, 1 on findings, 2 when unreadable.
    /// Honours the project allowlist of the current directory.
    CheckSecrets {
        /// The file to scan; `-` or nothing reads stdin.
        file: Option<String>,
    },
    /// Claude Code hooks (the plugin's hooks/hooks.json runs them; input: the hook's JSON on stdin).
    Hook {
        #[command(subcommand)]
        hook: Hook,
    },
    /// One short line for Claude Code's statusLine: today's delegated spend and saving, and the
    /// running tasks. Always exits 0 (a neutral line when nothing can be read). To use it, put
    /// in ~/.claude/settings.json:
    /// "statusLine": {"type": "command", "command": "opencode-bridge statusline"}
    Statusline,
    /// The watcher of one warm `opencode serve` the bridge started (started with it; not for
    /// people): stops the server once it has had no turn for OPENCODE_BRIDGE_SERVE_IDLE_MIN,
    /// whether or not a bridge runs, and exits when the server is gone.
    #[command(hide = true)]
    ServeWatch {
        /// The server's note, `<state dir>/serve/<pid>.json`.
        note: std::path::PathBuf,
    },
}

/// The hooks `opencode-bridge hook` runs.
#[derive(Debug, Subcommand)]
pub enum Hook {
    /// Stop hook: when tasks delegated in this Claude Code session still run or finished with a
    /// result never read, tells Claude which (once per turn); silent otherwise. Reads the task
    /// registry only.
    Stop,
}

/// Runs a subcommand; returns the process exit code.
pub async fn run(app: &App, command: Command) -> i32 {
    let (tool, args) = match command {
        Command::Serve
        | Command::Hook { .. }
        | Command::ServeWatch { .. }
        | Command::Statusline => {
            unreachable!("handled by main")
        }
        Command::CheckSecrets { file } => return crate::check_secrets::run(file.as_deref()),
        Command::Doctor => {
            let (text, ok) = doctor::doctor(app).await;
            emit(&text);
            return if ok { 0 } else { 1 };
        }
        Command::Sessions {
            state,
            agent,
            directory,
            search,
            title_prefix,
            since_minutes,
            limit,
            children,
        } => (
            "opencode_sessions",
            json!({"state": state, "agent": agent, "directory": directory, "search": search,
                   "title_prefix": title_prefix, "since_minutes": since_minutes,
                   "limit": limit, "children": children}),
        ),
        Command::Output {
            id,
            mode,
            messages,
            max_chars,
        } => (
            "opencode_session_output",
            json!({"id": id, "mode": mode, "messages": messages, "max_chars": max_chars}),
        ),
        Command::Policy { cwd, mode } => ("opencode_policy", json!({"cwd": cwd, "mode": mode})),
        Command::Processes => ("opencode_processes", json!({})),
        Command::Start {
            prompt,
            tier,
            cwd,
            agent,
            model,
            timeout_minutes,
            verify,
            verify_retries,
            output_schema,
            request_id,
        } => {
            let schema = match output_schema.as_deref().map(schema_arg).transpose() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("opencode-bridge: {e}");
                    return 1;
                }
            };
            let args = json!({"prompt": prompt, "tier": tier, "cwd": cwd, "agent": agent,
                              "model": model, "timeout_minutes": timeout_minutes,
                              "verify": verify, "verify_retries": verify_retries,
                              "output_schema": schema, "request_id": request_id});
            return start(app, &given(&args)).await;
        }
        Command::Usage {
            since,
            since_days,
            until,
            by,
            project,
            json,
            csv,
            html,
        } => {
            let args = json!({"since": since, "since_days": since_days, "until": until, "by": by, "project": project});
            return usage(app, &args, json, csv, html.as_deref()).await;
        }
    };
    let args = given(&args);
    let outcome = match tools::parse_call(tool, Some(&args)) {
        Ok(call) => app.call(call).await,
        Err(refused) => Err(refused.cli_text()),
    };
    match outcome {
        Ok(text) => {
            emit(&text);
            0
        }
        Err(e) => {
            eprintln!("opencode-bridge: {}", cli_wording(&e));
            1
        }
    }
}

/// `--output-schema`: JSON text, or `@FILE` holding it.
fn schema_arg(given: &str) -> Result<Value, String> {
    let text = match given.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("--output-schema: cannot read {path}: {e}"))?,
        None => given.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| {
        format!("--output-schema is not JSON ({e}): give a JSON Schema object, or @FILE")
    })
}

/// `start`: the task is started like opencode_start, waited for here (the bridge this command
/// is), and its result printed.
async fn start(app: &App, args: &Map<String, Value>) -> i32 {
    let started = match tools::parse_call("opencode_start", Some(args)) {
        Ok(tools::Call::Start(start)) => app.start_task(start, &crate::app::Progress::none()).await,
        Ok(_) => Err("internal error: not a start".to_owned()),
        Err(refused) => Err(refused.cli_text()),
    };
    let (id, text) = match started {
        Ok(s) => s,
        Err(e) => {
            eprintln!("opencode-bridge: {}", cli_wording(&e));
            return 1;
        }
    };
    eprint!("{text}");
    // The task may be another bridge's (a repeated request_id): waited for on disk too.
    let snapshot = loop {
        let report = app
            .supervisor()
            .wait_for(&[id], true, std::time::Duration::from_secs(600))
            .await;
        if report.satisfied || !report.unknown.is_empty() {
            break report.finished.into_iter().next();
        }
    };
    let result = tools::parse_call(
        "opencode_result",
        Some(&given(&json!({"id": id.to_string()}))),
    )
    .map_err(|e| e.cli_text());
    match result {
        Ok(call) => match app.call(call).await {
            Ok(text) => print!("{text}"),
            Err(e) => eprintln!("opencode-bridge: {}", cli_wording(&e)),
        },
        Err(e) => eprintln!("opencode-bridge: {e}"),
    }
    match snapshot.map(|s| s.state) {
        Some(run_supervisor::TaskState::Succeeded) => 0,
        _ => 1,
    }
}

/// The arguments a subcommand was given: its JSON object without the flags left out (null).
fn given(args: &Value) -> Map<String, Value> {
    args.as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// `usage`: the report (or its JSON), and the HTML page when asked.
async fn usage(app: &App, args: &Value, as_json: bool, csv: bool, html: Option<&Path>) -> i32 {
    let args = given(args);
    let call = match tools::parse_call("opencode_usage", Some(&args)) {
        Ok(c) => c,
        Err(refused) => {
            eprintln!("opencode-bridge: {}", refused.cli_text());
            return 1;
        }
    };
    let tools::Call::Usage {
        since_ms,
        since_text,
        until_ms,
        by,
        project,
    } = call.clone()
    else {
        unreachable!("opencode_usage parses to Call::Usage")
    };
    let reply = match app.reply(call, crate::app::Progress::none()).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("opencode-bridge: {}", cli_wording(&e));
            return 1;
        }
    };
    let window = run_supervisor::usage::ledger::Window {
        since_ms,
        until_ms,
        project: project.map(std::path::PathBuf::from),
    };
    let summary = if html.is_some() || csv {
        match app.usage_summary(&window) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("opencode-bridge: {e}");
                return 1;
            }
        }
    } else {
        None
    };
    if let (Some(file), Some(s)) = (html, &summary) {
        let page = render::usage::usage_html(
            s,
            &since_text,
            app.supervisor().config().pricing.compare_model(),
        );
        if let Err(e) = std::fs::write(file, page) {
            eprintln!(
                "opencode-bridge: {}",
                render::usage::html_unwritable(file, &e.to_string())
            );
            return 1;
        }
    }
    if let (true, Some(s)) = (csv, &summary) {
        emit(&render::usage::usage_csv(s, by.as_deref()));
    } else if as_json {
        let data = reply.structured.unwrap_or(Value::Null);
        emit(&(serde_json::to_string_pretty(&data).unwrap_or_default() + "\n"));
    } else {
        emit(&reply.text);
        if let Some(file) = html {
            emit(&format!("{}\n", render::usage::html_written(file)));
        }
    }
    0
}

/// Writes `text` to stdout. A reader that went away (`usage --json | head`) is not an
/// error: what it did not read is dropped, where `print!` would panic on the closed pipe.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// A message that names tools, reworded with the subcommands a person at a terminal runs
/// (`check the id with opencode_sessions` becomes `… with \`opencode-bridge sessions\``).
fn cli_wording(message: &str) -> String {
    const SUBCOMMANDS: [(&str, &str); 5] = [
        ("opencode_usage", "usage"),
        ("opencode_session_output", "output"),
        ("opencode_sessions", "sessions"),
        ("opencode_policy", "policy"),
        ("opencode_processes", "processes"),
    ];
    let mut out = String::new();
    let mut rest = message;
    'scan: while !rest.is_empty() {
        for (tool, sub) in SUBCOMMANDS {
            if let Some(after) = rest.strip_prefix(tool)
                && !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
            {
                rest = after;
                let id = rest.strip_prefix(" id=").map(|r| {
                    let end = r
                        .find(|c: char| c.is_whitespace() || ",;)".contains(c))
                        .unwrap_or(r.len());
                    (&r[..end], &r[end..])
                });
                match id {
                    Some((id, after)) if !id.is_empty() => {
                        out.push_str(&format!("`opencode-bridge {sub} {id}`"));
                        rest = after;
                    }
                    _ => out.push_str(&format!("`opencode-bridge {sub}`")),
                }
                continue 'scan;
            }
        }
        let ch = rest.chars().next().expect("not empty");
        out.push(ch);
        rest = &rest[ch.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_become_subcommands() {
        assert_eq!(
            cli_wording("no opencode session ses_x: check the id with opencode_sessions"),
            "no opencode session ses_x: check the id with `opencode-bridge sessions`"
        );
        assert_eq!(
            cli_wording("opencode_session_output id=ses_1 shows it"),
            "`opencode-bridge output ses_1` shows it"
        );
    }
}
