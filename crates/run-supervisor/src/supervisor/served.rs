//! One attempt of a task on a server ([`crate::runner::serve`]): the server (a warm local one
//! from the pool, or a remote one of the config file), the session, its rules, the prompt, the
//! event stream folded like a run's stdout, permission answers, a stop, the deadline, and the
//! end of the turn. Nothing of a served task is a process of ours, so nothing is signalled: a
//! stop is the session's abort.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opencode_client::backend::{ChildEnv, ServeProcess, ServeStart};
use opencode_client::http::HttpClient;
use opencode_client::sse::EventStream;
use tokio::sync::watch;

use super::child::{AttemptCtx, AttemptEnd, into_world, world_for};
use super::output::{finish_stdout, fold_stdout};
use super::record::Save;
use super::record::StopReason;
use super::table::persist;
use crate::classify::ExitInfo;
use crate::command::{LaunchContext, build_launch};
use crate::runner::serve::events::{Action, Follow, turn_done_in};
use crate::runner::serve::pool::Lease;
use crate::runner::serve::{Place, map_dir, session};
use bridge_proc::stream::LineSplitter;

mod v2;
use v2::run_v2_turn;

/// How long a local server may take to listen.
const SERVER_STARTUP: Duration = Duration::from_secs(60);

/// A stream silent this long means the server is gone (it sends a heartbeat every 10 s).
const STREAM_IDLE: Duration = Duration::from_secs(35);

/// How many more times, a second apart, an adopted turn read idle is asked whether it runs.
const RESUME_IDLE_CHECKS: u32 = 4;

/// How long a stop waits for the aborted turn to end (it ends within a second once the abort
/// reaches it; this bounds a server that never starts or never ends the turn).
const STOP_WAIT: Duration = Duration::from_secs(30);

/// Longest event line folded (as for a run's stdout).
const MAX_LINE: usize = 8 * 1024 * 1024;

/// The server a served attempt talks to.
struct Server {
    http: HttpClient,
    /// The task's directory as the server sees it.
    dir: PathBuf,
    /// How the server is confined (or why the bridge cannot say).
    confinement: String,
    /// Who it is, for messages: `the local opencode serve` or `server devbox (http://…)`.
    who: String,
    /// A local server's lease (dropped when the attempt ends).
    lease: Option<Lease>,
    /// The contract it speaks (opencode 1's routes, or opencode 2's `/api`).
    contract: opencode_client::Contract,
}

impl Server {
    fn alive(&self) -> bool {
        self.lease.as_ref().is_none_or(Lease::alive)
    }
}

