//! Structured results (`structuredContent`) of the inspection tools, and their `outputSchema`s.
//!
//! Every type here is what the server serialises, and each tool's `outputSchema` is generated
//! from the same type (rmcp's `schemars`, draft 2020-12, serialize contract), so the schema and
//! the data cannot drift. The values are built from the library crates' plain types; the text
//! content the model reads is rendered separately (`bridge-render`) and stays as it was.
//!
//! Shape decisions: every field is always present (an unknown value is `null`, never a missing
//! key), durations are whole milliseconds (`*_ms`), instants are RFC 3339 UTC strings for tasks
//! and epoch milliseconds for sessions (as opencode stores them), and closed sets of words
//! (states, failure kinds, modes, access) are enums in the schema.

use bridge_policy::view::PolicyView;
use opencode_client::{Session, SessionList, SessionState};
use rmcp::schemars::{self, JsonSchema};
use run_supervisor::utc::format as fmt_utc;
use run_supervisor::{
    ChangeSource, ChangedFiles, FailureKind, OpencodeProcess, TaskOutput, TaskSnapshot, TaskState,
    ToolCall, WaitReport,
};
use serde::Serialize;
use std::sync::Arc;

/// The `outputSchema` of a tool, or `None` for tools without structured results.
pub fn output_schema(tool: &str) -> Option<Arc<rmcp::model::JsonObject>> {
    use rmcp::handler::server::tool::schema_for_output as schema;
    Some(match tool {
        "opencode_status" => schema::<TaskView>(),
        "opencode_result" => schema::<ResultView>(),
        "opencode_wait" => schema::<WaitView>(),
        "opencode_list" => schema::<ListView>(),
        "opencode_policy" => schema::<PolicyOut>(),
        "opencode_sessions" => schema::<SessionsView>(),
        "opencode_processes" => schema::<ProcessesView>(),
        "opencode_usage" => schema::<UsageView>(),
        _ => return None,
    })
}

/// A serialisable value as a JSON object (what `structuredContent` carries).
pub fn to_value<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_else(|e| {
        // Our types are plain structs of strings and numbers: this cannot fail.
        tracing::error!("cannot encode a structured result: {e}");
        serde_json::Value::Object(Default::default())
    })
}

/// Where a delegated task is in its life.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStateView {
    Starting,
    Running,
    Retrying,
    Succeeded,
    Failed,
    Cancelled,
    TimedOut,
}

impl From<TaskState> for TaskStateView {
    fn from(s: TaskState) -> Self {
        match s {
            TaskState::Starting => TaskStateView::Starting,
            TaskState::Running => TaskStateView::Running,
            TaskState::Retrying => TaskStateView::Retrying,
            TaskState::Succeeded => TaskStateView::Succeeded,
            TaskState::Failed => TaskStateView::Failed,
            TaskState::Cancelled => TaskStateView::Cancelled,
            TaskState::TimedOut => TaskStateView::TimedOut,
        }
    }
}

/// Why a task failed.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureKindView {
    RateLimit,
    Quota,
    ContextLength,
    OutputLimit,
    Overloaded,
    Auth,
    Model,
    Agent,
    InvalidRequest,
    Network,
    Timeout,
    Spawn,
    Server,
    OutdatedRunner,
    Exit,
    Budget,
    Verify,
    Schema,
}

impl From<FailureKind> for FailureKindView {
    fn from(k: FailureKind) -> Self {
        match k {
            FailureKind::RateLimit => FailureKindView::RateLimit,
            FailureKind::Quota => FailureKindView::Quota,
            FailureKind::ContextLength => FailureKindView::ContextLength,
            FailureKind::OutputLimit => FailureKindView::OutputLimit,
            FailureKind::Overloaded => FailureKindView::Overloaded,
            FailureKind::Auth => FailureKindView::Auth,
            FailureKind::Model => FailureKindView::Model,
            FailureKind::Agent => FailureKindView::Agent,
            FailureKind::InvalidRequest => FailureKindView::InvalidRequest,
            FailureKind::Network => FailureKindView::Network,
            FailureKind::Timeout => FailureKindView::Timeout,
            FailureKind::Spawn => FailureKindView::Spawn,
            FailureKind::Server => FailureKindView::Server,
            FailureKind::OutdatedRunner => FailureKindView::OutdatedRunner,
            FailureKind::Exit => FailureKindView::Exit,
            FailureKind::Budget => FailureKindView::Budget,
            FailureKind::Verify => FailureKindView::Verify,
            FailureKind::Schema => FailureKindView::Schema,
        }
    }
}

