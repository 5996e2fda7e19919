//! Failure kinds and how a finished run is classified.
//!
//! [`classify`] is pure: it looks at the events of one run, its stderr and how the process
//! ended, and names what went wrong, with the provider's own message and advice. The rules are
//! written up in `docs/ERRORS.md`.

use serde_json::Value;

use bridge_ledger::quota::QUOTA_WORDS;

/// An `error` event: opencode's NamedError `{name, data}` flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorEvent {
    /// Error name, e.g. `APIError`, `ContextOverflowError`, `UnknownError`.
    pub name: String,
    /// `data.message` (empty when absent).
    pub message: String,
    /// `data.statusCode` for API errors.
    pub status_code: Option<u16>,
    /// `data.isRetryable` for API errors.
    pub is_retryable: Option<bool>,
    /// `data.responseBody` (raw text) when present.
    pub response_body: Option<String>,
    /// The whole `error` object as received.
    pub raw: Value,
}

/// Why a task failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// HTTP 429 (not quota) or a rate-limit message.
    RateLimit,
    /// The account's quota or credit is used up (429 `insufficient_quota`, billing messages).
    Quota,
    /// The conversation does not fit the model's context window.
    ContextLength,
    /// The model stopped because it hit its output-token limit.
    OutputLimit,
    /// The provider is overloaded or failing (529, 500, 502, 503, 504, mid-stream server errors).
    Overloaded,
    /// Missing or rejected credentials (401, 403, ProviderAuthError).
    Auth,
    /// The model or provider does not exist or is not configured.
    Model,
    /// The agent does not exist, is not runnable as asked, or its permissions stopped the run.
    Agent,
    /// The provider refused the request as malformed (other 4xx, content filter).
    InvalidRequest,
    /// The provider could not be reached.
    Network,
    /// The task ran past its time limit.
    Timeout,
    /// opencode could not be started.
    Spawn,
    /// The opencode server a served task ran on was unreachable, refused the bridge, or went
    /// away mid-task (the serve engine, remote servers).
    Server,
    /// The runner binary rejected a flag the bridge passes (`error: unknown option '…'`): it is
    /// older than the bridge needs (Claude Code before 2.1.198 lacks `--permission-prompts`).
    OutdatedRunner,
    /// opencode ended abnormally without a recognisable provider error.
    Exit,
    /// The run passed its `max_cost_usd` and was stopped.
    Budget,
    /// The caller's `verify` command still failed after the agent's turns (its follow-ups
    /// included).
    Verify,
    /// The agent's final answer was not JSON valid against the caller's `output_schema`, also
    /// after the follow-up that quoted the errors.
    Schema,
}

impl FailureKind {
    /// Every kind, in documentation order.
    pub const ALL: [FailureKind; 18] = [
        FailureKind::RateLimit,
        FailureKind::Quota,
        FailureKind::ContextLength,
        FailureKind::OutputLimit,
        FailureKind::Overloaded,
        FailureKind::Auth,
        FailureKind::Model,
        FailureKind::Agent,
        FailureKind::InvalidRequest,
        FailureKind::Network,
        FailureKind::Timeout,
        FailureKind::Spawn,
        FailureKind::Server,
        FailureKind::OutdatedRunner,
        FailureKind::Exit,
        FailureKind::Budget,
        FailureKind::Verify,
        FailureKind::Schema,
    ];

