//! Configuration from the environment, the choice of backend (with the reason, for people), and
//! renaming when only the store is at hand.
//!
//! Order of the choice ([`choose_backend`]):
//! 1. `OPENCODE_BRIDGE_BACKEND=store|server|api` wins (any other value is an error naming the
//!    accepted ones; `server` also needs `OPENCODE_BRIDGE_SERVER_URL`);
//! 2. `OPENCODE_BRIDGE_SERVER_URL` is set → `server` (someone pointed us at a server on purpose);
//! 3. opencode's SQLite store exists → `store` (no service needed, sees every session);
//! 4. the `opencode` binary (`OPENCODE_BIN`, else `opencode` on `PATH`) has an `api` command
//!    (opencode v2, judged from its `--help`) → `api`;
//! 5. otherwise an error saying where the store was looked for.
//!
//! A store-backed source renames through a short-lived `opencode serve` of its own (see
//! [`rename_with_ephemeral_server`]): the store itself is never written.

use crate::api::{ApiCommand, ApiSource};
use crate::error::ClientError;
use crate::http::{BasicAuth, DEFAULT_MAX_REPLY_BYTES, HttpClient, encode_component, query};
use crate::model::{Session, SessionFilter, SessionList, SessionTranscript};
use crate::server::{ServerSource, check_id};
use crate::source::{Liveness, ScanContext, SessionSource};
use bridge_env as env;
use bridge_proc::{CaptureLimits, DROPPED_ENV};
use serde_json::json;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The serve processes of the bridge's own, named here as before (their home is
/// [`crate::serve_process`]).
pub use crate::serve_process::{ChildEnv, ServeProcess, ServeStart};

/// Default service-call timeout (`OPENCODE_BRIDGE_API_TIMEOUT_MS`).
pub const DEFAULT_API_TIMEOUT: Duration =
    Duration::from_millis(env::API_TIMEOUT_MS.default_number());
/// Default session-scan deadline (`OPENCODE_BRIDGE_SCAN_DEADLINE_MS`).
pub const DEFAULT_SCAN_DEADLINE: Duration =
    Duration::from_millis(env::SCAN_DEADLINE_MS.default_number());
/// The accepted values of `OPENCODE_BRIDGE_BACKEND`.
pub const BACKENDS: [&str; 3] = ["store", "server", "api"];

/// Which backend to use, when forced by `OPENCODE_BRIDGE_BACKEND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// opencode's SQLite store, read-only.
    Store,
    /// `opencode serve` over HTTP.
    Server,
    /// The v2 service through `opencode api`.
    Api,
}

impl BackendKind {
    /// Parses `store`, `server` or `api` (case-insensitive).
    pub fn parse(s: &str) -> Result<BackendKind, ClientError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "store" => Ok(BackendKind::Store),
            "server" => Ok(BackendKind::Server),
            "api" => Ok(BackendKind::Api),
            other => Err(ClientError::InvalidArgument {
                field: env::BACKEND.name,
                detail: format!(
                    "{other:?} is not a backend; use one of {}",
                    BACKENDS.join(", ")
                ),
            }),
        }
    }
}