/// A failure: its kind, opencode's message and what to do.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FailureView {
    pub kind: FailureKindView,
    pub message: String,
    pub advice: String,
}

/// Token counts.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TokensView {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// One delegated task (`opencode_status`, and each task of list and wait).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskView {
    /// Task id (what opencode_start returned).
    pub id: u64,
    pub state: TaskStateView,
    pub agent: String,
    /// Session title (`LANE/agent: task`).
    pub title: String,
    pub cwd: String,
    pub model: Option<String>,
    pub read_only: bool,
    pub attempts: u32,
    /// Since the task was accepted (to its end when finished).
    pub elapsed_ms: u64,
    /// When the task was accepted (RFC 3339, UTC).
    pub started_at: String,
    /// The opencode session (`ses_...`) once known; `opencode://session/{id}` reads it.
    pub session_id: Option<String>,
    /// The session a follow-up continues.
    pub continues: Option<String>,
    /// pid of the running process.
    pub pid: Option<i32>,
    /// Since the running attempt's last event.
    pub last_event_age_ms: Option<u64>,
    /// The running attempt has been silent for the quiet period.
    pub quiet: bool,
    /// The final failure, or the one a pending retry waits on.
    pub failure: Option<FailureView>,
    /// Time left before the next attempt, while retrying.
    pub retry_in_ms: Option<u64>,
    pub tokens: TokensView,
    /// Cost in the provider's currency (USD for most).
    pub cost: f64,
    pub tool_calls: u64,
    pub exit_code: Option<i32>,
    pub label: Option<String>,
    /// Whether the kernel fence confined the latest attempt: `confined (Landlock ABI N)` or
    /// `not confined: <why>`; absent before the first attempt.
    pub sandbox: Option<String>,
    /// Where it ran: `run` (a process per attempt), `serve` (the bridge's local opencode
    /// serve) or `serve:<name>` (a server of the bridge's config file).
    pub engine: String,
    /// Its bridge is gone but the run goes on (it can be cancelled).
    pub orphaned: bool,
    /// pid of another live bridge that runs it.
    pub other_bridge: Option<i32>,
    /// How the caller's verify command last ended: `passed`, `failed (exit N)`, with
    /// `after N runs` past the first (`null`: no verify, or it has not run yet).
    pub verify: Option<String>,
    /// Whether the answer satisfied the caller's output_schema (`null`: none, or not checked).
    pub output_schema_valid: Option<bool>,
}

impl From<&TaskSnapshot> for TaskView {
    fn from(s: &TaskSnapshot) -> Self {
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        TaskView {
            id: s.id,
            state: s.state.into(),
            agent: s.agent.clone(),
            title: s.title.clone(),
            cwd: s.cwd.display().to_string(),
            model: s.model.clone(),
            read_only: s.read_only,
            attempts: s.attempts,
            elapsed_ms: ms(s.elapsed),
            started_at: fmt_utc(s.started_at),
            session_id: s.session_id.clone(),
            continues: s.continues.clone(),
            pid: s.pid,
            last_event_age_ms: s.last_event_age.map(ms),
            quiet: s.quiet,
            failure: s.failure.as_ref().map(|f| FailureView {
                kind: f.kind.into(),
                message: f.message.clone(),
                advice: f.advice.clone(),
            }),
            retry_in_ms: s.retry_in.map(ms),
            tokens: TokensView {
                input: s.tokens.input,
                output: s.tokens.output,
                reasoning: s.tokens.reasoning,
                cache_read: s.tokens.cache_read,
                cache_write: s.tokens.cache_write,
            },
            cost: s.cost,
            tool_calls: s.tool_calls as u64,
            exit_code: s.exit_code,
            label: s.label.clone(),
            sandbox: s.sandbox.clone(),
            engine: s.engine.clone(),
            orphaned: s.orphaned,
            other_bridge: s.other_bridge,
            verify: s.verify.as_ref().map(|v| v.line()),
            output_schema_valid: s.schema_valid,
        }
    }
}

