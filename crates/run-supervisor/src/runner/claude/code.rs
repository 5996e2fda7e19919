//! The second runner: Claude Code's headless mode (`claude -p`) for bare Claude model ids.
//!
//! - [`Runner::for_model`] picks the runner from the model string: provider-prefixed models
//!   (`openai/gpt-5`, `anthropic/claude-sonnet-4-5`) run through opencode; `claude/<model>`,
//!   the aliases in [`CLAUDE_ALIASES`] and ids starting with `claude-` run through `claude -p`.
//! - [`build_launch`] gives the command line: `-p --output-format stream-json --verbose`, the
//!   model, a tool set fenced by `--tools` (read-only tasks get [`READ_TOOLS`] only), a
//!   permission mode that never prompts, and no MCP server at all (`--strict-mcp-config`), so
//!   a delegated run cannot reach back into the bridge.
//! - [`ClaudeStream`] folds stream-json lines into the same [`RunSummary`] opencode runs use.
//! - [`classify`] names failures with the same kinds, and finds the reset time of a usage
//!   limit when Claude Code reports one.
//!
//! Facts marked *(observed)* in `docs/ERRORS.md` come from Claude Code 2.1.328 against the
//! fake endpoint of `bridge_testkit::fake_claude_api`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use crate::argv::Argv;
use crate::classify::{ExitInfo, Failure, FailureKind, classify_error, stderr_tail};
use crate::command::{DROPPED_ENV, Launch};
pub use crate::runner::Runner;
use crate::runner::opencode::events::{ErrorEvent, RunSummary, TokenUsage, ToolCall};
use crate::spec::TaskSpec;

/// Bare model names that mean Claude Code's own aliases. The one list: [`is_claude_alias`]
/// (used by [`Runner::for_model`] and by the binary's argument check) and the binary's schema
/// pattern are built from it.
pub const CLAUDE_ALIASES: &[&str] = &[
    "sonnet", "opus", "haiku", "fable", "opusplan", "default", "best",
];

/// `alias` with its first letter in upper case (`Sonnet`).
pub fn capitalized(alias: &str) -> String {
    let mut c = alias.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// True when `base` (a model string without its `#effort`) is a Claude Code alias as the
/// bridge accepts it: one of [`CLAUDE_ALIASES`] in lower case or capitalized (`sonnet`,
/// `Sonnet`; not `SONNET`), optionally followed by `[1m]`.
pub fn is_claude_alias(base: &str) -> bool {
    let b = base.strip_suffix("[1m]").unwrap_or(base);
    CLAUDE_ALIASES
        .iter()
        .any(|a| b == *a || b == capitalized(a))
}

/// Built-in Claude Code tools of a read-only run.
pub const READ_TOOLS: &[&str] = &["Read", "Grep", "Glob"];

/// Built-in Claude Code tools of an editing run.
pub const EDIT_TOOLS: &[&str] = &["Read", "Grep", "Glob", "Edit", "Write", "Bash"];

/// Variables of a parent Claude Code session that a delegated run must not inherit.
pub const CLAUDE_DROPPED_ENV: &[&str] = &[
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SSE_PORT",
    "CLAUDE_CODE_SESSION_ID",
];

/// The model and effort passed to `claude`: `claude/` is dropped, `#<effort>` becomes
/// `--effort <effort>`.
pub fn claude_model(model: &str) -> (String, Option<String>) {
    let m = model.trim();
    let m = m
        .strip_prefix("claude/")
        .or_else(|| m.strip_prefix("Claude/"))
        .unwrap_or(m);
    match m.split_once('#') {
        Some((m, e)) if !e.trim().is_empty() => (m.trim().to_owned(), Some(e.trim().to_owned())),
        Some((m, _)) => (m.trim().to_owned(), None),
        None => (m.to_owned(), None),
    }
}

/// Finds the claude binary from `explicit` (`CLAUDE_BIN`): a path, a bare name looked up on
/// `PATH`, or unset for `claude` on `PATH` (see [`bridge_env::Program::find`]).
pub fn resolve_claude(explicit: Option<&Path>) -> Result<PathBuf, String> {
    bridge_env::CLAUDE.find(explicit)
}

/// Every long flag [`build_launch`] may pass; `doctor` checks that `claude --help` lists each
/// (Claude Code before 2.1.198 lacks `--permission-prompts`).
pub const RUNNER_FLAGS: &[&str] = &[
    "--output-format",
    "--verbose",
    "--model",
    "--effort",
    "--tools",
    "--permission-mode",
    "--allowedTools",
    "--permission-prompts",
    "--strict-mcp-config",
    "--mcp-config",
    "--resume",
    "--name",
    "--setting-sources",
    "--settings",
];

/// The settings sources a run loads: the user's own (login, model, permissions), never the
/// project's `.claude/settings.json` nor its `settings.local.json`, which the repository (or an
/// earlier run) wrote.
pub const SETTING_SOURCES: &str = "user";

/// Settings given on the command line, above every file but managed policy: no hook runs,
/// neither the user's nor one a plugin brings (a hook is a command run outside the tool set).
pub const RUN_SETTINGS: &str = r#"{"disableAllHooks":true}"#;

/// What `claude --version` and `claude --help` say about the binary the runner would use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeCheck {
    /// The first line of `claude --version` (`2.1.328 (Claude Code)`).
    pub version: String,
    /// Flags of [`RUNNER_FLAGS`] its help does not list.
    pub missing_flags: Vec<&'static str>,
}

