//! `opencode-bridge doctor`: every check of the installation on its own line (bridge, root,
//! fence, opencode, model, claude, engine and servers, store, budgets, worktrees, backend,
//! roster, mode), then the variables that are set.

use crate::app::App;
use crate::config::ENV_VARS;
use bridge_policy::SystemEnv;
use bridge_policy::view::PolicyView;
use bridge_render as render;
use std::path::Path;
use std::time::Instant;

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

/// The `worktrees` lines, only when there is something to say: isolated changes waiting for
/// `opencode_apply`, and worktrees in the state directory whose task the registry does not know
/// (left by a registry that was removed or pruned by hand), with the command that removes them.
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

/// The `model` line: the configured `OPENCODE_BRIDGE_MODEL` must be one `opencode models`
/// lists (a model opencode does not know fails every task with an `UnknownError`).
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
}
