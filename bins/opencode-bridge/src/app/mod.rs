//! What the tools do, without MCP: each call takes validated arguments and returns the text the
//! tool shows, or a one-line error the model can act on. The CLI subcommands call the same
//! functions, so a person sees exactly what the model sees.
//!
//! Here: the [`App`] the server holds, the root check ([`within_root`]), what a call answers
//! ([`Reply`], [`Progress`]) and the dispatch of a validated call. The tools' work, by kind, in
//! the submodules (each an `impl App`, none used by another but through it):
//! - `tasks`: starting a task (policy, roster, fence, overlays, follow-ups), waiting, isolated
//!   changes and their apply, the notes a status or result adds;
//! - `sessions`: the session source, learning running tasks' sessions, `opencode_sessions`,
//!   `opencode_session_output`, the transcript views the MCP resources read, `opencode_rename`;
//! - `usage`: what tasks cost, `opencode_usage`.

mod sessions;
mod tasks;
mod usage;

use crate::config::Settings;
use crate::roster::RosterSource;
use crate::structured;
use crate::tools::{Call, REPLY_CAP_CHARS};
use bridge_policy::view::PolicyView;
use bridge_policy::{Mode, Roster, SystemEnv};
use bridge_render as render;
use opencode_client::backend::ClientConfig;
use opencode_client::{ClientError, SessionSource};
use run_supervisor::{Supervisor, SupervisorConfig, TaskId};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// opencode's inline config: the roster server gets it with the bridge's `worker` merged in.
const CONFIG_CONTENT: &str = bridge_env::OPENCODE_CONFIG_CONTENT.name;

/// Everything the server holds: settings and the client configuration; the policy is read
/// afresh on every call (marker files may appear at any time).
pub struct App {
    pub settings: Settings,
    client: Result<ClientConfig, ClientError>,
    supervisor: Supervisor,
    roster: Arc<RosterSource>,
    /// Why the config file or a budget variable is not usable: starts are refused with it.
    usage_config_error: Option<String>,
    /// Numeric variables outside their range (`bridge_env::number_errors`), one line each:
    /// every start is refused with them until they are fixed.
    env_errors: Vec<String>,
}

impl fmt::Debug for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("App")
            .field("settings", &self.settings)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// A session source and the sentence saying why it was chosen.
pub type Chosen = (Box<dyn SessionSource>, String);

/// A directory checked to lie inside the delegation root, canonical (symbolic links and `..`
/// resolved). Only [`within_root`] makes one, and everything that reads or runs anything in a
/// directory for a caller takes one: the roster (a temporary `opencode serve` there, the agent
/// files, the cache's walk of its configuration), mode detection and the policy. So no directory
/// outside the root is ever probed: for one outside, nothing beyond canonicalising its path
/// happens (docs/ARCHITECTURE.md, "No directory outside the root is ever probed").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InRoot(PathBuf);

impl InRoot {
    /// The canonical path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Why [`within_root`] refused a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutsideRoot {
    /// Longer than any path (the length, in bytes); nothing was looked up.
    TooLong(usize),
    /// The root itself cannot be resolved (its message).
    Root(String),
    /// Outside the root: the canonical directory (as far as it exists, the rest appended) and
    /// the canonical root.
    Outside { dir: PathBuf, root: PathBuf },
}

/// The one check of a caller's directory against the root: canonicalises `dir` (absolute; the
/// longest existing ancestor is resolved and the rest appended, so a directory that does not
/// exist yet is placed where it would be) and accepts it only inside the canonical `root`.
/// Canonicalising is all it does in `dir`.
pub fn within_root(dir: &Path, root: &Path) -> Result<InRoot, OutsideRoot> {
    let bytes = dir.as_os_str().len();
    if bytes > render::root_check::PATH_MAX {
        return Err(OutsideRoot::TooLong(bytes));
    }
    let root = root.canonicalize().map_err(|e| {
        OutsideRoot::Root(format!(
            "OPENCODE_BRIDGE_ROOT ({}) cannot be resolved: {e}",
            root.display()
        ))
    })?;
    let full = dir
        .ancestors()
        .find_map(|a| {
            let canon = a.canonicalize().ok()?;
            let rest = dir.strip_prefix(a).ok()?;
            // (`join("")` would add a trailing `/`)
            Some(if rest.as_os_str().is_empty() {
                canon
            } else {
                canon.join(rest)
            })
        })
        .unwrap_or_else(|| dir.to_path_buf());
    if full.is_absolute() && full.starts_with(&root) {
        Ok(InRoot(full))
    } else {
        Err(OutsideRoot::Outside { dir: full, root })
    }
}

