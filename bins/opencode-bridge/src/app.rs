//! What the tools do, without MCP: each call takes validated arguments and returns the text the
//! tool shows, or a one-line error the model can act on. The CLI subcommands call the same
//! functions, so a person sees exactly what the model sees.

use crate::config::Settings;
use crate::roster::RosterSource;
use crate::structured;
use crate::tools::{
    Call, OutputArgs, REPLY_CAP_CHARS, SESSIONS_DEFAULT_LIMIT, SessionsArgs, StartArgs,
};
use bridge_policy::roster::Access;
use bridge_policy::view::PolicyView;
use bridge_policy::{DelegationRequest, Mode, Roster, SystemEnv, evaluate};
use bridge_render as render;
use bridge_render::tasks::SessionHolder;
use opencode_client::backend::{ClientConfig, choose_backend_with};
use opencode_client::{
    Children, ClientError, Liveness, SessionFilter, SessionSource, SessionState,
};
use run_supervisor::{ProcessKind, Supervisor, SupervisorConfig, TaskId, TaskSpec, WaitReport};
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// How long `opencode_start` waits for the run's session id when the caller asked for progress.
const START_PROGRESS_WAIT: Duration = Duration::from_secs(10);

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
        let (standings, today) = self.supervisor.budget_report(None);
        format!(
            "{text}{}\n{}{}",
            self.settings.root_line(),
            render::usage::budget_lines(&standings, today),
            render::usage::prices_line(&self.supervisor.config().pricing)
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

    /// The line that ends a finished task's result: cost, Claude-equivalent, saved.
    pub fn usage_line(&self, s: &run_supervisor::TaskSnapshot) -> String {
        if !s.state.is_finished() {
            return String::new();
        }
        // The Claude-equivalent at the compare model's price now, as the header names it.
        let pricing = &self.supervisor.config().pricing;
        let usage = s.usage.clone().map(|mut u| {
            u.claude_equivalent = pricing.compare_price().map(|p| p.cost(&u.tokens));
            u
        });
        render::usage::usage_line(usage.as_ref(), s.model.as_deref(), &pricing.compare_model)
    }

    /// The usage ledger (empty without a state directory).
    pub fn usage_ledger(&self) -> Result<run_supervisor::usage::ledger::Ledger, String> {
        match self.supervisor.state_dir() {
            None => Ok(Default::default()),
            Some(dir) => run_supervisor::usage::ledger::read(dir)
                .map_err(|e| render::usage::ledger_unreadable(dir, &e.to_string())),
        }
    }

    /// The ledger's summary of `window`.
    pub fn usage_summary(
        &self,
        window: &run_supervisor::usage::ledger::Window,
    ) -> Result<run_supervisor::usage::ledger::Summary, String> {
        use run_supervisor::usage::ledger;
        let l = self.usage_ledger()?;
        Ok(ledger::summarize_window(
            l.rows.iter().map(ledger::Row::view),
            l.unreadable,
            window,
            self.supervisor.config().pricing.compare_price(),
        ))
    }

    /// `opencode_usage`: the ledger is read once, without copying its strings, for the summary
    /// and the budgets.
    async fn usage(
        &self,
        window: &run_supervisor::usage::ledger::Window,
        since_text: &str,
        by: Option<&str>,
    ) -> Result<Reply, String> {
        use run_supervisor::usage::ledger;
        let text = match self.supervisor.state_dir() {
            None => Vec::new(),
            Some(dir) => ledger::read_text(dir)
                .map_err(|e| render::usage::ledger_unreadable(dir, &e.to_string()))?,
        };
        let (rows, unreadable) = ledger::parse_text(&text);
        let rows: Vec<_> = rows.iter().map(ledger::TextRow::view).collect();
        let pricing = &self.supervisor.config().pricing;
        let summary = ledger::summarize_window(
            rows.iter().copied(),
            unreadable,
            window,
            pricing.compare_price(),
        );
        let compare = &self.supervisor.config().pricing.compare_model;
        let (standings, today) = self.supervisor.budget_report_of(&rows, None);
        let view = structured::UsageView::new(&summary, compare, &standings, today);
        Ok(Reply {
            text: render::usage::usage_report_by(&summary, since_text, compare, by)
                + &render::usage::budget_lines(&standings, today)
                + &render::usage::prices_line(&self.supervisor.config().pricing),
            structured: Some(structured::to_value(&view)),
            session: None,
        })
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
                        .map(|s| crate::mcp_resources::task_uri(s, &snap.engine)),
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
                        .map(|s| crate::mcp_resources::task_uri(s, &out.snapshot.engine)),
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

    /// `opencode_wait`: until any or all of `ids` finished, or `timeout_s`; a progress report
    /// each time one more finishes, and every 5 s.
    pub async fn wait(
        &self,
        ids: &[TaskId],
        all: bool,
        timeout_s: u64,
        progress: &Progress,
    ) -> WaitReport {
        let total = ids.len();
        let deadline = bridge_proc::deadline::after_tokio(Duration::from_secs(timeout_s));
        let mut last_done = usize::MAX;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            // Short slices while someone listens, so progress flows; one wait otherwise.
            let slice = if progress.wanted() {
                left.min(Duration::from_secs(5))
            } else {
                left
            };
            let report = self.supervisor.wait_for(ids, all, slice).await;
            let done = report.finished.len();
            if report.satisfied || left <= slice {
                return report;
            }
            if done != last_done || progress.wanted() {
                // A task whose opencode waits on a provider's limit says so.
                let waits: String = ids
                    .iter()
                    .filter_map(|id| {
                        let w = self.supervisor.status(*id)?.provider_wait?;
                        let line = render::tasks::provider_wait_line(&w, SystemTime::now());
                        Some(format!("; task {id}: {line}"))
                    })
                    .collect();
                progress.report(format!(
                    "{done} of {total} task(s) finished; waiting ({}s left){waits}",
                    deadline
                        .saturating_duration_since(tokio::time::Instant::now())
                        .as_secs()
                ));
                last_done = done;
            }
        }
    }

    /// `opencode_start`: policy first (tier, mode, prompt, secret, agent), then the supervisor
    /// (cwd inside the root, parallel limit, opencode present). Returns at once, unless the
    /// caller asked for progress: then it reports the run's start and waits up to 10 s for
    /// its session id.
    /// The reply carries the task's session when it is known by the time it answers.
    async fn start(&self, args: StartArgs, progress: &Progress) -> Result<Reply, String> {
        let wait_s = args.wait_s;
        let (id, started) = self.start_task(args, progress).await?;
        let text = match wait_s {
            Some(wait_s) => self.sync_wait(id, wait_s, started).await,
            None => started,
        };
        let session = self.supervisor.status(id).and_then(|s| {
            let engine = s.engine.clone();
            s.session_id
                .or(s.continues)
                .map(|sid| crate::mcp_resources::task_uri(&sid, &engine))
        });
        Ok(Reply {
            text,
            structured: None,
            session,
        })
    }

    /// Starts the task (policy first, then the supervisor) and returns its id with the start
    /// text; `wait_s` is not looked at (the MCP tasks path answers with a task instead).
    pub async fn start_task(
        &self,
        args: StartArgs,
        progress: &Progress,
    ) -> Result<(TaskId, String), String> {
        // A follow-up: the session must exist; its agent, directory and model are the defaults.
        let session = match &args.session {
            Some(id) => Some(self.session_for_follow_up(id).await?),
            None => None,
        };
        let asked = match (&args.cwd, &session) {
            (None, Some(s)) if !s.directory.is_empty() => PathBuf::from(&s.directory),
            _ => self.resolve_dir(args.cwd.as_deref()),
        };
        // The root check comes first: nothing is read or run in a directory outside the root
        // (the roster below starts opencode there, mode detection reads its marker files).
        // Refused in the supervisor's words; it checks again when it starts the run.
        let in_root = within_root(&asked, &self.settings.root).map_err(|f| match f {
            OutsideRoot::TooLong(bytes) => render::root_check::path_too_long("cwd", bytes),
            OutsideRoot::Root(why) => why,
            OutsideRoot::Outside { dir, root } => {
                run_supervisor::StartError::CwdOutsideRoot { cwd: dir, root }.to_string()
            }
        })?;
        // Inside: it must exist and be a directory (the supervisor checks again at the start).
        run_supervisor::command::check_cwd(&asked, &self.settings.root)
            .map_err(|e| e.to_string())?;
        let cwd = in_root.path().to_path_buf();
        let agent_default = session.as_ref().and_then(|s| s.agent.clone());
        let args = StartArgs {
            agent: args.agent.clone().or(agent_default),
            model: args
                .model
                .clone()
                .or_else(|| session.as_ref().and_then(|s| s.model.clone())),
            ..args
        };
        let env = SystemEnv;
        // A task placed on a remote server runs that server's agents.
        let remote = self.remote_server(args.server.as_deref())?;
        let roster = match &remote {
            Some(server) => self.remote_roster(server, &cwd).await?,
            None => self.roster(&in_root).await,
        };
        let mut request = DelegationRequest::new(args.tier, &args.prompt, &cwd);
        request.agent = args.agent.as_deref();
        request.mechanical = args.mechanical;
        request.mode = args.mode;
        let delegation = evaluate(&request, &env, &roster).map_err(|r| r.message)?;
        let agent = &delegation.agent;
        if agent.access == Access::Editing
            && let Some(what) = self.settings.broad_root()
        {
            return Err(format!(
                "refused: editing agent `{}` would work under {} ({what}): the root is the server's working directory because OPENCODE_BRIDGE_ROOT is not set. Set it to your projects tree (claude mcp add … -e OPENCODE_BRIDGE_ROOT=\"$HOME/projects\" …), or use a read-only agent such as explorer.",
                agent.name,
                self.settings.root.display()
            ));
        }
        let title = match &session {
            Some(s) => s.title.clone(),
            None => bridge_policy::naming::session_title(
                args.lane.as_deref(),
                &cwd,
                &agent.name,
                &args.prompt,
                args.title.as_deref(),
            ),
        };
        let mut warnings = Vec::new();
        if session.is_none() {
            // Secrets never reach a title or a label; the caller is told which argument held one.
            if let Some(lane) = args.lane.as_deref().filter(|_| args.title.is_none())
                && secrets_replaced(lane, &bridge_policy::secrets::redact(lane))
            {
                warnings.push(render::root_check::secret_replaced("lane"));
            }
            if let Some(explicit) = args.title.as_deref() {
                if secrets_replaced(explicit, &title) {
                    warnings.push(render::root_check::secret_replaced("title"));
                }
                let problems = bridge_policy::naming::check_title(&title);
                if !problems.is_empty() {
                    warnings.push(format!(
                        "the title breaks the LANE/agent: task convention: {}",
                        problems.join("; ")
                    ));
                }
            }
        }
        let label = args.label.as_deref().map(bridge_policy::secrets::redact);
        if let (Some(given), Some(kept)) = (args.label.as_deref(), label.as_deref())
            && secrets_replaced(given, kept)
        {
            warnings.push(render::root_check::secret_replaced("label"));
        }
        let title_warning = (!warnings.is_empty()).then(|| warnings.join("\nwarning: "));
        let mut spec = TaskSpec::new(&delegation.prompt, &cwd, &agent.name, &title);
        spec.read_only = agent.access == Access::ReadOnly;
        // Asks are approved only for editing agents: a read-only run must not have its `ask`
        // rules turned into writes (its overlay also denies edit, bash and task).
        spec.auto_approve = agent.access == Access::Editing;
        spec.model = args.model.clone();
        spec.timeout = args.timeout_minutes.map(|m| Duration::from_secs(m * 60));
        let (overlay, unchecked) = match &remote {
            // A remote server's configuration is its own: a read-only agent there is held by
            // the default-deny rules appended to its session (and its asks rejected).
            Some(_) => (None, String::new()),
            None => self.run_overlay(&cwd, &roster, &delegation).await?,
        };
        spec.config_overlay = overlay;
        // The whole id (the caller may have given a unique prefix).
        spec.session = session.as_ref().map(|s| s.id.clone());
        spec.label = label.clone();
        spec.denied = denied_permissions(agent);
        spec.isolation = args.isolation;
        spec.server = args.server.clone();
        spec.max_cost_usd = args.max_cost_usd;
        if let Some(e) = &self.usage_config_error {
            return Err(render::usage::config_refusal(e));
        }
        if let Some(e) = self.env_errors.first() {
            return Err(render::tasks::env_refusal(e));
        }
        if let Some(schema) = &args.output_schema {
            run_supervisor::verify::compile_schema(schema)?;
        }
        spec.verify = args.verify.clone();
        spec.verify_retries = args.verify_retries.map_or(1, |n| n as u32);
        spec.output_schema = args.output_schema.clone();
        spec.request = args
            .request_id
            .as_deref()
            .map(|r| run_supervisor::RequestKey::new(r, &args.prompt, &cwd, &agent.name));
        let id = match self.supervisor.start_or_existing(spec) {
            Ok(run_supervisor::Started::New(id)) => id,
            Ok(run_supervisor::Started::Existing(id)) => {
                let request_id = args.request_id.as_deref().unwrap_or_default();
                let text = match self.supervisor.status(id) {
                    Some(s) => render::tasks::repeated_request(request_id, &s),
                    None => render::tasks::unknown_task(id),
                };
                return Ok((id, text));
            }
            Err(e) => return Err(e.to_string()),
        };
        let budget_warning =
            render::usage::budget_warning(&self.supervisor.budget_check(Some(&cwd)));
        if progress.wanted() {
            self.report_start(id, progress).await;
        }
        let model = args
            .model
            .clone()
            .or_else(|| self.supervisor.config().default_model.clone());
        let mode = delegation.mode.reason();
        let engine = self
            .supervisor
            .status(id)
            .map(|s| s.engine)
            .unwrap_or_else(|| "run".to_owned());
        let cwd_text = cwd.display().to_string();
        let root_text = self.settings.root.display().to_string();
        let started = render::tasks::started(&render::tasks::Started {
            id,
            agent: &agent.name,
            mode: &mode,
            tier: delegation.tier.as_str(),
            title: &title,
            cwd: &cwd_text,
            root: &root_text,
            model: model.as_deref(),
            title_warning: title_warning.as_deref(),
            label: label.as_deref(),
            continues: session.as_ref().map(|s| s.id.as_str()),
            engine: &engine,
        }) + &unchecked
            + &self.isolated_start(id)
            + &budget_warning;
        Ok((id, started))
    }

    /// The server of the config file a start names (`None`: the bridge's own engine, also for
    /// `local`); an unknown name is refused by the supervisor with the names it knows.
    fn remote_server(&self, name: Option<&str>) -> Result<Option<bridge_config::Server>, String> {
        let Some(name) = name
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != "local")
        else {
            return Ok(None);
        };
        match &self.settings.file {
            Err(e) => Err(e.clone()),
            Ok(file) => Ok(file.server(name).cloned()),
        }
    }

    /// The roster of a remote server for `cwd`: its own `GET /agent` there.
    async fn remote_roster(
        &self,
        server: &bridge_config::Server,
        cwd: &Path,
    ) -> Result<bridge_policy::Roster, String> {
        let (s, root, dir) = (
            server.clone(),
            self.settings.root.clone(),
            cwd.to_path_buf(),
        );
        let timeout = self.supervisor.config().api_timeout;
        let agents = tokio::task::spawn_blocking(move || {
            run_supervisor::server_agents(&s, &root, &dir, timeout)
        })
        .await
        .map_err(|e| format!("internal error while asking a server for its agents: {e}"))??;
        Ok(bridge_policy::Roster::from_opencode(
            &agents,
            &bridge_policy::Roster::default(),
            Vec::new(),
            &format!("GET /agent on server {} ({})", server.name, server.url),
        ))
    }

    /// The run's config overlay: the policy's, and for a read-only agent the one opencode was
    /// asked about and resolves default-deny ([`RosterSource::check_read_only`]), with the
    /// start text's warning when opencode is not asked here; the refusal otherwise.
    async fn run_overlay(
        &self,
        cwd: &Path,
        roster: &bridge_policy::Roster,
        delegation: &bridge_policy::Delegation,
    ) -> Result<(Option<serde_json::Value>, String), String> {
        use crate::roster::ReadOnlyCheck;
        let (agent, overlay) = match (&delegation.agent, &delegation.config_overlay) {
            (a, Some(o)) if a.access == Access::ReadOnly => (a.name.clone(), o.clone()),
            _ => return Ok((delegation.config_overlay.clone(), String::new())),
        };
        let asked = matches!(
            roster.origin(),
            bridge_policy::roster::RosterOrigin::Opencode { .. }
        );
        let (source, dir) = (self.roster.clone(), cwd.to_path_buf());
        let check = tokio::task::spawn_blocking(move || {
            source.check_read_only(&dir, &agent, &overlay, asked)
        })
        .await
        .map_err(|e| format!("internal error while checking a read-only run: {e}"))?;
        match check {
            ReadOnlyCheck::Checked(o) => Ok((Some(o), String::new())),
            ReadOnlyCheck::Unchecked { overlay, why } => {
                Ok((Some(overlay), render::tasks::read_only_unchecked(&why)))
            }
            ReadOnlyCheck::Refused(why) => Err(render::tasks::read_only_refused(
                &delegation.agent.name,
                &why,
            )),
        }
    }

    /// The start note of an isolated task (empty for one that runs in the caller's checkout).
    fn isolated_start(&self, id: TaskId) -> String {
        let Some(dir) = self.supervisor.state_dir() else {
            return String::new();
        };
        let root = run_supervisor::worktree::root(dir);
        let root = root.canonicalize().unwrap_or(root);
        match run_supervisor::worktree::load(dir, id) {
            Some(info) => render::isolation::started(
                &info.dir.display().to_string(),
                Some(&info.repo.display().to_string()),
            ),
            // Not made yet (it is made before the first attempt): the task's cwd is in it.
            None => match self.supervisor.status(id) {
                Some(s) if s.cwd.starts_with(&root) => render::isolation::started(
                    &root.join(id.to_string()).display().to_string(),
                    None,
                ),
                _ => String::new(),
            },
        }
    }

    /// The change of an isolated task for `opencode_result`, as text and as structure (empty
    /// and `None` for other tasks). Reads the worktree's files in the state directory only.
    pub fn isolated_change(
        &self,
        id: TaskId,
        snap: &run_supervisor::TaskSnapshot,
        head: Option<usize>,
        tail: Option<usize>,
    ) -> (String, Option<structured::IsolatedChangeView>) {
        use run_supervisor::worktree;
        let Some(dir) = self.supervisor.state_dir() else {
            return (String::new(), None);
        };
        let view = |info: &worktree::WorktreeInfo, c: Option<&worktree::Change>| {
            let cut = c.map(|c| render::isolation::cut_patch(&c.patch, head, tail));
            structured::IsolatedChangeView {
                worktree: info.dir.display().to_string(),
                checkout: info.repo.display().to_string(),
                collected: c.is_some(),
                stat: c.map(|c| c.stat.clone()).unwrap_or_default(),
                patch: cut.as_ref().map(|c| c.text.clone()).unwrap_or_default(),
                patch_chars: cut.as_ref().map_or(0, |c| c.total_chars as u64),
                patch_truncated: cut.as_ref().is_some_and(|c| c.truncated),
            }
        };
        match (worktree::change(dir, id), worktree::load(dir, id)) {
            (Some(c), _) => (
                render::isolation::change(id, &c, head, tail),
                Some(view(&c.info, Some(&c))),
            ),
            (None, Some(info)) if snap.state.is_finished() => (
                render::isolation::not_collected(id, &info),
                Some(view(&info, None)),
            ),
            (None, Some(info)) => (String::new(), Some(view(&info, None))),
            _ => (String::new(), None),
        }
    }

    /// Warnings for an editing task run in the caller's checkout: every other such task that
    /// ran in the same checkout at the same time and whose agent wrote some of the same files
    /// (named, from both runs' write/edit calls).
    async fn overlap_note(&self, out: &run_supervisor::TaskOutput) -> String {
        use run_supervisor::worktree;
        let me = &out.snapshot;
        let isolated_root = self
            .supervisor
            .state_dir()
            .map(worktree::root)
            .map(|r| r.canonicalize().unwrap_or(r));
        let isolated = |s: &run_supervisor::TaskSnapshot| {
            isolated_root.as_ref().is_some_and(|r| s.cwd.starts_with(r))
        };
        if me.read_only || isolated(me) || out.changed_files.is_none() {
            return String::new();
        }
        let span = |s: &run_supervisor::TaskSnapshot| (s.started_at, s.started_at + s.elapsed);
        let (a0, a1) = span(me);
        let others: Vec<run_supervisor::TaskOutput> = self
            .supervisor
            .list()
            .into_iter()
            .filter(|s| s.id != me.id && !s.read_only && !isolated(s))
            .filter(|s| {
                let (b0, b1) = span(s);
                a0 < b1 && b0 < a1
            })
            .filter_map(|s| self.supervisor.result(s.id, Some(1), None))
            .collect();
        if others.is_empty() {
            return String::new();
        }
        let mine = out.clone();
        blocking(move || {
            let Some(top) = worktree::checkout_of(&mine.snapshot.cwd) else {
                return Ok(String::new());
            };
            let my_files = worktree::files_written(&mine.tool_calls, &mine.snapshot.cwd, &top);
            let mut text = String::new();
            for o in others {
                if worktree::checkout_of(&o.snapshot.cwd).as_deref() != Some(top.as_path()) {
                    continue;
                }
                let theirs = worktree::files_written(&o.tool_calls, &o.snapshot.cwd, &top);
                let both = worktree::shared_files(&my_files, &theirs);
                if !both.is_empty() {
                    text.push_str(&render::isolation::overlap(
                        mine.snapshot.id,
                        o.snapshot.id,
                        &both,
                    ));
                }
            }
            Ok(text)
        })
        .await
        .unwrap_or_default()
    }

    /// `opencode_apply`: brings an isolated task's change into the caller's checkout, or with
    /// `discard` throws it away; either removes its worktree. A task whose run ended without
    /// its change collected (its bridge died) is collected first. Protected paths are written
    /// only when `allow_protected` names them.
    pub async fn apply(
        &self,
        id: &str,
        discard: bool,
        allow_protected: &[String],
    ) -> Result<String, String> {
        use run_supervisor::worktree;
        let id = parse_task_id(id)?;
        let snap = self
            .supervisor
            .status(id)
            .ok_or_else(|| render::tasks::unknown_task(id))?;
        let dir = self
            .supervisor
            .state_dir()
            .map(Path::to_path_buf)
            .ok_or_else(|| format!("task {id} has no worktree: this bridge keeps no state directory (OPENCODE_BRIDGE_STATE_DIR), so no task runs isolated"))?;
        if !snap.state.is_finished() {
            return Err(format!(
                "task {id} is {}: wait for it (opencode_wait ids=[\"{id}\"]) or cancel it, then call opencode_apply",
                snap.state
            ));
        }
        let allow = allow_protected.to_vec();
        blocking(move || {
            if worktree::load(&dir, id).is_some_and(|i| i.ended_ms.is_none()) {
                worktree::collect(&dir, id)?;
            }
            if discard {
                return worktree::discard(&dir, id).map(|i| render::isolation::discarded(id, &i));
            }
            match worktree::apply(&dir, id, &allow) {
                Ok(a) => Ok(render::isolation::applied(id, &a)),
                Err(e) => Err(render::isolation::conflict(id, &e)),
            }
        })
        .await
    }

    /// A sync run: waits up to `wait_s` seconds; a finished task answers with its result, an
    /// unfinished one with the start text and a note that it goes on.
    async fn sync_wait(&self, id: TaskId, wait_s: u64, started: String) -> String {
        let report = self
            .supervisor
            .wait_for(&[id], true, Duration::from_secs(wait_s))
            .await;
        if report.satisfied
            && let Some(out) = self.supervisor.result(id, None, None)
        {
            self.supervisor.mark_read(id);
            // As opencode_result would end it: the usage line; and the budgets' warning as a
            // start gives it, counting this task's spend now.
            let warning = render::usage::budget_warning(
                &self.supervisor.budget_check(Some(&out.snapshot.cwd)),
            );
            return format!(
                "task {id} finished within wait_s={wait_s}:\n{}{}{}{warning}",
                render::tasks::result(&out),
                self.isolated_change(id, &out.snapshot, None, None).0,
                self.usage_line(&out.snapshot)
            );
        }
        format!(
            "{started}still running after wait_s={wait_s} s: opencode_wait ids=[\"{id}\"] waits for it, opencode_result id={id} reads it once it ends.\n"
        )
    }

    /// Reports the run's process and then its session id as they become known (at most
    /// [`START_PROGRESS_WAIT`]), or the task's end if it ends first.
    async fn report_start(&self, id: TaskId, progress: &Progress) {
        let deadline = tokio::time::Instant::now() + START_PROGRESS_WAIT;
        let mut spawned = false;
        let mut polls = 0u32;
        while tokio::time::Instant::now() < deadline {
            // The store may show the session before the event stream does.
            if polls.is_multiple_of(10) {
                self.learn_sessions().await;
            }
            polls += 1;
            let Some(s) = self.supervisor.status(id) else {
                return;
            };
            if !spawned && let Some(pid) = s.pid {
                let runner = self.supervisor.runner(id).unwrap_or_default();
                progress.report(format!("task {id}: {runner} started (pid {pid})"));
                spawned = true;
            }
            if let Some(sid) = &s.session_id {
                progress.report(format!("task {id}: session {sid}"));
                return;
            }
            if s.state.is_finished() {
                progress.report(format!("task {id}: {}", s.state));
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// For a task lost with its bridge: what its session says now (the run may have finished on
    /// its own after the bridge died). Empty when not lost or the session cannot be read.
    async fn lost_note(&self, snap: &run_supervisor::TaskSnapshot) -> String {
        let Some(sid) = snap.session_id.clone().filter(|_| snap.lost) else {
            return String::new();
        };
        let liveness = self.liveness().await;
        let session = self
            .on_source(liveness, move |source, ctx| {
                source.get(&sid, ctx).map_err(|e| e.to_string())
            })
            .await;
        match session {
            Ok(s) => format!(
                "its session {} is {} now{}; opencode_session_output id={} shows what it did\n",
                s.id,
                s.state.as_str(),
                s.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default(),
                s.id
            ),
            Err(_) => String::new(),
        }
    }

    /// The session a follow-up goes to, or why it cannot be used.
    async fn session_for_follow_up(&self, id: &str) -> Result<opencode_client::Session, String> {
        let id = &self.whole_session_id(id, None).await?;
        let liveness = self.liveness().await;
        let id = id.to_owned();
        let session = self
            .on_source(liveness, move |source, ctx| {
                source.get(&id, ctx).map_err(|e| {
                    format!(
                        "cannot continue session {id}: {e} (opencode_sessions lists the sessions)"
                    )
                })
            })
            .await?;
        if let Some(holder) = self.session_holder(&session).await {
            return Err(render::tasks::follow_up_refused(&session.id, &holder));
        }
        Ok(session)
    }

    /// Who holds a session a follow-up would prompt too, if anyone: an unfinished task (this
    /// bridge's, another live bridge's, or an orphan's), an opencode TUI or run of no bridge
    /// task that has it open (`-s`, from the process table), or, when no one can be named,
    /// opencode's record saying it is working. One prompter per session.
    async fn session_holder(&self, session: &opencode_client::Session) -> Option<SessionHolder> {
        let id = session.id.as_str();
        let holds = |t: &run_supervisor::TaskSnapshot| {
            !t.state.is_finished()
                && (t.session_id.as_deref() == Some(id) || t.continues.as_deref() == Some(id))
        };
        if let Some(t) = self.supervisor.list().into_iter().find(holds) {
            return Some(match (t.other_bridge, t.orphaned) {
                (Some(pid), _) => SessionHolder::OtherBridge { id: t.id, pid },
                (None, true) => SessionHolder::Orphan {
                    id: t.id,
                    pid: t.pid,
                },
                (None, false) => SessionHolder::OwnTask { id: t.id },
            });
        }
        let sup = self.supervisor.clone();
        let procs = blocking(move || Ok(sup.processes()))
            .await
            .unwrap_or_default();
        if let Some(p) = procs.iter().find(|p| {
            p.session_id.as_deref() == Some(id)
                && matches!(p.kind, ProcessKind::Tui | ProcessKind::Run)
        }) {
            return Some(match p.task_id {
                Some(task) => SessionHolder::OwnTask { id: task },
                None => SessionHolder::Process {
                    kind: p.kind.as_str().to_owned(),
                    pid: p.pid,
                },
            });
        }
        (session.state == SessionState::Running).then_some(SessionHolder::Working)
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

    /// A session id, or a prefix of exactly one session's id (`ses_3f2a` for
    /// `ses_3f2a9c…`), made whole. An id that names no session is returned as given (the call
    /// then says it is unknown); a prefix of several is an error naming some of them.
    async fn whole_session_id(&self, id: &str, server: Option<&str>) -> Result<String, String> {
        let liveness = self.liveness().await;
        let id = id.trim().to_owned();
        self.on_source_at(server, liveness, move |source, ctx| {
            match source.get(&id, ctx) {
                Ok(s) => return Ok(s.id),
                Err(ClientError::NotFound { .. }) => {}
                Err(e) => return Err(e.to_string()),
            }
            let all = SessionFilter {
                limit: usize::MAX,
                ..Default::default()
            };
            let list = source.list(&all, ctx).map_err(|e| e.to_string())?;
            let hits: Vec<&str> = list
                .sessions
                .iter()
                .map(|s| s.id.as_str())
                .filter(|s| s.starts_with(&id))
                .collect();
            match hits.as_slice() {
                [one] => Ok(one.to_string()),
                [] => Ok(id),
                many => Err(format!(
                    "session id prefix {id} matches {} sessions ({}…): give more of the id",
                    many.len(),
                    many.iter().take(3).copied().collect::<Vec<_>>().join(", ")
                )),
            }
        })
        .await
    }

    /// Runs `f` on the blocking pool with the session source, chosen afresh, and a scan
    /// context: choosing the source opens the store, or may run `opencode --help`, which the
    /// runtime thread must never wait for (every other call would wait with it).
    async fn on_source<T: Send + 'static>(
        &self,
        liveness: Liveness,
        f: impl FnOnce(&dyn SessionSource, &opencode_client::ScanContext) -> Result<T, String>
        + Send
        + 'static,
    ) -> Result<T, String> {
        self.on_source_at(None, liveness, f).await
    }

    /// [`on_source`](Self::on_source) on a server of the config file when `server` names one
    /// (its sessions, through its HTTP API), else on this machine's.
    async fn on_source_at<T: Send + 'static>(
        &self,
        server: Option<&str>,
        liveness: Liveness,
        f: impl FnOnce(&dyn SessionSource, &opencode_client::ScanContext) -> Result<T, String>
        + Send
        + 'static,
    ) -> Result<T, String> {
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?.clone();
        let remote = match server {
            Some(name) => Some(self.named_server(name)?),
            None => None,
        };
        let timeout = self.supervisor.config().api_timeout;
        blocking(move || {
            let ctx = cfg.scan_context(liveness);
            if let Some(server) = remote {
                let http = run_supervisor::server_client(&server, timeout)?;
                let source = opencode_client::backend::server_sessions(http);
                return f(source.as_ref(), &ctx);
            }
            let (source, _why) =
                choose_backend_with(&cfg, &open_store).map_err(|e| e.to_string())?;
            f(source.as_ref(), &ctx)
        })
        .await
    }

    /// The server of the config file of this name, or the one line that says what to do.
    fn named_server(&self, name: &str) -> Result<bridge_config::Server, String> {
        let file = self.settings.file.as_ref().map_err(Clone::clone)?;
        file.server(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = file.servers.iter().map(|s| s.name.as_str()).collect();
            format!(
                "no server is named {name:?}: {} (servers are named in the bridge's config file)",
                if known.is_empty() {
                    "the config file names none".to_owned()
                } else {
                    format!("use one of {}", known.join(", "))
                }
            )
        })
    }

    /// opencode's store when opencode has not run on this machine yet: the store backend would
    /// be used (no server, no forced backend, no v2 `api` command) and the file does not exist
    /// or is empty. That is the normal first state, not a failure.
    /// May run `opencode --help` (once per binary): call it off the async thread.
    pub fn store_not_created_yet(&self) -> Option<PathBuf> {
        store_not_created_yet(self.client.as_ref().ok()?)
    }

    /// The session source, chosen afresh (the store may appear after the server started).
    pub fn source(&self) -> Result<Chosen, String> {
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?;
        choose_backend_with(cfg, &open_store).map_err(|e| e.to_string())
    }

    /// What the bridge knows beyond the store: its unfinished tasks' sessions are busy, its
    /// finished tasks' sessions (cancelled, failed, lost: their run is gone) have no process any
    /// more. Session ids the event stream has not named yet are looked up in the store first
    /// ([`learn_sessions`](Self::learn_sessions)); a follow-up's session is the one it continues.
    async fn liveness(&self) -> Liveness {
        self.learn_sessions().await;
        let mut l = Liveness::default();
        for t in self.supervisor.list() {
            if let Some(sid) = t.session_id.or(t.continues) {
                if t.state.is_finished() {
                    l.gone.insert(sid);
                } else {
                    l.busy.insert(sid);
                }
            }
        }
        l
    }

    /// Learns the session ids of this bridge's tasks from opencode's store (read-only) before
    /// their event stream names them: opencode 1.18 prints the session id only with its first
    /// event, which can come many seconds in, or never for a run cancelled before it. A task's
    /// session is the one session created since its attempt started with the task's exact title
    /// (`--title`) in its cwd that no other task claims; with two candidates, or two such tasks
    /// of the same title and cwd, nothing is learnt (the event stream will tell).
    async fn learn_sessions(&self) {
        let wanted = self.supervisor.sessionless();
        if wanted.is_empty() {
            return;
        }
        let Ok(cfg) = self.client.as_ref().map(Clone::clone) else {
            return;
        };
        let claimed: HashSet<String> = self
            .supervisor
            .list()
            .into_iter()
            .filter_map(|t| t.session_id)
            .collect();
        // On the blocking pool from the start: whether a store exists may run `opencode
        // --help`, and choosing the source opens the store.
        let found = blocking(move || {
            if store_not_created_yet(&cfg).is_some() {
                return Ok(Vec::new());
            }
            let (source, _why) =
                choose_backend_with(&cfg, &open_store).map_err(|e| e.to_string())?;
            let ctx = cfg.scan_context(Liveness::default());
            let mut found = Vec::new();
            for w in &wanted {
                let twins = wanted
                    .iter()
                    .filter(|o| o.title == w.title && o.cwd == w.cwd)
                    .count();
                if twins > 1 || w.title.is_empty() {
                    continue;
                }
                let since_ms = w
                    .attempt_started
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                let minutes = ctx.now_ms.saturating_sub(since_ms).max(0) / 60_000 + 2;
                let filter = SessionFilter {
                    title_prefix: Some(w.title.clone()),
                    directory: Some(w.cwd.display().to_string()),
                    since_minutes: Some(minutes as u64),
                    limit: 20,
                    children: Children::Exclude,
                    ..Default::default()
                };
                let Ok(list) = source.list(&filter, &ctx) else {
                    continue;
                };
                let hits: Vec<_> = list
                    .sessions
                    .iter()
                    .filter(|s| {
                        s.title == w.title
                            && Path::new(&s.directory) == w.cwd
                            && s.created_ms >= since_ms
                            && !claimed.contains(&s.id)
                    })
                    .collect();
                if let [one] = hits.as_slice() {
                    let created = UNIX_EPOCH + Duration::from_millis(one.created_ms.max(0) as u64);
                    found.push((w.id, one.id.clone(), created));
                }
            }
            Ok(found)
        })
        .await
        .unwrap_or_default();
        for (id, sid, created) in found {
            if self.supervisor.learn_session(id, &sid, created).await {
                tracing::debug!(task = id, session = %sid, "session id learnt from the store");
            }
        }
    }

    /// `opencode_sessions`.
    async fn sessions(&self, args: SessionsArgs) -> Result<Reply, String> {
        let filter = SessionFilter {
            state: args.state.as_deref().and_then(SessionState::parse),
            agent: args.agent.clone(),
            directory: args.directory.clone(),
            search: args.search.clone(),
            title_prefix: args.title_prefix.clone(),
            since_minutes: args.since_minutes,
            limit: args.limit.unwrap_or(SESSIONS_DEFAULT_LIMIT) as usize,
            children: match args.children.as_deref() {
                Some("exclude") => Children::Exclude,
                Some("only") => Children::Only,
                _ => Children::Include,
            },
        };
        let described = describe_filter(&args);
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?.clone();
        let not_yet = blocking(move || Ok(store_not_created_yet(&cfg))).await?;
        if let Some(store) = not_yet.filter(|_| args.server.is_none()) {
            let none = structured::SessionsView {
                sessions: Vec::new(),
                scanned: 0,
                partial: None,
                backend: "none".into(),
            };
            return Ok(Reply {
                text: render::sessions::no_sessions_yet(&store),
                structured: Some(structured::to_value(&none)),
                session: None,
            });
        }
        let liveness = self.liveness().await;
        self.on_source_at(args.server.as_deref(), liveness, move |source, ctx| {
            let list = source.list(&filter, ctx).map_err(|e| e.to_string())?;
            Ok(Reply {
                text: render::session_list(&list, &described, ctx.now_ms),
                structured: Some(structured::to_value(&structured::SessionsView::from(&list))),
                session: None,
            })
        })
        .await
    }

    /// `opencode_session_output`.
    pub async fn session_output(&self, mut args: OutputArgs) -> Result<String, String> {
        args.id = self
            .whole_session_id(&args.id, args.server.as_deref())
            .await?;
        let mode = render::OutputMode::parse(&args.mode).unwrap_or(render::OutputMode::Tail);
        let last = match mode {
            render::OutputMode::Tail => Some(args.messages as usize),
            render::OutputMode::Last | render::OutputMode::Full => None,
        };
        let liveness = self.liveness().await;
        let server = args.server.clone();
        self.on_source_at(server.as_deref(), liveness, move |source, ctx| {
            let t = source
                .transcript(&args.id, last, ctx)
                .map_err(|e| e.to_string())?;
            Ok(render::transcript(
                &t,
                mode,
                args.max_chars as usize,
                ctx.now_ms,
            ))
        })
        .await
    }

    /// The newest `limit` sessions that are not subagent sessions (MCP `resources/list`);
    /// none before opencode first ran. Everything that may start a process (the `opencode
    /// --help` probe of a missing store) runs on the blocking pool: Claude Code lists resources
    /// as it connects, and the server must keep answering its other requests meanwhile.
    pub async fn recent_sessions(
        &self,
        limit: usize,
    ) -> Result<Vec<opencode_client::Session>, String> {
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?.clone();
        let liveness = self.liveness().await;
        blocking(move || {
            if store_not_created_yet(&cfg).is_some() {
                return Ok(Vec::new());
            }
            let (source, _why) =
                choose_backend_with(&cfg, &open_store).map_err(|e| e.to_string())?;
            let ctx = cfg.scan_context(liveness);
            let filter = SessionFilter {
                limit,
                children: Children::Exclude,
                ..Default::default()
            };
            let list = source.list(&filter, &ctx).map_err(|e| e.to_string())?;
            Ok(list.sessions)
        })
        .await
    }

    /// A whole session's transcript (MCP `resources/read`): what `opencode_session_output
    /// mode=full` shows, cut to [`REPLY_CAP_CHARS`] keeping the end; `Ok(None)` when no session
    /// has this exact id.
    pub async fn session_transcript(
        &self,
        id: &str,
        server: Option<&str>,
    ) -> Result<Option<String>, String> {
        let liveness = self.liveness().await;
        if server.is_none() {
            let cfg = self.client.as_ref().map_err(|e| e.to_string())?.clone();
            if blocking(move || Ok(store_not_created_yet(&cfg)))
                .await?
                .is_some()
            {
                return Ok(None);
            }
        }
        let id = id.to_owned();
        self.on_source_at(server, liveness, move |source, ctx| {
            match source.transcript(&id, None, ctx) {
                Ok(t) => Ok(Some(render::transcript(
                    &t,
                    render::OutputMode::Full,
                    REPLY_CAP_CHARS,
                    ctx.now_ms,
                ))),
                Err(ClientError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
    }

    /// `opencode_session_rename`. The title is stored as a start's explicit title is: control
    /// characters become spaces and every secret `[secret]`
    /// ([`bridge_policy::naming::clean_title`]). A session whose directory is outside the root is
    /// not renamed: every backend renames through an opencode instance of that directory
    /// (`?directory=`), which loads its plugins and MCP servers.
    pub async fn rename(
        &self,
        id: String,
        title: String,
        server: Option<String>,
    ) -> Result<String, String> {
        let id = self.whole_session_id(&id, server.as_deref()).await?;
        let stored = bridge_policy::naming::clean_title(&title);
        if stored.is_empty() {
            return Err(render::root_check::title_empty());
        }
        let mut warnings = Vec::new();
        if secrets_replaced(&title, &stored) {
            warnings.push(render::root_check::secret_replaced("title"));
        }
        let problems = bridge_policy::naming::check_title(&stored);
        if !problems.is_empty() {
            warnings.push(format!(
                "the title breaks the LANE/agent: task convention: {}",
                problems.join("; ")
            ));
        }
        let warning = (!warnings.is_empty()).then(|| warnings.join("\nwarning: "));
        let liveness = self.liveness().await;
        // On a server of the config file, its root stands for ours.
        let (root, remote) = match server.as_deref() {
            Some(name) => (self.named_server(name)?.root, true),
            None => (self.settings.root.clone(), false),
        };
        self.on_source_at(server.as_deref(), liveness, move |source, ctx| {
            let before = source.get(&id, ctx).map_err(|e| e.to_string())?;
            if remote && !Path::new(&before.directory).starts_with(&root) {
                return Err(render::root_check::rename_outside_root(
                    &before.id,
                    &before.directory,
                    &root,
                ));
            }
            if let Some(f) = (!remote)
                .then(|| within_root(Path::new(&before.directory), &root).err())
                .flatten()
            {
                return Err(match f {
                    OutsideRoot::Outside { root, .. } => render::root_check::rename_outside_root(
                        &before.id,
                        &before.directory,
                        &root,
                    ),
                    OutsideRoot::TooLong(_) => render::root_check::rename_outside_root(
                        &before.id,
                        "(a path too long to show)",
                        &root,
                    ),
                    OutsideRoot::Root(why) => why,
                });
            }
            let s = source
                .rename(&id, &stored, ctx)
                .map_err(|e| e.to_string())?;
            Ok(render::renamed(&s, warning.as_deref(), ctx.now_ms))
        })
        .await
    }
}

/// [`App::store_not_created_yet`] for a client configuration.
fn store_not_created_yet(cfg: &ClientConfig) -> Option<PathBuf> {
    // A forced backend was asked for on purpose: its faults are errors.
    if cfg.server_url.is_some() || cfg.backend.is_some() {
        return None;
    }
    // Delegated runs keep their sessions in their worlds' stores: once one exists, there are
    // sessions to list even where the user's own opencode never ran.
    if !opencode_client::backend::world_stores(cfg).is_empty() {
        return None;
    }
    match std::fs::metadata(&cfg.db_path) {
        Ok(m) if m.is_file() && m.len() == 0 => Some(cfg.db_path.clone()),
        Ok(_) => None,
        Err(_) => (!opencode_client::backend::has_api_command(&cfg.opencode_bin))
            .then(|| cfg.db_path.clone()),
    }
}

/// Opens opencode's SQLite store (read-only).
fn open_store(path: &Path) -> Result<Box<dyn SessionSource>, ClientError> {
    Ok(Box::new(opencode_client::store::StoreSource::open(path)?))
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

/// Runs blocking work (store scans, HTTP calls) off the async thread.
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

/// The permissions the policy believes denied in an agent's run, for the post-run audit of
/// its tool calls: read-only agents run with edit, bash and task denied (their overlay); an
/// editing agent whose edit tools are denied or whose shell is denied must not use them either.
fn denied_permissions(agent: &bridge_policy::roster::AgentInfo) -> run_supervisor::audit::Denied {
    use bridge_policy::roster::Shell;
    if agent.access == Access::ReadOnly {
        return run_supervisor::audit::Denied::read_only();
    }
    run_supervisor::audit::Denied {
        edit: !agent.edit_tools,
        bash: agent.shell == Shell::Denied,
        task: false,
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("internal error while reading sessions: {e}"))?
}

fn describe_filter(a: &SessionsArgs) -> String {
    let mut parts = Vec::new();
    let mut push = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            parts.push(format!("{k}={v}"));
        }
    };
    push("state", a.state.clone());
    push("agent", a.agent.clone());
    push("directory", a.directory.clone());
    push("search", a.search.clone());
    push("title_prefix", a.title_prefix.clone());
    push("since_minutes", a.since_minutes.map(|v| v.to_string()));
    push("limit", a.limit.map(|v| v.to_string()));
    push("children", a.children.clone());
    parts.join(", ")
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
mod tests {
    use super::*;

    #[test]
    fn task_ids_in_several_spellings() {
        for s in ["3", "task 3", "task-3", "t3", "#3", " 3 "] {
            assert_eq!(parse_task_id(s), Ok(3), "{s}");
        }
        assert!(
            parse_task_id("ses_abc")
                .unwrap_err()
                .contains("not a task id")
        );
    }

    #[test]
    fn the_fence_resolves_first_and_accepts_only_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let root_c = root.canonicalize().unwrap();
        let inside = |p: &Path| within_root(p, &root).map(|d| d.path().to_path_buf());
        assert_eq!(inside(&root), Ok(root_c.clone()));
        assert_eq!(inside(&root.join("a/b")), Ok(root_c.join("a/b")));
        let shown = format!("{:?}", within_root(&outside, &root));
        assert!(!shown.contains("outside/\""), "no trailing slash: {shown}");
        // not there yet: placed where it would be
        assert_eq!(inside(&root.join("a/new/x")), Ok(root_c.join("a/new/x")));
        for out in [
            outside.clone(),
            root.join("a/../.."),
            root.join("link"),
            // a directory that does not exist below a link that leads out
            root.join("link/not-yet"),
            PathBuf::from("/"),
            PathBuf::from(""),
        ] {
            assert!(
                matches!(within_root(&out, &root), Err(OutsideRoot::Outside { .. })),
                "{out:?}: {:?}",
                within_root(&out, &root)
            );
        }
        let long = PathBuf::from(format!("/{}", "a/".repeat(3000)));
        assert_eq!(within_root(&long, &root), Err(OutsideRoot::TooLong(6001)));
        assert!(matches!(
            within_root(&root, &tmp.path().join("no-root")),
            Err(OutsideRoot::Root(_))
        ));
    }

    #[test]
    fn secrets_replaced_counts_new_markers_only() {
        assert!(secrets_replaced("ghp_x", "[secret]"));
        assert!(!secrets_replaced("a [secret] b", "a [secret] b"));
        assert!(!secrets_replaced("docs", "docs"));
    }

    #[test]
    fn replies_are_capped() {
        let long = "x".repeat(REPLY_CAP_CHARS + 5);
        let capped = cap_reply(&long);
        assert!(capped.starts_with(&"x".repeat(REPLY_CAP_CHARS)));
        assert!(capped.contains("5 characters cut"));
        assert_eq!(cap_reply("short"), "short");
    }
}