/// How the changed files were found.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeSourceView {
    /// git status and diff before and after the task.
    Git,
    /// The run's completed file-writing tool calls (lines where their inputs tell).
    ToolCalls,
}

/// One changed file.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileChangeView {
    pub path: String,
    /// `added`, `modified` or `deleted` (git); `written` (tool calls).
    pub status: String,
    /// Lines added (`null`: binary, or no stat).
    pub added: Option<u64>,
    /// Lines removed (`null`: binary, or no stat).
    pub removed: Option<u64>,
}

/// The files an editing agent changed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ChangedFilesView {
    pub source: ChangeSourceView,
    pub files: Vec<FileChangeView>,
}

impl From<&ChangedFiles> for ChangedFilesView {
    fn from(c: &ChangedFiles) -> Self {
        ChangedFilesView {
            source: match c.source {
                ChangeSource::Git => ChangeSourceView::Git,
                ChangeSource::ToolCalls => ChangeSourceView::ToolCalls,
            },
            files: c
                .files
                .iter()
                .map(|f| FileChangeView {
                    path: f.path.clone(),
                    status: f.status.clone(),
                    added: f.added,
                    removed: f.removed,
                })
                .collect(),
        }
    }
}

/// One tool call of the run.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolCallView {
    pub tool: String,
    /// `completed` or `error`.
    pub status: String,
    pub title: Option<String>,
    pub error: Option<String>,
}

impl From<&ToolCall> for ToolCallView {
    fn from(c: &ToolCall) -> Self {
        ToolCallView {
            tool: c.tool.clone(),
            status: c.status.clone(),
            title: c.title.clone(),
            error: c.error.clone(),
        }
    }
}

/// `opencode_result`: the task, what its run did, and the files it changed. The answer itself
/// is the text content.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResultView {
    pub task: TaskView,
    /// Characters the agent wrote in all (before any cut).
    pub output_chars: u64,
    /// The text content shows only part of the output (head, tail or the default cut).
    pub output_truncated: bool,
    pub tool_calls: Vec<ToolCallView>,
    /// Editing agents only, once finished (`null`: not tracked); for a read-only agent, the
    /// files it changed (a policy violation).
    pub changed_files: Option<ChangedFilesView>,
    /// The post-run audit of an opencode run, once finished: `audited: agent …, model … in N
    /// assistant messages` or `not audited: …` (`null`: not audited, e.g. a Claude run).
    pub audit: Option<String>,
    /// A task started with `isolation: "worktree"` whose worktree is still there (`null`:
    /// not isolated, or its change was applied or discarded).
    pub isolated: Option<IsolatedChangeView>,
    /// The end of the last verify run's output, secrets redacted (`null`: no verify).
    pub verify_output: Option<String>,
    /// The agent's answer, parsed, when it is valid against the task's output_schema.
    pub output: Option<serde_json::Value>,
}

/// The change of an isolated task, waiting for `opencode_apply`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IsolatedChangeView {
    /// The task's worktree.
    pub worktree: String,
    /// The caller's checkout `opencode_apply` writes to.
    pub checkout: String,
    /// `false` while the run goes on, or when its bridge died before collecting it
    /// (`opencode_apply` collects it then).
    pub collected: bool,
    /// `git diff --stat` of the change.
    pub stat: String,
    /// The patch against what the agent started from, cut like the text (`head`/`tail`,
    /// default its first 30000 characters).
    pub patch: String,
    /// Characters of the whole patch.
    pub patch_chars: u64,
    pub patch_truncated: bool,
}

impl From<&TaskOutput> for ResultView {
    fn from(o: &TaskOutput) -> Self {
        ResultView {
            task: (&o.snapshot).into(),
            output_chars: o.text.total_chars as u64,
            output_truncated: o.text.truncated,
            tool_calls: o.tool_calls.iter().map(Into::into).collect(),
            changed_files: o.changed_files.as_ref().map(Into::into),
            audit: o.audit.clone(),
            isolated: None,
            verify_output: o.verify_output.clone(),
            output: o.output.clone(),
        }
    }
}

