//! The thirteen tools: names, descriptions, input schemas, annotations, and the validation that turns
//! a `tools/call` argument object into typed arguments before anything runs.
//!
//! The schemas are written by hand, on purpose: optional parameters are plain optional
//! properties (never `["type","null"]`), every object rejects unknown properties, and the
//! validator below accepts exactly what the schema describes (a test checks both agree).

use bridge_policy::{Mode, Tier};
use bridge_render::{ArgError, ArgProblem};
use run_supervisor::Isolation;
use run_supervisor::argv::option_like;
use run_supervisor::claude::{CLAUDE_ALIASES, capitalized, is_claude_alias};
use serde_json::{Map, Value, json};

/// Tool names, in the order `tools/list` returns them.
pub const TOOL_NAMES: [&str; 13] = [
    "opencode_start",
    "opencode_status",
    "opencode_result",
    "opencode_apply",
    "opencode_wait",
    "opencode_cancel",
    "opencode_list",
    "opencode_policy",
    "opencode_sessions",
    "opencode_session_output",
    "opencode_session_rename",
    "opencode_processes",
    "opencode_usage",
];

/// The largest `max_cost_usd`.
pub const MAX_COST_USD: f64 = 10_000.0;

/// Tiers accepted by the schema (the policy's names, in the order of [`Tier::ALL`]); only the
/// first two are delegated.
pub const TIERS: [&str; 4] = [
    Tier::Easy.as_str(),
    Tier::Medium.as_str(),
    Tier::Hard.as_str(),
    Tier::Unsure.as_str(),
];
/// Routing modes (the policy's names, in the order of [`Mode::ALL`]).
pub const MODES: [&str; 3] = [
    Mode::Blueprint.as_str(),
    Mode::Sensitive.as_str(),
    Mode::Insensitive.as_str(),
];
/// Session states accepted by the `state` filter.
pub const STATES: [&str; 5] = ["running", "succeeded", "failed", "interrupted", "stale"];
/// Values of `children`.
pub const CHILDREN: [&str; 3] = ["include", "exclude", "only"];
/// Values of `isolation` for `opencode_start`.
pub const ISOLATIONS: [&str; 2] = [Isolation::None.as_str(), Isolation::Worktree.as_str()];
/// Values of `mode` for `opencode_session_output`.
pub const OUTPUT_MODES: [&str; 3] = ["last", "tail", "full"];

/// No reply is longer than this.
pub const REPLY_CAP_CHARS: usize = 100_000;
/// Sessions listed when `limit` is not given.
pub const SESSIONS_DEFAULT_LIMIT: u64 = 30;
/// Messages shown by `tail` when `messages` is not given.
pub const OUTPUT_DEFAULT_MESSAGES: u64 = 12;
/// Characters of `opencode_session_output` when `max_chars` is not given.
pub const OUTPUT_DEFAULT_CHARS: u64 = 20_000;
/// Values of `mode` for `opencode_wait`.
pub const WAIT_MODES: [&str; 2] = ["any", "all"];
/// Seconds `opencode_wait` waits when `timeout_s` is not given: well under the tool-call
/// timeouts of MCP clients.
pub const WAIT_DEFAULT_S: u64 = 50;
/// The longest `opencode_wait`.
pub const WAIT_MAX_S: u64 = 55;
/// Task ids one `opencode_wait` accepts.
pub const WAIT_MAX_IDS: usize = 64;

/// The longest path argument (`cwd`, `directory`): Linux's PATH_MAX.
pub const MAX_PATH_CHARS: usize = 4096;
/// The longest name argument: an agent, a lane, a label, a model, a session or task id.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest `verify` command of `opencode_start`.
pub const MAX_VERIFY_CHARS: usize = 4096;
/// Longest `request_id` of `opencode_start`.
pub const MAX_REQUEST_ID_CHARS: usize = 128;
/// Most paths `allow_protected` names.
pub const MAX_ALLOW_PROTECTED: usize = 64;
/// The longest model argument (`provider/model#variant` can be long on gateways).
pub const MAX_MODEL_CHARS: usize = 200;
/// The longest title argument (and `title_prefix`).
pub const MAX_TITLE_CHARS: usize = 200;
/// The longest `search` text.
pub const MAX_SEARCH_CHARS: usize = 1000;
/// The longest prompt (about 250 000 tokens: more than any model reads at once).
pub const MAX_PROMPT_CHARS: usize = 1_000_000;
/// The schema pattern of values that must not look like an option (an agent, a session id):
/// empty, or a first character other than white space that is not `-`.
pub const NOT_OPTION_LIKE: &str = r"^\s*($|[^\s-])";

/// Everything `tools/list` says about one tool.
#[derive(Debug, Clone)]
pub struct ToolDef {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub schema: Value,
    pub read_only: bool,
    pub destructive: bool,
}