/// Runs `program --version` and `program --help` (30 s each at most).
pub async fn check_claude(
    program: &Path,
    sandbox: bridge_fence::Sandbox,
) -> Result<ClaudeCheck, String> {
    let probe = |args| {
        crate::command::output_text(program, args, &[], bridge_fence::RunKind::Claude, sandbox)
    };
    let version = probe(&["--version"]).await?;
    let help = probe(&["--help"]).await?;
    Ok(ClaudeCheck {
        version: version
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("(no version printed)")
            .to_owned(),
        missing_flags: missing_flags(&help),
    })
}

/// The flags of [`RUNNER_FLAGS`] that `help` does not list as whole words.
pub fn missing_flags(help: &str) -> Vec<&'static str> {
    let listed: std::collections::HashSet<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .collect();
    RUNNER_FLAGS
        .iter()
        .copied()
        .filter(|f| !listed.contains(f))
        .collect()
}

/// The command line, environment and stdin of one `claude -p` attempt in `cwd`.
///
/// The tool set is fenced by `--tools` (a tool outside it does not exist for the run, whatever
/// the user's settings allow): read-only tasks get [`READ_TOOLS`] with `--permission-mode
/// dontAsk` (anything that would ask is denied, e.g. a read outside the directory); editing
/// tasks get [`EDIT_TOOLS`] with `acceptEdits` (edits inside the directory are accepted,
/// outside denied) and `Bash` allowed. `--permission-prompts none` makes sure nothing waits for
/// an answer. `--strict-mcp-config` with an empty `--mcp-config` gives the run no MCP server.
/// `--setting-sources=user` loads no settings file of the project, and `--settings` with
/// [`RUN_SETTINGS`] runs no hook at all: nothing the repository holds runs as the run starts.
pub fn build_launch(
    spec: &TaskSpec,
    cwd: &Path,
    program: &Path,
    model: Option<&str>,
    base_env: &[(String, String)],
) -> Launch {
    // Every value goes as one `--name=value` element (crate::argv): none can be an option
    // (commander reads the word after `--resume`, whose value is optional, as an option when it
    // starts with `-`).
    let mut args = Argv::new(&["-p"]);
    args.value("--output-format", "stream-json")
        .word("--verbose");
    if let Some(m) = model.filter(|m| !m.trim().is_empty()) {
        let (m, effort) = claude_model(m);
        args.value("--model", m);
        if let Some(e) = effort {
            args.value("--effort", e);
        }
    }
    let tools = if spec.read_only {
        READ_TOOLS
    } else {
        EDIT_TOOLS
    };
    args.value("--tools", tools.join(","));
    if spec.read_only {
        args.value("--permission-mode", "dontAsk");
    } else {
        args.value("--permission-mode", "acceptEdits")
            .value("--allowedTools", "Bash");
    }
    args.value("--permission-prompts", "none")
        .word("--strict-mcp-config")
        .value("--mcp-config", r#"{"mcpServers":{}}"#)
        .value("--setting-sources", SETTING_SOURCES)
        .value("--settings", RUN_SETTINGS);
    if let Some(session) = spec.session.as_deref().filter(|s| !s.trim().is_empty()) {
        // A follow-up continues that Claude Code session (same id, its history as context).
        args.value("--resume", session.trim());
    } else if !spec.title.is_empty() {
        args.value("--name", &spec.title);
    }
    let mut env_set: Vec<(String, String)> = base_env.to_vec();
    env_set.extend(spec.env.iter().cloned());
    env_set.push(("PWD".into(), cwd.to_string_lossy().into_owned()));
    let env_remove: Vec<String> = DROPPED_ENV
        .iter()
        .chain(CLAUDE_DROPPED_ENV)
        .map(|s| s.to_string())
        .collect();
    env_set.retain(|(k, _)| !env_remove.contains(k));
    Launch {
        program: program.to_path_buf(),
        args: args.into_args(),
        env_remove,
        env_set,
        stdin: spec.prompt.clone().into_bytes(),
        prompt_file: None,
    }
}

/// The `result` event of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaudeResult {
    /// `subtype`: `success`, `error_max_turns`, `error_during_execution`, ...
    pub subtype: String,
    /// `is_error`.
    pub is_error: bool,
    /// `result`: the final text, or the error text.
    pub text: String,
    /// `terminal_reason`: `completed`, `api_error`, `prompt_too_long`, ...
    pub terminal_reason: Option<String>,
    /// `api_error_status`: the HTTP status of a failed API call.
    pub api_error_status: Option<u16>,
    /// `api_error_type`: `rate_limit_error`, `overloaded_error`, `authentication_error`, ...
    pub api_error_type: Option<String>,
    /// Tool uses the permission rules denied.
    pub permission_denials: usize,
}

