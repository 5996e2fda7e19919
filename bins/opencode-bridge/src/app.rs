//! What the tools do, without MCP: each call takes validated arguments and returns the text the
//! tool shows, or a one-line error the model can act on. The CLI subcommands call the same
//! functions, so a person sees exactly what the model sees.

use crate::config::Settings;
use crate::tools::{Call, OutputArgs, SESSIONS_DEFAULT_LIMIT, SessionsArgs};
use bridge_policy::{PolicyView, SystemEnv};
use bridge_render as render;
use opencode_client::backend::{ClientConfig, choose_backend_with};
use opencode_client::{
    Children, ClientError, Liveness, SessionFilter, SessionSource, SessionState,
};
use std::fmt;
use std::path::{Path, PathBuf};

/// Everything the server holds: settings and the client configuration; the policy is read
/// afresh on every call (marker files may appear at any time).
pub struct App {
    pub settings: Settings,
    client: Result<ClientConfig, ClientError>,
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

impl App {
    pub fn new(settings: Settings) -> App {
        App {
            settings,
            client: ClientConfig::from_env(),
        }
    }

    /// The MCP server instructions: the active policy for the root in a few lines.
    pub fn instructions(&self) -> String {
        match PolicyView::build(&SystemEnv, &self.settings.root, None) {
            Ok(view) => render::instructions(&view),
            Err(e) => format!(
                "opencode-bridge delegates easy and medium work to opencode agents, but its policy cannot be read: {e}. opencode_start refuses until this is fixed."
            ),
        }
    }

    /// Runs one validated call.
    pub async fn call(&self, call: Call) -> Result<String, String> {
        match call {
            Call::Policy { cwd, mode } => self.policy(cwd.as_deref(), mode.as_deref()),
            Call::Sessions(args) => self.sessions(args).await,
            Call::SessionOutput(args) => self.session_output(args).await,
            Call::Rename { id, title } => self.rename(id, title).await,
            other => Err(format!(
                "{} is not available in this build yet",
                call_name(&other)
            )),
        }
    }

    /// Stops every task this process started.
    pub async fn shutdown(&self) {}

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

    /// `opencode_policy`.
    pub fn policy(&self, cwd: Option<&str>, mode: Option<&str>) -> Result<String, String> {
        let dir = self.resolve_dir(cwd);
        let view = PolicyView::build(&SystemEnv, &dir, mode).map_err(|e| e.to_string())?;
        Ok(render::policy(&view))
    }

    /// The session source, chosen afresh (the store may appear after the server started).
    pub fn source(&self) -> Result<Chosen, String> {
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?;
        choose_backend_with(cfg, &open_store).map_err(|e| e.to_string())
    }

    fn liveness(&self) -> Liveness {
        Liveness::default()
    }

    /// `opencode_sessions`.
    pub async fn sessions(&self, args: SessionsArgs) -> Result<String, String> {
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
        let liveness = self.liveness();
        let (source, _why) = self.source()?;
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?.clone();
        blocking(move || {
            let ctx = cfg.scan_context(liveness);
            let list = source.list(&filter, &ctx).map_err(|e| e.to_string())?;
            Ok(render::session_list(&list, &described, ctx.now_ms))
        })
        .await
    }

    /// `opencode_session_output`.
    pub async fn session_output(&self, args: OutputArgs) -> Result<String, String> {
        let mode = render::OutputMode::parse(&args.mode).unwrap_or(render::OutputMode::Tail);
        let last = match mode {
            render::OutputMode::Tail => Some(args.messages as usize),
            render::OutputMode::Last | render::OutputMode::Full => None,
        };
        let liveness = self.liveness();
        let (source, _why) = self.source()?;
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?.clone();
        blocking(move || {
            let ctx = cfg.scan_context(liveness);
            let t = source
                .transcript(&args.id, last, &ctx)
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

    /// `opencode_session_rename`.
    pub async fn rename(&self, id: String, title: String) -> Result<String, String> {
        let problems = bridge_policy::naming::check_title(&title);
        let warning = (!problems.is_empty()).then(|| {
            format!(
                "the title breaks the LANE/agent: task convention: {}",
                problems.join("; ")
            )
        });
        let liveness = self.liveness();
        let (source, _why) = self.source()?;
        let cfg = self.client.as_ref().map_err(|e| e.to_string())?.clone();
        blocking(move || {
            let ctx = cfg.scan_context(liveness);
            let s = source
                .rename(&id, &title, &ctx)
                .map_err(|e| e.to_string())?;
            Ok(render::renamed(&s, warning.as_deref(), ctx.now_ms))
        })
        .await
    }
}

/// Opens opencode's SQLite store.
fn open_store(path: &Path) -> Result<Box<dyn SessionSource>, ClientError> {
    Err(ClientError::Unsupported {
        operation: "reading the SQLite store",
        backend: "store",
        hint: format!(
            "this build cannot read {} yet; set OPENCODE_BRIDGE_SERVER_URL to an `opencode serve`",
            path.display()
        ),
    })
}

/// Runs blocking work (store scans, HTTP calls) off the async thread.
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

fn call_name(call: &Call) -> &'static str {
    match call {
        Call::Start(_) => "opencode_start",
        Call::Status { .. } => "opencode_status",
        Call::Result { .. } => "opencode_result",
        Call::Cancel { .. } => "opencode_cancel",
        Call::List => "opencode_list",
        Call::Policy { .. } => "opencode_policy",
        Call::Sessions(_) => "opencode_sessions",
        Call::SessionOutput(_) => "opencode_session_output",
        Call::Rename { .. } => "opencode_session_rename",
        Call::Processes => "opencode_processes",
    }
}