/// What a call answers: the text the model reads, the same facts as data for the tools that
/// declare an `outputSchema` (see [`crate::structured`]), and the opencode session the reply
/// is about, when known (the MCP server links it as a resource).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub structured: Option<serde_json::Value>,
    /// The resource URI of the session the reply is about (linked after its text).
    pub session: Option<String>,
}

impl Reply {
    /// A text-only reply.
    pub fn text(text: String) -> Reply {
        Reply {
            text,
            structured: None,
            session: None,
        }
    }
}

/// Where a call reports how far it got (the server turns each message into an MCP progress
/// notification when the caller asked for them). Reports after the call ended go nowhere.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    tx: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

impl Progress {
    /// Reports nothing.
    pub fn none() -> Progress {
        Progress { tx: None }
    }

    /// Reports into `tx`.
    pub fn to(tx: tokio::sync::mpsc::UnboundedSender<String>) -> Progress {
        Progress { tx: Some(tx) }
    }

    /// Whether anyone listens.
    pub fn wanted(&self) -> bool {
        self.tx.as_ref().is_some_and(|t| !t.is_closed())
    }

    /// One step, in words.
    pub fn report(&self, message: impl Into<String>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(message.into());
        }
    }
}

impl App {
    /// `serving`: this process is the long-lived MCP server (it then becomes a child subreaper
    /// so that escaped descendants of its tasks come back to it to be reaped).
    pub fn new(settings: Settings, serving: bool) -> App {
        let mut cfg = SupervisorConfig::from_env();
        cfg.root = settings.root.clone();
        cfg.subreaper = serving;
        // Each warm server is watched by this binary (`serve-watch`), so its idle rule holds
        // while no bridge runs.
        cfg.serve_watcher = std::env::current_exe().ok();
        if let Ok(file) = &settings.file {
            cfg.servers = file.servers.clone();
        }
        let usage_config_error =
            crate::config::apply_usage_config(&mut cfg, |k| std::env::var(k).ok()).err();
        // A service is never asked about a directory outside the root (see [`within_root`]).
        let client = ClientConfig::from_env().map(|mut c| {
            c.probe_within = Some(settings.root.clone());
            c
        });
        cfg.session_reader = client.as_ref().ok().map(|c| {
            Arc::new(crate::audit_reader::ClientSessionReader::new(c.clone()))
                as Arc<dyn run_supervisor::audit::SessionReader>
        });
        let roster = Arc::new(roster_source(&cfg, client.as_ref()));
        App {
            settings,
            client,
            supervisor: Supervisor::new(cfg),
            roster,
            usage_config_error,
            env_errors: bridge_env::number_errors(|k| std::env::var(k).ok()),
        }
    }

    /// The roster for runs in `cwd`, as opencode reports it (see [`crate::roster`]); asks
    /// opencode on the blocking pool when nothing is cached. Only for a directory inside the
    /// root ([`within_root`]).
    pub async fn roster(&self, cwd: &InRoot) -> Roster {
        let source = self.roster.clone();
        let dir = cwd.path().to_path_buf();
        let fallback = dir.clone();
        tokio::task::spawn_blocking(move || source.roster(&dir))
            .await
            .unwrap_or_else(|_| Roster::load(&SystemEnv, &fallback))
    }

    /// Asks opencode for the roster of the root in the background, so the first delegation does
    /// not wait for a cold `opencode serve`.
    pub fn prewarm_roster(&self) {
        let source = self.roster.clone();
        let root = self.root_dir();
        tokio::task::spawn_blocking(move || {
            let roster = source.roster(root.path());
            tracing::debug!(origin = ?roster.origin(), agents = roster.names().len(), "roster ready");
        });
    }