/// `opencode_wait`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WaitView {
    /// `true`: the wait ended because its condition held; `false`: it timed out.
    pub satisfied: bool,
    /// `any` or `all`, as asked.
    pub mode: String,
    pub timeout_s: u64,
    /// In the order asked.
    pub finished: Vec<TaskView>,
    /// In the order asked.
    pub running: Vec<TaskView>,
    /// Ids no task has.
    pub unknown: Vec<u64>,
}

impl WaitView {
    pub fn new(r: &WaitReport, all: bool, timeout_s: u64) -> Self {
        WaitView {
            satisfied: r.satisfied,
            mode: if all { "all" } else { "any" }.into(),
            timeout_s,
            finished: r.finished.iter().map(Into::into).collect(),
            running: r.running.iter().map(Into::into).collect(),
            unknown: r.unknown.clone(),
        }
    }
}

/// `opencode_list`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ListView {
    /// Newest first.
    pub tasks: Vec<TaskView>,
    /// Unfinished tasks among them.
    pub running: u64,
    /// Tasks this bridge runs at once at most (OPENCODE_BRIDGE_MAX_PARALLEL).
    pub max_parallel: u64,
}

/// A session's state.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStateView {
    Running,
    Succeeded,
    Failed,
    Interrupted,
    /// No outcome and quiet for 45 minutes (shown `stale?` in the text).
    Stale,
}

impl From<SessionState> for SessionStateView {
    fn from(s: SessionState) -> Self {
        match s {
            SessionState::Running => SessionStateView::Running,
            SessionState::Succeeded => SessionStateView::Succeeded,
            SessionState::Failed => SessionStateView::Failed,
            SessionState::Interrupted => SessionStateView::Interrupted,
            SessionState::Stale => SessionStateView::Stale,
        }
    }
}

/// One opencode session.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionView {
    /// `ses_...`; `opencode://session/{id}` reads its transcript.
    pub id: String,
    pub title: String,
    pub directory: String,
    /// The parent session of a subagent (child) session.
    pub parent_id: Option<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub state: SessionStateView,
    /// The error of a failed session.
    pub error: Option<String>,
    pub tokens: TokensView,
    pub cost: f64,
    /// Epoch milliseconds.
    pub created_ms: i64,
    /// Epoch milliseconds.
    pub updated_ms: i64,
}

impl From<&Session> for SessionView {
    fn from(s: &Session) -> Self {
        SessionView {
            id: s.id.clone(),
            title: s.title.clone(),
            directory: s.directory.clone(),
            parent_id: s.parent_id.clone(),
            agent: s.agent.clone(),
            model: s.model.clone(),
            state: s.state.into(),
            error: s.error.clone(),
            tokens: TokensView {
                input: s.tokens.input,
                output: s.tokens.output,
                reasoning: s.tokens.reasoning,
                cache_read: s.tokens.cache_read,
                cache_write: s.tokens.cache_write,
            },
            cost: s.cost,
            created_ms: s.created_ms,
            updated_ms: s.updated_ms,
        }
    }
}

/// `opencode_sessions`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SessionsView {
    /// Newest first.
    pub sessions: Vec<SessionView>,
    /// Sessions looked at.
    pub scanned: u64,
    /// Set when the scan hit its deadline: how far it got.
    pub partial: Option<String>,
    /// What answered: `store`, `server`, `api`, or `none` (opencode has not run here yet).
    pub backend: String,
}

impl From<&SessionList> for SessionsView {
    fn from(l: &SessionList) -> Self {
        SessionsView {
            sessions: l.sessions.iter().map(Into::into).collect(),
            scanned: l.scanned as u64,
            partial: l.partial.clone(),
            backend: l.backend.to_owned(),
        }
    }
}