/// Everything the client reads from the environment.
#[derive(Clone)]
pub struct ClientConfig {
    /// `OPENCODE_BRIDGE_BACKEND`.
    pub backend: Option<BackendKind>,
    /// `OPENCODE_BRIDGE_SERVER_URL`.
    pub server_url: Option<String>,
    /// From `OPENCODE_SERVER_PASSWORD` (and `OPENCODE_SERVER_USERNAME`, default `opencode`).
    pub server_auth: Option<BasicAuth>,
    /// `OPENCODE_BRIDGE_API_TIMEOUT_MS` (default 45000): one service call, or one `opencode api`.
    pub api_timeout: Duration,
    /// `OPENCODE_BRIDGE_SCAN_DEADLINE_MS` (default 35000): a listing stops here and says PARTIAL.
    pub scan_deadline: Duration,
    /// Replies larger than this are refused (32 MiB).
    pub max_reply_bytes: u64,
    /// `OPENCODE_BIN`, else `opencode`, as given: [`ClientConfig::opencode_program`] finds it
    /// (a path, or a bare name on `PATH`).
    pub opencode_bin: PathBuf,
    /// The SQLite store, resolved as opencode does (see [`crate::paths`]): `OPENCODE_DB`
    /// (absolute, or relative to the data dir), else `opencode.db` (or the single channel
    /// store) in `$XDG_DATA_HOME/opencode` or `~/.local/share/opencode`.
    pub db_path: PathBuf,
    /// `OPENCODE_BRIDGE_SANDBOX`: the kernel fence around every temporary `opencode serve`
    /// (an unreadable value is `required`).
    pub sandbox: bridge_fence::Sandbox,
    /// `OPENCODE_BRIDGE_ROOT`, else the working directory: a temporary server's project is
    /// looked for no higher than this ([`bridge_fence::project_of`]).
    pub root: PathBuf,
    /// Only directories inside this one (canonical) are named to a service in `?directory=`
    /// when reading (a server creates an instance for a directory it is asked about, which
    /// loads that directory's plugins and MCP servers); `None`: any. The bridge sets its root.
    pub probe_within: Option<PathBuf>,
    /// The bridge's state directory ([`bridge_env::state_dir`]): the stores of the runs'
    /// worlds beneath it ([`bridge_fence::world::all`]) are read beside the user's own.
    pub state_dir: Option<PathBuf>,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("backend", &self.backend)
            .field("server_url", &self.server_url)
            .field("server_auth", &self.server_auth)
            .field("api_timeout", &self.api_timeout)
            .field("scan_deadline", &self.scan_deadline)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .field("opencode_bin", &self.opencode_bin)
            .field("db_path", &self.db_path)
            .field("sandbox", &self.sandbox)
            .field("root", &self.root)
            .field("probe_within", &self.probe_within)
            .finish()
    }
}

impl ClientConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<ClientConfig, ClientError> {
        ClientConfig::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (tests pass their own world). Empty values count as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<ClientConfig, ClientError> {
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        // Held to the variable's range (`bridge_env::EnvVar::read`); a value outside it is
        // refused with the range's one line.
        let ms = |v: &'static env::EnvVar, default: Duration| -> Result<Duration, ClientError> {
            match v.read(get(v.name).as_deref()) {
                None => Ok(default),
                Some(env::Number { value, error: None }) => Ok(Duration::from_millis(value)),
                Some(env::Number {
                    error: Some(detail),
                    ..
                }) => Err(ClientError::InvalidArgument {
                    field: v.name,
                    detail,
                }),
            }
        };
        let backend = get(env::BACKEND.name)
            .map(|v| BackendKind::parse(&v))
            .transpose()?;
        let server_auth = get(env::SERVER_PASSWORD.name).map(|pw| {
            BasicAuth::new(
                get(env::SERVER_USERNAME.name)
                    .unwrap_or_else(|| env::SERVER_USERNAME.default.into()),
                pw,
            )
        });
        Ok(ClientConfig {
            backend,
            server_url: get(env::SERVER_URL.name),
            server_auth,
            api_timeout: ms(&env::API_TIMEOUT_MS, DEFAULT_API_TIMEOUT)?,
            scan_deadline: ms(&env::SCAN_DEADLINE_MS, DEFAULT_SCAN_DEADLINE)?,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            opencode_bin: get(env::OPENCODE_BIN.name)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env::OPENCODE.name)),
            db_path: default_db_path(&get),
            sandbox: get(env::SANDBOX.name)
                .map(|v| {
                    bridge_fence::Sandbox::parse(&v).unwrap_or(bridge_fence::Sandbox::Required)
                })
                .unwrap_or_default(),
            root: get(env::ROOT.name)
                .map(PathBuf::from)
                .or_else(|| std::env::current_dir().ok())
                .unwrap_or_else(|| PathBuf::from("/")),
            probe_within: None,
            state_dir: env::state_dir(get),
        })
    }

    /// A context for one call: the deadline starts now.
    pub fn scan_context(&self, liveness: Liveness) -> ScanContext {
        ScanContext {
            deadline: bridge_proc::deadline::after(self.scan_deadline),
            now_ms: now_ms(),
            liveness,
        }
    }

    /// The HTTP client for `server_url`.
    pub fn http_client(&self, url: &str) -> Result<HttpClient, ClientError> {
        HttpClient::new(
            url,
            self.server_auth.clone(),
            self.api_timeout,
            self.max_reply_bytes,
        )
    }

    /// The opencode binary to start, found the one way every crate finds it
    /// ([`bridge_env::Program::find`]); when it cannot be found, `opencode_bin` as given, so
    /// that starting it fails with the system's error.
    pub fn opencode_program(&self) -> PathBuf {
        env::OPENCODE
            .find(Some(&self.opencode_bin))
            .unwrap_or_else(|_| self.opencode_bin.clone())
    }

    /// The `opencode api` runner.
    pub fn api_command(&self) -> ApiCommand {
        ApiCommand::new(
            self.opencode_program(),
            self.api_timeout,
            self.max_reply_bytes,
        )
    }
}