    /// The root itself, canonical when it exists (the root is the caller's own choice, so it
    /// is inside by definition even when it cannot be resolved).
    pub fn root_dir(&self) -> InRoot {
        within_root(&self.settings.root, &self.settings.root)
            .unwrap_or_else(|_| InRoot(self.settings.root.clone()))
    }

    /// The client configuration, or why it is unusable.
    pub fn client_config(&self) -> Result<&ClientConfig, String> {
        self.client.as_ref().map_err(|e| e.to_string())
    }

    /// The task supervisor.
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// The MCP server instructions: the active policy for the root in a few lines.
    pub fn instructions(&self) -> String {
        let roster = self.roster.roster_if_cached(&self.settings.root);
        let text = match bridge_policy::mode::detect_mode(&SystemEnv, &self.settings.root, None) {
            Ok(decision) => {
                render::instructions(&PolicyView::from_parts(&SystemEnv, decision, &roster))
            }
            Err(e) => format!(
                "opencode-bridge delegates easy and medium work to opencode agents, but its policy cannot be read: {e}. opencode_start refuses until this is fixed.\n"
            ),
        };
        // No prices line: reading opencode's models cache (a megabyte of JSON) is left to the
        // first call that prices something; `opencode_usage` and doctor show where prices come from.
        let (standings, today) = self.supervisor.budget_report(None);
        format!(
            "{text}{}\n{}",
            self.settings.root_line(),
            render::usage::budget_lines(&standings, today),
        )
    }

    /// The numeric variables outside their range, one line each.
    pub fn env_errors(&self) -> &[String] {
        &self.env_errors
    }

    /// Why the config file or a budget variable is not usable (every start is refused then).
    pub fn usage_config_error(&self) -> Option<&str> {
        self.usage_config_error.as_deref()
    }

    /// Runs one validated call. No reply is longer than [`REPLY_CAP_CHARS`].
    pub async fn call(&self, call: Call) -> Result<String, String> {
        self.call_with(call, Progress::none()).await
    }

    /// Like [`call`](Self::call), reporting its steps to `progress`.
    pub async fn call_with(&self, call: Call, progress: Progress) -> Result<String, String> {
        self.reply(call, progress).await.map(|r| r.text)
    }

    /// Like [`call_with`](Self::call_with), with the structured result and the session the
    /// reply is about (the MCP server adds them to the text).
    pub async fn reply(&self, call: Call, progress: Progress) -> Result<Reply, String> {
        self.call_uncapped(call, progress).await.map(|mut r| {
            r.text = cap_reply(&r.text);
            r
        })
    }