/// Runs one attempt of a served task to its end.
pub(super) async fn run_served_attempt(
    ctx: &AttemptCtx<'_>,
    attempt: u32,
    place: &Place,
    stop_rx: &mut watch::Receiver<Option<StopReason>>,
) -> AttemptEnd {
    let shared = ctx.shared;
    let id = ctx.id;
    let spec = ctx.spec;
    // A task adopted from a bridge that is gone follows the session it has, on the server it
    // ran on.
    let resume_on = shared
        .with(id, |r| r.resume.then_some(r.rec.server).flatten())
        .flatten();
    let server = match server_for(ctx, place, resume_on.map(Into::into)).await {
        Ok(s) => s,
        // A task followed again whose server is gone cannot run elsewhere: it has no prompt.
        Err(e) if *place == Place::Local && resume_on.is_none() => {
            return AttemptEnd::NoLocalServer(e);
        }
        Err(e) => return AttemptEnd::ServerFailed(e),
    };
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let cfg = &shared.config;
    shared.with(id, |r| {
        r.begin_attempt(
            attempt,
            server.confinement.clone(),
            cfg.output_cap,
            shared.writer.is_none(),
        );
        r.rec.engine = Some(place.engine_name());
        r.server_pid = server.lease.as_ref().map(Lease::pid);
        r.rec.server = server.lease.as_ref().map(|l| l.ident().into());
        persist(shared, r, Save::Record);
    });
    if server.contract == opencode_client::Contract::V2 {
        return run_v2_turn(ctx, place, server, stop_rx).await;
    }
    let http = server.http.clone();
    let dir = server.dir.clone();
    let blocking = |f: Box<dyn FnOnce() -> Result<String, String> + Send>| async move {
        tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
    };
    // A task adopted from a bridge that is gone follows the session it has.
    let resume = shared
        .with(id, |r| std::mem::take(&mut r.resume))
        .unwrap_or(false);
    let follow_up = spec.session.clone().filter(|s| !s.trim().is_empty());
    let sid = match follow_up {
        Some(s) => s.trim().to_owned(),
        None => {
            let (h, d, t) = (http.clone(), dir.clone(), spec.title.clone());
            match blocking(Box::new(move || session::create(&h, &d, &t))).await {
                Ok(s) => s,
                Err(e) => return AttemptEnd::ServerFailed(format!("{}: {e}", server.who)),
            }
        }
    };
    // Recorded at once: a bridge restarted from here on finds the session.
    shared.with(id, |r| {
        r.rec.session_id = Some(sid.clone());
        persist(shared, r, Save::Record);
    });
    if spec.read_only && !resume {
        // The policy's default-deny, appended after whatever the session had: last rule wins.
        let (h, d, s) = (http.clone(), dir.clone(), sid.clone());
        let set = blocking(Box::new(move || {
            session::append_rules(&h, &d, &s, session::read_only_rules())?;
            let now = session::rules(&h, &d, &s)?;
            let ours = session::read_only_rules();
            if now.len() < ours.len() || now[now.len() - ours.len()..] != ours[..] {
                return Err("the session's rules do not end with the read-only rules".into());
            }
            Ok(String::new())
        }))
        .await;
        if let Err(e) = set {
            return AttemptEnd::ServerFailed(format!(
                "{}: the read-only rules could not be set, so the task was not started: {e}",
                server.who
            ));
        }
    }
    // Follow the events before sending the prompt, so none is missed.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<serde_json::Value, String>>(1024);
    let (h, query) = (
        http.clone(),
        format!(
            "/event?directory={}",
            opencode_client::http::encode_component(&dir.to_string_lossy())
        ),
    );
    let opened = tokio::task::spawn_blocking(move || EventStream::open(&h, &query, STREAM_IDLE))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    let mut stream = match opened {
        Ok(s) => s,
        Err(e) => {
            return AttemptEnd::ServerFailed(format!(
                "{}: cannot follow its events: {e}",
                server.who
            ));
        }
    };
    let closer = stream.closer().ok();
    std::thread::Builder::new()
        .name("serve-events".into())
        .spawn(move || {
            loop {
                let next = stream.next_event();
                let msg = match next {
                    Ok(Some(v)) => Ok(v),
                    Ok(None) => Err("the server ended its event stream".to_owned()),
                    Err(e) => Err(e.to_string()),
                };
                let last = msg.is_err();
                if tx.blocking_send(msg).is_err() || last {
                    break;
                }
            }
        })
        .ok();
    // The first frame (`server.connected`) says the subscription stands.
    match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
        Ok(Some(Ok(_))) => {}
        Ok(Some(Err(e))) => return AttemptEnd::ServerFailed(format!("{}: {e}", server.who)),
        _ => {
            return AttemptEnd::ServerFailed(format!(
                "{}: its event stream said nothing for 10 s",
                server.who
            ));
        }
    }
    let model = spec.model.clone().or_else(|| cfg.default_model.clone());
    let (h, d, s, agent, text) = (
        http.clone(),
        dir.clone(),
        sid.clone(),
        spec.agent.clone(),
        spec.prompt.clone(),
    );
    let sent = blocking(Box::new(move || {
        if resume {
            // Sent by the bridge that adopted out; is the turn still going?
            return session::busy(&h, &d, &s).map(|b| if b { "busy" } else { "" }.to_owned());
        }
        session::prompt(&h, &d, &s, &agent, model.as_deref(), &text).map(|_| String::new())
    }))
    .await;
    let mut still_busy = match sent {
        Ok(b) => b == "busy",
        Err(e) => {
            if let Some(c) = &closer {
                c.close();
            }
            return AttemptEnd::ServerFailed(format!("{}: {e}", server.who));
        }
    };
    // An adopted turn read idle with no finished reply in its session is asked again for a few
    // seconds before it counts as ended (a prompt that had only just been sent when its bridge
    // died may not have begun yet on a loaded machine).
    let accepted_ms = shared.with(id, |r| r.rec.accepted_ms).unwrap_or(0);
    if resume && !still_busy && !replied_since((&http, &dir, &sid), accepted_ms).await {
        for _ in 0..RESUME_IDLE_CHECKS {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (h, d, s) = (http.clone(), dir.clone(), sid.clone());
            let busy = tokio::task::spawn_blocking(move || session::busy(&h, &d, &s)).await;
            if matches!(busy, Ok(Ok(true))) {
                still_busy = true;
                break;
            }
        }
    }
    let prompted = Instant::now();
    let prompted_ms = crate::registry::now_ms();
    let approve = spec.auto_approve && !spec.read_only;
    let mut follow = if resume {
        Follow::resumed(&sid, approve, still_busy)
    } else {
        Follow::new(&sid, approve)
    };
    let mut lines = LineSplitter::new(MAX_LINE);
    let text = shared.with(id, |r| r.summary.text_buffer());
    // A `run` line, folded as a run's stdout line is.
    let fold_line = |lines: &mut LineSplitter, line: String| {
        if let Some(text) = &text {
            let mut bytes = line.into_bytes();
            bytes.push(b'\n');
            fold_stdout(shared, id, (runner, text), lines, &bytes);
        }
    };
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u64 = 0;
    let mut idle_polls = 0u32;
    let deadline = ctx.deadline;
    let end: AttemptEnd = loop {
        if resume && !still_busy {
            break exited(&follow);
        }
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Ok(frame)) => match follow.on_event(&frame) {
                    // A resumed turn is read whole from its messages at its end.
                    Some(Action::Line(_)) if resume => {}
                    Some(Action::Line(line)) => fold_line(&mut lines, line),
                    Some(Action::Permission { id: request, reply, stderr }) => {
                        if let Some(line) = stderr {
                            shared.with(id, |r| {
                                r.stderr.push(line.as_bytes());
                                r.stderr.push(b"\n");
                            });
                        }
                        let (h, d) = (http.clone(), dir.clone());
                        tokio::task::spawn_blocking(move || session::reply(&h, &d, &request, reply));
                    }
                    Some(Action::Idle) => break exited(&follow),
                    Some(Action::Retry(wait)) => {
                        // A wait past the task's time left, or past the longest the bridge
                        // sits through, ends the task now rather than at its timeout.
                        let over = wait.as_ref().and_then(|w| {
                            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                            let wait_for = w.wait_from(std::time::SystemTime::now());
                            (wait_for > bridge_ledger::quota::LONGEST_WAIT || wait_for >= left)
                                .then(|| (w.clone(), wait_for >= left && left <= bridge_ledger::quota::LONGEST_WAIT))
                        });
                        shared.with(id, |r| r.provider_wait = wait);
                        if let Some((w, past_left)) = over {
                            break AttemptEnd::ProviderLimit(w, past_left);
                        }
                    }
                    None => {}
                },
                Some(Err(e)) => {
                    break lost(&server, &e).await;
                }
                None => break lost(&server, "the event stream ended").await,
            },
            _ = stop_rx.changed() => {
                let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                break AttemptEnd::Stopped(reason);
            }
            _ = tokio::time::sleep_until(deadline) => break AttemptEnd::TimedOut,
            _ = tick.tick() => {
                ticks += 1;
                shared.with(id, |r| {
                    let session = r.summary.session_id().is_some() && !r.persisted_session;
                    let output = ticks.is_multiple_of(10) && r.summary.events() != r.persisted_events;
                    if session || output {
                        r.persisted_session = r.summary.session_id().is_some();
                        r.persisted_events = r.summary.events();
                        persist(shared, r, if output { Save::WithOutput } else { Save::Record });
                    }
                });
                // Past its max_cost_usd, as for a run: checked as each step's cost arrives.
                if let Some(max) = spec.max_cost_usd {
                    let spent = shared
                        .with(id, |r| r.task_usage().budget_cost())
                        .unwrap_or(0.0);
                    if spent > max {
                        break AttemptEnd::OverBudget(spent);
                    }
                }
                let overflows = shared.with(id, |r| r.summary.overflows()).unwrap_or(0);
                if overflows >= cfg.overflow_limit.max(1) {
                    break AttemptEnd::OverflowLoop(overflows);
                }
                if !server.alive() {
                    break lost(&server, "the server exited").await;
                }
                // A turn whose end the stream did not show (a missed frame): the session is
                // idle on the server for two polls in a row, well after the prompt.
                if ticks.is_multiple_of(4) && prompted.elapsed() > Duration::from_secs(3) {
                    let (h, d, s) = (http.clone(), dir.clone(), sid.clone());
                    let busy = tokio::task::spawn_blocking(move || session::busy(&h, &d, &s)).await;
                    match busy {
                        Ok(Ok(false)) => idle_polls += 1,
                        _ => idle_polls = 0,
                    }
                    // Idle before the turn was seen to begin is a turn not begun yet (the
                    // loop can start seconds after `prompt_async`'s reply on a loaded
                    // machine), unless the session already holds its finished reply.
                    if idle_polls >= 2
                        && !follow.started()
                        && !replied_since((&http, &dir, &sid), prompted_ms).await
                    {
                        idle_polls = 0;
                    }
                    if idle_polls >= 2 {
                        // Let frames already on their way be folded first.
                        while let Ok(Ok(frame)) = rx.try_recv() {
                            if let Some(Action::Line(line)) = follow.on_event(&frame)
                                && !resume
                            {
                                fold_line(&mut lines, line);
                            }
                        }
                        break exited(&follow);
                    }
                }
            }
        }
    };
    // A turn still going is aborted, except at the bridge's shutdown when tasks are left
    // running (always on a remote server): it keeps running on its server, and the next bridge
    // follows it again.
    let keep_running = matches!(end, AttemptEnd::Stopped(StopReason::Shutdown))
        && (matches!(place, Place::Remote(_)) || cfg.on_exit == crate::spec::OnExit::Leave);
    if keep_running && let Some(lease) = &server.lease {
        lease.leave_running();
    }
    let turn_open = matches!(
        end,
        AttemptEnd::Stopped(_)
            | AttemptEnd::TimedOut
            | AttemptEnd::OverflowLoop(_)
            | AttemptEnd::OverBudget(_)
            | AttemptEnd::ProviderLimit(..)
    );
    // (A local server may serve another bridge too: a task cancelled at the bridge's stop has
    // its turn aborted like any other.)
    if turn_open && !keep_running {
        stop_turn(&mut rx, &mut follow, (&http, &dir, &sid), prompted_ms).await;
    }
    if let Some(c) = &closer {
        c.close();
    }
    let end = match end {
        AttemptEnd::Exited(_) if resume => {
            // The turn as the server kept it: every assistant message since the task began.
            let since = shared.with(id, |r| r.rec.accepted_ms).unwrap_or(0);
            let (h, d, s) = (http.clone(), dir.clone(), sid.clone());
            let read = tokio::task::spawn_blocking(move || session::messages(&h, &d, &s)).await;
            match read {
                Ok(Ok(messages)) => {
                    let replayed = follow.replay(&messages, since.saturating_sub(2_000));
                    for line in replayed {
                        fold_line(&mut lines, line);
                    }
                    exited(&follow)
                }
                Ok(Err(e)) => AttemptEnd::ServerFailed(format!("{}: {e}", server.who)),
                Err(e) => AttemptEnd::ServerFailed(e.to_string()),
            }
        }
        other => other,
    };
    finish_stdout(shared, id, &mut lines);
    // The lease may be the last of a retired server, whose stop waits for it to exit.
    tokio::task::spawn_blocking(move || drop(server));
    end
}