/// Current time in epoch milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The store path by opencode's rules ([`crate::paths`]); when it cannot be resolved (no
/// `HOME`), the explanation stands in for the path, so "store not found" messages carry it.
fn default_db_path(get: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match crate::paths::resolve_store_path(&|k| get(k).map(OsString::from)) {
        Ok(found) => found.path,
        Err(ClientError::StoreMissing { path }) => PathBuf::from(path),
        Err(other) => PathBuf::from(other.to_string()),
    }
}

/// Opens the store backend at a path (injected so this module does not depend on how the
/// store is read).
pub type StoreOpener<'a> = &'a dyn Fn(&Path) -> Result<Box<dyn SessionSource>, ClientError>;

/// Picks the backend (see the module docs) and says why, e.g. `server: OPENCODE_BRIDGE_SERVER_URL
/// is set (http://127.0.0.1:4096)`. A store-backed source renames through a short-lived server.
pub fn choose_backend_with(
    cfg: &ClientConfig,
    open_store: StoreOpener<'_>,
) -> Result<(Box<dyn SessionSource>, String), ClientError> {
    let worlds = world_stores(cfg);
    let store = |why: String| -> Result<(Box<dyn SessionSource>, String), ClientError> {
        let mut stores = Vec::new();
        if cfg.db_path.is_file() || worlds.is_empty() {
            stores.push((open_store(&cfg.db_path)?, None));
        }
        for (db, data_home) in &worlds {
            // A world's store that cannot be read is left out; the user's own is not.
            if let Ok(s) = open_store(db) {
                stores.push((s, Some(data_home.clone())));
            }
        }
        let src: Box<dyn SessionSource> = Box::new(StoreWithRename {
            stores,
            cfg: cfg.clone(),
        });
        Ok((src, why))
    };
    let server = |why: String| -> Result<(Box<dyn SessionSource>, String), ClientError> {
        let url = cfg
            .server_url
            .as_deref()
            .ok_or(ClientError::InvalidArgument {
                field: env::SERVER_URL.name,
                detail: "OPENCODE_BRIDGE_BACKEND=server needs the server's URL (http://host:port)"
                    .into(),
            })?;
        let src: Box<dyn SessionSource> =
            Box::new(ServerSource::new(cfg.http_client(url)?).within(cfg.probe_within.as_deref()));
        Ok((src, why))
    };
    let api = |why: String| -> Result<(Box<dyn SessionSource>, String), ClientError> {
        Ok((Box::new(ApiSource::new(cfg.api_command())), why))
    };
    match cfg.backend {
        Some(BackendKind::Store) => {
            return store(format!(
                "store: OPENCODE_BRIDGE_BACKEND=store ({})",
                cfg.db_path.display()
            ));
        }
        Some(BackendKind::Server) => {
            return server(format!(
                "server: OPENCODE_BRIDGE_BACKEND=server ({})",
                cfg.server_url.as_deref().unwrap_or("no URL")
            ));
        }
        Some(BackendKind::Api) => {
            return api(format!(
                "api: OPENCODE_BRIDGE_BACKEND=api (`{} api`)",
                cfg.opencode_bin.display()
            ));
        }
        None => {}
    }
    if let Some(url) = &cfg.server_url {
        return server(format!("server: OPENCODE_BRIDGE_SERVER_URL is set ({url})"));
    }
    if cfg.db_path.is_file() {
        return store(format!(
            "store: opencode's store exists at {}",
            cfg.db_path.display()
        ));
    }
    if !worlds.is_empty() {
        return store(format!(
            "store: no store at {}, and the bridge's runs have {} in their worlds",
            cfg.db_path.display(),
            worlds.len()
        ));
    }
    if has_api_command(&cfg.opencode_program()) {
        return api(format!(
            "api: no store at {}, and `{}` has an `api` command (opencode v2)",
            cfg.db_path.display(),
            cfg.opencode_bin.display()
        ));
    }
    Err(ClientError::StoreMissing {
        path: cfg.db_path.display().to_string(),
    })
}