    async fn call_uncapped(&self, call: Call, progress: Progress) -> Result<Reply, String> {
        match call {
            Call::Policy { cwd, mode } => self.policy(cwd.as_deref(), mode).await,
            Call::Sessions(args) => self.sessions(args).await,
            Call::SessionOutput(args) => self.session_output(args).await.map(Reply::text),
            Call::Rename { id, title, server } => {
                self.rename(id, title, server).await.map(Reply::text)
            }
            Call::Start(args) => self.start(args, &progress).await,
            Call::Usage {
                since_ms,
                since_text,
                until_ms,
                by,
                project,
            } => {
                let window = run_supervisor::usage::ledger::Window {
                    since_ms,
                    until_ms,
                    project: project.map(std::path::PathBuf::from),
                };
                self.usage(&window, &since_text, by.as_deref()).await
            }
            Call::Wait {
                ids,
                all,
                timeout_s,
            } => {
                let ids = ids
                    .iter()
                    .map(|i| parse_task_id(i))
                    .collect::<Result<Vec<_>, _>>()?;
                let report = self.wait(&ids, all, timeout_s, &progress).await;
                Ok(Reply {
                    text: render::tasks::waited(&report, all, timeout_s),
                    structured: Some(structured::to_value(&structured::WaitView::new(
                        &report, all, timeout_s,
                    ))),
                    session: None,
                })
            }
            Call::Status { id } => {
                let id = parse_task_id(&id)?;
                self.learn_sessions().await;
                let snap = self
                    .supervisor
                    .status(id)
                    .ok_or_else(|| render::tasks::unknown_task(id))?;
                let note = self.lost_note(&snap).await;
                Ok(Reply {
                    text: render::tasks::status(&snap) + &note,
                    structured: Some(structured::to_value(&structured::TaskView::from(&snap))),
                    session: snap
                        .session_id
                        .as_deref()
                        .or(snap.continues.as_deref())
                        .map(|s| crate::session_uri::task_uri(s, &snap.engine)),
                })
            }
            Call::Result { id, head, tail } => {
                let id = parse_task_id(&id)?;
                self.learn_sessions().await;
                let out = self
                    .supervisor
                    .result(id, head, tail)
                    .ok_or_else(|| render::tasks::unknown_task(id))?;
                self.supervisor.mark_read(id);
                let note = self.lost_note(&out.snapshot).await;
                let (isolated, view) = self.isolated_change(id, &out.snapshot, head, tail);
                let overlap = self.overlap_note(&out).await;
                let mut result_view = structured::ResultView::from(&out);
                result_view.isolated = view;
                let usage = self.usage_line(&out.snapshot);
                Ok(Reply {
                    text: render::tasks::result(&out) + &note + &isolated + &overlap + &usage,
                    structured: Some(structured::to_value(&result_view)),
                    session: out
                        .snapshot
                        .session_id
                        .as_deref()
                        .or(out.snapshot.continues.as_deref())
                        .map(|s| crate::session_uri::task_uri(s, &out.snapshot.engine)),
                })
            }
            Call::Apply {
                id,
                discard,
                allow_protected,
            } => self
                .apply(&id, discard, &allow_protected)
                .await
                .map(Reply::text),
            Call::Cancel { id } => {
                let id = parse_task_id(&id)?;
                render::tasks::cancelled(id, self.supervisor.cancel(id).await).map(Reply::text)
            }
            Call::List { label } => {
                self.learn_sessions().await;
                let mut tasks = self.supervisor.list();
                // Labels are kept with their secrets replaced: the filter is compared the same way.
                if let Some(l) = label.as_deref().map(bridge_policy::secrets::redact) {
                    tasks.retain(|t| t.label.as_deref() == Some(l.as_str()));
                }
                let running = tasks.iter().filter(|t| !t.state.is_finished()).count();
                let max_parallel = self.supervisor.config().max_parallel;
                Ok(Reply {
                    text: render::tasks::task_list(&tasks, running, max_parallel),
                    structured: Some(structured::to_value(&structured::ListView {
                        tasks: tasks.iter().map(Into::into).collect(),
                        running: running as u64,
                        max_parallel: max_parallel as u64,
                    })),
                    session: None,
                })
            }
            Call::Processes => {
                let procs = self.supervisor.processes();
                Ok(Reply {
                    text: render::tasks::processes(&procs),
                    structured: Some(structured::to_value(&structured::ProcessesView {
                        processes: procs.iter().map(Into::into).collect(),
                    })),
                    session: None,
                })
            }
        }
    }

    /// `opencode_processes`.
    pub fn processes(&self) -> String {
        render::tasks::processes(&self.supervisor.processes())
    }

    /// Stops every task this process started (their whole process groups) and waits for them,
    /// and a roster ask in flight (its temporary `opencode serve`).
    pub async fn shutdown(&self) {
        self.roster.stop(Duration::from_secs(5)).await;
        self.supervisor.shutdown().await;
    }