    /// The snake_case name used in tool output and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::RateLimit => "rate_limit",
            FailureKind::Quota => "quota",
            FailureKind::ContextLength => "context_length",
            FailureKind::OutputLimit => "output_limit",
            FailureKind::Overloaded => "overloaded",
            FailureKind::Auth => "auth",
            FailureKind::Model => "model",
            FailureKind::Agent => "agent",
            FailureKind::InvalidRequest => "invalid_request",
            FailureKind::Network => "network",
            FailureKind::Timeout => "timeout",
            FailureKind::Spawn => "spawn",
            FailureKind::Server => "server",
            FailureKind::OutdatedRunner => "outdated_runner",
            FailureKind::Exit => "exit",
            FailureKind::Budget => "budget",
            FailureKind::Verify => "verify",
            FailureKind::Schema => "schema",
        }
    }

    /// True for kinds that may go away by waiting: the only ones ever retried.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            FailureKind::RateLimit | FailureKind::Overloaded | FailureKind::Network
        )
    }

    /// What to do about it (generic advice for the kind).
    pub fn advice(self) -> &'static str {
        match self {
            FailureKind::RateLimit => {
                "The provider is rate-limiting requests. Wait a few minutes, run fewer tasks at once (OPENCODE_BRIDGE_MAX_PARALLEL), or use another model."
            }
            FailureKind::Quota => {
                "The provider account is out of quota or credit. Check the plan and billing, or switch to another provider/model; retrying will not help."
            }
            FailureKind::ContextLength => {
                "The conversation is too large for the model's context window. Split the task into smaller pieces, point the agent at fewer or smaller files, or use a model with a larger context."
            }
            FailureKind::OutputLimit => {
                "The model hit its output-token limit and its answer is cut off. Ask for a shorter answer, split the task, or use a model with a larger output limit."
            }
            FailureKind::Overloaded => {
                "The provider is overloaded or failing on its side. Wait and try again later, or use another model."
            }
            FailureKind::Auth => {
                "The provider rejected or is missing the credentials. Check the API key with `opencode auth list` / the provider's environment variable, and that the key has access to this model."
            }
            FailureKind::Model => {
                "The model or provider is not available. Check the model name (OPENCODE_BRIDGE_MODEL or the task's model, as provider/model) against `opencode models`; `opencode run --print-logs` shows the cause."
            }
            FailureKind::Agent => {
                "The agent could not do the work as asked. Check the agent name with `opencode agent list`, and that its permissions allow what the task needs (work inside the task's directory)."
            }
            FailureKind::InvalidRequest => {
                "The provider refused the request. Rephrase or shorten the task; if it persists, try another model."
            }
            FailureKind::Network => {
                "The provider could not be reached. Check the network, proxy and the provider's base URL; try again when it is reachable."
            }
            FailureKind::Timeout => {
                "The task ran past its time limit and was stopped. Split it into smaller tasks or give it a longer timeout (timeout_minutes, OPENCODE_BRIDGE_TIMEOUT_MIN)."
            }
            FailureKind::Spawn => {
                "opencode could not be started. Install it or set OPENCODE_BIN to its path, and check that the working directory exists."
            }
            FailureKind::Server => {
                "The opencode server could not run the task. Check that it is up and reachable (opencode_doctor), then start the task again."
            }
            FailureKind::OutdatedRunner => OUTDATED_RUNNER_ADVICE,
            FailureKind::Exit => {
                "opencode ended abnormally. Look at its stderr below; running the same task with `opencode run --print-logs` shows more."
            }
            FailureKind::Budget => {
                "The run cost more than its max_cost_usd and was stopped; what it did so far is kept. Give a larger max_cost_usd, a cheaper model, or split the task."
            }
            FailureKind::Verify => {
                "The agent's work does not pass the verify command; its output is in the result. Fix it yourself, or send a follow-up in the task's session with what to fix."
            }
            FailureKind::Schema => {
                "The agent's answer does not match the output_schema; the errors are in the message. Read its text, or ask again with a simpler schema or a clearer prompt."
            }
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The kind.
    pub kind: FailureKind,
    /// The provider's or opencode's own message (one line, possibly shortened).
    pub message: String,
    /// What to do about it.
    pub advice: String,
}

impl Failure {
    /// A failure with the kind's generic advice.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: one_line(&message.into(), 600),
            advice: kind.advice().to_owned(),
        }
    }

    /// A failure with specific advice.
    pub fn with_advice(kind: FailureKind, message: impl Into<String>, advice: &str) -> Self {
        Failure {
            kind,
            message: one_line(&message.into(), 600),
            advice: advice.to_owned(),
        }
    }
}