/// One running opencode (or bridge-started `claude -p`) process.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProcessView {
    pub pid: i32,
    pub ppid: i32,
    /// `run`, `tui`, `serve`, or another subcommand.
    pub kind: String,
    pub elapsed_ms: u64,
    pub agent: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub cwd: Option<String>,
    pub session_id: Option<String>,
    /// The bridge task that started it (this bridge's or another's), if any.
    pub task_id: Option<u64>,
    /// A warm `opencode serve` of the bridge's state directory: the tasks running on it
    /// (empty: idle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge_server_tasks: Option<Vec<u64>>,
    /// How long that warm server has been idle (0 while a task is on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge_server_idle_ms: Option<u64>,
    /// Whether this bridge holds that warm server (started or adopted it); otherwise a bridge
    /// that stopped left it running, or another bridge holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge_server_held: Option<bool>,
}

impl From<&OpencodeProcess> for ProcessView {
    fn from(p: &OpencodeProcess) -> Self {
        ProcessView {
            pid: p.pid,
            ppid: p.ppid,
            kind: p.kind.as_str().to_owned(),
            elapsed_ms: p.elapsed.as_millis() as u64,
            agent: p.agent.clone(),
            title: p.title.clone(),
            model: p.model.clone(),
            cwd: p.cwd.as_ref().map(|c| c.display().to_string()),
            session_id: p.session_id.clone(),
            task_id: p.task_id,
            bridge_server_tasks: p.bridge_server.as_ref().map(|w| w.tasks.clone()),
            bridge_server_idle_ms: p.bridge_server.as_ref().map(|w| w.idle.as_millis() as u64),
            bridge_server_held: p.bridge_server.as_ref().map(|w| w.held),
        }
    }
}

/// `opencode_processes`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProcessesView {
    pub processes: Vec<ProcessView>,
}

/// A routing mode.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModeView {
    Blueprint,
    Sensitive,
    Insensitive,
}

impl From<bridge_policy::Mode> for ModeView {
    fn from(m: bridge_policy::Mode) -> Self {
        match m {
            bridge_policy::Mode::Blueprint => ModeView::Blueprint,
            bridge_policy::Mode::Sensitive => ModeView::Sensitive,
            bridge_policy::Mode::Insensitive => ModeView::Insensitive,
        }
    }
}

/// What an agent may do to files.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AccessView {
    ReadOnly,
    Editing,
}

/// One source the mode detection looked at.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModeSourceView {
    /// Where it looked (`env OPENCODE_MODE`, a marker file, ...).
    pub source: String,
    /// What it found (`not set`, `absent`, a mode, ...).
    pub reading: String,
}

/// An agent the active mode allows.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AllowedAgentView {
    pub name: String,
    /// Allowed only with `mechanical: true`.
    pub mechanical_only: bool,
    /// opencode knows it here.
    pub installed: bool,
}

/// One agent opencode knows here.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AgentView {
    pub name: String,
    pub description: Option<String>,
    pub access: AccessView,
    /// Why the access is what it is.
    pub access_note: String,
    /// `primary`, `subagent` or `all`.
    pub opencode_mode: String,
    /// Where it is defined.
    pub source: String,
    /// Hidden in opencode: listed, never offered.
    pub hidden: bool,
}

/// `opencode_policy`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PolicyOut {
    /// The directory the policy is for.
    pub cwd: String,
    pub mode: ModeView,
    /// One line: the mode and the source that decided it.
    pub reason: String,
    /// The source that decided the mode.
    pub decided_by: String,
    pub consulted: Vec<ModeSourceView>,
    /// The nearest parent holding `.claude` or `.git`.
    pub project_root: Option<String>,
    /// The agent used when none is named.
    pub default_agent: String,
    pub allowed_agents: Vec<AllowedAgentView>,
    /// Agents the mode refuses by name.
    pub refused_agents: Vec<String>,
    /// Work to delegate (easy or medium).
    pub delegate: Vec<String>,
    /// Work to keep (hard).
    pub keep: Vec<String>,
    pub roster: Vec<AgentView>,
    /// Where the roster was learnt.
    pub roster_origin: String,
    pub roster_warnings: Vec<String>,
    pub plugins: Vec<String>,
    /// The secret-guard allowlist file in force.
    pub secret_allowlist: Option<String>,
    /// Set when `cwd` is not an existing directory (opencode_start would refuse it).
    pub warning: Option<String>,
}

