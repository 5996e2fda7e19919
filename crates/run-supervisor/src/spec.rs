//! What a task is (given by the caller) and how the supervisor is configured.

/// How opencode tasks are run ([`bridge_env::ENGINE`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Engine {
    /// An `opencode run` process per attempt (what a machine where no server starts falls back
    /// to).
    Run,
    /// A session on a warm local `opencode serve` (the default).
    #[default]
    Serve,
}

impl Engine {
    /// The variable's value, or why it is not accepted.
    pub fn parse(value: &str) -> Result<Engine, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "run" => Ok(Engine::Run),
            "" | "serve" => Ok(Engine::Serve),
            _ => Err(format!(
                "{}={value:?} is not accepted; use run or serve",
                bridge_env::ENGINE.name
            )),
        }
    }

    /// `run` or `serve`.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Run => "run",
            Engine::Serve => "serve",
        }
    }
}

/// What a clean stop of the bridge does to its running tasks ([`env::ON_EXIT`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnExit {
    /// They keep running: a process of the `run` engine in its own process group, a session on
    /// its server (the warm local one is left running while it has a turn); the next bridge on
    /// the state directory adopts them and reports their results (the default).
    #[default]
    Leave,
    /// They are cancelled and recorded so, and the warm local servers stop.
    Cancel,
}

impl OnExit {
    /// The variable's value, or why it is not accepted (one line).
    pub fn parse(value: &str) -> Result<OnExit, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "leave" => Ok(OnExit::Leave),
            "cancel" => Ok(OnExit::Cancel),
            _ => Err(format!(
                "{}={value:?} is not accepted; use leave or cancel",
                env::ON_EXIT.name
            )),
        }
    }

    /// `leave` or `cancel`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExit::Leave => "leave",
            OnExit::Cancel => "cancel",
        }
    }
}
use bridge_env as env;
use bridge_isolation::worktree::Isolation;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One delegated task, as the caller (the MCP server, after policy checks) hands it over.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    /// The final prompt: policy instructions and the task, sent verbatim.
    pub prompt: String,
    /// Working directory; must resolve inside the configured root.
    pub cwd: PathBuf,
    /// opencode agent name (`--agent`).
    pub agent: String,
    /// Exact session title (`--title`).
    pub title: String,
    /// `provider/model` or `provider/model#variant`; `None` uses the configured default.
    pub model: Option<String>,
    /// Wall-clock limit for the whole task (all attempts); `None` uses the configured default.
    pub timeout: Option<Duration>,
    /// True for agents that cannot change files: only those are ever retried.
    pub read_only: bool,
    /// Pass `--auto` (approve permission asks that are not denied). Default true; false lets
    /// opencode auto-reject every ask.
    pub auto_approve: bool,
    /// The policy's config for this run (`Delegation::config_overlay`: read-only permissions,
    /// a subagent's mode switched to `all`, the `worker` definition), merged on top of
    /// `OPENCODE_CONFIG_CONTENT` by `bridge_policy::roster::config_content`. The supervisor
    /// applies it as it is and adds nothing of its own.
    pub config_overlay: Option<serde_json::Value>,
    /// Extra environment for the child.
    pub env: Vec<(String, String)>,
    /// Continue this existing opencode session (`--session <id>`) with the prompt as a
    /// follow-up, instead of starting a new session. The title is then left as it is.
    pub session: Option<String>,
    /// A free-form label the caller can filter the task list by.
    pub label: Option<String>,
    /// Permissions the policy believes denied in this run, for the post-run audit of its tool
    /// calls ([`bridge_isolation::audit`]); read-only agents always count `edit`, `bash` and `task` denied.
    pub denied: bridge_isolation::audit::Denied,
    /// Run in the caller's checkout ([`Isolation::None`], the default) or in a detached git
    /// worktree of its own whose change is applied on request (see [`bridge_isolation::worktree`]).
    pub isolation: Isolation,
    /// Run on this server of the bridge's config file (a session there) instead of the
    /// configured engine.
    pub server: Option<String>,
    /// Stop the run once it has cost this many USD (its usage so far, estimated where
    /// opencode records 0); it fails with kind `budget`.
    pub max_cost_usd: Option<f64>,
    /// The caller's idempotency key (`request_id`): a start with the key of a task accepted
    /// on the same state directory less than [`REQUEST_TTL`] ago returns that task instead
    /// of starting another ([`crate::supervisor::Supervisor::start_or_existing`]).
    pub request: Option<RequestKey>,
    /// A shell command (`sh -c`) run in the task's cwd after the agent's turn, in the run's
    /// fence and world; its exit status decides ([`crate::verify`]).
    pub verify: Option<String>,
    /// Follow-ups the agent gets with a failed verify's output before the task fails (0-3).
    pub verify_retries: u32,
    /// A JSON Schema the agent's final answer must satisfy (compiled by
    /// [`crate::verify::compile_schema`] at the start).
    pub output_schema: Option<serde_json::Value>,
}