impl From<bridge_isolation::audit::Finding> for Failure {
    /// An audit's finding as the task's failure: kind `agent` or `model`, by whom it blames.
    fn from(f: bridge_isolation::audit::Finding) -> Self {
        let kind = match f.blame {
            bridge_isolation::audit::Blame::Agent => FailureKind::Agent,
            bridge_isolation::audit::Blame::Model => FailureKind::Model,
        };
        Failure {
            kind,
            message: f.message,
            advice: f.advice,
        }
    }
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitInfo {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal killed it.
    pub signal: Option<i32>,
}

pub(crate) fn one_line(s: &str, max: usize) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max {
        joined
    } else {
        let mut out: String = joined.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// Lines of stderr that say the asked agent is not what runs.
pub fn agent_fallback_line(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .map(strip_ansi)
        .find(|l| {
            (l.contains("Falling back") || l.contains("falling back"))
                && (l.contains("agent") || l.contains("subagent"))
        })
        .map(|l| l.trim().trim_start_matches('!').trim().to_owned())
}

/// Permission requests that `run` auto-rejected, as stderr reports them.
pub fn rejected_permission_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .map(strip_ansi)
        .filter(|l| l.contains("permission requested:") && l.contains("auto-rejecting"))
        .map(|l| l.trim().trim_start_matches('!').trim().to_owned())
        .collect()
}

/// The last ~400 characters of stderr, colours removed and trimmed: what a failure quotes.
pub(crate) fn stderr_tail(stderr: &str) -> String {
    let clean = strip_ansi(stderr);
    let t = clean.trim();
    let mut start = t.len().saturating_sub(400);
    while !t.is_char_boundary(start) {
        start += 1;
    }
    t[start..].to_owned()
}

/// Removes ANSI escape sequences (opencode colours its stderr).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c2 in chars.by_ref() {
                    if c2.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The provider's error object out of a response body or a JSON message: `error.code`,
/// `error.type`, `error.message` (missing fields are empty).
fn provider_error_fields(text: &str) -> Option<(String, String, String)> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    let e = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
    let get = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let (code, typ, msg) = (get("code"), get("type"), get("message"));
    if code.is_empty() && typ.is_empty() && msg.is_empty() {
        return None;
    }
    Some((code, typ, msg))
}

fn contains_any(hay: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| hay.contains(n))
}

const OVERFLOW_WORDS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "context length",
    "too many tokens",
    "request entity too large",
];
/// The failure of a task whose opencode would wait on a provider's limit longer than the bridge
/// sits through ([`bridge_ledger::quota::LONGEST_WAIT`]) or than the task's time left (`past_left`):
/// kind `quota` when the provider's message speaks of quota or credit, else `rate_limit`; the
/// message names the limit and when it resets, the advice what to do meanwhile.
pub fn provider_limit(
    wait: &bridge_ledger::quota::ProviderWait,
    past_left: bool,
    now: std::time::SystemTime,
) -> Failure {
    let (kind, bound) = limit_kind_and_bound(wait.is_quota(), past_left);
    let secs = wait.wait_from(now).as_secs();
    let message = format!(
        "the provider's limit stopped the task: {}; opencode would send retry {} only in {}, {bound}; the limit {}",
        if wait.message.is_empty() {
            "(no message)"
        } else {
            wait.message.as_str()
        },
        wait.attempt,
        wait_words(secs),
        wait.next.describe()
    );
    let advice = format!(
        "{} Start the task again after {} (UTC), or use a model of another provider meanwhile.",
        if kind == FailureKind::Quota {
            "The provider account is out of quota or credit until its window resets."
        } else {
            "The provider is rate-limiting this account and asks to wait before the next request."
        },
        bridge_ledger::utc::format(wait.next.at)
    );
    Failure::with_advice(kind, message, &advice)
}