/// The sessions of a server the bridge reaches over HTTP (a server of the config file), read
/// as the contract it speaks asks: opencode 1's `/session` routes, or opencode 2's `/api`
/// routes ([`ApiSource::over_http`]). Blocking: it asks the server which it speaks.
pub fn server_sessions(http: HttpClient) -> Box<dyn SessionSource> {
    match crate::contract::Contract::of_server(&http) {
        Ok((crate::contract::Contract::V2, _)) => Box::new(ApiSource::over_http(http)),
        // opencode 1, or no answer: the v1 backend's own calls say what is wrong.
        _ => Box::new(ServerSource::new(http)),
    }
}

/// [`choose_backend_with`] with the SQLite store backend ([`crate::store::StoreSource`]).
pub fn choose_backend(cfg: &ClientConfig) -> Result<(Box<dyn SessionSource>, String), ClientError> {
    choose_backend_with(cfg, &|path: &Path| {
        Ok(Box::new(crate::store::StoreSource::open(path)?) as Box<dyn SessionSource>)
    })
}

/// Whether `program --help` lists an `api` command (opencode v2 has one, 1.x does not).
/// Asked once per program path per process (bounded by 10 s); any failure means no.
pub fn has_api_command(program: &Path) -> bool {
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, bool>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(hit) = seen.lock().unwrap_or_else(|e| e.into_inner()).get(program) {
        return *hit;
    }
    let found = run_capture(program, &["--help"], Duration::from_secs(10))
        .is_some_and(|help| crate::contract::help_lists_api(&help));
    seen.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(program.to_path_buf(), found);
    found
}

/// `program args…`'s stdout then stderr (each up to 1 MiB), or `None` when it cannot start,
/// does not finish within `timeout`, or prints invalid UTF-8.
fn run_capture(program: &Path, args: &[&str], timeout: Duration) -> Option<String> {
    let limits = CaptureLimits {
        stdout_bytes: 1 << 20,
        stderr_bytes: 1 << 20,
    };
    let c = bridge_proc::run_capture(Command::new(program).args(args), timeout, limits).ok()?;
    let mut text = String::from_utf8(c.stdout).unwrap_or_default();
    text.push_str(&String::from_utf8(c.stderr).unwrap_or_default());
    Some(text)
}

/// The stores of the bridge's run worlds (`<state>/worlds/*/data/opencode/opencode.db`) that
/// exist, each with its world's data home.
pub fn world_stores(cfg: &ClientConfig) -> Vec<(PathBuf, PathBuf)> {
    let Some(state) = &cfg.state_dir else {
        return Vec::new();
    };
    bridge_fence::world::all(state)
        .into_iter()
        .map(|w| (w.opencode_db(), w.data_home()))
        .filter(|(db, _)| db.is_file() && *db != cfg.db_path)
        .collect()
}

/// The store backend: the user's own store and the stores of the bridge's run worlds, read as
/// one (a listing merges them newest first; a session is looked up in each), plus rename
/// through a short-lived `opencode serve` on the store that holds the session.
struct StoreWithRename {
    /// Each store with its world's data home (`None`: the user's own store).
    stores: Vec<(Box<dyn SessionSource>, Option<PathBuf>)>,
    cfg: ClientConfig,
}