/// The attempt ended with the turn: `run`'s exit code for it (1 after any session error).
fn exited(follow: &Follow) -> AttemptEnd {
    AttemptEnd::Exited(ExitInfo {
        code: Some(if follow.errors() > 0 { 1 } else { 0 }),
        signal: None,
    })
}

/// The server went away mid-task.
async fn lost(server: &Server, why: &str) -> AttemptEnd {
    let why = if !server.alive() {
        "the server exited".to_owned()
    } else {
        why.to_owned()
    };
    AttemptEnd::ServerFailed(format!("{}: {why} while the task ran", server.who))
}

/// The server of a served attempt: the warm local one for this kind of run, or the remote one.
async fn server_for(
    ctx: &AttemptCtx<'_>,
    place: &Place,
    resume_on: Option<bridge_proc::ProcId>,
) -> Result<Server, String> {
    let cfg = &ctx.shared.config;
    if let (Place::Local, Some(ident)) = (place, resume_on) {
        let lease = Arc::clone(&ctx.shared.serve_pool).lease_of(ident).await?;
        return Ok(Server {
            http: lease.http().clone(),
            dir: ctx.cwd.to_path_buf(),
            confinement: lease.confinement().to_owned(),
            who: format!("the local opencode serve (pid {})", lease.pid()),
            contract: ctx.caps.contract,
            lease: Some(lease),
        });
    }
    match place {
        Place::Remote(name) => {
            let s = cfg
                .servers
                .iter()
                .find(|s| &s.name == name)
                .ok_or_else(|| format!("no server named {name:?} in the bridge's config file"))?;
            let who = format!("server {name} ({})", s.url);
            let http = crate::runner::serve::client_for(s, cfg.api_timeout)?;
            let root = cfg.root.canonicalize().unwrap_or_else(|_| cfg.root.clone());
            let dir = map_dir(ctx.cwd, &root, &s.root).ok_or_else(|| {
                format!(
                    "{} is not under the bridge's root {}, so it has no place on {who}",
                    ctx.cwd.display(),
                    root.display()
                )
            })?;
            // What the server speaks, asked of it (a remote server is not the local binary).
            let contract = {
                let h = http.clone();
                tokio::task::spawn_blocking(move || opencode_client::Contract::of_server(&h))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|(c, _)| c)
                    .map_err(|e| format!("{who}: {e}"))?
            };
            Ok(Server {
                http,
                dir,
                confinement: format!("not confined by this bridge (runs on {who})"),
                who,
                lease: None,
                contract,
            })
        }
        Place::Local => {
            let launch_ctx = LaunchContext {
                cwd: ctx.cwd,
                program: ctx.bin,
                caps: ctx.caps,
                default_model: cfg.default_model.as_deref(),
                base_env: &cfg.env,
                prompt_file_threshold: usize::MAX,
                prompt_file_path: PathBuf::new(),
            };
            // The environment a run of this task would get (its config overlay included).
            let mut launch = build_launch(ctx.spec, ctx.cwd, &launch_ctx)?;
            let runner = ctx.shared.with(ctx.id, |r| r.runner).unwrap_or_default();
            // The server lives in the task's world, like a run of it: one server per world.
            into_world(ctx, runner, &mut launch)?;
            let contract = ctx.caps.contract;
            if contract == opencode_client::Contract::V2 {
                v2_config_dir(ctx, &mut launch)?;
            }
            let world = world_for(ctx, runner, &launch, Path::new("/"));
            let project = world.project.clone();
            let mut set: Vec<(String, String)> = launch
                .env_set
                .iter()
                .filter(|(k, _)| k != "PWD")
                .cloned()
                .collect();
            set.sort();
            let key = format!(
                "{}\u{0}{}\u{0}{:?}\u{0}{:?}",
                project.display(),
                world.editing,
                set,
                launch.env_remove
            );
            // What opencode would load for the task's directory, as that process sees its
            // environment: a server that loaded an older version of it is not used.
            let identity = {
                let env = |k: &str| {
                    let found = world.env.iter().rev().find(|(n, _)| n == k);
                    found.map(|(_, v)| v.clone())
                };
                let root = cfg.root.canonicalize().unwrap_or_else(|_| cfg.root.clone());
                opencode_client::config_files::identity(ctx.cwd, &root, &env)
            };
            set.push(("PWD".into(), project.to_string_lossy().into_owned()));
            let env = ChildEnv {
                set,
                remove: launch.env_remove.clone(),
            };
            let (program, sandbox) = (ctx.bin.to_path_buf(), cfg.sandbox);
            let (api_timeout, cwd) = (cfg.api_timeout, project.clone());
            let start = move |log: Option<&Path>| {
                let start = ServeStart {
                    program: &program,
                    shown: &program,
                    cwd: &cwd,
                    env: &env,
                    startup: SERVER_STARTUP,
                    cancel: None,
                    purpose: "the bridge's local opencode serve",
                    api_timeout,
                    max_reply_bytes: 32 * 1024 * 1024,
                    log,
                    contract,
                };
                ServeProcess::start(&start, |tmp| {
                    let mut world = world;
                    world.tmp = tmp.to_path_buf();
                    bridge_fence::Fence::prepare(&bridge_fence::for_run(&world), sandbox)
                        .map_err(|detail| opencode_client::ClientError::TempServer { detail })
                })
                .map_err(|e| e.to_string())
            };
            let lease = Arc::clone(&ctx.shared.serve_pool)
                .acquire(
                    key,
                    (ctx.cwd, identity),
                    (cfg.serve_idle, cfg.serve_max),
                    start,
                )
                .await
                .map_err(|e| {
                    let why = format!("the local opencode serve could not start: {e}");
                    // Not tried again for a while: each task would wait out the same failure.
                    ctx.shared.serve_pool.mark_down(&why);
                    why
                })?;
            Ok(Server {
                http: lease.http().clone(),
                dir: ctx.cwd.to_path_buf(),
                confinement: lease.confinement().to_owned(),
                who: format!("the local opencode serve (pid {})", lease.pid()),
                lease: Some(lease),
                contract: ctx.caps.contract,
            })
        }
    }
}