/// How long a `request_id` names the task it started.
pub const REQUEST_TTL: Duration = Duration::from_secs(24 * 3600);

/// A caller's idempotency key with what the start asked: the same key asking something else
/// is refused. The prompt is kept as a fingerprint only (FNV-1a, 64 bits): the registry never
/// holds a caller's prompt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestKey {
    /// The caller's `request_id`.
    pub id: String,
    /// The fingerprint of the caller's prompt ([`RequestKey::new`]).
    pub prompt: String,
    /// The cwd the caller's start resolved to (before an isolated task's worktree).
    pub cwd: PathBuf,
    /// The agent the start resolved to.
    pub agent: String,
}

impl RequestKey {
    /// The key `id` of a start of `prompt` (the caller's, before any instruction is added) in
    /// `cwd` by `agent`.
    pub fn new(id: &str, prompt: &str, cwd: &Path, agent: &str) -> RequestKey {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in prompt.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        RequestKey {
            id: id.to_owned(),
            prompt: format!("fnv1a64:{h:016x}"),
            cwd: cwd.to_path_buf(),
            agent: agent.to_owned(),
        }
    }

    /// What of this start differs from the one that used the key first (`None`: the same).
    pub fn differs_from(&self, first: &RequestKey) -> Option<&'static str> {
        if self.prompt != first.prompt {
            Some("prompt")
        } else if self.cwd != first.cwd {
            Some("cwd")
        } else if self.agent != first.agent {
            Some("agent")
        } else {
            None
        }
    }
}

impl TaskSpec {
    /// A task with defaults: default model and timeout, not read-only,
    /// `--auto` on, no extra config or environment.
    pub fn new(
        prompt: impl Into<String>,
        cwd: impl AsRef<Path>,
        agent: impl Into<String>,
        title: impl Into<String>,
    ) -> TaskSpec {
        TaskSpec {
            prompt: prompt.into(),
            cwd: cwd.as_ref().to_path_buf(),
            agent: agent.into(),
            title: title.into(),
            model: None,
            timeout: None,
            read_only: false,
            auto_approve: true,
            config_overlay: None,
            env: Vec::new(),
            session: None,
            label: None,
            denied: bridge_isolation::audit::Denied::default(),
            isolation: Isolation::None,
            server: None,
            max_cost_usd: None,
            request: None,
            verify: None,
            verify_retries: 1,
            output_schema: None,
        }
    }
}

impl TaskSpec {
    /// Refuses values that can only be mistakes when they start with `-` (they would look like
    /// options on the run's command line; [`crate::argv`] keeps them from being read as such
    /// anyway): the agent, the session id, and the model (`model`: the spec's or the
    /// configured default) with its variant or effort.
    pub(crate) fn check_option_like(&self, model: Option<&str>) -> Result<(), String> {
        let model_parts = model
            .into_iter()
            .flat_map(|m| {
                let m = m.trim();
                let m = m.strip_prefix("claude/").unwrap_or(m);
                m.split('#')
            })
            .map(|part| ("model", part));
        let named = [("agent", self.agent.as_str())]
            .into_iter()
            .chain(self.session.as_deref().map(|s| ("session id", s)));
        for (what, value) in named.chain(model_parts) {
            if crate::argv::option_like(value) {
                let shown: String = value.trim().chars().take(40).collect();
                return Err(format!(
                    "the {what} `{shown}` starts with `-`, which no {what} does (it would read as an option): give the {what} without it"
                ));
            }
        }
        Ok(())
    }
}

