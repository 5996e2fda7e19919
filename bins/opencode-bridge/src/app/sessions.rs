//! Sessions: the source that reads them (store, server of the config file, v2 API), learning
//! the sessions of running tasks, `opencode_sessions`, `opencode_session_output`, the views the
//! MCP resources read, and `opencode_rename`.

use super::{App, Chosen, OutsideRoot, Reply, blocking, secrets_replaced, within_root};
use crate::structured;
use crate::tools::{OutputArgs, REPLY_CAP_CHARS, SESSIONS_DEFAULT_LIMIT, SessionsArgs};
use bridge_render as render;
use opencode_client::backend::{ClientConfig, choose_backend_with};
use opencode_client::{
    Children, ClientError, Liveness, SessionFilter, SessionSource, SessionState,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

impl App {
    /// A session id, or a prefix of exactly one session's id (`ses_3f2a` for
    /// `ses_3f2a9c…`), made whole. An id that names no session is returned as given (the call
    /// then says it is unknown); a prefix of several is an error naming some of them.
    pub(super) async fn whole_session_id(
        &self,
        id: &str,
        server: Option<&str>,
    ) -> Result<String, String> {
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
    pub(super) async fn on_source<T: Send + 'static>(
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
    pub(super) async fn on_source_at<T: Send + 'static>(
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
    pub(super) fn named_server(&self, name: &str) -> Result<bridge_config::Server, String> {
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
    pub(super) async fn liveness(&self) -> Liveness {
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
    pub(super) async fn learn_sessions(&self) {
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
    pub(super) async fn sessions(&self, args: SessionsArgs) -> Result<Reply, String> {
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