/// The failure of an `opencode run` held by a provider's refusals past the task's time left
/// (`past_left`) or past [`bridge_ledger::quota::LONGEST_WAIT`]: kind `quota` when the
/// provider's message speaks of quota or credit, else `rate_limit`. `opencode run` does not
/// say when it tries again, so the message says how long it was held and the advice points at
/// the serve engine, which shows the reset.
pub fn provider_stall(
    stall: &bridge_ledger::quota::ProviderStall,
    past_left: bool,
    now: std::time::SystemTime,
) -> Failure {
    let (kind, bound) = limit_kind_and_bound(stall.is_quota(), past_left);
    let message = format!(
        "the provider's limit stopped the task: {}; opencode was refused {} time{} and waited to try again for {}, {bound}; `opencode run` does not say when the limit resets",
        if stall.message.is_empty() {
            "(no message)"
        } else {
            stall.message.as_str()
        },
        stall.refusals,
        if stall.refusals == 1 { "" } else { "s" },
        wait_words(stall.held_for(now).as_secs()),
    );
    let advice = format!(
        "{} Start the task again later, or use a model of another provider meanwhile; on the serve engine (OPENCODE_BRIDGE_ENGINE=serve, the default) the task says when the limit resets.",
        if kind == FailureKind::Quota {
            "The provider account is out of quota or credit until its window resets."
        } else {
            "The provider is rate-limiting this account."
        }
    );
    Failure::with_advice(kind, message, &advice)
}

/// A provider's limit: kind `quota` or `rate_limit`, and which bound its wait passed (the
/// task's time left, or the bridge's longest wait).
fn limit_kind_and_bound(quota: bool, past_left: bool) -> (FailureKind, String) {
    let kind = if quota {
        FailureKind::Quota
    } else {
        FailureKind::RateLimit
    };
    let bound = if past_left {
        "past the task's time left".to_owned()
    } else {
        format!(
            "longer than the {} minutes the bridge waits on a provider",
            bridge_ledger::quota::LONGEST_WAIT.as_secs() / 60
        )
    };
    (kind, bound)
}