/// Supervisor settings. [`SupervisorConfig::from_env`] reads the `OPENCODE_BRIDGE_*` variables;
/// every default of one comes from its [`bridge_env`] entry.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// `OPENCODE_BIN` (a path, or a bare name on PATH); `None` looks for `opencode` on PATH.
    pub opencode_bin: Option<PathBuf>,
    /// `CLAUDE_BIN` (a path, or a bare name on PATH); `None` looks for `claude` on PATH (used for Claude models: sonnet, opus,
    /// haiku, claude-…).
    pub claude_bin: Option<PathBuf>,
    /// `OPENCODE_BRIDGE_ROOT` (default: the current directory): every task cwd must be inside.
    pub root: PathBuf,
    /// `OPENCODE_BRIDGE_MODEL`: `provider/model[#variant]` for tasks that name none.
    pub default_model: Option<String>,
    /// [`env::MAX_PARALLEL`] (clamped to 1..=64): tasks running at once.
    pub max_parallel: usize,
    /// [`env::TIMEOUT_MIN`]: per-task limit unless the task sets one.
    pub default_timeout: Duration,
    /// [`env::KILL_GRACE_MS`]: SIGTERM to SIGKILL.
    pub kill_grace: Duration,
    /// [`env::RUN_NICE`] (clamped to 0..=19): how much nicer than the bridge a run starts, so
    /// that busy runs give the CPU to the bridge and interactive programs when they want it
    /// ([`bridge_proc::sched::start_nicer`]); 0 starts runs at the bridge's priority.
    pub run_nice: u8,
    /// [`env::SANDBOX`]: the kernel fence around every run ([`bridge_fence`]). An unreadable
    /// value is `required`: a typo never turns the fence off.
    pub sandbox: bridge_fence::Sandbox,
    /// [`env::RETRIES`]: automatic retries of transient failures.
    pub retries: u32,
    /// [`env::RETRY_DELAY_S`]: first retry delay, then ×3 each time.
    pub retry_delay: Duration,
    /// [`env::QUIET_MIN`]: a live run with no event for this long is
    /// flagged as quiet in its status.
    pub quiet_after: Duration,
    /// Context-overflow errors in one attempt after which the run is stopped (default 3): 1.x
    /// compacts and retries forever on a persistent overflow.
    pub overflow_limit: usize,
    /// Bytes of output kept per stream per task (default 2 MB, head and tail).
    pub output_cap: usize,
    /// Prompts longer than this many bytes are sent as an attached file (default 100 000).
    pub prompt_file_threshold: usize,
    /// Directory for oversized prompts' files (default `/tmp/opencode`, which opencode lets
    /// agents read without asking).
    pub prompt_dir: PathBuf,
    /// Environment given to every child (before each task's own).
    pub env: Vec<(String, String)>,
    /// Make this process a child subreaper so escaped descendants come back to it to be reaped
    /// (default true).
    pub subreaper: bool,
    /// Where the task registry lives, so tasks outlive the bridge (see [`crate::registry`]).
    /// `None` (the default) keeps tasks in memory only; [`from_env`](Self::from_env) uses
    /// `OPENCODE_BRIDGE_STATE_DIR`, else `$XDG_STATE_HOME/opencode-bridge`, else
    /// `~/.local/state/opencode-bridge`.
    pub state_dir: Option<PathBuf>,
    /// [`env::PRUNE_DAYS`]: finished tasks older than this are removed from
    /// the registry when a supervisor opens it. Nothing else is ever pruned.
    pub prune_after: Duration,
    /// Reads what an opencode run's session used, for the post-run audit ([`bridge_isolation::audit`]).
    /// `None` (the default): runs are not audited (their result says so).
    pub session_reader: Option<std::sync::Arc<dyn bridge_isolation::audit::SessionReader>>,
    /// [`env::ENGINE`]: how opencode tasks run when they name no server ([`Engine`]).
    pub engine: Engine,
    /// The remote servers of the bridge's config file, by name (`TaskSpec::server`).
    pub servers: Vec<bridge_config::Server>,
    /// [`env::SERVE_IDLE_MIN`]: a warm local server with no turn running this long stops,
    /// whether or not a bridge is attached (its watcher or the next bridge stops it).
    pub serve_idle: Duration,
    /// [`env::ON_EXIT`]: what [`crate::supervisor::Supervisor::shutdown`] does to running tasks.
    pub on_exit: OnExit,
    /// The program that watches a warm local server once started (run as `PROGRAM serve-watch
    /// NOTE`, see [`crate::serve_watch`]): it applies the idle rule while no bridge runs. The
    /// bridge gives its own executable; `None` (the default): a server left running is
    /// stopped by the next bridge that finds it idle.
    pub serve_watcher: Option<PathBuf>,
    /// [`env::SERVE_MAX`]: at most this many warm local servers; starting another first stops
    /// the one idle longest (never one with a task running).
    pub serve_max: usize,
    /// [`env::API_TIMEOUT_MS`]: the limit of each call to a server.
    pub api_timeout: Duration,
    /// [`env::CLAUDE_SESSION`]: the Claude Code session this bridge serves, recorded with each
    /// task it accepts ([`crate::registry::unsettled`]). `None` outside Claude Code.
    pub client_session: Option<String>,
    /// Prices and the compare model: what a task's usage costs, estimated where opencode
    /// recorded 0, and its Claude-equivalent ([`bridge_ledger::usage`]).
    pub pricing: bridge_ledger::usage::Pricing,
    /// USD per UTC day / month for all tasks (`OPENCODE_BRIDGE_BUDGET_DAY_USD`,
    /// `_MONTH_USD`, or the config file's `[budget]`): a start is refused once spent.
    pub budgets: bridge_ledger::usage::budget::Budgets,
    /// The config file's per-project budgets.
    pub project_budgets: Vec<bridge_ledger::usage::budget::ProjectBudget>,
    /// More variables of the bridge's environment that reach runs (`OPENCODE_BRIDGE_PASS_ENV`:
    /// names, or prefixes ending in `*`); see [`crate::command::confine_env`].
    pub pass_env: Vec<String>,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            opencode_bin: None,
            claude_bin: None,
            root: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            default_model: None,
            max_parallel: env::MAX_PARALLEL.default_number() as usize,
            default_timeout: Duration::from_secs(env::TIMEOUT_MIN.default_number() * 60),
            kill_grace: Duration::from_millis(env::KILL_GRACE_MS.default_number()),
            run_nice: env::RUN_NICE.default_number() as u8,
            sandbox: bridge_fence::Sandbox::Auto,
            retries: env::RETRIES.default_number() as u32,
            retry_delay: Duration::from_secs(env::RETRY_DELAY_S.default_number()),
            quiet_after: Duration::from_secs(env::QUIET_MIN.default_number() * 60),
            overflow_limit: 3,
            output_cap: 2 * 1024 * 1024,
            prompt_file_threshold: 100_000,
            prompt_dir: PathBuf::from("/tmp/opencode"),
            env: Vec::new(),
            subreaper: true,
            state_dir: None,
            prune_after: Duration::from_secs(env::PRUNE_DAYS.default_number() * 24 * 3600),
            session_reader: None,
            engine: Engine::default(),
            servers: Vec::new(),
            serve_idle: Duration::from_secs(env::SERVE_IDLE_MIN.default_number() * 60),
            serve_max: env::SERVE_MAX.default_number() as usize,
            on_exit: OnExit::default(),
            serve_watcher: None,
            api_timeout: Duration::from_millis(env::API_TIMEOUT_MS.default_number()),
            client_session: None,
            pricing: bridge_ledger::usage::Pricing::default(),
            budgets: bridge_ledger::usage::budget::Budgets::default(),
            project_budgets: Vec::new(),
            pass_env: Vec::new(),
        }
    }
}

