//! The tools' closed sets and limits: tool names, enum values, defaults and the longest value
//! of every argument. The schemas publish them and the validation enforces them.

use bridge_policy::{Mode, Tier};
use run_supervisor::Isolation;

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

/// The largest `max_cost_usd`. A whole number: the tool schema states it as an integer, so that
/// listing the tools formats no float (which would fault in the float printer and its tables at
/// every cold start).
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
