//! What `tools/list` says about each tool: the hand-written JSON Schemas, titles, descriptions
//! and annotations, and the shapes a model argument may take.

use super::limits::*;
use run_supervisor::claude::{CLAUDE_ALIASES, capitalized, is_claude_alias};
use serde_json::{Value, json};

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
                    "max_cost_usd": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_COST_USD as u64, "description": "Stop the run once it has cost more than this many USD (checked as each model step's cost arrives; estimated from list prices where opencode records 0); it then fails with kind budget and keeps what it did. Day and month budgets (opencode_policy shows them) apply as well."},
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