impl SupervisorConfig {
    /// Reads the configuration from the process environment. A number outside its variable's
    /// range is held to it, one that does not parse gives the default
    /// ([`bridge_env::EnvVar::read`]).
    pub fn from_env() -> SupervisorConfig {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`from_env`](Self::from_env) with an injectable variable lookup.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> SupervisorConfig {
        let mut c = SupervisorConfig::default();
        // Every number is held to its variable's range (`bridge_env::EnvVar::read`); the
        // binary reports the ones that were not in it (`bridge_env::number_errors`).
        let num = |v: &env::EnvVar| v.read(get(v.name).as_deref()).map(|n| n.value);
        if let Some(b) = get(env::OPENCODE_BIN.name).filter(|s| !s.trim().is_empty()) {
            c.opencode_bin = Some(PathBuf::from(b));
        }
        if let Some(b) = get(env::CLAUDE_BIN.name).filter(|s| !s.trim().is_empty()) {
            c.claude_bin = Some(PathBuf::from(b));
        }
        if let Some(r) = get(env::ROOT.name).filter(|s| !s.trim().is_empty()) {
            c.root = PathBuf::from(r);
        }
        c.default_model = get(env::MODEL.name).filter(|s| !s.trim().is_empty());
        if let Some(n) = num(&env::MAX_PARALLEL) {
            c.max_parallel = n as usize;
        }
        if let Some(n) = num(&env::TIMEOUT_MIN) {
            c.default_timeout = Duration::from_secs(n.saturating_mul(60));
        }
        if let Some(n) = num(&env::KILL_GRACE_MS) {
            c.kill_grace = Duration::from_millis(n);
        }
        if let Some(n) = num(&env::RUN_NICE) {
            c.run_nice = n.min(u64::from(bridge_proc::sched::NICEST)) as u8;
        }
        if let Some(v) = get(env::SANDBOX.name) {
            c.sandbox = bridge_fence::Sandbox::parse(&v).unwrap_or(bridge_fence::Sandbox::Required);
        }
        if let Some(n) = num(&env::RETRIES) {
            c.retries = n as u32;
        }
        if let Some(n) = num(&env::RETRY_DELAY_S) {
            c.retry_delay = Duration::from_secs(n);
        }
        if let Some(n) = num(&env::QUIET_MIN) {
            c.quiet_after = Duration::from_secs(n.saturating_mul(60));
        }
        if let Some(n) = num(&env::PRUNE_DAYS) {
            c.prune_after = Duration::from_secs(n.saturating_mul(24 * 3600));
        }
        if let Some(v) = get(env::ENGINE.name) {
            // A value that cannot be read keeps the default (doctor says why).
            c.engine = Engine::parse(&v).unwrap_or_default();
        }
        if let Some(n) = num(&env::SERVE_IDLE_MIN) {
            c.serve_idle = Duration::from_secs(n.saturating_mul(60));
        }
        if let Some(n) = num(&env::SERVE_IDLE_MS) {
            c.serve_idle = Duration::from_millis(n);
        }
        if let Some(v) = get(env::ON_EXIT.name) {
            // A value that cannot be read keeps the default (doctor says why).
            c.on_exit = OnExit::parse(&v).unwrap_or_default();
        }
        if let Some(n) = num(&env::SERVE_MAX) {
            c.serve_max = n as usize;
        }
        if let Some(n) = num(&env::API_TIMEOUT_MS) {
            c.api_timeout = Duration::from_millis(n);
        }
        c.client_session = get(env::CLAUDE_SESSION.name).filter(|s| !s.trim().is_empty());
        c.pass_env = get(env::PASS_ENV.name)
            .map(|v| parse_pass_env(&v))
            .unwrap_or_default();
        c.state_dir = env::state_dir(&get);
        c.pricing = bridge_ledger::usage::Pricing::from_lookup(&get, &[]);
        // A budget that does not parse refuses every start (its error says why) rather than
        // being no budget: see `usage::budget::parse_usd`.
        let usd =
            |k: &str| get(k).map(|v| bridge_ledger::usage::budget::parse_usd(&v).unwrap_or(0.0));
        c.budgets = bridge_ledger::usage::budget::Budgets {
            day_usd: usd(env::BUDGET_DAY_USD.name),
            month_usd: usd(env::BUDGET_MONTH_USD.name),
        };
        c
    }
}