/// Per-attempt state of the stream-json fold: tool calls waiting for their result, the result
/// event, and a usage-limit window Claude Code announced.
#[derive(Debug, Clone, Default)]
pub struct ClaudeStream {
    pending: HashMap<String, (String, Option<String>, LineCounts)>,
    /// The `result` event, once seen.
    pub result: Option<ClaudeResult>,
    /// `rate_limit_event` with status `rejected`: when the window resets (its `resetsAt`,
    /// held to [`bridge_ledger::quota::HORIZON`] from when the event was read).
    pub limit_reset: Option<bridge_ledger::quota::Reset>,
    /// True when a `rate_limit_event` said `rejected`.
    pub limit_rejected: bool,
}

/// Lines a call added and removed, where its input tells.
type LineCounts = (Option<u64>, Option<u64>);

/// The lines a Claude Code file-writing call adds and removes, from its input: `Write`
/// `{file_path, content}`, `Edit` `{old_string, new_string, replace_all}`, `MultiEdit`
/// `{edits: [...]}`, counted as opencode's `write`, `edit` and `multiedit` are
/// ([`crate::runner::opencode::events::line_counts`]). Anything else: unknown.
fn line_counts_of(tool: &str, input: &Value) -> LineCounts {
    let edit = |e: &Value| {
        serde_json::json!({
            "oldString": e.get("old_string"),
            "newString": e.get("new_string"),
            "replaceAll": e.get("replace_all"),
        })
    };
    let (name, as_opencode) = match tool {
        "Write" => (
            "write",
            serde_json::json!({"content": input.get("content")}),
        ),
        "Edit" => ("edit", edit(input)),
        "MultiEdit" => {
            let edits: Vec<Value> = input
                .get("edits")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(edit)
                .collect();
            if edits.is_empty() {
                return (None, None);
            }
            ("multiedit", serde_json::json!({"edits": edits}))
        }
        _ => return (None, None),
    };
    crate::runner::opencode::events::line_counts(name, &as_opencode)
}

fn title_of(input: &Value) -> Option<String> {
    ["file_path", "command", "pattern", "path", "url"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(|s| s.chars().take(200).collect())
}

fn content_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

impl ClaudeStream {
    /// When the usage-limit window that refused the run resets: the `rate_limit_event`'s
    /// `resetsAt`, else the epoch seconds in the result's text (`…|<secs>`).
    pub fn reset(&self, result_text: Option<&str>) -> Option<bridge_ledger::quota::Reset> {
        self.limit_reset.or_else(|| {
            result_text
                .and_then(reset_in_text)
                .map(|s| bridge_ledger::quota::Reset::at_epoch_secs(s, SystemTime::now()))
        })
    }

    /// Folds one stdout line of `--output-format stream-json` into `summary`. Returns true if
    /// it was a JSON event. Unknown event types are counted, malformed lines too; nothing is
    /// fatal.
    pub fn push_line(&mut self, summary: &mut RunSummary, line: &str) -> bool {
        let t = line.trim();
        if t.is_empty() {
            return false;
        }
        let Some(v) = serde_json::from_str::<Value>(t)
            .ok()
            .filter(Value::is_object)
        else {
            summary.note_malformed();
            return false;
        };
        summary.note_event(v.get("session_id").and_then(Value::as_str));
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "system" => {}
            "assistant" => self.assistant(summary, &v),
            "user" => self.user(summary, &v),
            "result" => self.result(summary, &v),
            "rate_limit_event" => {
                let info = v.get("rate_limit_info").unwrap_or(&Value::Null);
                if info.get("status").and_then(Value::as_str) == Some("rejected") {
                    self.limit_rejected = true;
                    self.limit_reset = info
                        .get("resetsAt")
                        .and_then(Value::as_f64)
                        .and_then(|f| {
                            bridge_ledger::quota::Reset::at_epoch_secs_f64(f, SystemTime::now())
                        })
                        .or(self.limit_reset);
                }
            }
            other => summary.note_unknown(other),
        }
        true
    }

    fn assistant(&mut self, summary: &mut RunSummary, v: &Value) {
        let msg = v.get("message").unwrap_or(&Value::Null);
        // An API failure is reported as a synthetic assistant message; it is not the model's.
        if v.get("is_api_error_message").and_then(Value::as_bool) == Some(true)
            || msg.get("model").and_then(Value::as_str) == Some("<synthetic>")
        {
            return;
        }
        summary.note_step();
        let id = msg.get("id").and_then(Value::as_str).map(str::to_owned);
        let Some(blocks) = msg.get("content").and_then(Value::as_array) else {
            return;
        };
        for b in blocks {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = b.get("text").and_then(Value::as_str).unwrap_or("");
                    if text.is_empty() {
                        continue;
                    }
                    summary.push_text(id.as_deref(), text);
                }
                Some("tool_use") => {
                    summary.note_output();
                    let tid = b.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
                    let name = b
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned();
                    let input = b.get("input").unwrap_or(&Value::Null);
                    let counts = line_counts_of(&name, input);
                    self.pending.insert(tid, (name, title_of(input), counts));
                }
                _ => {}
            }
        }
    }

    fn user(&mut self, summary: &mut RunSummary, v: &Value) {
        let Some(blocks) = v
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array)
        else {
            return;
        };
        for b in blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        {
            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
            let (tool, title, (added, removed)) = self
                .pending
                .remove(id)
                .unwrap_or_else(|| ("?".to_owned(), None, (None, None)));
            let is_error = b.get("is_error").and_then(Value::as_bool) == Some(true);
            let text = content_text(b.get("content").unwrap_or(&Value::Null));
            summary.push_tool_result(ToolCall {
                tool,
                status: if is_error { "error" } else { "completed" }.to_owned(),
                title,
                error: is_error.then(|| {
                    let t = text
                        .trim()
                        .trim_start_matches("<tool_use_error>")
                        .trim_end_matches("</tool_use_error>");
                    t.chars().take(600).collect()
                }),
                added: added.filter(|_| !is_error),
                removed: removed.filter(|_| !is_error),
            });
        }
    }

    fn result(&mut self, summary: &mut RunSummary, v: &Value) {
        let u = |path: &[&str]| {
            let mut cur = v;
            for k in path {
                match cur.get(k) {
                    Some(n) => cur = n,
                    None => return 0,
                }
            }
            cur.as_u64().unwrap_or(0)
        };
        let tokens = TokenUsage {
            input: u(&["usage", "input_tokens"]),
            output: u(&["usage", "output_tokens"]),
            cache_read: u(&["usage", "cache_read_input_tokens"]),
            cache_write: u(&["usage", "cache_creation_input_tokens"]),
            reasoning: u(&["usage", "output_tokens_details", "thinking_tokens"]),
        };
        let cost = v
            .get("total_cost_usd")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let reason = v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_owned);
        summary.set_totals(tokens, cost, reason);
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let r = ClaudeResult {
            subtype: s("subtype").unwrap_or_default(),
            is_error: v.get("is_error").and_then(Value::as_bool) == Some(true),
            text: s("result").unwrap_or_default(),
            terminal_reason: s("terminal_reason"),
            api_error_status: v
                .get("api_error_status")
                .and_then(Value::as_u64)
                .and_then(|n| u16::try_from(n).ok()),
            api_error_type: s("api_error_type"),
            permission_denials: v
                .get("permission_denials")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
        };
        if !r.is_error && !r.text.is_empty() {
            summary.set_final_text(&r.text);
        }
        self.result = Some(r);
    }
}