/// The thirteen tool definitions.
pub fn definitions() -> Vec<ToolDef> {
    let id = |what: &str| json!({"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "description": what});
    let session_id = |what: &str| json!({"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NOT_OPTION_LIKE, "description": what});
    vec![
        ToolDef {
            name: "opencode_start",
            title: "Delegate a job to an opencode agent",
            description: "Delegate an EASY or MEDIUM job to an opencode agent. Returns at once with a task id (or, with wait_s, the result itself when the run finishes within that many seconds); follow it with opencode_wait, opencode_status and opencode_result. A Claude model (sonnet, opus, haiku, claude-...) runs through Claude Code's `claude -p` instead of opencode; a quota or usage-limit refusal with a known reset time refuses later starts on that account until then. The policy is enforced here: `tier` is required and hard or unsure work is refused (it stays with you); the routing mode (blueprint by default, sensitive, insensitive; sensitive wins) is detected from OPENCODE_BRIDGE_MODE/OPENCODE_MODE, <project>/.claude/sensitive|insensitive, ~/.claude/insensitive or the `mode` argument, and decides which agents are allowed (sensitive: explorer, librarian, deep-research, oracle, and fixer/worker only with mechanical=true). Give fixer/designer a written blueprint: files, signatures, edge cases, acceptance criteria, test command. Prompts that contain secrets are refused. The session is titled `LANE/agent: task`. Limits: OPENCODE_BRIDGE_MAX_PARALLEL tasks at once (default 6), a per-task timeout, transient provider errors retried only for read-only agents. The output is an untrusted draft: check files, rerun tests, recompute numbers. Call opencode_policy for the full rules.",
            schema: json!({
                "type": "object",
                "properties": {
                    "tier": {"type": "string", "enum": TIERS, "description": "How hard the job is. Only easy and medium are delegated; when unsure, treat the job as one tier harder."},
                    "prompt": {"type": "string", "minLength": 1, "maxLength": MAX_PROMPT_CHARS, "description": "The complete task for the agent; its first line becomes the session title's task part."},
                    "cwd": {"type": "string", "maxLength": MAX_PATH_CHARS, "description": "Working directory of the run; must lie inside OPENCODE_BRIDGE_ROOT. Default: the root."},
                    "lane": {"type": "string", "maxLength": MAX_NAME_CHARS, "description": "LANE part of the title (capitals). Default: the working directory's name upper-cased."},
                    "agent": {"type": "string", "maxLength": MAX_NAME_CHARS, "pattern": NOT_OPTION_LIKE, "description": "opencode agent (explorer, librarian, deep-research, oracle, fixer, designer, worker, ...). Default: OPENCODE_BRIDGE_AGENT or worker; explorer in sensitive mode."},
                    "title": {"type": "string", "maxLength": MAX_TITLE_CHARS, "description": "Explicit session title; should follow `LANE/agent: task`."},
                    "mode": {"type": "string", "enum": MODES, "description": "Routing mode, only when the user asked for one. Sensitive always wins over other sources."},
                    "mechanical": {"type": "boolean", "description": "The job is a purely mechanical edit (rename, reformat, move). Lets fixer/worker run in sensitive mode."},
                    "model": {"type": "string", "maxLength": MAX_MODEL_CHARS, "pattern": model_pattern(), "description": "provider/model[#variant] runs through opencode; a Claude model (sonnet, opus, haiku, claude-..., claude/<model>, optionally #effort) runs through Claude Code (`claude -p`) with the same policy, a read-only or editing tool set by agent, and no MCP servers. Default: OPENCODE_BRIDGE_MODEL, else opencode's default."},
                    "wait_s": {"type": "integer", "minimum": 1, "maximum": WAIT_MAX_S, "description": "Sync run: wait up to this many seconds (at most 55, under client tool timeouts) and return the result directly if the task finishes in time; otherwise the task id is returned as usual."},
                    "timeout_minutes": {"type": "integer", "minimum": 1, "maximum": 1440, "description": "Kill the run after this many minutes. Default: OPENCODE_BRIDGE_TIMEOUT_MIN (120)."},
                    "session": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NOT_OPTION_LIKE, "description": "Continue this opencode session (ses_...) with the prompt as a follow-up instead of starting a new one. The same policy checks apply; the agent defaults to the session's, cwd to its directory; the session keeps its id and title."},
                    "label": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "description": "A label of your choice (e.g. a batch name); opencode_list can filter by it."},
                    "max_cost_usd": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_COST_USD, "description": "Stop the run once it has cost more than this many USD (checked as each model step's cost arrives; estimated from list prices where opencode records 0); it then fails with kind budget and keeps what it did. Day and month budgets (opencode_policy shows them) apply as well."},
                    "isolation": {"type": "string", "enum": ISOLATIONS, "description": "worktree: an editing agent works in its own detached git worktree (your uncommitted and untracked files carried over) and your checkout is not touched; opencode_result shows its patch and opencode_apply brings it in or discards it. Needs a git repository with a commit. Default: none (the agent edits your checkout)."},
                    "verify": {"type": "string", "minLength": 1, "maxLength": MAX_VERIFY_CHARS, "description": "Prefer this for code changes: a shell command (run as `sh -c`) in the task's cwd after the agent's turn, inside the same fence and world as the run (an isolated task's in its worktree, before anything is applied); its exit status decides. The result shows `verify: passed` or `verify: failed (exit N)` with the end of its output (secrets redacted). On failure the agent gets that output as a follow-up in its session and the command runs again (verify_retries times); still failing, the task fails with kind verify. Its time counts against the task's time limit. E.g. `cargo test -q`, `npm test`, `pytest -x`."},
                    "verify_retries": {"type": "integer", "minimum": 0, "maximum": 3, "description": "Follow-ups the agent gets with a failed verify's output before the task fails (0-3). Default 1."},
                    "output_schema": {"type": "object", "description": "A JSON Schema (at most 64 KB) the agent's final answer must satisfy: the prompt tells the agent; an invalid answer gets one follow-up quoting the validation errors, then the task fails with kind schema; a valid answer comes back parsed in the result's structuredContent (key `output`) and in its text."},
                    "request_id": {"type": "string", "minLength": 1, "maxLength": MAX_REQUEST_ID_CHARS, "description": "Your key for this start (up to 128 characters): a repeated start with the same request_id within 24 hours (also after a bridge restart) returns the task the first one started, in its current state, instead of starting another; the same request_id with another prompt, cwd or agent is refused. Use it when you may retry a start whose answer you did not get."},
                    "server": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NOT_OPTION_LIKE, "description": "Run the task as a session on this opencode server of the bridge's config file ([[server]] entries; opencode_doctor lists them); cwd is mapped from OPENCODE_BRIDGE_ROOT to the server's root. `local`: the bridge's own engine. Default: the bridge's engine (OPENCODE_BRIDGE_ENGINE)."}
                },
                "required": ["tier", "prompt"],
                "additionalProperties": false
            }),
            read_only: false,
            destructive: false,
        },
        ToolDef {
            name: "opencode_status",
            title: "Status of a delegated task",
            description: "State of a delegated task (starting, running, retrying, succeeded, failed, cancelled, timed out; orphaned when the bridge that started it is gone but its run goes on), elapsed time, attempts, label and its opencode session id. A failed task shows its failure kind and what to do. Tasks are kept across bridge restarts.",
            schema: json!({
                "type": "object",
                "properties": {"id": id("Task id returned by opencode_start.")},
                "required": ["id"],
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_result",
            title: "Output of a delegated task",
            description: "What a delegated task answered, with the failure kind (rate_limit, quota, context_length, output_limit, overloaded, auth, model, agent, invalid_request, network, timeout, spawn, server, exit) and advice when it failed, and for editing agents the files it changed with a short diff stat; for a task started with isolation=worktree its patch (apply it with opencode_apply). Output longer than 60000 characters is cut to its end unless head or tail is given. Treat it as an untrusted draft and verify it.",
            schema: json!({
                "type": "object",
                "properties": {
                    "id": id("Task id returned by opencode_start."),
                    "head": {"type": "integer", "minimum": 1, "maximum": REPLY_CAP_CHARS, "description": "Return only the first N characters."},
                    "tail": {"type": "integer", "minimum": 1, "maximum": REPLY_CAP_CHARS, "description": "Return only the last N characters."}
                },
                "required": ["id"],
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_apply",
            title: "Apply or discard an isolated task's change",
            description: "For a finished task started with isolation=worktree: bring its change into your checkout, or with discard=true throw it away; either removes the task's worktree. Files you changed meanwhile are merged three-way; if any file conflicts nothing is written and the conflicting files are named (resolve them, then apply again, or discard). Never commits, stages or moves a ref.",
            schema: json!({
                "type": "object",
                "properties": {
                    "id": id("Task id returned by opencode_start (a task started with isolation=worktree)."),
                    "discard": {"type": "boolean", "description": "Throw the change away instead of applying it."},
                    "allow_protected": {"type": "array", "maxItems": MAX_ALLOW_PROTECTED, "items": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS}, "description": "Protected paths the change may write (git hooks and config, .mcp.json, .claude settings, commands and agents, .opencode, opencode.json, .envrc, .vscode, .idea, .devcontainer: they run later outside any fence), each as the refusal named it or a directory above it. Without it a change touching one is refused and nothing is written."}
                },
                "required": ["id"],
                "additionalProperties": false
            }),
            read_only: false,
            destructive: true,
        },
        ToolDef {
            name: "opencode_wait",
            title: "Wait for delegated tasks",
            description: "Wait until any (default) or all of the given tasks have finished, for at most timeout_s seconds (default 50, at most 55, under client tool timeouts). Returns which finished, with their outcome, and which still run; call it again to keep waiting. Cheaper than polling opencode_status.",
            schema: json!({
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}, "minItems": 1, "maxItems": WAIT_MAX_IDS, "description": "Task ids returned by opencode_start."},
                    "mode": {"type": "string", "enum": WAIT_MODES, "description": "any (default): return when one has finished; all: when every one has."},
                    "timeout_s": {"type": "integer", "minimum": 1, "maximum": WAIT_MAX_S, "description": "Longest wait in seconds (default 50)."}
                },
                "required": ["ids"],
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_cancel",
            title: "Cancel a delegated task",
            description: "Stop a starting, running, retrying or orphaned delegated task: SIGTERM, then SIGKILL after a grace period, to its whole process group (an orphan's pid is checked against its recorded start time first). Never touches sessions or processes no bridge started; a task another live bridge runs is left to that bridge. A task that already ended is reported as such.",
            schema: json!({
                "type": "object",
                "properties": {"id": id("Task id returned by opencode_start.")},
                "required": ["id"],
                "additionalProperties": false
            }),
            read_only: false,
            destructive: true,
        },
        ToolDef {
            name: "opencode_list",
            title: "Delegated tasks",
            description: "Delegated tasks, newest first, with state, agent, elapsed time, tokens, session id, label and title: this bridge's and those of earlier bridges on the same state directory (kept across restarts; finished ones for OPENCODE_BRIDGE_PRUNE_DAYS days). For every opencode session on the machine use opencode_sessions.",
            schema: json!({
                "type": "object",
                "properties": {
                    "label": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "description": "Only tasks started with this label."}
                },
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_policy",
            title: "The delegation policy in force",
            description: "The delegation policy opencode_start enforces for a directory: the active routing mode and where it was detected, the agents allowed in it, what to delegate and what to keep, how to verify what comes back, and the agent roster. Call it when unsure before delegating.",
            schema: json!({
                "type": "object",
                "properties": {
                    "cwd": {"type": "string", "maxLength": MAX_PATH_CHARS, "description": "Directory whose project decides the mode. Default: OPENCODE_BRIDGE_ROOT."},
                    "mode": {"type": "string", "enum": MODES, "description": "Show the policy as if this mode were asked for."}
                },
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_sessions",
            title: "Every opencode session",
            description: "opencode sessions of every project on this machine, newest first: id, state (running, succeeded, failed, interrupted, stale?), agent, age, tokens in/out, directory and title, whoever started them. state=running shows what is active now; a session with no outcome that has been quiet for 45 minutes shows as stale?. A scan that hits its deadline says PARTIAL.",
            schema: json!({
                "type": "object",
                "properties": {
                    "state": {"type": "string", "enum": STATES, "description": "Only sessions in this state."},
                    "agent": {"type": "string", "maxLength": MAX_NAME_CHARS, "description": "Only sessions of this agent."},
                    "directory": {"type": "string", "maxLength": MAX_PATH_CHARS, "description": "Only sessions whose directory contains this text."},
                    "search": {"type": "string", "maxLength": MAX_SEARCH_CHARS, "description": "Case-insensitive text searched in titles and messages."},
                    "title_prefix": {"type": "string", "maxLength": MAX_TITLE_CHARS, "description": "Only titles starting with this, e.g. `DOCS/` for one lane."},
                    "since_minutes": {"type": "integer", "minimum": 1, "maximum": 525600, "description": "Only sessions updated in the last N minutes."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "At most this many sessions (default 30)."},
                    "children": {"type": "string", "enum": CHILDREN, "description": "Subagent (child) sessions: include (default), exclude, or only."},
                    "server": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NOT_OPTION_LIKE, "description": "Read this opencode server of the bridge's config file ([[server]]) instead of this machine's sessions."}
                },
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_session_output",
            title: "What an opencode session did",
            description: "What one opencode session did. mode=last: its final answer; tail (default): the last `messages` messages condensed, with timestamps, assistant text and `-> tool(input) [status] => result` lines (reasoning dropped, tool input and output clipped); full: the same for every message. The text is cut to max_chars, keeping the end.",
            schema: json!({
                "type": "object",
                "properties": {
                    "id": session_id("Session id (ses_...), as opencode_sessions or opencode_status show it."),
                    "mode": {"type": "string", "enum": OUTPUT_MODES, "description": "last, tail (default) or full."},
                    "messages": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Messages shown by tail (default 12)."},
                    "max_chars": {"type": "integer", "minimum": 200, "maximum": REPLY_CAP_CHARS, "description": "Cut the text to this many characters, keeping the end (default 20000)."},
                    "server": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NOT_OPTION_LIKE, "description": "Read this opencode server of the bridge's config file ([[server]]) instead of this machine's sessions."}
                },
                "required": ["id"],
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_session_rename",
            title: "Rename an opencode session",
            description: "Set the title of an opencode session, the only change the bridge makes to sessions it did not start. Use the convention `LANE/agent: task` (LANE in capitals, task 3-8 words); a title that breaks it is still set, with a warning.",
            schema: json!({
                "type": "object",
                "properties": {
                    "id": session_id("Session id (ses_...)."),
                    "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS, "description": "The new title, e.g. `DOCS/librarian: collect API notes`."},
                    "server": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NOT_OPTION_LIKE, "description": "Rename on this opencode server of the bridge's config file ([[server]]) (a session of that server)."}
                },
                "required": ["id", "title"],
                "additionalProperties": false
            }),
            read_only: false,
            destructive: false,
        },
        ToolDef {
            name: "opencode_processes",
            title: "Running opencode processes",
            description: "Operating-system view of running opencode processes (opencode run, serve and the TUI): pid, elapsed time, agent, title, working directory, and whether this bridge started it (a task's run, or a warm server with the tasks running on it). Shows runs that no service knows about and processes that hang.",
            schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            read_only: true,
            destructive: false,
        },
        ToolDef {
            name: "opencode_usage",
            title: "What delegation cost and saved",
            description: "Usage of the bridge's finished tasks from its ledger (kept across restarts): tokens, cost (as opencode or claude -p recorded it; estimated from list prices, and marked, where opencode recorded 0), the same tokens at the Claude compare model's price (OPENCODE_BRIDGE_COMPARE_MODEL) and what was saved, in total and by day (by week past 60 days), agent, model, lane and engine, or by the one grouping `by` names (also week, month, project). The last 30 days unless since/since_days/until say otherwise. Savings are an estimate (tokenizers differ), computed at the compare model's price now. Also the day and month budgets and their spend, and where the prices come from.",
            schema: json!({
                "type": "object",
                "properties": {
                    "since_days": {"type": "integer", "minimum": 1, "maximum": 3650, "description": "Only the last N UTC days, today included (default: all of the ledger)."},
                    "since": {"type": "string", "minLength": 10, "maxLength": 10, "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "description": "Only from this UTC date on (YYYY-MM-DD); wins over since_days."},
                    "until": {"type": "string", "minLength": 10, "maxLength": 10, "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "description": "Only up to this UTC date, included (YYYY-MM-DD)."},
                    "by": {"type": "string", "enum": ["day", "week", "month", "project", "model", "agent", "lane", "engine"], "description": "Show only this grouping (default: by day, by week past 60 days, then by agent, model, lane and engine)."},
                    "project": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "Only the tasks whose working directory is in this absolute directory."}
                },
                "additionalProperties": false
            }),
            read_only: true,
            destructive: false,
        },
    ]
}

/// `provider/model` with an optional `#variant`, or a bare Claude model id or alias.
/// The schema pattern of `model`: `provider/model`, a Claude id (`claude-...`) or a Claude Code
/// alias (run_supervisor's one list, lower case or capitalized, optionally `[1m]`), each with
/// an optional `#variant`. The same shapes as [`valid_model`].
pub fn model_pattern() -> String {
    let aliases: Vec<String> = CLAUDE_ALIASES
        .iter()
        .map(|a| a.to_string())
        .chain(CLAUDE_ALIASES.iter().map(|a| capitalized(a)))
        .collect();
    format!(
        r"^([^-/\s#][^/\s#]*/[^-\s#][^\s#]*|[Cc]laude-[^/\s#]+|({})(\[1m\])?)(#[^-\s#][^\s#]*)?$",
        aliases.join("|")
    )
}

/// A validated call.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Start(StartArgs),
    Status {
        id: String,
    },
    Result {
        id: String,
        head: Option<usize>,
        tail: Option<usize>,
    },
    Wait {
        ids: Vec<String>,
        all: bool,
        timeout_s: u64,
    },
    Apply {
        id: String,
        discard: bool,
        /// Protected paths the caller named (`allow_protected`).
        allow_protected: Vec<String>,
    },
    Cancel {
        id: String,
    },
    List {
        label: Option<String>,
    },
    Policy {
        cwd: Option<String>,
        mode: Option<Mode>,
    },
    Sessions(SessionsArgs),
    SessionOutput(OutputArgs),
    Rename {
        id: String,
        title: String,
        /// A server of the config file whose session this is.
        server: Option<String>,
    },
    Processes,
    Usage {
        /// Epoch ms of the window's start (`None`: all of the ledger).
        since_ms: Option<u64>,
        /// How the window was asked for (`since 2026-01-01`, `all time`).
        since_text: String,
        /// Epoch ms of the window's end, exclusive (`None`: now).
        until_ms: Option<u64>,
        /// The one grouping to show (`None`: the usual ones).
        by: Option<String>,
        /// Only the tasks in this directory.
        project: Option<String>,
    },
}

/// Arguments of `opencode_start`. Tier and mode are the policy's types, parsed here once.
#[derive(Debug, Clone, PartialEq)]
pub struct StartArgs {
    pub tier: Tier,
    pub prompt: String,
    pub cwd: Option<String>,
    pub lane: Option<String>,
    pub agent: Option<String>,
    pub title: Option<String>,
    pub mode: Option<Mode>,
    pub mechanical: bool,
    pub model: Option<String>,
    pub timeout_minutes: Option<u64>,
    pub session: Option<String>,
    pub label: Option<String>,
    /// Sync run: seconds to wait for the result before answering with the task id.
    pub wait_s: Option<u64>,
    /// Where an editing agent works: the caller's checkout or a worktree of its own.
    pub isolation: Isolation,
    /// A server of the config file to run on (`local`: the bridge's own engine).
    pub server: Option<String>,
    /// Stop the run once it has cost more than this (USD).
    pub max_cost_usd: Option<f64>,
    /// The caller's idempotency key.
    pub request_id: Option<String>,
    /// A shell command that checks the work after the agent's turn.
    pub verify: Option<String>,
    /// Follow-ups a failed verify gets (0-3, default 1).
    pub verify_retries: Option<u64>,
    /// A JSON Schema the final answer must satisfy.
    pub output_schema: Option<Value>,
}

/// Arguments of `opencode_sessions`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionsArgs {
    pub state: Option<String>,
    pub agent: Option<String>,
    pub directory: Option<String>,
    pub search: Option<String>,
    pub title_prefix: Option<String>,
    pub since_minutes: Option<u64>,
    pub limit: Option<u64>,
    pub children: Option<String>,
    /// Read this server of the config file instead of this machine's sessions.
    pub server: Option<String>,
}

/// Arguments of `opencode_session_output`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputArgs {
    pub id: String,
    pub mode: String,
    pub messages: u64,
    pub max_chars: u64,
    /// Read this server of the config file instead of this machine's sessions.
    pub server: Option<String>,
}

/// Whether `name` is one of our tools.
pub fn is_tool(name: &str) -> bool {
    TOOL_NAMES.contains(&name)
}

/// Validates the arguments of a call to a known tool. The error names the field and what was
/// wrong; bridge-render words it for MCP and for the command line.
pub fn parse_call(tool: &str, args: Option<&Map<String, Value>>) -> Result<Call, ArgError> {
    let empty = Map::new();
    // Built once: every call is checked against these schemas, and building them (thirteen JSON
    // trees, the model pattern) cost more than the rest of a status call.
    static DEFS: std::sync::LazyLock<Vec<ToolDef>> = std::sync::LazyLock::new(definitions);
    let def = DEFS
        .iter()
        .find(|d| d.name == tool)
        .ok_or_else(|| ArgError::new(tool, ArgProblem::UnknownTool))?;
    let a = Args {
        map: args.unwrap_or(&empty),
        schema: &def.schema,
    };
    a.check_unknown()?;
    Ok(match tool {
        "opencode_start" => Call::Start(StartArgs {
            tier: a.required_choice("tier", &Tier::ALL, Tier::as_str)?,
            prompt: a.required_str("prompt")?,
            cwd: a.opt_str("cwd")?,
            lane: a.opt_str("lane")?,
            agent: a.opt_not_option("agent", "agent")?,
            title: a.opt_str("title")?,
            mode: a.opt_choice("mode", &Mode::ALL, Mode::as_str)?,
            mechanical: a.opt_bool("mechanical")?.unwrap_or(false),
            model: a.opt_model("model")?,
            timeout_minutes: a.opt_int("timeout_minutes", 1, 1440)?,
            session: match a.opt_nonempty("session")? {
                Some(_) => a.opt_not_option("session", "session id")?,
                None => None,
            },
            label: a.opt_str_max("label", MAX_NAME_CHARS)?,
            wait_s: a.opt_int("wait_s", 1, WAIT_MAX_S)?,
            isolation: match a.opt_enum("isolation", &ISOLATIONS)?.as_deref() {
                Some("worktree") => Isolation::Worktree,
                _ => Isolation::None,
            },
            server: match a.opt_nonempty("server")? {
                Some(_) => a.opt_not_option("server", "server name")?,
                None => None,
            },
            max_cost_usd: a.opt_usd("max_cost_usd", MAX_COST_USD)?,
            request_id: a.opt_str_max("request_id", MAX_REQUEST_ID_CHARS)?,
            verify: a.opt_nonempty("verify")?,
            verify_retries: a.opt_int("verify_retries", 0, 3)?,
            output_schema: a.opt_object("output_schema")?,
        }),
        "opencode_status" => Call::Status {
            id: a.required_str("id")?,
        },
        "opencode_result" => Call::Result {
            id: a.required_str("id")?,
            head: a
                .opt_int("head", 1, REPLY_CAP_CHARS as u64)?
                .map(|v| v as usize),
            tail: a
                .opt_int("tail", 1, REPLY_CAP_CHARS as u64)?
                .map(|v| v as usize),
        },
        "opencode_wait" => Call::Wait {
            ids: a.required_ids("ids", WAIT_MAX_IDS)?,
            all: a.opt_enum("mode", &WAIT_MODES)?.as_deref() == Some("all"),
            timeout_s: a
                .opt_int("timeout_s", 1, WAIT_MAX_S)?
                .unwrap_or(WAIT_DEFAULT_S),
        },
        "opencode_apply" => Call::Apply {
            id: a.required_str("id")?,
            discard: a.opt_bool("discard")?.unwrap_or(false),
            allow_protected: a.opt_paths("allow_protected", MAX_ALLOW_PROTECTED)?,
        },
        "opencode_cancel" => Call::Cancel {
            id: a.required_str("id")?,
        },
        "opencode_list" => Call::List {
            label: a.opt_nonempty("label")?,
        },
        "opencode_policy" => Call::Policy {
            cwd: a.opt_str("cwd")?,
            mode: a.opt_choice("mode", &Mode::ALL, Mode::as_str)?,
        },
        "opencode_sessions" => Call::Sessions(SessionsArgs {
            state: a.opt_enum("state", &STATES)?,
            agent: a.opt_str("agent")?,
            directory: a.opt_str("directory")?,
            search: a.opt_str("search")?,
            title_prefix: a.opt_str("title_prefix")?,
            since_minutes: a.opt_int("since_minutes", 1, 525_600)?,
            limit: a.opt_int("limit", 1, 500)?,
            children: a.opt_enum("children", &CHILDREN)?,
            server: match a.opt_nonempty("server")? {
                Some(_) => a.opt_not_option("server", "server name")?,
                None => None,
            },
        }),
        "opencode_session_output" => Call::SessionOutput(OutputArgs {
            id: a.required_session_id("id")?,
            mode: a
                .opt_enum("mode", &OUTPUT_MODES)?
                .unwrap_or_else(|| "tail".into()),
            messages: a
                .opt_int("messages", 1, 1000)?
                .unwrap_or(OUTPUT_DEFAULT_MESSAGES),
            max_chars: a
                .opt_int("max_chars", 200, REPLY_CAP_CHARS as u64)?
                .unwrap_or(OUTPUT_DEFAULT_CHARS),
            server: match a.opt_nonempty("server")? {
                Some(_) => a.opt_not_option("server", "server name")?,
                None => None,
            },
        }),
        "opencode_session_rename" => Call::Rename {
            id: a.required_session_id("id")?,
            title: a.required_str_max("title", MAX_TITLE_CHARS)?,
            server: match a.opt_nonempty("server")? {
                Some(_) => a.opt_not_option("server", "server name")?,
                None => None,
            },
        },
        "opencode_processes" => Call::Processes,
        "opencode_usage" => {
            let days = a.opt_int("since_days", 1, 3650)?;
            let until = a.opt_date("until")?;
            let by = a.opt_enum(
                "by",
                &[
                    "day", "week", "month", "project", "model", "agent", "lane", "engine",
                ],
            )?;
            let project = a.opt_nonempty("project")?;
            if let Some(p) = &project
                && !std::path::Path::new(p).is_absolute()
            {
                return Err(ArgError::new(
                    "project",
                    ArgProblem::WrongType {
                        expected: "an absolute directory",
                        got: Value::String(p.clone()),
                    },
                ));
            }
            let mut call = match a.opt_date("since")? {
                Some((ms, text)) => Call::Usage {
                    since_ms: Some(ms),
                    since_text: format!("since {text}"),
                    until_ms: None,
                    by: None,
                    project: None,
                },
                // The last 30 days unless a window is given.
                None if days.is_none() && until.is_some() => usage_window(None, 0),
                None => usage_window(days.or(Some(30)), run_supervisor::registry::now_ms()),
            };
            if let Call::Usage {
                since_text,
                until_ms,
                by: b,
                project: pr,
                ..
            } = &mut call
            {
                if let Some((ms, text)) = until {
                    *until_ms = Some(ms.saturating_add(86_400_000));
                    since_text.push_str(&format!(" until {text}"));
                }
                if let Some(p) = &project {
                    since_text.push_str(&format!(" in {p}"));
                }
                *b = by;
                *pr = project;
            }
            call
        }
        other => return Err(ArgError::new(other, ArgProblem::UnknownTool)),
    })
}

struct Args<'a> {
    map: &'a Map<String, Value>,
    schema: &'a Value,
}

impl Args<'_> {
    fn properties(&self) -> Vec<&str> {
        self.schema["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    fn check_unknown(&self) -> Result<(), ArgError> {
        let known = self.properties();
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(key) => Err(ArgError::new(
                key.as_str(),
                ArgProblem::Unknown {
                    suggestion: closest(key, &known).map(String::from),
                    accepted: known.iter().map(|k| k.to_string()).collect(),
                },
            )),
        }
    }

    /// A present, non-null value. `null` counts as absent (some clients send it for "unset").
    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    /// The `maxLength` the schema gives `field` (every string argument has one, or an enum).
    fn max_len(&self, field: &str) -> Option<usize> {
        let p = &self.schema["properties"][field];
        p["maxLength"]
            .as_u64()
            .or_else(|| p["items"]["maxLength"].as_u64())
            .map(|m| m as usize)
    }

    /// A string of at most the schema's `maxLength` characters, checked before anything else
    /// looks at it (so no long value is echoed or goes further).
    fn opt_str(&self, field: &'static str) -> Result<Option<String>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => match self.max_len(field) {
                Some(max) if s.chars().nth(max).is_some() => {
                    Err(ArgError::new(field, ArgProblem::TooLong { max }))
                }
                _ => Ok(Some(s.clone())),
            },
            Some(v) => Err(ArgError::new(
                field,
                ArgProblem::WrongType {
                    expected: "a string",
                    got: v.clone(),
                },
            )),
        }
    }

    /// An optional JSON object.
    fn opt_object(&self, field: &'static str) -> Result<Option<Value>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
            Some(v) => Err(ArgError::new(
                field,
                ArgProblem::WrongType {
                    expected: "a JSON Schema object",
                    got: v.clone(),
                },
            )),
        }
    }

    fn required_str(&self, field: &'static str) -> Result<String, ArgError> {
        match self.opt_str(field)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            Some(_) => Err(ArgError::new(field, ArgProblem::Empty)),
            None => Err(ArgError::new(
                field,
                ArgProblem::Missing {
                    expected: "a string",
                },
            )),
        }
    }

    /// An optional string that, when given, must not be empty.
    fn opt_nonempty(&self, field: &'static str) -> Result<Option<String>, ArgError> {
        match self.opt_str(field)? {
            Some(s) if s.is_empty() => Err(ArgError::new(field, ArgProblem::Empty)),
            other => Ok(other),
        }
    }

    /// A string that must not look like an option (an agent, a session id).
    fn opt_not_option(
        &self,
        field: &'static str,
        what: &'static str,
    ) -> Result<Option<String>, ArgError> {
        match self.opt_str(field)? {
            Some(s) if option_like(&s) => Err(ArgError::new(
                field,
                ArgProblem::OptionLike {
                    got: Value::String(s),
                    what,
                },
            )),
            other => Ok(other),
        }
    }

    /// A required session id: not empty, not looking like an option.
    fn required_session_id(&self, field: &'static str) -> Result<String, ArgError> {
        let s = self.required_str(field)?;
        if option_like(&s) {
            return Err(ArgError::new(
                field,
                ArgProblem::OptionLike {
                    got: Value::String(s),
                    what: "session id",
                },
            ));
        }
        Ok(s)
    }

    fn opt_str_max(&self, field: &'static str, max: usize) -> Result<Option<String>, ArgError> {
        let s = self.opt_nonempty(field)?;
        if s.as_ref().is_some_and(|s| s.chars().count() > max) {
            return Err(ArgError::new(field, ArgProblem::TooLong { max }));
        }
        Ok(s)
    }

    /// A required array of 1..=max non-empty strings.
    fn required_ids(&self, field: &'static str, max: usize) -> Result<Vec<String>, ArgError> {
        let bad = || ArgError::new(field, ArgProblem::NotTaskIds { max });
        match self.get(field) {
            None => Err(ArgError::new(
                field,
                ArgProblem::Missing {
                    expected: "an array of task ids",
                },
            )),
            Some(Value::Array(items)) if !items.is_empty() && items.len() <= max => items
                .iter()
                .map(|v| match v {
                    Value::String(s) if s.chars().count() > MAX_NAME_CHARS => Err(ArgError::new(
                        field,
                        ArgProblem::TooLong {
                            max: MAX_NAME_CHARS,
                        },
                    )),
                    Value::String(s) if !s.is_empty() => Ok(s.clone()),
                    _ => Err(bad()),
                })
                .collect(),
            Some(_) => Err(bad()),
        }
    }

    /// An optional array of at most `max` non-empty paths of at most [`MAX_PATH_CHARS`]
    /// characters each (absent: none).
    fn opt_paths(&self, field: &'static str, max: usize) -> Result<Vec<String>, ArgError> {
        let bad = |got: &Value| {
            ArgError::new(
                field,
                ArgProblem::WrongType {
                    expected: "an array of paths",
                    got: got.clone(),
                },
            )
        };
        match self.get(field) {
            None => Ok(vec![]),
            Some(Value::Array(items)) if items.len() <= max => items
                .iter()
                .map(|v| match v {
                    Value::String(s) if s.chars().count() > MAX_PATH_CHARS => Err(ArgError::new(
                        field,
                        ArgProblem::TooLong {
                            max: MAX_PATH_CHARS,
                        },
                    )),
                    Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                    Value::String(_) => Err(ArgError::new(field, ArgProblem::Empty)),
                    other => Err(bad(other)),
                })
                .collect(),
            // Too many: the count is what is out of range.
            Some(Value::Array(items)) => Err(ArgError::new(
                field,
                ArgProblem::OutOfRange {
                    got: Value::from(items.len()),
                    min: 0,
                    max: max as u64,
                },
            )),
            Some(other) => Err(bad(other)),
        }
    }

    fn required_str_max(&self, field: &'static str, max: usize) -> Result<String, ArgError> {
        let s = self.required_str(field)?;
        if s.chars().count() > max {
            return Err(ArgError::new(field, ArgProblem::TooLong { max }));
        }
        Ok(s)
    }

    /// One of `accepted`, in any letter case (`EASY` is `easy`); the value returned is the
    /// accepted spelling.
    fn opt_enum(
        &self,
        field: &'static str,
        accepted: &[&'static str],
    ) -> Result<Option<String>, ArgError> {
        Ok(self.opt_choice(field, accepted, |a| a)?.map(str::to_string))
    }

    /// One of a closed set of values (`all`, spelt by `name`), in any letter case, parsed
    /// into its type (the policy's [`Tier`] and [`Mode`] this way).
    fn opt_choice<T: Copy>(
        &self,
        field: &'static str,
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<Option<T>, ArgError> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        v.as_str()
            .and_then(|s| {
                all.iter()
                    .find(|&&t| name(t).eq_ignore_ascii_case(s.trim()))
            })
            .map(|&t| Some(t))
            .ok_or_else(|| {
                ArgError::new(
                    field,
                    ArgProblem::NotOneOf {
                        got: v.clone(),
                        allowed: all.iter().map(|&t| name(t)).collect(),
                    },
                )
            })
    }

    /// A required [`Args::opt_choice`].
    fn required_choice<T: Copy>(
        &self,
        field: &'static str,
        all: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<T, ArgError> {
        self.opt_choice(field, all, name)?.ok_or_else(|| {
            ArgError::new(
                field,
                ArgProblem::MissingOneOf {
                    allowed: all.iter().map(|&t| name(t)).collect(),
                },
            )
        })
    }

    fn opt_bool(&self, field: &'static str) -> Result<Option<bool>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ArgError::new(field, ArgProblem::NotBool { got: v.clone() })),
        }
    }

    fn opt_int(&self, field: &'static str, min: u64, max: u64) -> Result<Option<u64>, ArgError> {
        let bad = |v: &Value| {
            ArgError::new(
                field,
                ArgProblem::OutOfRange {
                    got: v.clone(),
                    min,
                    max,
                },
            )
        };
        match self.get(field) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => {
                let int = n.as_u64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                });
                match int {
                    Some(i) if (min..=max).contains(&i) => Ok(Some(i)),
                    _ => Err(bad(v)),
                }
            }
            Some(v) => Err(bad(v)),
        }
    }

    fn opt_usd(&self, field: &'static str, max: f64) -> Result<Option<f64>, ArgError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_f64().is_some_and(|f| f > 0.0 && f <= max) => {
                Ok(n.as_f64())
            }
            Some(v) => Err(ArgError::new(
                field,
                ArgProblem::NotUsd {
                    got: v.clone(),
                    max,
                },
            )),
        }
    }

    /// A UTC date `YYYY-MM-DD`: its midnight in epoch ms, and the date.
    fn opt_date(&self, field: &'static str) -> Result<Option<(u64, String)>, ArgError> {
        let Some(text) = self.opt_nonempty(field)? else {
            return Ok(None);
        };
        let text = text.trim().to_owned();
        match run_supervisor::utc::parse(&format!("{text}T00:00:00Z")) {
            Some(t) if text.len() == 10 && run_supervisor::utc::format(t).starts_with(&text) => {
                let ms = t
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                Ok(Some((ms, text)))
            }
            _ => Err(ArgError::new(
                field,
                ArgProblem::NotDate {
                    got: Value::String(text),
                },
            )),
        }
    }

    fn opt_model(&self, field: &'static str) -> Result<Option<String>, ArgError> {
        let Some(model) = self.opt_str(field)? else {
            return Ok(None);
        };
        let (main, variant) = model.split_once('#').unwrap_or((&model, ""));
        let (provider, name) = main.split_once('/').unwrap_or((main, ""));
        if [provider, name, variant].into_iter().any(option_like) {
            return Err(ArgError::new(
                field,
                ArgProblem::OptionLike {
                    got: Value::String(model),
                    what: "model",
                },
            ));
        }
        if valid_model(&model) {
            Ok(Some(model))
        } else {
            Err(ArgError::new(field, ArgProblem::BadModel { got: model }))
        }
    }
}