/// `OPENCODE_BRIDGE_PASS_ENV`: names or `PREFIX*` patterns separated by commas or blanks.
pub fn parse_pass_env(v: &str) -> Vec<String> {
    v.split(|c: char| c == ',' || c.is_whitespace())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn values_that_would_read_as_options_are_refused() {
        let ok = TaskSpec::new("p", "/p", "worker", "--title-may-start-with-a-dash");
        assert_eq!(ok.check_option_like(Some("fk/ok#high")), Ok(()));
        assert_eq!(ok.check_option_like(Some("claude/opus#low")), Ok(()));
        assert_eq!(ok.check_option_like(None), Ok(()));
        let e = ok
            .check_option_like(Some("--dir=/tmp/elsewhere"))
            .unwrap_err();
        assert_eq!(
            e,
            "the model `--dir=/tmp/elsewhere` starts with `-`, which no model does (it would read as an option): give the model without it"
        );
        for m in ["fk/ok#--auto", "claude/-p", " -m", "sonnet#-x"] {
            assert!(ok.check_option_like(Some(m)).is_err(), "{m}");
        }
        let agent = TaskSpec::new("p", "/p", "--agent=build", "t");
        assert!(agent.check_option_like(None).unwrap_err().contains("agent"));
        let mut session = ok.clone();
        session.session = Some("-f".into());
        assert!(
            session
                .check_option_like(None)
                .unwrap_err()
                .contains("session id")
        );
        let long = TaskSpec::new("p", "/p", format!("-{}", "a".repeat(5000)), "t");
        assert!(long.check_option_like(None).unwrap_err().len() < 200);
    }

    #[test]
    fn on_exit_and_the_idle_time_are_read() {
        let get = |pairs: &'static [(&'static str, &'static str)]| {
            SupervisorConfig::from_lookup(move |k| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        assert_eq!(SupervisorConfig::default().on_exit, OnExit::Leave);
        let c = get(&[
            ("OPENCODE_BRIDGE_ON_EXIT", "Cancel"),
            ("OPENCODE_BRIDGE_SERVE_IDLE_MIN", "3"),
        ]);
        assert_eq!(c.on_exit, OnExit::Cancel);
        assert_eq!(c.serve_idle, Duration::from_secs(180));
        let c = get(&[
            ("OPENCODE_BRIDGE_SERVE_IDLE_MIN", "3"),
            ("OPENCODE_BRIDGE_SERVE_IDLE_MS", "6000"),
        ]);
        assert_eq!(c.serve_idle, Duration::from_secs(6));
        // What cannot be read keeps the default; the error is one line naming the variable.
        let c = get(&[
            ("OPENCODE_BRIDGE_ON_EXIT", "later"),
            ("OPENCODE_BRIDGE_SERVE_IDLE_MIN", "-1"),
        ]);
        assert_eq!(c.on_exit, OnExit::Leave);
        assert_eq!(c.serve_idle, Duration::from_secs(600));
        let e = OnExit::parse("later").unwrap_err();
        assert!(
            e.contains("OPENCODE_BRIDGE_ON_EXIT") && e.contains("leave or cancel"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn env_values_are_read_and_clamped() {
        let vars: HashMap<&str, &str> = [
            ("OPENCODE_BRIDGE_MAX_PARALLEL", "100"),
            ("OPENCODE_BRIDGE_TIMEOUT_MIN", "5"),
            ("OPENCODE_BRIDGE_KILL_GRACE_MS", "250"),
            ("OPENCODE_BRIDGE_RUN_NICE", "25"),
            ("OPENCODE_BRIDGE_RETRIES", "1"),
            ("OPENCODE_BRIDGE_RETRY_DELAY_S", "0"),
            ("OPENCODE_BRIDGE_MODEL", "fk/ok#high"),
            ("OPENCODE_BRIDGE_ROOT", "/srv"),
            ("OPENCODE_BIN", "/opt/opencode"),
        ]
        .into_iter()
        .collect();
        let c = SupervisorConfig::from_lookup(|k| vars.get(k).map(|v| v.to_string()));
        assert_eq!(c.max_parallel, 64);
        assert_eq!(c.default_timeout, Duration::from_secs(300));
        assert_eq!(c.kill_grace, Duration::from_millis(250));
        assert_eq!(c.run_nice, 19, "nice values end at 19");
        assert_eq!(SupervisorConfig::default().run_nice, 10);
        let sandbox = |v: &str| {
            let v = v.to_owned();
            SupervisorConfig::from_lookup(move |k| (k == env::SANDBOX.name).then(|| v.clone()))
                .sandbox
        };
        assert_eq!(
            SupervisorConfig::default().sandbox,
            bridge_fence::Sandbox::Auto
        );
        assert_eq!(sandbox("off"), bridge_fence::Sandbox::Off);
        assert_eq!(sandbox(" REQUIRED "), bridge_fence::Sandbox::Required);
        assert_eq!(
            sandbox("of"),
            bridge_fence::Sandbox::Required,
            "a typo never turns the fence off"
        );
        assert_eq!(c.retries, 1);
        assert_eq!(c.retry_delay, Duration::ZERO);
        assert_eq!(c.default_model.as_deref(), Some("fk/ok#high"));
        assert_eq!(c.root, PathBuf::from("/srv"));
        assert_eq!(c.opencode_bin, Some(PathBuf::from("/opt/opencode")));
        assert_eq!(c.state_dir, None, "no HOME, no XDG_STATE_HOME: in memory");
        let st = |vars: &[(&str, &str)]| {
            let m: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            SupervisorConfig::from_lookup(|k| m.get(k).cloned())
        };
        assert_eq!(
            st(&[("HOME", "/h")]).state_dir,
            Some(PathBuf::from("/h/.local/state/opencode-bridge"))
        );
        assert_eq!(
            st(&[("HOME", "/h"), ("XDG_STATE_HOME", "/x")]).state_dir,
            Some(PathBuf::from("/x/opencode-bridge"))
        );
        let own = st(&[
            ("XDG_STATE_HOME", "/x"),
            ("OPENCODE_BRIDGE_STATE_DIR", "/own"),
            ("OPENCODE_BRIDGE_PRUNE_DAYS", "2"),
        ]);
        assert_eq!(own.state_dir, Some(PathBuf::from("/own")));
        assert_eq!(own.prune_after, Duration::from_secs(2 * 86_400));
        let zero = SupervisorConfig::from_lookup(|k| {
            (k == "OPENCODE_BRIDGE_MAX_PARALLEL").then(|| "0".to_owned())
        });
        assert_eq!(zero.max_parallel, 1);
        let junk = SupervisorConfig::from_lookup(|_| Some("junk".to_owned()));
        assert_eq!(junk.max_parallel, 6);
        assert_eq!(junk.retries, 2);
        assert_eq!(junk.default_timeout, Duration::from_secs(7200));
        // The largest values the environment can hold are held to the ranges: no overflow.
        let huge = SupervisorConfig::from_lookup(|_| Some("18446744073709551615".to_owned()));
        assert_eq!(huge.default_timeout, Duration::from_secs(10_080 * 60));
        assert_eq!(huge.retry_delay, Duration::from_secs(3_600));
        assert_eq!(huge.prune_after, Duration::from_secs(36_500 * 86_400));
        assert_eq!(huge.max_parallel, 64);
    }
}