impl fmt::Debug for StoreWithRename {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreWithRename")
            .field("stores", &self.stores.len())
            .finish()
    }
}

impl StoreWithRename {
    /// The first store that answers `f` with something other than "not found".
    fn first<T>(
        &self,
        mut f: impl FnMut(&dyn SessionSource) -> Result<T, ClientError>,
    ) -> Result<(T, Option<&PathBuf>), ClientError> {
        let mut last = None;
        for (store, home) in &self.stores {
            match f(store.as_ref()) {
                Ok(v) => return Ok((v, home.as_ref())),
                Err(e @ ClientError::NotFound { .. }) => last = Some(e),
                Err(e) if home.is_some() => last = last.or(Some(e)),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(ClientError::NotFound { id: String::new() }))
    }
}

impl SessionSource for StoreWithRename {
    fn name(&self) -> &'static str {
        "store"
    }
    fn list(&self, filter: &SessionFilter, ctx: &ScanContext) -> Result<SessionList, ClientError> {
        let mut merged: Option<SessionList> = None;
        for (store, home) in &self.stores {
            let list = match store.list(filter, ctx) {
                Ok(l) => l,
                Err(_) if home.is_some() => continue,
                Err(e) => return Err(e),
            };
            match &mut merged {
                None => merged = Some(list),
                Some(m) => {
                    m.scanned += list.scanned;
                    m.partial = m.partial.take().or(list.partial);
                    for s in list.sessions {
                        if !m.sessions.iter().any(|x| x.id == s.id) {
                            m.sessions.push(s);
                        }
                    }
                }
            }
        }
        let mut list = merged.ok_or(ClientError::StoreMissing {
            path: self.cfg.db_path.display().to_string(),
        })?;
        list.sessions
            .sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then(a.id.cmp(&b.id)));
        list.sessions.truncate(filter.limit.max(1));
        list.backend = "store";
        Ok(list)
    }
    fn get(&self, id: &str, ctx: &ScanContext) -> Result<Session, ClientError> {
        self.first(|s| s.get(id, ctx)).map(|(v, _)| v)
    }
    fn transcript(
        &self,
        id: &str,
        last: Option<usize>,
        ctx: &ScanContext,
    ) -> Result<SessionTranscript, ClientError> {
        self.first(|s| s.transcript(id, last, ctx)).map(|(v, _)| v)
    }
    fn rename(&self, id: &str, title: &str, ctx: &ScanContext) -> Result<Session, ClientError> {
        let (session, home) = self.first(|s| s.get(id, ctx))?;
        rename_with_ephemeral_server(
            &self.cfg,
            &session.directory,
            id,
            title,
            home.map(|h| h.as_path()),
        )?;
        self.get(id, ctx)
    }
}

/// Renames a session through a short-lived `opencode serve` of our own (see
/// [`with_temporary_server`]), asked `PATCH /session/{id}?directory=<dir>`.
pub fn rename_with_ephemeral_server(
    cfg: &ClientConfig,
    directory: &str,
    id: &str,
    title: &str,
    data_home: Option<&Path>,
) -> Result<(), ClientError> {
    check_id(id)?;
    let dir = Path::new(directory);
    let cwd = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    // A session of a run's world is renamed by a server on that world's store.
    let set = data_home
        .map(|h| vec![("XDG_DATA_HOME".to_owned(), h.to_string_lossy().into_owned())])
        .unwrap_or_default();
    let env = ChildEnv {
        set,
        remove: DROPPED_ENV.iter().map(|k| k.to_string()).collect(),
    };
    with_temporary_server(
        cfg,
        &cwd,
        &env,
        cfg.api_timeout,
        None,
        "a temporary `opencode serve` started for the rename",
        |http| {
            let path = format!(
                "/session/{}{}",
                encode_component(id),
                query(&[("directory", Some(directory.to_string()))])
            );
            http.patch_json(&path, &json!({ "title": title }))?;
            Ok(())
        },
    )
}