/// The usage window of the last `days` UTC days, today included, at `now_ms` (`None`: all).
pub fn usage_window(days: Option<u64>, now_ms: u64) -> Call {
    match days {
        Some(d) => {
            let today = now_ms / 86_400_000;
            let start = today.saturating_sub(d - 1) * 86_400_000;
            Call::Usage {
                since_ms: Some(start),
                since_text: format!("since {}", run_supervisor::utc::day(start)),
                until_ms: None,
                by: None,
                project: None,
            }
        }
        None => Call::Usage {
            since_ms: None,
            since_text: "all time".into(),
            until_ms: None,
            by: None,
            project: None,
        },
    }
}

/// The known name `name` most likely misspells: the same in another letter case or with `-`
/// for `_`, or at most two edits away (one for names of up to four letters).
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let wanted = norm(name);
    if wanted.chars().count() > 64 {
        return None;
    }
    let limit = if wanted.chars().count() <= 4 { 1 } else { 2 };
    known
        .iter()
        .map(|k| (edit_distance(&wanted, &norm(k)), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Whether a model string has the `provider/model[#variant]` shape or names a Claude model
/// (which runs through `claude -p`).
pub fn valid_model(model: &str) -> bool {
    // The same shapes as model_pattern()'s Claude branch.
    let (base, effort) = match model.split_once('#') {
        Some((b, e)) => (b, Some(e)),
        None => (model, None),
    };
    let clean = |s: &str| {
        !s.is_empty() && !s.starts_with('-') && !s.chars().any(|c| c.is_whitespace() || c == '#')
    };
    let claude_id = ["claude-", "Claude-"].iter().any(|p| {
        base.strip_prefix(p)
            .is_some_and(|rest| clean(rest) && !rest.contains('/'))
    });
    let alias = is_claude_alias(base);
    if (claude_id || alias) && effort.is_none_or(clean) {
        return true;
    }
    let (main, variant) = match model.split_once('#') {
        Some((m, v)) => (m, Some(v)),
        None => (model, None),
    };
    let ok_part = |s: &str| {
        !s.is_empty()
            && !s.starts_with('-')
            && !s.chars().any(char::is_whitespace)
            && !s.contains('#')
    };
    let Some((provider, name)) = main.split_once('/') else {
        return false;
    };
    !provider.contains('/') && ok_part(provider) && ok_part(name) && variant.is_none_or(ok_part)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call, with a refusal worded for MCP.
    fn call(tool: &str, args: Value) -> Result<Call, String> {
        parse_call(tool, args.as_object()).map_err(|e| e.mcp_text())
    }

    #[test]
    fn misspelled_names_get_a_suggestion_and_enums_ignore_case() {
        let e = call("opencode_start", json!({"tier": "easy", "promt": "x"})).unwrap_err();
        assert!(
            e.starts_with("unknown argument `promt`; did you mean `prompt`?"),
            "{e}"
        );
        let e = call("opencode_sessions", json!({"title-prefix": "X/"})).unwrap_err();
        assert!(e.contains("did you mean `title_prefix`?"), "{e}");
        let e = call("opencode_sessions", json!({"zzzzzz": 1})).unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
        match call(
            "opencode_start",
            json!({"tier": "Easy", "prompt": "x", "mode": "SENSITIVE"}),
        ) {
            Ok(Call::Start(a)) => {
                assert_eq!(a.tier, Tier::Easy);
                assert_eq!(a.mode, Some(Mode::Sensitive));
            }
            other => panic!("{other:?}"),
        }
        assert!(call("opencode_start", json!({"tier": "eesy", "prompt": "x"})).is_err());
    }

    #[test]
    fn apply_takes_the_protected_paths_it_may_write_by_name() {
        match call(
            "opencode_apply",
            json!({"id": "3", "allow_protected": [".mcp.json", ".vscode/"]}),
        ) {
            Ok(Call::Apply {
                allow_protected, ..
            }) => assert_eq!(allow_protected, [".mcp.json", ".vscode/"]),
            other => panic!("{other:?}"),
        }
        match call("opencode_apply", json!({"id": "3"})) {
            Ok(Call::Apply {
                allow_protected, ..
            }) => assert!(allow_protected.is_empty()),
            other => panic!("{other:?}"),
        }
        let e = call(
            "opencode_apply",
            json!({"id": "3", "allow_protected": ".mcp.json"}),
        )
        .unwrap_err();
        assert!(
            e.contains("allow_protected") && e.contains("an array of paths"),
            "{e}"
        );
        assert!(e.lines().count() == 1, "{e}");
        let e = call(
            "opencode_apply",
            json!({"id": "3", "allow_protected": [""]}),
        )
        .unwrap_err();
        assert!(e.contains("must not be empty"), "{e}");
        let many: Vec<String> = (0..=MAX_ALLOW_PROTECTED).map(|i| format!("p{i}")).collect();
        assert!(
            call(
                "opencode_apply",
                json!({"id": "3", "allow_protected": many})
            )
            .is_err()
        );
    }

    #[test]
    fn start_needs_tier_and_prompt() {
        assert_eq!(
            call("opencode_start", json!({"prompt": "x"})).unwrap_err(),
            "missing required argument `tier`; use one of easy, medium, hard, unsure"
        );
        assert_eq!(
            call("opencode_start", json!({"tier": "easy"})).unwrap_err(),
            "missing required argument `prompt` (a string)"
        );
        let ok = call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "do it", "mechanical": true, "timeout_minutes": 5}),
        )
        .unwrap();
        let Call::Start(args) = ok else { panic!() };
        assert!(args.mechanical);
        assert_eq!(args.timeout_minutes, Some(5));
    }

    #[test]
    fn bad_values_name_the_field_and_the_accepted_values() {
        assert_eq!(
            call("opencode_start", json!({"tier": "trivial", "prompt": "x"})).unwrap_err(),
            "bad argument `tier`: \"trivial\" is not accepted; use one of easy, medium, hard, unsure"
        );
        assert_eq!(
            call("opencode_sessions", json!({"limit": 0})).unwrap_err(),
            "bad argument `limit`: 0 is not accepted; use a whole number from 1 to 500"
        );
        assert_eq!(
            call("opencode_processes", json!({"x": 1})).unwrap_err(),
            "unknown argument `x`; this tool takes no arguments"
        );
        assert_eq!(
            call("opencode_list", json!({"x": 1})).unwrap_err(),
            "unknown argument `x`; accepted arguments: label"
        );
        assert_eq!(
            call("opencode_wait", json!({"ids": ["3", "t4"]})).unwrap(),
            Call::Wait {
                ids: vec!["3".into(), "t4".into()],
                all: false,
                timeout_s: WAIT_DEFAULT_S
            }
        );
        assert!(
            call(
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "model": "gpt"})
            )
            .unwrap_err()
            .contains("provider/model")
        );
    }

    #[test]
    fn null_counts_as_absent() {
        assert_eq!(
            call("opencode_policy", json!({"cwd": null})).unwrap(),
            Call::Policy {
                cwd: None,
                mode: None
            }
        );
    }

    /// The published schemas and the validator accept and refuse the same arguments.
    #[test]
    fn schemas_and_validator_agree() {
        let samples: Vec<(&str, Value)> = vec![
            ("opencode_start", json!({"tier": "easy", "prompt": "x"})),
            ("opencode_start", json!({"tier": "hard", "prompt": "x"})),
            ("opencode_start", json!({"tier": "trivial", "prompt": "x"})),
            ("opencode_start", json!({"prompt": "x"})),
            ("opencode_start", json!({"tier": "easy", "prompt": ""})),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "model": "a/b#c"}),
            ),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "model": "ab"}),
            ),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "timeout_minutes": 0}),
            ),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "timeout_minutes": 30, "mechanical": true, "mode": "sensitive", "lane": "L", "agent": "a", "title": "t", "cwd": "."}),
            ),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "mechanical": "yes"}),
            ),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "extra": 1}),
            ),
            ("opencode_status", json!({"id": "1"})),
            ("opencode_status", json!({})),
            ("opencode_result", json!({"id": "1", "head": 10, "tail": 5})),
            ("opencode_result", json!({"id": "1", "head": 0})),
            ("opencode_cancel", json!({"id": "1"})),
            ("opencode_list", json!({})),
            ("opencode_list", json!({"x": 1})),
            ("opencode_list", json!({"label": "night"})),
            ("opencode_list", json!({"label": ""})),
            (
                "opencode_wait",
                json!({"ids": ["1", "2"], "mode": "all", "timeout_s": 55}),
            ),
            ("opencode_wait", json!({"ids": ["1"]})),
            ("opencode_wait", json!({"ids": []})),
            ("opencode_wait", json!({"ids": [1]})),
            ("opencode_wait", json!({"ids": [""]})),
            ("opencode_wait", json!({"ids": ["1"], "timeout_s": 56})),
            ("opencode_wait", json!({"ids": ["1"], "mode": "some"})),
            ("opencode_wait", json!({})),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "session": "ses_1", "label": "b"}),
            ),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "session": ""}),
            ),
            (
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "label": "y".repeat(101)}),
            ),
            ("opencode_policy", json!({"cwd": "/x", "mode": "blueprint"})),
            ("opencode_policy", json!({"mode": "loose"})),
            (
                "opencode_sessions",
                json!({"state": "stale", "limit": 500, "children": "only", "since_minutes": 5}),
            ),
            ("opencode_sessions", json!({"limit": 501})),
            ("opencode_sessions", json!({"children": true})),
            (
                "opencode_session_output",
                json!({"id": "ses_1", "mode": "full", "messages": 3, "max_chars": 200}),
            ),
            (
                "opencode_session_output",
                json!({"id": "ses_1", "max_chars": 199}),
            ),
            (
                "opencode_session_rename",
                json!({"id": "ses_1", "title": "A/b: c d e"}),
            ),
            ("opencode_session_rename", json!({"id": "ses_1"})),
            ("opencode_processes", json!({})),
        ];
        for (tool, args) in samples {
            let def = definitions().into_iter().find(|d| d.name == tool).unwrap();
            let validator = jsonschema::validator_for(&def.schema).expect("a valid JSON Schema");
            let by_schema = validator.is_valid(&args);
            let by_us = parse_call(tool, args.as_object()).is_ok();
            assert_eq!(
                by_schema, by_us,
                "{tool} {args}: schema {by_schema}, validator {by_us}"
            );
        }
    }

    #[test]
    fn the_argument_check_and_the_runner_agree_on_claude_models() {
        // One alias list with one case rule: a bare model the check accepts runs through
        // Claude Code, and one the check refuses would not have (before, `OPUS` was refused
        // here but chosen as a Claude model by the supervisor; `Default` the other way).
        use run_supervisor::Runner;
        let mut cases: Vec<String> = CLAUDE_ALIASES
            .iter()
            .flat_map(|a| {
                [
                    a.to_string(),
                    capitalized(a),
                    a.to_ascii_uppercase(),
                    format!("{a}[1m]"),
                    format!("{a}#high"),
                ]
            })
            .collect();
        cases.extend(["claude-x", "Claude-x", "CLAUDE-x", "sonnets", "gpt-5"].map(String::from));
        for m in &cases {
            let claude = Runner::for_model(Some(m)) == Runner::Claude;
            assert_eq!(valid_model(m), claude, "{m}: check vs runner");
        }
        let re = regex::Regex::new(&model_pattern()).unwrap();
        for m in &cases {
            assert_eq!(
                re.is_match(m),
                valid_model(m),
                "{m}: schema pattern vs check"
            );
        }
    }

    #[test]
    fn claude_models_and_wait_s_are_accepted() {
        for m in [
            "sonnet",
            "opus#high",
            "haiku",
            "sonnet[1m]",
            "claude-haiku-4-5",
            "Claude-opus-4-1",
            "claude/opus",
        ] {
            assert!(valid_model(m), "{m}");
        }
        for m in ["gpt4", "claude-", "sonnet x", "opus#", "sonnets"] {
            assert!(!valid_model(m), "{m}");
        }
        let Call::Start(args) = call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "x", "model": "sonnet", "wait_s": 30}),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(args.wait_s, Some(30));
        assert_eq!(args.model.as_deref(), Some("sonnet"));
        assert!(
            call(
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "wait_s": 56})
            )
            .unwrap_err()
            .contains("wait_s")
        );
    }

    /// A valid value for a property of a tool's schema (the base of the calls below).
    fn valid_value(p: &Value) -> Value {
        if let Some(e) = p["enum"].as_array() {
            return e[0].clone();
        }
        match p["type"].as_str() {
            Some("integer") => json!(p["minimum"].as_u64().unwrap_or(1)),
            Some("boolean") => json!(true),
            Some("array") => json!(["1"]),
            _ => json!("x"),
        }
    }

    /// Every string argument of every tool (array items included) is an enum or has a
    /// `maxLength`, and the validator refuses one character more with a line naming the field
    /// and the limit, before anything else looks at the value: no tool echoes a long input.
    #[test]
    fn every_string_argument_has_a_limit_that_is_enforced() {
        let mut checked = 0;
        for def in definitions() {
            let props = def.schema["properties"].as_object().unwrap();
            let required: Vec<&str> = def.schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let base: Map<String, Value> = required
                .iter()
                .map(|r| (r.to_string(), valid_value(&props[*r])))
                .collect();
            let validator = jsonschema::validator_for(&def.schema).unwrap();
            for (name, p) in props {
                let (string, array) = match p["type"].as_str() {
                    Some("string") => (p, false),
                    Some("array") => (&p["items"], true),
                    _ => continue,
                };
                if string["enum"].is_array() {
                    continue;
                }
                let max = string["maxLength"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{} `{name}` has no maxLength", def.name))
                    as usize;
                let long = "a".repeat(max + 1);
                let mut args = base.clone();
                args.insert(
                    name.clone(),
                    if array { json!([long]) } else { json!(long) },
                );
                let e = parse_call(def.name, Some(&args)).unwrap_err();
                assert_eq!(
                    e.mcp_text(),
                    format!("bad argument `{name}`: longer than {max} characters"),
                    "{} {name}",
                    def.name
                );
                assert!(!validator.is_valid(&Value::Object(args.clone())));
                let fits = "a".repeat(max);
                args.insert(
                    name.clone(),
                    if array { json!([fits]) } else { json!(fits) },
                );
                if let Err(e) = parse_call(def.name, Some(&args)) {
                    assert!(
                        !matches!(e.problem, ArgProblem::TooLong { .. }),
                        "{} {name}: {e}",
                        def.name
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 20, "{checked} string arguments checked");
    }

    /// What each string argument of `opencode_start` does with values that look like options:
    /// refused where they can only be mistakes, accepted (and passed as values, never as
    /// options: `run_supervisor::argv`) elsewhere. A new string argument fails here until it
    /// is placed in one list, and the accepted ones are each run through both runners with such
    /// values by the live test `live_argv`.
    #[test]
    fn option_like_values_are_refused_where_they_can_only_be_mistakes() {
        const INJECTIONS: [&str; 8] = run_supervisor::argv::INJECTION_SAMPLES;
        const REFUSED: [&str; 4] = ["model", "agent", "session", "server"];
        const CLOSED_SETS: [&str; 3] = ["tier", "mode", "isolation"];
        // `request_id` never reaches a command line (only the registry); `verify` only as the
        // script of `sh -c`, never as an option.
        const ACCEPTED: [&str; 7] = [
            "prompt",
            "cwd",
            "lane",
            "title",
            "label",
            "request_id",
            "verify",
        ];
        let start = definitions().into_iter().next().unwrap();
        assert_eq!(start.name, "opencode_start");
        let validator = jsonschema::validator_for(&start.schema).unwrap();
        for (name, p) in start.schema["properties"].as_object().unwrap() {
            if p["type"] != "string" {
                continue;
            }
            for v in INJECTIONS {
                let mut args = json!({"tier": "easy", "prompt": "x"});
                args[name.as_str()] = json!(v);
                let got = parse_call("opencode_start", args.as_object());
                assert_eq!(got.is_ok(), validator.is_valid(&args), "{name}={v}");
                if REFUSED.contains(&name.as_str()) {
                    let e = got.unwrap_err();
                    assert!(
                        matches!(e.problem, ArgProblem::OptionLike { .. }),
                        "{name}={v}: {e}"
                    );
                    assert!(e.mcp_text().contains("starts with `-`"), "{e}");
                } else if CLOSED_SETS.contains(&name.as_str()) {
                    assert!(got.is_err(), "{name}={v}");
                } else {
                    assert!(ACCEPTED.contains(&name.as_str()), "`{name}` is in no list");
                    assert!(got.is_ok(), "{name}={v}: {got:?}");
                }
            }
        }
        for m in ["fk/--auto", "fk/ok#--variant=x", "claude/-p", "sonnet#-x"] {
            let e = call(
                "opencode_start",
                json!({"tier": "easy", "prompt": "x", "model": m}),
            )
            .unwrap_err();
            assert!(
                e.contains("starts with `-`, which no model does"),
                "{m}: {e}"
            );
        }
        for (tool, args) in [
            ("opencode_session_output", json!({"id": "--session=x"})),
            (
                "opencode_session_rename",
                json!({"id": "--session=x", "title": "t"}),
            ),
        ] {
            let e = call(tool, args).unwrap_err();
            assert!(
                e.starts_with(
                    "bad argument `id`: \"--session=x\" starts with `-`, which no session id does"
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn model_shapes() {
        assert!(valid_model("anthropic/claude-sonnet"));
        assert!(valid_model("openrouter/qwen/qwen3#high"));
        assert!(!valid_model("noslash"));
        assert!(!valid_model("a/b#"));
        assert!(!valid_model("/b"));
    }
}
