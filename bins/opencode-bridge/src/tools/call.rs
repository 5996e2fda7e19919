//! A `tools/call` turned into a typed [`Call`]: every argument validated against the tool's
//! schema before anything runs.

use super::args::Args;
use super::limits::*;
use super::schema::{ToolDef, definitions};
use bridge_policy::{Mode, Tier};
use bridge_render::{ArgError, ArgProblem};
use run_supervisor::Isolation;
use serde_json::{Map, Value};

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