/// A wait in words: `45 s`, `12 min`, `3 h 20 min`, `24 days 20 h`.
fn wait_words(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3_599 => format!("{} min", secs / 60),
        3_600..=86_399 => format!("{} h {} min", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{} days {} h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

const RATE_WORDS: &[&str] = &["rate limit", "rate_limit", "too many requests", "429"];
const OVERLOAD_WORDS: &[&str] = &[
    "overloaded",
    "server_error",
    "internal server error",
    "service unavailable",
    "bad gateway",
    "gateway timeout",
    "upstream",
    "provider returned error",
];
const NETWORK_WORDS: &[&str] = &[
    "cannot connect",
    "unable to connect",
    "econnrefused",
    "econnreset",
    "etimedout",
    "enotfound",
    "eai_again",
    "fetch failed",
    "socket hang up",
    "network",
];
const AUTH_WORDS: &[&str] = &[
    "not logged in",
    "please run /login",
    "api key",
    "api_key",
    "unauthorized",
    "authentication",
    "invalid_api_key",
    "permission_denied",
    "forbidden",
];
const MODEL_WORDS: &[&str] = &[
    "model_not_found",
    "model not found",
    "does not exist",
    "unknown model",
    "providermodelnotfound",
    "no such model",
];

/// Advice of [`FailureKind::OutdatedRunner`]: Claude Code 2.1.198 and later need Node 22, and
/// on Node 20 npm quietly installs 2.1.197, which lacks `--permission-prompts`.
pub const OUTDATED_RUNNER_ADVICE: &str = "Claude Code is older than the bridge needs (it rejected a flag the bridge passes). Upgrade Claude Code: npm i -g @anthropic-ai/claude-code@2.1.328 on Node 20, or @latest on Node >= 22; `opencode-bridge doctor` checks the version and the flags.";

/// The `error: unknown option '--x'` line a runner prints when it does not know a flag the
/// bridge passed (commander's wording, used by Claude Code), if `stderr` has one.
pub fn unknown_option_line(stderr: &str) -> Option<String> {
    strip_ansi(stderr)
        .lines()
        .map(str::trim)
        .find(|l| l.to_lowercase().contains("unknown option"))
        .map(|l| one_line(l, 300))
}

/// Classifies free text (an UnknownError message, a mid-stream error, stderr) by its words.
pub(crate) fn classify_text(text: &str) -> Option<FailureKind> {
    let lower = text.to_lowercase();
    if contains_any(&lower, OVERFLOW_WORDS) {
        Some(FailureKind::ContextLength)
    } else if contains_any(&lower, QUOTA_WORDS) {
        Some(FailureKind::Quota)
    } else if contains_any(&lower, RATE_WORDS) {
        Some(FailureKind::RateLimit)
    } else if contains_any(&lower, AUTH_WORDS) {
        Some(FailureKind::Auth)
    } else if contains_any(&lower, MODEL_WORDS) {
        Some(FailureKind::Model)
    } else if contains_any(&lower, OVERLOAD_WORDS) {
        Some(FailureKind::Overloaded)
    } else if contains_any(&lower, NETWORK_WORDS) {
        Some(FailureKind::Network)
    } else {
        None
    }
}

/// Classifies one error event.
pub fn classify_error(e: &ErrorEvent) -> Failure {
    let body = e.response_body.as_deref().unwrap_or("");
    let fields = provider_error_fields(body);
    let code_type = fields
        .as_ref()
        .map(|(c, t, _)| format!("{c} {t}").to_lowercase())
        .unwrap_or_default();
    let msg_lower = e.message.to_lowercase();
    let all = format!("{msg_lower} {code_type}");
    let status = e
        .status_code
        .map(|s| format!(" (HTTP {s})"))
        .unwrap_or_default();
    let message = format!("{}: {}{status}", e.name, e.message);
    match e.name.as_str() {
        "ContextOverflowError" => Failure::new(FailureKind::ContextLength, message),
        "ProviderAuthError" => Failure::new(FailureKind::Auth, message),
        "MessageOutputLengthError" => Failure::new(FailureKind::OutputLimit, message),
        "ContentFilterError" => Failure::with_advice(
            FailureKind::InvalidRequest,
            message,
            "The provider's content filter blocked the answer. Rephrase the task; if it persists, use another model.",
        ),
        "StructuredOutputError" => Failure::new(FailureKind::InvalidRequest, message),
        "MessageAbortedError" => Failure::with_advice(
            FailureKind::Exit,
            message,
            "The run was aborted inside opencode (not by the bridge). Start the task again; if it repeats, run it by hand with `opencode run --print-logs`.",
        ),
        "ProviderModelNotFoundError" | "ProviderInitError" => {
            Failure::new(FailureKind::Model, message)
        }
        "APIError" => {
            let kind = match e.status_code {
                Some(401) | Some(403) => FailureKind::Auth,
                Some(404) => FailureKind::Model,
                Some(413) => FailureKind::ContextLength,
                Some(429) if contains_any(&all, QUOTA_WORDS) => FailureKind::Quota,
                Some(429) => FailureKind::RateLimit,
                Some(402) => FailureKind::Quota,
                Some(408) => FailureKind::Network,
                Some(s) if s >= 500 => FailureKind::Overloaded,
                Some(_) if contains_any(&all, OVERFLOW_WORDS) => FailureKind::ContextLength,
                Some(_) if contains_any(&all, QUOTA_WORDS) => FailureKind::Quota,
                Some(_) if contains_any(&all, MODEL_WORDS) => FailureKind::Model,
                Some(_) => FailureKind::InvalidRequest,
                None => classify_text(&all).unwrap_or(FailureKind::Network),
            };
            Failure::new(kind, message)
        }
        "UnknownError" => {
            if e.message.contains("Unexpected server error") {
                return Failure::with_advice(
                    FailureKind::Model,
                    message,
                    "opencode hit an internal error, most often an unknown model or provider. Check the model name (provider/model) against `opencode models` and the provider config; `opencode run --print-logs` shows the real cause.",
                );
            }
            // A mid-stream provider error arrives as the JSON of its error object.
            let kind = match provider_error_fields(&e.message) {
                Some((code, typ, msg)) => classify_text(&format!("{code} {typ}"))
                    .or_else(|| classify_text(&msg))
                    .unwrap_or(FailureKind::Exit),
                None => classify_text(&e.message).unwrap_or(FailureKind::Exit),
            };
            Failure::new(kind, message)
        }
        _ => {
            let lower = format!("{} {}", e.name, e.message).to_lowercase();
            let kind = if lower.contains("badrequest") || lower.contains("validation") {
                FailureKind::InvalidRequest
            } else {
                classify_text(&lower).unwrap_or(FailureKind::Exit)
            };
            Failure::new(kind, message)
        }
    }
}