/// Gives an opencode 2 server the run's configuration overlay (the bridge's rules), which it
/// reads only from files: `OPENCODE_CONFIG_DIR` set to the world's directory for it
/// ([`bridge_fence::World::opencode2_config`]), holding links to the user's own configuration
/// directory and the overlay.
fn v2_config_dir(ctx: &AttemptCtx<'_>, launch: &mut crate::command::Launch) -> Result<(), String> {
    const DIR: &str = bridge_env::OPENCODE_CONFIG_DIR.name;
    let lookup = |k: &str| {
        let found = launch.env_set.iter().rev().find(|(n, _)| n == k);
        found
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(k).ok())
            .filter(|v| !v.trim().is_empty())
    };
    let user = bridge_fence::UserDirs::from_lookup(lookup).opencode_config;
    let mut overlay = opencode_client::contract::v2_inline_config(
        &lookup(bridge_env::OPENCODE_CONFIG_CONTENT.name).unwrap_or_else(|| "{}".into()),
    );
    if ctx.spec.read_only {
        // What v1's session rules do (`session::read_only_rules`, appended last): opencode 2
        // appends an agent's rules of a later file to those of earlier ones, so the policy's
        // default-deny, as this file's rules for the agent, comes after the user's.
        let mut v: serde_json::Value = serde_json::from_str(&overlay).map_err(|e| {
            format!(
                "the run's {} is not JSON: {e}",
                bridge_env::OPENCODE_CONFIG_CONTENT.name
            )
        })?;
        if !v.is_object() {
            v = serde_json::json!({});
        }
        if !v.get("agent").is_some_and(serde_json::Value::is_object) {
            v["agent"] = serde_json::json!({});
        }
        let entry = &mut v["agent"][ctx.spec.agent.as_str()];
        if !entry.is_object() {
            *entry = serde_json::json!({});
        }
        entry["permission"] = bridge_policy::roster::read_only_permissions();
        overlay = v.to_string();
    }
    let dir = super::child::world_of(ctx).opencode2_config(user.as_deref(), &overlay)?;
    launch.env_set.retain(|(k, _)| k != DIR);
    launch
        .env_set
        .push((DIR.to_owned(), dir.to_string_lossy().into_owned()));
    Ok(())
}