const USAGE_WORDS: &[&str] = &[
    "usage limit",
    "limit reached",
    "hit your limit",
    "out of extra usage",
    "credit balance",
    "spend limit",
];

/// The reset time in a usage-limit message: `…|<epoch seconds>` (what Claude Code prints for
/// a subscription limit), else `None`.
pub fn reset_in_text(text: &str) -> Option<u64> {
    let (_, tail) = text.rsplit_once('|')?;
    let digits: String = tail
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse::<u64>().ok().filter(|&n| n > 1_000_000_000)
}

/// A quota refusal: the failure, and when its window resets when that is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Classified {
    /// The failure.
    pub failure: Failure,
    /// When a usage-limit window resets.
    pub reset: Option<bridge_ledger::quota::Reset>,
}

/// Classifies a finished `claude -p` run (`None`: it succeeded).
///
/// Rules, in order: a `result` event with `is_error` → the kind of its API error status and
/// text (401/403 `auth`; 429 `rate_limit`, or `quota` when a usage limit was announced or the
/// text speaks of one; 402 `quota`; 5xx and 529 `overloaded`; "prompt is too long" or
/// `terminal_reason: prompt_too_long` `context_length`; 404 `model`; other 4xx
/// `invalid_request`), other error subtypes (`error_max_turns`, `error_during_execution`) →
/// `exit`; no `result` event → `exit` from the exit code or signal and the stderr tail.
pub fn classify(
    summary: &RunSummary,
    stream: &ClaudeStream,
    stderr: &str,
    exit: ExitInfo,
) -> Option<Classified> {
    let stderr_tail = stderr_tail(stderr);
    let plain = |f: Failure| {
        Some(Classified {
            failure: f,
            reset: None,
        })
    };
    let Some(r) = &stream.result else {
        if let Some(sig) = exit.signal {
            return plain(Failure::with_advice(
                FailureKind::Exit,
                format!("claude was killed by signal {sig}. {stderr_tail}"),
                EXIT_ADVICE,
            ));
        }
        if let Some(line) = crate::classify::unknown_option_line(stderr) {
            return plain(Failure::new(
                FailureKind::OutdatedRunner,
                format!("claude rejected a flag the bridge passes: {line}"),
            ));
        }
        let what = match exit.code {
            Some(c) if c != 0 => format!("claude exited with code {c} without a result."),
            _ => "claude printed no result event.".to_owned(),
        };
        let _ = summary;
        return plain(Failure::with_advice(
            FailureKind::Exit,
            format!("{what} {stderr_tail}"),
            EXIT_ADVICE,
        ));
    };
    if !r.is_error && r.subtype == "success" {
        return None;
    }
    if !r.is_error || (r.api_error_status.is_none() && r.subtype != "success") {
        return plain(Failure::with_advice(
            FailureKind::Exit,
            format!(
                "claude ended with `{}`{}: {}",
                r.subtype,
                r.terminal_reason
                    .as_deref()
                    .map(|t| format!(" ({t})"))
                    .unwrap_or_default(),
                r.text
            ),
            EXIT_ADVICE,
        ));
    }
    let lower = format!(
        "{} {}",
        r.text.to_lowercase(),
        r.api_error_type.as_deref().unwrap_or("")
    );
    let usage = stream.limit_rejected || USAGE_WORDS.iter().any(|w| lower.contains(w));
    let reset = stream.reset(Some(&r.text));
    let status = r
        .api_error_status
        .map(|s| format!(" (HTTP {s})"))
        .unwrap_or_default();
    let message = format!("{}{status}", r.text);
    if usage || r.api_error_status == Some(402) {
        let when = reset
            .map(|t| format!("; the window {}", t.describe()))
            .unwrap_or_default();
        return Some(Classified {
            failure: Failure::with_advice(
                FailureKind::Quota,
                format!("usage limit reached{when}: {message}"),
                "Claude Code's usage limit for this account is reached. Wait until the window resets (the time is in the message when Claude Code gave one), or use an opencode model (provider/model) meanwhile; retrying sooner does not help.",
            ),
            reset,
        });
    }
    if r.terminal_reason.as_deref() == Some("prompt_too_long") {
        return plain(Failure::new(FailureKind::ContextLength, message));
    }
    // Same status and word rules as opencode's API errors.
    let f = classify_error(&ErrorEvent {
        name: "APIError".into(),
        message: r.text.clone(),
        status_code: r.api_error_status,
        is_retryable: None,
        response_body: r
            .api_error_type
            .as_ref()
            .map(|t| serde_json::json!({"error": {"type": t}}).to_string()),
        raw: Value::Null,
    });
    let advice = match f.kind {
        FailureKind::Auth => {
            "Claude Code has no valid login for this run. Run `claude` once in a terminal and log in (or set ANTHROPIC_API_KEY for it); the bridge never reads credentials itself."
        }
        FailureKind::Model => {
            "Claude Code does not know this model. Use an alias (sonnet, opus, haiku) or a full claude-… id."
        }
        k => k.advice(),
    };
    plain(Failure::with_advice(f.kind, message, advice))
}