impl PolicyOut {
    pub fn new(cwd: &std::path::Path, view: &PolicyView, warning: Option<String>) -> Self {
        let d = &view.decision;
        PolicyOut {
            cwd: cwd.display().to_string(),
            mode: d.mode.into(),
            reason: view.reason.clone(),
            decided_by: d.decided_by.to_string(),
            consulted: d
                .consulted
                .iter()
                .map(|c| ModeSourceView {
                    source: c.source.to_string(),
                    reading: c.reading.to_string(),
                })
                .collect(),
            project_root: d.project_root.as_ref().map(|p| p.display().to_string()),
            default_agent: view.default_agent.clone(),
            allowed_agents: view
                .allowed_agents
                .iter()
                .map(|a| AllowedAgentView {
                    name: a.name.clone(),
                    mechanical_only: a.mechanical_only,
                    installed: a.installed,
                })
                .collect(),
            refused_agents: view.refused_agents.iter().map(|s| s.to_string()).collect(),
            delegate: view.tiers.delegate.clone(),
            keep: view.tiers.keep.clone(),
            roster: view
                .roster
                .iter()
                .map(|a| AgentView {
                    name: a.name.clone(),
                    description: a.description.clone(),
                    access: match a.access {
                        bridge_policy::roster::Access::ReadOnly => AccessView::ReadOnly,
                        bridge_policy::roster::Access::Editing => AccessView::Editing,
                    },
                    access_note: a.access_note.clone(),
                    opencode_mode: a.opencode_mode.as_str().to_owned(),
                    source: a.source.clone(),
                    hidden: a.hidden,
                })
                .collect(),
            roster_origin: view.roster_origin.clone(),
            roster_warnings: view.roster_warnings.clone(),
            plugins: view.plugins.clone(),
            secret_allowlist: view.secret_allowlist.as_ref().map(|a| a.path.clone()),
            warning,
        }
    }
}

/// Tokens and money of a set of ledger rows (`opencode_usage`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UsageTotalsView {
    pub tasks: usize,
    pub attempts: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Cost as recorded, plus estimates where opencode recorded 0 (USD).
    pub cost_usd: f64,
    /// The estimated part of `cost_usd`.
    pub estimated_usd: f64,
    /// The same tokens at the compare model's list price (USD; an estimate).
    pub claude_equivalent_usd: f64,
    /// `claude_equivalent_usd - cost_usd` (an estimate: tokenizers differ).
    pub saved_usd: f64,
    /// Attempts whose model has no known price: $0 here, their Claude-equivalent against budgets.
    pub unknown_cost_attempts: usize,
    pub free_attempts: usize,
}

impl From<&run_supervisor::usage::ledger::Totals> for UsageTotalsView {
    fn from(t: &run_supervisor::usage::ledger::Totals) -> Self {
        UsageTotalsView {
            tasks: t.tasks,
            attempts: t.attempts,
            input_tokens: t.tokens.input,
            output_tokens: t.tokens.output,
            reasoning_tokens: t.tokens.reasoning,
            cache_read_tokens: t.tokens.cache_read,
            cache_write_tokens: t.tokens.cache_write,
            cost_usd: t.cost_usd,
            estimated_usd: t.estimated_usd,
            claude_equivalent_usd: t.claude_equivalent_usd,
            saved_usd: t.saved_usd,
            unknown_cost_attempts: t.unknown_cost_attempts,
            free_attempts: t.free_attempts,
        }
    }
}

/// One row of a grouping: a day, an agent, a model, a lane or an engine.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UsageGroupView {
    pub key: String,
    #[serde(flatten)]
    pub totals: UsageTotalsView,
}

/// A budget and where it stands.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BudgetView {
    /// `day` or `month` (UTC).
    pub window: String,
    /// The project it is for (`null`: all tasks).
    pub project: Option<String>,
    pub spent_usd: f64,
    pub budget_usd: f64,
    /// When the window resets (RFC 3339 UTC).
    pub resets_at: String,
}

impl From<&run_supervisor::usage::budget::Standing> for BudgetView {
    fn from(s: &run_supervisor::usage::budget::Standing) -> Self {
        BudgetView {
            window: s.window.as_str().to_owned(),
            project: s.project.as_ref().map(|p| p.display().to_string()),
            spent_usd: s.spent,
            budget_usd: s.budget,
            resets_at: fmt_utc(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(s.resets_ms),
            ),
        }
    }
}