/// Runs `f` against a short-lived `opencode serve` of our own: started in `cwd` (also as
/// `PWD`) on `127.0.0.1` with a random password and `env` over the inherited environment (so the
/// same data dir, store and configuration as a run there), then stopped (SIGTERM to its process
/// group, SIGKILL after 3 s) and reaped, on every path. Start-up is bounded by `startup` and each
/// call by the service-call timeout. A server that exits before it listens is
/// [`ClientError::OpencodeRefused`] with opencode's own message when it printed one (e.g.
/// `Configuration is invalid at …`). Setting `cancel` stops the server while it starts
/// ([`ClientError::Cancelled`]).
pub fn with_temporary_server<T>(
    cfg: &ClientConfig,
    cwd: &Path,
    env: &ChildEnv,
    startup: Duration,
    cancel: Option<&std::sync::atomic::AtomicBool>,
    purpose: &str,
    f: impl FnOnce(&HttpClient) -> Result<T, ClientError>,
) -> Result<T, ClientError> {
    let program = cfg.opencode_program();
    let contract = crate::Contract::from_api_command(has_api_command(&program));
    let env = &temporary_server_env(cfg, cwd, env, contract)?;
    let start = ServeStart {
        program: &program,
        shown: &cfg.opencode_bin,
        cwd,
        env,
        startup,
        cancel,
        purpose,
        api_timeout: cfg.api_timeout,
        max_reply_bytes: cfg.max_reply_bytes,
        log: None,
        contract,
    };
    // Confined like a read-only run in `cwd`: the server loads that directory's plugins and
    // tools, which may read the project but write nothing of it.
    let server = ServeProcess::start(&start, |tmp| server_fence(cfg, cwd, env, &program, tmp))?;
    let out = f(server.http());
    drop(server);
    out
}

/// A temporary server's environment: like a read-only run's in `cwd`, only what opencode needs
/// of the bridge's environment ([`bridge_proc::env::kept`]), in the read-only world of the
/// project (so what the project's plugins write lands there, never in the user's store), with
/// the caller's variables over it.
fn temporary_server_env(
    cfg: &ClientConfig,
    cwd: &Path,
    env: &ChildEnv,
    contract: crate::Contract,
) -> Result<ChildEnv, ClientError> {
    let mut set = Vec::new();
    let mut config_dir = None;
    if let Some(state) = &cfg.state_dir {
        let root = cfg.root.canonicalize().unwrap_or_else(|_| cfg.root.clone());
        let project = bridge_fence::project_of(cwd, &root, None);
        let world = bridge_fence::World::of(state, &project.top, false);
        let user = bridge_fence::UserDirs::from_lookup(|k| std::env::var(k).ok());
        world
            .prepare(bridge_fence::RunKind::Opencode, &user)
            .map_err(|detail| ClientError::TempServer { detail })?;
        set = world.env(bridge_fence::RunKind::Opencode);
        if contract == crate::Contract::V2 {
            // opencode 2 reads the inline configuration (the bridge's `worker`, a run's
            // overlay) only from a file: the world's configuration directory for it.
            let lookup = |k: &str| {
                let found = env.set.iter().rev().find(|(n, _)| n == k);
                found
                    .map(|(_, v)| v.clone())
                    .or_else(|| std::env::var(k).ok())
                    .filter(|v| !v.trim().is_empty())
            };
            let user = bridge_fence::UserDirs::from_lookup(lookup).opencode_config;
            let overlay = crate::contract::v2_inline_config(
                &lookup(bridge_env::OPENCODE_CONFIG_CONTENT.name).unwrap_or_else(|| "{}".into()),
            );
            let dir = world
                .opencode2_config(user.as_deref(), &overlay)
                .map_err(|detail| ClientError::TempServer { detail })?;
            config_dir = Some(dir.to_string_lossy().into_owned());
        }
    }
    set.retain(|(k, _)| !env.set.iter().any(|(n, _)| n == k));
    set.extend(env.set.iter().cloned());
    if let Some(dir) = config_dir {
        set.retain(|(k, _)| k != bridge_env::OPENCODE_CONFIG_DIR.name);
        set.push((bridge_env::OPENCODE_CONFIG_DIR.name.into(), dir));
    }
    let mut remove = bridge_proc::dropped_names(std::env::vars(), &[], &[]);
    remove.extend(env.remove.iter().cloned());
    remove.sort();
    remove.dedup();
    Ok(ChildEnv { set, remove })
}