/// Aborts the session's turn and waits (at most [`STOP_WAIT`]) until it has ended, so a stopped
/// task leaves no busy session behind.
///
/// The abort reaches a turn only once the server's loop for it runs. One sent between
/// `prompt_async`'s reply and the loop's start is answered `true` and does nothing, and the turn
/// then runs to its own end (seen on a loaded machine: a follow-up in the session waited for it).
/// So an abort sent before the turn was seen to begin is sent again once it begins.
async fn stop_turn(
    rx: &mut tokio::sync::mpsc::Receiver<Result<serde_json::Value, String>>,
    follow: &mut Follow,
    (http, dir, sid): (&HttpClient, &Path, &str),
    prompted_ms: u64,
) {
    let until = Instant::now() + STOP_WAIT;
    let abort = || {
        let (h, d, s) = (http.clone(), dir.to_path_buf(), sid.to_owned());
        tokio::task::spawn_blocking(move || session::abort(&h, &d, &s))
    };
    let busy = || {
        let (h, d, s) = (http.clone(), dir.to_path_buf(), sid.to_owned());
        tokio::task::spawn_blocking(move || session::busy(&h, &d, &s))
    };
    // An abort was sent after the turn was seen to begin: it reaches the turn.
    let mut landed = false;
    let mut stream_open = true;
    let mut quiet = 0u32;
    while !follow.ended() && Instant::now() < until {
        if !landed {
            landed = follow.started();
            let _ = abort().await;
        }
        let frame = if stream_open {
            match tokio::time::timeout(Duration::from_millis(250), rx.recv()).await {
                Ok(Some(Ok(frame))) => Some(frame),
                Ok(_) => {
                    stream_open = false;
                    None
                }
                Err(_) => None,
            }
        } else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            None
        };
        if let Some(frame) = frame {
            quiet = 0;
            // Asks made while stopping are refused; the turn's last words are not kept.
            if let Some(Action::Permission { id, .. }) = follow.on_event(&frame) {
                let (h, d) = (http.clone(), dir.to_path_buf());
                tokio::task::spawn_blocking(move || session::reply(&h, &d, &id, "reject"));
            }
            continue;
        }
        // No word from the stream for a second (or no stream): the server says whether the
        // session is still busy. Idle once an abort has reached the turn means it ended; idle
        // before the turn was seen to begin may be a turn not begun yet, so that waits.
        quiet += 1;
        if quiet.is_multiple_of(4) || !stream_open {
            let idle = matches!(busy().await, Ok(Ok(false)));
            if idle && landed {
                break;
            }
            // Unless the turn began and ended with its frames unseen.
            if idle && !follow.started() && replied_since((http, dir, sid), prompted_ms).await {
                break;
            }
        }
    }
}

/// Whether the session holds a finished reply made since the prompt (sent at `prompted_ms`, with
/// 2 s for the clocks): a turn that began and ended while its frames went unseen.
async fn replied_since((http, dir, sid): (&HttpClient, &Path, &str), prompted_ms: u64) -> bool {
    let (h, d, s) = (http.clone(), dir.to_path_buf(), sid.to_owned());
    let since = prompted_ms.saturating_sub(2_000);
    let done = tokio::task::spawn_blocking(move || {
        session::messages(&h, &d, &s).map(|m| turn_done_in(&m, since))
    })
    .await;
    matches!(done, Ok(Ok(true)))
}
