//! Tasks: waiting, starting (policy, roster, fence, overlays, follow-ups), isolated changes and
//! their apply, and the notes a status or result adds (lost runs, overlapping edits).

use super::{
    App, OutsideRoot, Progress, Reply, blocking, parse_task_id, secrets_replaced, within_root,
};
use crate::structured;
use crate::tools::StartArgs;
use bridge_policy::roster::Access;
use bridge_policy::{DelegationRequest, SystemEnv, evaluate};
use bridge_render as render;
use bridge_render::tasks::SessionHolder;
use opencode_client::SessionState;
use run_supervisor::{ProcessKind, TaskId, TaskSpec, WaitReport};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long `opencode_start` waits for the run's session id when the caller asked for progress.
const START_PROGRESS_WAIT: Duration = Duration::from_secs(10);

impl App {
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
                        let s = self.supervisor.status(*id)?;
                        let line = match (&s.provider_wait, &s.provider_stall) {
                            (Some(w), _) => render::tasks::provider_wait_line(w, SystemTime::now()),
                            (None, Some(w)) => {
                                render::tasks::provider_stall_line(w, SystemTime::now())
                            }
                            (None, None) => return None,
                        };
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
    pub(super) async fn start(
        &self,
        args: StartArgs,
        progress: &Progress,
    ) -> Result<Reply, String> {
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
                .map(|sid| crate::session_uri::task_uri(&sid, &engine))
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
    pub(super) fn remote_server(
        &self,
        name: Option<&str>,
    ) -> Result<Option<bridge_config::Server>, String> {
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
    pub(super) async fn remote_roster(
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
    pub(super) async fn run_overlay(
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
    pub(super) fn isolated_start(&self, id: TaskId) -> String {
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
    pub(super) async fn overlap_note(&self, out: &run_supervisor::TaskOutput) -> String {
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
    pub(super) async fn sync_wait(&self, id: TaskId, wait_s: u64, started: String) -> String {
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
    pub(super) async fn report_start(&self, id: TaskId, progress: &Progress) {
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
    pub(super) async fn lost_note(&self, snap: &run_supervisor::TaskSnapshot) -> String {
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
    pub(super) async fn session_for_follow_up(
        &self,
        id: &str,
    ) -> Result<opencode_client::Session, String> {
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
    pub(super) async fn session_holder(
        &self,
        session: &opencode_client::Session,
    ) -> Option<SessionHolder> {
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
