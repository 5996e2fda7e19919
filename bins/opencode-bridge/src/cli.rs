//! The command line: no subcommand serves MCP on stdio; the subcommands show a person at a
//! terminal exactly what the tools return, through the same validation and rendering.

use crate::app::App;
use crate::config::ENV_VARS;
use crate::tools;
use bridge_policy::SystemEnv;
use bridge_policy::view::PolicyView;
use bridge_render as render;
use clap::{Parser, Subcommand};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::time::Instant;

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
            let (text, ok) = doctor(app).await;
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

/// `doctor`'s lines about the config file, the engine and every server the file names.
async fn doctor_engine(app: &App) -> Vec<(&'static str, &'static str, String)> {
    let mut lines = Vec::new();
    let servers = match &app.settings.file {
        Err(e) => {
            lines.push(("FAIL", "config", e.clone()));
            Vec::new()
        }
        Ok(file) => {
            lines.push((
                "ok",
                "config",
                match &file.path {
                    Some(p) => format!("{} ({} server(s))", p.display(), file.servers.len()),
                    None => format!(
                        "no config file ({} names one; default $XDG_CONFIG_HOME/opencode-bridge/config.toml)",
                        bridge_env::CONFIG.name
                    ),
                },
            ));
            file.servers.clone()
        }
    };
    let sup = app.supervisor();
    if let Some(Err(e)) = std::env::var(bridge_env::ENGINE.name)
        .ok()
        .map(|v| run_supervisor::Engine::parse(&v))
    {
        lines.push((
            "warn",
            "engine",
            format!(
                "{e} ({} is used)",
                run_supervisor::Engine::default().as_str()
            ),
        ));
    }
    match sup.config().engine {
        run_supervisor::Engine::Run => lines.push((
            "ok",
            "engine",
            format!(
                "run: an `opencode run` process per attempt ({}=serve, the default, keeps a warm local opencode serve instead)",
                bridge_env::ENGINE.name
            ),
        )),
        run_supervisor::Engine::Serve => {
            // Whether an opencode serve starts here at all (fenced like a read-only run in the
            // root, stopped at once): where it cannot, tasks run as `opencode run`.
            let probe = match app.client_config() {
                Ok(cfg) => {
                    let (cfg, root) = (cfg.clone(), app.settings.root.clone());
                    tokio::task::spawn_blocking(move || {
                        opencode_client::backend::with_temporary_server(
                            &cfg,
                            &root,
                            &opencode_client::backend::ChildEnv::default(),
                            std::time::Duration::from_secs(60),
                            None,
                            "doctor's check of the serve engine",
                            |http| {
                                // opencode 1 or 2, whichever the binary is.
                                opencode_client::Contract::of_server(http)
                                    .map(|_| ())
                                    .map_err(|detail| opencode_client::ClientError::TempServer {
                                        detail,
                                    })
                            },
                        )
                        .map_err(|e| e.to_string())
                    })
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()))
                }
                Err(e) => Err(e),
            };
            let idle = sup.config().serve_idle.as_secs_f64() / 60.0;
            lines.push(match probe {
                Ok(()) => (
                    "ok",
                    "engine",
                    format!(
                        "serve: tasks are sessions on a warm local opencode serve (started on the first task, stopped after {idle} min with no turn, whether or not a bridge runs)"
                    ),
                ),
                Err(e) => (
                    "warn",
                    "engine",
                    format!(
                        "serve, but opencode serve does not start here ({e}): tasks run as `opencode run` instead ({}=run says so at once)",
                        bridge_env::ENGINE.name
                    ),
                ),
            });
        }
    }
    // The warm servers of the state directory: this bridge's, and those bridges left running.
    let procs = {
        let sup = sup.clone();
        tokio::task::spawn_blocking(move || sup.processes())
            .await
            .unwrap_or_default()
    };
    for p in &procs {
        if let Some(w) = &p.bridge_server {
            lines.push((
                "ok",
                "server",
                format!("pid {}: {}", p.pid, bridge_render::tasks::warm_server(w)),
            ));
        }
    }
    lines.push((
        "ok",
        "on exit",
        match sup.config().on_exit {
            run_supervisor::OnExit::Leave => format!(
                "leave: a clean stop leaves running tasks running; the next bridge adopts them ({}=cancel cancels them)",
                bridge_env::ON_EXIT.name
            ),
            run_supervisor::OnExit::Cancel => format!(
                "cancel: a clean stop cancels running tasks ({}=leave, the default, leaves them running)",
                bridge_env::ON_EXIT.name
            ),
        },
    ));
    if let Some(Err(e)) = std::env::var(bridge_env::ON_EXIT.name)
        .ok()
        .map(|v| run_supervisor::OnExit::parse(&v))
    {
        lines.push(("warn", "on exit", format!("{e} (leave is used)")));
    }
    let timeout = sup
        .config()
        .api_timeout
        .min(std::time::Duration::from_secs(10));
    let checks = tokio::task::spawn_blocking(move || {
        servers
            .iter()
            .map(|s| run_supervisor::check_server(s, timeout))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    for c in checks {
        match c.outcome {
            Ok(what) => lines.push(("ok", "server", format!("{} {}: {what}", c.name, c.url))),
            Err(e) => lines.push(("FAIL", "server", format!("{} {}: {e}", c.name, c.url))),
        }
    }
    lines
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
            &app.supervisor().config().pricing.compare_model,
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

/// `doctor`: every check on its own line, `ok`, `warn` or `FAIL`, then the variables that are
/// set. The bool is false when a check failed.
pub async fn doctor(app: &App) -> (String, bool) {
    let mut out = String::new();
    let mut ok = true;
    let mut line = |status: &str, what: &str, detail: String| {
        out.push_str(&format!("{status:<4}  {what:<10} {detail}\n"));
    };
    line(
        "ok",
        "bridge",
        format!("opencode-bridge {}", env!("CARGO_PKG_VERSION")),
    );
    line(
        "ok",
        "root",
        format!(
            "{} (tasks may only work inside it)",
            app.settings.root.display()
        ),
    );

    let sup = app.supervisor();
    let (status, detail) = doctor_sandbox(sup.config().sandbox);
    ok &= status != "FAIL";
    line(status, "sandbox", detail);
    if sup.config().sandbox != run_supervisor::Sandbox::Off {
        let (status, detail) = doctor_layers(&bridge_fence::mechanisms());
        line(status, "layers", detail);
    }
    for (what, detail) in doctor_worlds(sup.config()) {
        line("ok", what, detail);
    }
    match sup.capabilities().await {
        Ok(caps) => {
            let bin = run_supervisor::command::resolve_binary(sup.config().opencode_bin.as_deref())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let mut flags = Vec::new();
            for (name, has) in [
                ("--title", caps.title),
                ("--auto", caps.auto),
                ("--variant", caps.variant),
                ("--standalone", caps.standalone),
            ] {
                flags.push(format!("{name} {}", if has { "yes" } else { "no" }));
            }
            let detail = match caps.contract {
                opencode_client::Contract::V1 => format!(
                    "{bin}: {}, {} (run {})",
                    caps.version,
                    caps.contract.describe(),
                    flags.join(", ")
                ),
                opencode_client::Contract::V2 => format!(
                    "{bin}: {}: opencode 2 has no `run`, tasks run as sessions on a local server of it",
                    caps.version
                ),
            };
            line("ok", "opencode", detail);
            let (status, detail) = doctor_model(app, Path::new(&bin)).await;
            line(status, "model", detail);
        }
        Err(e) => {
            ok = false;
            line("FAIL", "opencode", e);
        }
    }
    let (status, detail) = doctor_claude(app).await;
    line(status, "claude", detail);
    for (status, what, detail) in doctor_engine(app).await {
        ok &= status != "FAIL";
        line(status, what, detail);
    }

    match app.client_config() {
        Ok(cfg) => {
            let store = &cfg.db_path;
            let size = std::fs::metadata(store)
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len());
            line(
                if size.is_some_and(|n| n > 0) {
                    "ok"
                } else {
                    "warn"
                },
                "store",
                format!(
                    "{} {}",
                    store.display(),
                    match size {
                        Some(0) => "is empty (opencode has not written it yet: run opencode once)",
                        Some(_) => "exists",
                        None => "does not exist (run opencode once, or set OPENCODE_DB)",
                    }
                ),
            );
            match &cfg.server_url {
                Some(url) => line("ok", "server", format!("OPENCODE_BRIDGE_SERVER_URL={url}")),
                None => line(
                    "ok",
                    "server",
                    "none configured (OPENCODE_BRIDGE_SERVER_URL unset)".into(),
                ),
            }
        }
        Err(e) => {
            ok = false;
            line("FAIL", "config", e.clone());
        }
    }
    for e in app.env_errors() {
        ok = false;
        line("FAIL", "environment", bridge_render::tasks::env_refusal(e));
    }
    let (standings, today) = app.supervisor().budget_report(None);
    match app.usage_config_error() {
        Some(e) => {
            ok = false;
            line("FAIL", "budgets", render::usage::config_refusal(e));
        }
        None => line(
            if standings.iter().any(|s| s.exhausted()) {
                "warn"
            } else {
                "ok"
            },
            "budgets",
            render::usage::budget_lines(&standings, today)
                .trim_end()
                .to_owned(),
        ),
    }
    line(
        "ok",
        "prices",
        render::usage::prices_line(&app.supervisor().config().pricing)
            .trim_end()
            .trim_start_matches("prices: ")
            .to_owned(),
    );
    for (status, detail) in doctor_worktrees(app) {
        line(status, "worktrees", detail);
    }
    let not_yet = app.store_not_created_yet();
    match app.source() {
        _ if not_yet.is_some() => {
            line(
                "warn",
                "backend",
                "store: opencode has not run on this machine yet (normal before its first run); sessions appear after it".into(),
            );
            line(
                "warn",
                "sessions",
                "0 sessions (opencode has not run yet)".into(),
            );
        }
        Ok((source, why)) => {
            line("ok", "backend", why);
            let started = Instant::now();
            let cfg = app.client_config().ok().cloned();
            let probe = tokio::task::spawn_blocking(move || {
                let cfg = cfg.ok_or("no client configuration")?;
                let ctx = cfg.scan_context(opencode_client::Liveness::default());
                let filter = opencode_client::SessionFilter {
                    limit: 1,
                    ..Default::default()
                };
                source
                    .list(&filter, &ctx)
                    .map(|l| l.scanned)
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            match probe {
                Ok(_) => line(
                    "ok",
                    "sessions",
                    format!(
                        "readable (a listing took {} ms)",
                        started.elapsed().as_millis()
                    ),
                ),
                Err(e) => {
                    ok = false;
                    line("FAIL", "sessions", e);
                }
            }
        }
        Err(e) => {
            ok = false;
            line("FAIL", "backend", e);
        }
    }

    let started = Instant::now();
    let roster = app.roster(&app.root_dir()).await;
    let asked_ms = started.elapsed().as_millis();
    let (ok_roster, origin) = match roster.origin() {
        bridge_policy::roster::RosterOrigin::Opencode { via } => {
            (true, format!("from {via}, {asked_ms} ms"))
        }
        bridge_policy::roster::RosterOrigin::Files { why } => (
            false,
            format!(
                "read from the agent files by the bridge, not from opencode{}",
                why.as_deref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ),
        ),
    };
    if let Some(e) = roster.load_error() {
        ok = false;
        line(
            "FAIL",
            "opencode config",
            format!(
                "opencode refuses to load its configuration in {}: {e}. Every delegation is refused until it is fixed.",
                app.settings.root.display()
            ),
        );
    }
    line(if ok_roster { "ok" } else { "warn" }, "roster", origin);
    for l in render::roster_summary(&roster) {
        line("ok", "roster", l);
    }
    for w in roster.warnings() {
        line("warn", "roster", w.clone());
    }
    match PolicyView::build(&SystemEnv, &app.settings.root, None) {
        Ok(view) => line("ok", "mode", view.reason),
        Err(e) => {
            ok = false;
            line("FAIL", "mode", e.to_string());
        }
    }

    out.push_str("\nenvironment (set variables):\n");
    let mut any = false;
    for var in ENV_VARS {
        if let Ok(v) = std::env::var(var.name) {
            any = true;
            let shown = if !var.shown {
                "(set, not shown)".to_string()
            } else {
                v
            };
            out.push_str(&format!("  {}={shown}\n", var.name));
        }
    }
    if !any {
        out.push_str("  (none: every default applies)\n");
    }
    (out, ok)
}

/// The `model` line: the configured `OPENCODE_BRIDGE_MODEL` must be one `opencode models`
/// lists (a model opencode does not know fails every task with an `UnknownError`).
/// The `worktrees` lines, only when there is something to say: isolated changes waiting for
/// `opencode_apply`, and worktrees in the state directory whose task the registry does not know
/// (left by a registry that was removed or pruned by hand), with the command that removes them.
/// The kernel fence: what `OPENCODE_BRIDGE_SANDBOX` asks for and what this kernel gives.
fn doctor_sandbox(mode: run_supervisor::Sandbox) -> (&'static str, String) {
    use run_supervisor::Sandbox;
    let var = bridge_env::SANDBOX.name;
    let raw = std::env::var(var).unwrap_or_default();
    let typo = if !raw.trim().is_empty() && Sandbox::parse(&raw).is_err() {
        format!(" ({var}={raw:?} is not auto, required or off: read as required)")
    } else {
        String::new()
    };
    match (mode, bridge_fence::kernel_abi()) {
        (Sandbox::Off, _) => (
            "warn",
            format!("{var}=off: runs are not confined (they may write anywhere you can)"),
        ),
        (_, Ok(abi)) => (
            "ok",
            format!(
                "{}{typo}: every run is confined by Landlock (ABI {abi}): it writes only its project (editing agents) and opencode's own directories, and reads no other project, nor ~/.ssh",
                mode.as_str()
            ),
        ),
        (Sandbox::Required, Err(why)) => (
            "FAIL",
            format!("required{typo}, but {why}: every task is refused"),
        ),
        (Sandbox::Auto, Err(why)) => ("warn", format!("auto: runs are NOT confined: {why}")),
    }
}

/// The `layers` line: what holds besides Landlock, and by which mechanism of this kernel
/// (`warn` when a layer is missing, saying what is left without it).
pub(crate) fn doctor_layers(m: &bridge_fence::Mechanisms) -> (&'static str, String) {
    let mut warn = false;
    let sockets = match &m.seccomp {
        Ok(()) => "unix sockets: refused by seccomp (Landlock up to ABI 7 does not govern them)"
            .to_owned(),
        Err(why) => {
            warn = true;
            format!("unix sockets: NOT refused ({why}): a run can reach ssh-agent, D-Bus or docker")
        }
    };
    let protected = match &m.namespaces {
        Ok(bridge_fence::Namespaces::Mount) => {
            "protected paths: bound read-only in a mount namespace".to_owned()
        }
        Ok(bridge_fence::Namespaces::UserAndMount) => {
            "protected paths: bound read-only in a user and mount namespace".to_owned()
        }
        Err(why) => {
            warn = true;
            format!("protected paths: not bound ({why}): only put back after each run")
        }
    };
    let caps = if m.capabilities_held {
        "capabilities: every one dropped, the bounding set included"
    } else {
        "capabilities: none held, none gained (no_new_privs)"
    };
    (
        if warn { "warn" } else { "ok" },
        format!("{sockets}; {protected}; {caps}"),
    )
}

/// The `worlds` and `env` lines: where runs keep their runner state, and which of this
/// environment's variables no run gets (names only).
fn doctor_worlds(cfg: &run_supervisor::SupervisorConfig) -> Vec<(&'static str, String)> {
    let state = cfg
        .state_dir
        .clone()
        .unwrap_or_else(bridge_fence::world::fallback_state_dir);
    let worlds = bridge_fence::world::all(&state).len();
    // The bridge's own settings and the homes a world replaces are not news.
    let replaced = ["XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"];
    let mut dropped = bridge_proc::dropped_names(std::env::vars(), &[], &cfg.pass_env);
    dropped.retain(|k| !k.starts_with("OPENCODE_BRIDGE_") && !replaced.contains(&k.as_str()));
    let dropped = if dropped.is_empty() {
        "nothing".to_owned()
    } else {
        dropped.join(", ")
    };
    vec![
        (
            "worlds",
            format!(
                "each project and access keeps its runner state (store, caches, logins by link) in its own world under {} ({worlds} so far)",
                bridge_fence::world::worlds_dir(&state).display()
            ),
        ),
        (
            "env",
            format!(
                "runs get only what they need of this environment, their model's provider keys and what {} names; dropped here: {dropped}",
                bridge_env::PASS_ENV.name
            ),
        ),
    ]
}

fn doctor_worktrees(app: &App) -> Vec<(&'static str, String)> {
    use run_supervisor::worktree;
    let sup = app.supervisor();
    let Some(dir) = sup.state_dir() else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    let ids = worktree::ids(dir);
    let waiting: Vec<String> = ids
        .iter()
        .filter(|&&id| sup.status(id).is_some())
        .map(|id| id.to_string())
        .collect();
    if !waiting.is_empty() {
        lines.push((
            "ok",
            format!(
                "{} isolated change(s) not applied or discarded yet (tasks {}): opencode_apply id=N, or discard=true; removed after OPENCODE_BRIDGE_PRUNE_DAYS",
                waiting.len(),
                waiting.join(", ")
            ),
        ));
    }
    for (id, path) in worktree::strays(dir, |id| sup.status(id).is_some()) {
        lines.push((
            "warn",
            format!(
                "{} belongs to task {id}, which the registry does not know: remove it with `git worktree remove --force {}` in its repository (or delete the directory and run `git worktree prune` there)",
                path.display(),
                path.display()
            ),
        ));
    }
    lines
}

async fn doctor_model(app: &App, opencode: &Path) -> (&'static str, String) {
    let sup = app.supervisor();
    let Some(model) = sup.config().default_model.clone() else {
        return (
            "ok",
            "OPENCODE_BRIDGE_MODEL unset: tasks use opencode's default model (`opencode models` lists the others)".into(),
        );
    };
    if run_supervisor::Runner::for_model(Some(&model)) == run_supervisor::Runner::Claude {
        return ("ok", format!("{model}: a Claude model, run by Claude Code"));
    }
    let (id, _variant) = run_supervisor::command::split_model(&model);
    match run_supervisor::command::output_text(
        opencode,
        &["models"],
        &sup.config().env,
        bridge_fence::RunKind::Opencode,
        sup.config().sandbox,
    )
    .await
    {
        Ok(listed) if listed.lines().any(|l| l.trim() == id) => {
            ("ok", format!("{model} (listed by `opencode models`)"))
        }
        Ok(_) => (
            "warn",
            format!(
                "OPENCODE_BRIDGE_MODEL={model}: `opencode models` does not list {id}, so every task would fail. Set up the provider (`opencode auth login`), pick an id from `opencode models` (provider/model, optionally #variant) and register the bridge with it"
            ),
        ),
        Err(e) => (
            "warn",
            format!("OPENCODE_BRIDGE_MODEL={model}: cannot check it with `opencode models`: {e}"),
        ),
    }
}

/// The `claude` line: Claude Code runs the tasks whose model is a Claude model; it must know
/// every flag the runner passes (2.1.198 and later; on Node 20 npm installs 2.1.197).
async fn doctor_claude(app: &App) -> (&'static str, String) {
    use run_supervisor::claude::{check_claude, resolve_claude};
    const UPGRADE: &str =
        "npm i -g @anthropic-ai/claude-code@2.1.328 (Node 20) or @latest (Node >= 22)";
    let bin = match resolve_claude(app.supervisor().config().claude_bin.as_deref()) {
        Ok(b) => b,
        Err(e) => {
            return (
                "warn",
                format!(
                    "{e}. Only tasks with a Claude model need it; opencode models work without it"
                ),
            );
        }
    };
    match check_claude(&bin, app.supervisor().config().sandbox).await {
        Ok(c) if c.missing_flags.is_empty() => (
            "ok",
            format!(
                "{}: {} (knows every flag the runner passes)",
                bin.display(),
                c.version
            ),
        ),
        Ok(c) => (
            "warn",
            format!(
                "{}: {} lacks {}: tasks with a Claude model (sonnet, opus, haiku) fail with `unknown option`. Upgrade Claude Code: {UPGRADE}",
                bin.display(),
                c.version,
                c.missing_flags.join(", ")
            ),
        ),
        Err(e) => (
            "warn",
            format!("{}: {e}. Upgrade Claude Code: {UPGRADE}", bin.display()),
        ),
    }
}

/// A message that names tools, reworded with the subcommands a person at a terminal runs
/// (`check the id with opencode_sessions` becomes `… with \`opencode-bridge sessions\``).
/// Writes `text` to stdout. A reader that went away (`usage --json | head`) is not an
/// error: what it did not read is dropped, where `print!` would panic on the closed pipe.
fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

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
    #[test]
    fn the_layers_line_names_each_mechanism_and_warns_for_a_missing_one() {
        use bridge_fence::{Mechanisms, Namespaces};
        let all = Mechanisms {
            landlock: Ok(7),
            seccomp: Ok(()),
            namespaces: Ok(Namespaces::UserAndMount),
            capabilities_held: false,
        };
        let (status, text) = super::doctor_layers(&all);
        assert_eq!(status, "ok");
        assert!(text.contains("refused by seccomp"), "{text}");
        assert!(text.contains("user and mount namespace"), "{text}");
        assert!(!text.contains('\n'));
        let none = Mechanisms {
            seccomp: Err("no seccomp".into()),
            namespaces: Err("the kernel refused a user namespace: EPERM".into()),
            capabilities_held: true,
            ..all
        };
        let (status, text) = super::doctor_layers(&none);
        assert_eq!(status, "warn");
        assert!(text.contains("NOT refused (no seccomp)"), "{text}");
        assert!(text.contains("only put back after each run"), "{text}");
        assert!(text.contains("every one dropped"), "{text}");
    }

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