/// `opencode_usage`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UsageView {
    /// The window's start (RFC 3339 UTC; `null`: all of the ledger).
    pub since: Option<String>,
    /// The model the tokens are compared with.
    pub compare_model: String,
    pub totals: UsageTotalsView,
    pub by_day: Vec<UsageGroupView>,
    pub by_agent: Vec<UsageGroupView>,
    pub by_model: Vec<UsageGroupView>,
    pub by_lane: Vec<UsageGroupView>,
    pub by_engine: Vec<UsageGroupView>,
    /// By week, keyed by its Monday (YYYY-MM-DD), oldest first.
    pub by_week: Vec<UsageGroupView>,
    /// By UTC month (YYYY-MM), oldest first.
    pub by_month: Vec<UsageGroupView>,
    /// By project (the tasks' working directory), costliest first.
    pub by_project: Vec<UsageGroupView>,
    /// The window's end, exclusive (RFC 3339 UTC; `null`: now).
    pub until: Option<String>,
    /// False when the compare model has no price: Claude-equivalents and savings are then
    /// unknown (shown as 0 here).
    pub compare_priced: bool,
    pub budgets: Vec<BudgetView>,
    /// Spent today (UTC), all tasks, USD.
    pub spent_today_usd: f64,
    /// Ledger lines that could not be read.
    pub unreadable_lines: usize,
    /// Rows left out to keep the answer bounded, per list (`by_day`: the oldest days past the
    /// newest [`USAGE_MAX_DAYS`]; `by_week`: past the newest 53; `by_month`: past the newest
    /// 24; the others: the least costly past [`USAGE_MAX_GROUPS`]). The totals cover them all.
    /// Absent lists were not cut.
    pub cut: std::collections::BTreeMap<String, usize>,
}

/// Days `by_day` of `opencode_usage`'s structured result holds at most (the newest).
pub const USAGE_MAX_DAYS: usize = 62;
/// Rows each list but the time lists holds at most.
pub const USAGE_MAX_GROUPS: usize = 20;

impl UsageView {
    pub fn new(
        s: &run_supervisor::usage::ledger::Summary,
        compare_model: &str,
        budgets: &[run_supervisor::usage::budget::Standing],
        today: f64,
    ) -> UsageView {
        let mut cut = std::collections::BTreeMap::new();
        let mut groups = |name: &str, g: &[run_supervisor::usage::ledger::Group]| {
            // Time lists keep their newest rows, the others their costliest (first).
            let max = match name {
                "by_day" => USAGE_MAX_DAYS,
                "by_week" => 53,
                "by_month" => 24,
                _ => USAGE_MAX_GROUPS,
            };
            let keep = if name == "by_day" || name == "by_week" || name == "by_month" {
                &g[g.len().saturating_sub(max)..]
            } else {
                &g[..g.len().min(max)]
            };
            if keep.len() < g.len() {
                cut.insert(name.to_owned(), g.len() - keep.len());
            }
            keep.iter()
                .map(|g| UsageGroupView {
                    key: g.key.clone(),
                    totals: (&g.totals).into(),
                })
                .collect()
        };
        UsageView {
            since: s
                .since_ms
                .map(|ms| fmt_utc(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))),
            compare_model: compare_model.to_owned(),
            totals: (&s.totals).into(),
            by_day: groups("by_day", &s.by_day),
            by_agent: groups("by_agent", &s.by_agent),
            by_model: groups("by_model", &s.by_model),
            by_lane: groups("by_lane", &s.by_lane),
            by_engine: groups("by_engine", &s.by_engine),
            by_week: groups("by_week", &s.by_week),
            by_month: groups("by_month", &s.by_month),
            by_project: groups("by_project", &s.by_project),
            until: s
                .until_ms
                .map(|ms| fmt_utc(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))),
            compare_priced: s.compare_priced,
            budgets: budgets.iter().map(Into::into).collect(),
            spent_today_usd: today,
            unreadable_lines: s.unreadable_lines,
            cut,
        }
    }
}