    /// A directory argument: relative paths are taken from the root.
    pub fn resolve_dir(&self, dir: Option<&str>) -> PathBuf {
        match dir {
            None => self.settings.root.clone(),
            Some(d) => {
                let p = Path::new(d);
                let joined = if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    self.settings.root.join(p)
                };
                crate::config::absolute(&joined)
            }
        }
    }

    /// `opencode_policy`. The root check comes first: for a directory outside the root the
    /// answer is that every task there is refused, and nothing in it is read or run.
    async fn policy(&self, cwd: Option<&str>, mode: Option<Mode>) -> Result<Reply, String> {
        let in_root =
            within_root(&self.resolve_dir(cwd), &self.settings.root).map_err(|f| match f {
                OutsideRoot::TooLong(bytes) => render::root_check::path_too_long("cwd", bytes),
                OutsideRoot::Root(why) => why,
                OutsideRoot::Outside { dir, root } => {
                    render::root_check::policy_outside_root(&dir, &root)
                }
            })?;
        let dir = in_root.path();
        let warning = if cwd.is_some() && !dir.is_dir() {
            format!(
                "warning: {} is not an existing directory; the policy below is what a task there would get, but opencode_start refuses a cwd that does not exist\n",
                dir.display()
            )
        } else {
            String::new()
        };
        let decision =
            bridge_policy::mode::detect_mode(&SystemEnv, dir, mode).map_err(|e| e.to_string())?;
        let roster = self.roster(&in_root).await;
        let view = PolicyView::from_parts(&SystemEnv, decision, &roster);
        let data = structured::PolicyOut::new(
            dir,
            &view,
            (!warning.is_empty()).then(|| warning.trim_end().to_owned()),
        );
        let (standings, today) = self.supervisor.budget_report(Some(dir));
        Ok(Reply {
            text: warning
                + &render::policy(&view)
                + &render::usage::budget_lines(&standings, today)
                + &render::usage::prices_line(&self.supervisor.config().pricing),
            structured: Some(structured::to_value(&data)),
            session: None,
        })
    }
}

/// Whether the guard replaced a secret in `given` (more `[secret]` markers in `kept`).
fn secrets_replaced(given: &str, kept: &str) -> bool {
    kept.matches("[secret]").count() > given.matches("[secret]").count()
}

/// Cuts a reply to [`REPLY_CAP_CHARS`], keeping its start and saying how much was cut.
fn cap_reply(text: &str) -> String {
    let total = text.chars().count();
    if total <= REPLY_CAP_CHARS {
        return text.to_string();
    }
    let head: String = text.chars().take(REPLY_CAP_CHARS).collect();
    format!(
        "{head}\n[… {} characters cut: the reply limit is {REPLY_CAP_CHARS}; narrow the request (limit, filters, head/tail, max_chars)]\n",
        total - REPLY_CAP_CHARS
    )
}

/// The roster source for runs configured by `cfg`: opencode is started as a run would be (the
/// same binary, base environment, dropped variables and `worker` definition).
fn roster_source(
    cfg: &SupervisorConfig,
    client: Result<&ClientConfig, &ClientError>,
) -> RosterSource {
    use bridge_policy::roster::config_content;
    use run_supervisor::command::{DROPPED_ENV, resolve_binary};
    let client = client.map_err(|e| e.to_string()).and_then(|c| {
        let bin = resolve_binary(cfg.opencode_bin.as_deref())?;
        let mut c = c.clone();
        c.opencode_bin = bin;
        Ok(c)
    });
    let existing = cfg
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == CONFIG_CONTENT)
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var(CONFIG_CONTENT).ok());
    let mut set: Vec<(String, String)> = cfg
        .env
        .iter()
        .filter(|(k, _)| k != CONFIG_CONTENT)
        .cloned()
        .collect();
    let client = match config_content(existing.as_deref(), None) {
        Ok(content) => {
            set.push((CONFIG_CONTENT.into(), content));
            client
        }
        // The runs would refuse too; the file reader shows the roster meanwhile.
        Err(e) => Err(e),
    };
    let env = opencode_client::backend::ChildEnv {
        set,
        remove: DROPPED_ENV.iter().map(|s| s.to_string()).collect(),
    };
    RosterSource::new(
        client,
        env,
        cfg.state_dir.as_ref().map(|d| d.join("roster-cache")),
    )
    .within(&cfg.root)
}

/// Runs blocking work (store scans, HTTP calls) off the async thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("internal error while reading sessions: {e}"))?
}

/// A task id as the tools show it (`3`); `task 3`, `task-3`, `t3` and `#3` are accepted too.
pub fn parse_task_id(text: &str) -> Result<TaskId, String> {
    let t = text.trim().to_ascii_lowercase();
    let digits = t
        .trim_start_matches("task")
        .trim_start_matches(['-', ' ', '_', '#', 't']);
    digits.parse::<TaskId>().map_err(|_| {
        format!("bad argument `id`: {text:?} is not a task id; use the number opencode_start returned (opencode_list shows them)")
    })
}

#[cfg(test)]
mod tests;