const EXIT_ADVICE: &str = "Claude Code ended abnormally. Look at its stderr below; running the same prompt with `claude -p --verbose --output-format stream-json` shows more.";

/// A running `claude -p` process of the bridge, for the process table.
pub(crate) fn process_entry(
    pid: i32,
    task_id: u64,
    agent: &str,
    title: &str,
    model: Option<&str>,
    session_id: Option<&str>,
) -> Option<opencode_client::proctable::OpencodeProcess> {
    let info = bridge_proc::ProcInfo::of(pid)?;
    Some(opencode_client::proctable::OpencodeProcess {
        pid,
        ppid: info.ppid,
        kind: opencode_client::proctable::ProcessKind::Other("claude -p".into()),
        elapsed: info.elapsed,
        agent: Some(agent.to_owned()),
        title: (!title.is_empty()).then(|| title.to_owned()),
        model: model.map(str::to_owned),
        cwd: info.cwd,
        session_id: session_id.map(str::to_owned),
        task_id: Some(task_id),
        bridge_server: None,
        cmdline: info.cmdline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::time::{Duration, UNIX_EPOCH};

    fn strs(a: &[OsString]) -> Vec<String> {
        a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn claude_code_file_writes_give_line_counts_and_name_their_files() {
        let j = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(
            line_counts_of(
                "Write",
                &j(r#"{"file_path":"/p/a.txt","content":"a\nb\nc\n"}"#)
            ),
            (Some(3), None)
        );
        assert_eq!(
            line_counts_of(
                "Edit",
                &j(r#"{"file_path":"/p/a.txt","old_string":"x","new_string":"y\nz"}"#)
            ),
            (Some(2), Some(1))
        );
        assert_eq!(
            line_counts_of(
                "Edit",
                &j(r#"{"old_string":"x","new_string":"y","replace_all":true}"#)
            ),
            (None, None)
        );
        assert_eq!(
            line_counts_of(
                "MultiEdit",
                &j(
                    r#"{"edits":[{"old_string":"a","new_string":"b\nc"},{"old_string":"d\ne","new_string":""}]}"#
                )
            ),
            (Some(2), Some(3))
        );
        assert_eq!(
            line_counts_of("Bash", &j(r#"{"command":"ls"}"#)),
            (None, None)
        );
        // Outside git, the files Claude Code wrote are named, with their counts.
        let call = ToolCall {
            tool: "Write".into(),
            status: "completed".into(),
            title: Some("/p/a.txt".into()),
            added: Some(3),
            ..Default::default()
        };
        let files = bridge_isolation::changes::from_tool_calls(&[call], std::path::Path::new("/p"));
        assert_eq!(files.files.len(), 1, "{files:?}");
        assert_eq!(files.files[0].path, "a.txt");
        assert_eq!(files.files[0].added, Some(3));
    }

    #[test]
    fn runner_follows_the_model_string() {
        for m in [
            "sonnet",
            "opus",
            "haiku",
            "Sonnet",
            "claude-sonnet-4-5",
            "claude-opus-4-1-20250805",
            "claude/sonnet",
            "sonnet[1m]",
            "opus#high",
        ] {
            assert_eq!(Runner::for_model(Some(m)), Runner::Claude, "{m}");
        }
        for m in [
            "openai/gpt-5",
            "anthropic/claude-sonnet-4-5",
            "fk/ok#high",
            "gpt-5",
            "",
            "  ",
        ] {
            assert_eq!(Runner::for_model(Some(m)), Runner::Opencode, "{m}");
        }
        assert_eq!(Runner::for_model(None), Runner::Opencode);
        assert_eq!(
            claude_model("claude/opus#high"),
            ("opus".into(), Some("high".into()))
        );
        assert_eq!(claude_model("sonnet"), ("sonnet".into(), None));
    }

    #[test]
    fn every_flag_passed_is_one_doctor_checks() {
        let mut spec = TaskSpec::new("p", "/tmp", "worker", "t");
        for (read_only, session) in [(true, None), (false, Some("0d98f55c"))] {
            spec.read_only = read_only;
            spec.session = session.map(str::to_owned);
            let l = build_launch(
                &spec,
                Path::new("/tmp"),
                Path::new("claude"),
                Some("sonnet#low"),
                &[],
            );
            for a in strs(&l.args).iter().filter(|a| a.starts_with("--")) {
                let a = a.split('=').next().unwrap_or_default();
                assert!(RUNNER_FLAGS.contains(&a), "{a} is not in RUNNER_FLAGS");
            }
        }
        let old_help =
            "Options:\n  -p, --print  x\n  --output-format <f>\n  --permission-prompt-tool <t>\n";
        let missing = missing_flags(old_help);
        assert!(missing.contains(&"--permission-prompts"), "{missing:?}");
        assert!(!missing.contains(&"--output-format"), "{missing:?}");
        assert!(missing_flags(&RUNNER_FLAGS.join("\n")).is_empty());
    }

    #[test]
    fn an_unknown_option_is_an_outdated_runner_and_not_logged_in_is_auth() {
        let f = classify(
            &RunSummary::new(1000),
            &ClaudeStream::default(),
            "error: unknown option '--permission-prompts'\n",
            ExitInfo {
                code: Some(1),
                signal: None,
            },
        )
        .unwrap();
        assert_eq!(f.failure.kind, FailureKind::OutdatedRunner);
        assert!(
            f.failure.message.contains("--permission-prompts"),
            "{}",
            f.failure.message
        );
        assert!(
            f.failure
                .advice
                .contains("@anthropic-ai/claude-code@2.1.328"),
            "{}",
            f.failure.advice
        );
        // What Claude Code 2.1.328 prints without a login (no API call is made).
        let (s, c) = fold(
            r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"result":"Not logged in · Please run /login","terminal_reason":"api_error"}"#,
        );
        let f = classify(
            &s,
            &c,
            "",
            ExitInfo {
                code: Some(1),
                signal: None,
            },
        )
        .unwrap();
        assert_eq!(f.failure.kind, FailureKind::Auth, "{}", f.failure.message);
        assert!(f.failure.advice.contains("log in"), "{}", f.failure.advice);
    }

    #[test]
    fn caller_strings_are_never_options() {
        for v in [
            "--dangerously-skip-permissions",
            "--permission-mode=bypassPermissions",
            "--settings={}",
            "-f",
            "--",
        ] {
            let mut spec = TaskSpec::new("p", "/p", "worker", v);
            let model = format!("claude/{v}#{v}");
            let a =
                strs(&build_launch(&spec, Path::new("/p"), Path::new("c"), Some(&model), &[]).args);
            assert!(a.contains(&format!("--name={v}")), "{a:?}");
            assert!(a.contains(&format!("--model={v}")), "{a:?}");
            assert!(a.contains(&format!("--effort={v}")), "{a:?}");
            spec.session = Some(v.into());
            let a = strs(&build_launch(&spec, Path::new("/p"), Path::new("c"), None, &[]).args);
            assert!(a.contains(&format!("--resume={v}")), "{a:?}");
            // Only the bridge's own switches stand alone.
            for x in a.iter().filter(|x| !x.contains('=')) {
                assert!(
                    ["-p", "--verbose", "--strict-mcp-config"].contains(&x.as_str()),
                    "{x} stands alone: {a:?}"
                );
            }
        }
    }

    #[test]
    fn read_only_and_editing_tool_sets_are_fenced() {
        let mut spec = TaskSpec::new("look", "/p", "explore", "t");
        spec.read_only = true;
        let l = build_launch(
            &spec,
            Path::new("/p"),
            Path::new("/bin/claude"),
            Some("sonnet#low"),
            &[],
        );
        let a = strs(&l.args);
        assert!(a.contains(&"--tools=Read,Grep,Glob".to_owned()), "{a:?}");
        assert!(a.contains(&"--permission-mode=dontAsk".to_owned()));
        assert!(a.contains(&"--model=sonnet".to_owned()));
        assert!(a.contains(&"--effort=low".to_owned()));
        assert!(a.contains(&"--strict-mcp-config".to_owned()));
        assert!(a.contains(&"--setting-sources=user".to_owned()), "{a:?}");
        assert!(
            a.contains(&r#"--settings={"disableAllHooks":true}"#.to_owned()),
            "{a:?}"
        );
        assert!(!a.iter().any(|x| x.contains("Write") || x.contains("Bash")));
        assert_eq!(l.stdin, b"look");
        assert!(l.env_remove.contains(&"CLAUDECODE".to_owned()));
        spec.read_only = false;
        let a =
            strs(&build_launch(&spec, Path::new("/p"), Path::new("/bin/claude"), None, &[]).args);
        assert!(a.contains(&"--tools=Read,Grep,Glob,Edit,Write,Bash".to_owned()));
        assert!(a.contains(&"--permission-mode=acceptEdits".to_owned()));
        assert!(!a.iter().any(|x| x.starts_with("--model")));
        assert!(a.contains(&"--name=t".to_owned()));
        spec.session = Some("0d98f55c-e1be-40fc-9a78-c581f39ed541".into());
        let a =
            strs(&build_launch(&spec, Path::new("/p"), Path::new("/bin/claude"), None, &[]).args);
        assert!(a.contains(&"--resume=0d98f55c-e1be-40fc-9a78-c581f39ed541".to_owned()));
        assert!(!a.iter().any(|x| x.starts_with("--name")));
    }

    const OK: &str = r#"{"type":"system","subtype":"init","cwd":"/p","session_id":"0d98f55c-e1be-40fc-9a78-c581f39ed541","tools":["Glob","Grep","Read"],"mcp_servers":[],"model":"claude-fake-text"}
{"type":"assistant","message":{"content":[{"id":"toolu_1","input":{"file_path":"/p/w.txt","content":"x"},"name":"Write","type":"tool_use"}],"id":"msg_a","model":"claude-fake-write","role":"assistant"},"session_id":"0d98f55c-e1be-40fc-9a78-c581f39ed541"}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"<tool_use_error>Error: No such tool available: Write.</tool_use_error>","is_error":true,"tool_use_id":"toolu_1"}]},"session_id":"0d98f55c-e1be-40fc-9a78-c581f39ed541"}
{"type":"assistant","message":{"content":[{"text":"Hello from fake Anthropic. DONE","type":"text"}],"id":"msg_b","model":"claude-fake-text","role":"assistant"},"session_id":"0d98f55c-e1be-40fc-9a78-c581f39ed541"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":200,"num_turns":2,"result":"Hello from fake Anthropic. DONE","stop_reason":"end_turn","session_id":"0d98f55c-e1be-40fc-9a78-c581f39ed541","total_cost_usd":0.00028,"usage":{"input_tokens":20,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":10},"permission_denials":[],"terminal_reason":"completed"}"#;

    fn fold(lines: &str) -> (RunSummary, ClaudeStream) {
        let mut s = RunSummary::new(1 << 20);
        let mut c = ClaudeStream::default();
        for l in lines.lines() {
            c.push_line(&mut s, l);
        }
        (s, c)
    }

    #[test]
    fn claude_code_text_keeps_the_same_caps_as_opencode_text() {
        // Before the summary's fields were private, this parser wrote `final_text` directly
        // and a long answer (or result) was kept whole.
        let big = "x".repeat(crate::runner::opencode::events::FINAL_CAP + 10_000);
        let assistant = serde_json::json!({"type": "assistant", "session_id": "s1",
            "message": {"id": "m1", "content": [{"type": "text", "text": big}]}});
        let result = serde_json::json!({"type": "result", "subtype": "success",
            "is_error": false, "result": big});
        for line in [assistant, result] {
            let (s, _) = fold(&line.to_string());
            assert_eq!(
                s.final_text().len(),
                crate::runner::opencode::events::FINAL_CAP,
                "{}",
                &line["type"]
            );
            assert!(s.text().kept_bytes() <= 1 << 20);
        }
    }

    #[test]
    fn stream_json_folds_into_the_summary() {
        let (s, c) = fold(&format!("{OK}\nnot json\n{{\"type\":\"stream_event\"}}"));
        assert_eq!(
            s.session_id().as_deref(),
            Some("0d98f55c-e1be-40fc-9a78-c581f39ed541")
        );
        assert_eq!(s.final_text(), "Hello from fake Anthropic. DONE");
        assert_eq!(s.tool_calls().len(), 1);
        assert_eq!(s.tool_calls()[0].tool, "Write");
        assert_eq!(s.tool_calls()[0].status, "error");
        assert_eq!(s.tool_calls()[0].title.as_deref(), Some("/p/w.txt"));
        assert!(
            s.tool_calls()[0]
                .error
                .as_deref()
                .unwrap()
                .starts_with("Error: No such tool")
        );
        assert_eq!(
            (
                s.tokens().input,
                s.tokens().output,
                s.tokens().cache_read,
                s.tokens().cache_write
            ),
            (20, 10, 4, 3)
        );
        assert!((s.cost() - 0.00028).abs() < 1e-12);
        assert_eq!((s.malformed(), s.unknown()), (1, 1));
        assert!(s.produced_output());
        assert!(
            classify(
                &s,
                &c,
                "",
                ExitInfo {
                    code: Some(0),
                    signal: None
                }
            )
            .is_none()
        );
    }

    fn failed(status: u16, typ: &str, text: &str, reason: &str) -> String {
        format!(
            r#"{{"type":"assistant","message":{{"content":[{{"type":"text","text":{t}}}],"id":"x","model":"<synthetic>","role":"assistant"}},"session_id":"s","is_api_error_message":true,"error":"rate_limit"}}
{{"type":"result","subtype":"success","is_error":true,"result":{t},"session_id":"s","total_cost_usd":0,"usage":{{}},"terminal_reason":"{reason}","api_error_status":{status},"api_error_type":"{typ}"}}"#,
            t = serde_json::Value::from(text)
        )
    }

    fn kind(lines: &str) -> (FailureKind, Option<bridge_ledger::quota::Reset>, String) {
        let (s, c) = fold(lines);
        assert!(!s.produced_output());
        let k = classify(
            &s,
            &c,
            "",
            ExitInfo {
                code: Some(1),
                signal: None,
            },
        )
        .expect("a failure");
        (k.failure.kind, k.reset, k.failure.message)
    }

    #[test]
    fn api_errors_map_to_kinds() {
        let cases = [
            (
                failed(
                    429,
                    "rate_limit_error",
                    "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit",
                    "api_error",
                ),
                FailureKind::RateLimit,
            ),
            (
                failed(
                    529,
                    "overloaded_error",
                    "API Error: 529 Overloaded. This is a server-side issue",
                    "api_error",
                ),
                FailureKind::Overloaded,
            ),
            (
                failed(
                    401,
                    "authentication_error",
                    "Invalid API key · Fix external API key",
                    "api_error",
                ),
                FailureKind::Auth,
            ),
            (
                failed(
                    400,
                    "invalid_request_error",
                    "Prompt is too long · the request is ~250000 tokens (limit 200000)",
                    "prompt_too_long",
                ),
                FailureKind::ContextLength,
            ),
            (
                failed(404, "not_found_error", "model: claude-nope", "api_error"),
                FailureKind::Model,
            ),
            (
                failed(400, "invalid_request_error", "bad thing", "api_error"),
                FailureKind::InvalidRequest,
            ),
            (
                failed(
                    429,
                    "rate_limit_error",
                    "Claude AI usage limit reached|1893456000",
                    "api_error",
                ),
                FailureKind::Quota,
            ),
        ];
        for (lines, want) in cases {
            assert_eq!(kind(&lines).0, want, "{lines}");
        }
        // A reset within the horizon is taken as said.
        let soon = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3 * 3600;
        let (_, reset, msg) = kind(&failed(
            429,
            "rate_limit_error",
            &format!("Claude AI usage limit reached|{soon}"),
            "api_error",
        ));
        let at = UNIX_EPOCH + Duration::from_secs(soon);
        assert_eq!(reset.map(|r| (r.at, r.clamped)), Some((at, false)));
        assert!(
            msg.contains(&format!("resets at {}", bridge_ledger::utc::format(at))),
            "{msg}"
        );
        let event = |resets: &str| {
            format!(
                "{{\"type\":\"rate_limit_event\",\"rate_limit_info\":{{\"status\":\"rejected\",\"resetsAt\":{resets},\"rateLimitType\":\"five_hour\"}},\"session_id\":\"s\"}}\n{}",
                failed(
                    429,
                    "rate_limit_error",
                    "API Error: Request rejected (429)",
                    "api_error"
                )
            )
        };
        let (k, reset, _) = kind(&event(&(soon + 60).to_string()));
        assert_eq!(k, FailureKind::Quota);
        assert_eq!(
            reset.map(|r| r.at),
            Some(UNIX_EPOCH + Duration::from_secs(soon + 60))
        );
        // Far or absurd reset times are held to the horizon, and the message says so; NaN
        // (as JSON cannot carry it, a string), negative and zero are no time at all.
        for far in [
            "1893456000",
            "18446744073709551615",
            "1e308",
            "1.7976931348623157e308",
        ] {
            let (k, reset, msg) = kind(&event(far));
            assert_eq!(k, FailureKind::Quota, "{far}");
            let reset = reset.unwrap_or_else(|| panic!("{far}: no reset"));
            assert!(reset.clamped, "{far}");
            assert!(
                reset.at <= SystemTime::now() + bridge_ledger::quota::HORIZON,
                "{far}"
            );
            assert!(msg.contains("at the latest"), "{far}: {msg}");
        }
        for none in ["-1", "-1e308", "0", "\"NaN\"", "null"] {
            let (k, reset, _) = kind(&event(none));
            assert_eq!(k, FailureKind::Quota, "{none}");
            assert_eq!(reset, None, "{none}");
        }
        let (_, reset, _) = kind(&failed(
            429,
            "rate_limit_error",
            "Claude AI usage limit reached|99999999999999999999999999",
            "api_error",
        ));
        assert!(reset.is_none_or(|r| r.clamped));
    }

    #[test]
    fn no_result_is_an_exit_failure() {
        let (s, c) = fold(r#"{"type":"system","subtype":"init","session_id":"s"}"#);
        let f = classify(
            &s,
            &c,
            "boom\n",
            ExitInfo {
                code: Some(3),
                signal: None,
            },
        )
        .unwrap();
        assert_eq!(f.failure.kind, FailureKind::Exit);
        assert!(f.failure.message.contains("code 3") && f.failure.message.contains("boom"));
        let f = classify(
            &s,
            &c,
            "",
            ExitInfo {
                code: None,
                signal: Some(9),
            },
        )
        .unwrap();
        assert!(f.failure.message.contains("signal 9"));
    }

    #[test]
    fn usage_limit_reset_in_text() {
        assert_eq!(
            reset_in_text("Claude AI usage limit reached|1893456000"),
            Some(1_893_456_000)
        );
        assert_eq!(reset_in_text("a | b"), None);
    }
}