/// The kernel fence of a temporary server in `cwd`: what a read-only run there gets
/// ([`bridge_fence::for_run`]).
fn server_fence(
    cfg: &ClientConfig,
    cwd: &Path,
    env: &ChildEnv,
    program: &Path,
    tmp: &Path,
) -> Result<bridge_fence::Fence, ClientError> {
    let root = cfg.root.canonicalize().unwrap_or_else(|_| cfg.root.clone());
    let project = bridge_fence::project_of(cwd, &root, None);
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !env.remove.contains(k))
        .collect();
    vars.extend(env.set.iter().cloned());
    let world = bridge_fence::RunWorld {
        kind: bridge_fence::RunKind::Opencode,
        program: program.to_path_buf(),
        project: project.top,
        editing: false,
        tmp: tmp.to_path_buf(),
        extra_read: project.read,
        extra_write: vec![],
        env: vars,
        credentials: vec![],
    };
    bridge_fence::Fence::prepare(&bridge_fence::for_run(&world), cfg.sandbox)
        .map_err(|detail| ClientError::TempServer { detail })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<ClientConfig, ClientError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ClientConfig::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = cfg(&[("HOME", "/home/u")]).unwrap();
        assert_eq!(c.api_timeout, DEFAULT_API_TIMEOUT);
        assert_eq!(c.scan_deadline, DEFAULT_SCAN_DEADLINE);
        assert_eq!(c.backend, None);
        assert!(c.server_auth.is_none());
        assert_eq!(c.opencode_bin, PathBuf::from("opencode"));
        assert_eq!(
            c.db_path,
            PathBuf::from("/home/u/.local/share/opencode/opencode.db")
        );
    }

    #[test]
    fn env_values_are_read() {
        let c = cfg(&[
            ("OPENCODE_BRIDGE_BACKEND", "Server"),
            ("OPENCODE_BRIDGE_SERVER_URL", "http://127.0.0.1:4096"),
            ("OPENCODE_SERVER_PASSWORD", "pw-secret"),
            ("OPENCODE_BRIDGE_API_TIMEOUT_MS", "1500"),
            ("OPENCODE_BRIDGE_SCAN_DEADLINE_MS", "2500"),
            ("OPENCODE_BIN", "/opt/oc"),
            ("XDG_DATA_HOME", "/d"),
            ("OPENCODE_DB", "custom.db"),
        ])
        .unwrap();
        assert_eq!(c.backend, Some(BackendKind::Server));
        assert_eq!(c.api_timeout, Duration::from_millis(1500));
        assert_eq!(c.scan_deadline, Duration::from_millis(2500));
        assert_eq!(c.opencode_bin, PathBuf::from("/opt/oc"));
        assert_eq!(c.db_path, PathBuf::from("/d/opencode/custom.db"));
        let auth = c.server_auth.clone().unwrap();
        assert_eq!(auth.username, "opencode");
        let shown = format!("{c:?}");
        assert!(!shown.contains("pw-secret"), "{shown}");
    }

    #[test]
    fn bad_values_are_one_line_errors_naming_the_variable() {
        let e = cfg(&[("OPENCODE_BRIDGE_BACKEND", "sqlite")]).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("OPENCODE_BRIDGE_BACKEND") && m.contains("store, server, api"),
            "{m}"
        );
        let e = cfg(&[("OPENCODE_BRIDGE_API_TIMEOUT_MS", "soon")]).unwrap_err();
        assert!(
            e.to_string().contains("OPENCODE_BRIDGE_API_TIMEOUT_MS"),
            "{e}"
        );
        let e = cfg(&[("OPENCODE_BRIDGE_SCAN_DEADLINE_MS", "0")]).unwrap_err();
        assert!(!e.to_string().contains('\n'));
    }
}
