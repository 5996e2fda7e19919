//! The agents opencode itself knows for a directory, with its plugins loaded: asked from a
//! temporary `opencode serve` started there with the environment a run gets (`GET /agent` and
//! `GET /config`). opencode is the source of truth for the roster; the bridge's own reading of
//! agent files is only the fallback when it cannot be asked.

use crate::backend::{ChildEnv, ClientConfig, with_temporary_server};
use crate::error::ClientError;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// What opencode reported.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentReport {
    /// `GET /agent`: `[{name, description?, mode, native, hidden?, permission: [rules], …}]`.
    pub agents: Value,
    /// The plugins its configuration loads (`GET /config` `plugin`), `file://` specs as paths.
    pub plugins: Vec<String>,
    /// How it was asked, for messages.
    pub via: String,
}

/// How long a cold ask may take: opencode installs a configuration's plugins on first use
/// (observed: 57 s for one local plugin on a 2-core machine), later asks take 2–10 s.
pub const ASK_STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Asks opencode for the agents of `directory` (see the module docs). `env` is the run's
/// environment (the bridge's `worker` in `OPENCODE_CONFIG_CONTENT`, the variables a run drops);
/// setting `cancel` gives up (and stops the server) while it starts.
///
/// # Errors
/// [`ClientError::OpencodeRefused`] with opencode's message when it will not load its
/// configuration there; other errors when it cannot be started or asked.
pub fn ask_agents(
    cfg: &ClientConfig,
    directory: &Path,
    env: &ChildEnv,
    startup: Duration,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<AgentReport, ClientError> {
    with_temporary_server(
        cfg,
        directory,
        env,
        startup,
        cancel,
        "a temporary `opencode serve` asked for its agents",
        |http| {
            let agents = agent_list(http, directory)?;
            // The plugin list is extra: a server that cannot say it still gave the agents.
            let plugins = http
                .get_json("/config")
                .map(|c| plugins_of(&c.body))
                .unwrap_or_default();
            Ok(AgentReport {
                agents,
                plugins,
                via: format!(
                    "opencode itself (its agent list on a temporary `opencode serve` in {})",
                    directory.display()
                ),
            })
        },
    )
}

/// `GET /agent?directory=D`: every agent opencode resolved for `directory`, with its ruleset.
/// An opencode 2 server has no such route: its `GET /api/agent?location[directory]=D` is read
/// instead, in 1.x's shape. Blocking (a v2 location loads lazily: up to 30 s).
pub fn agent_list(http: &crate::http::HttpClient, directory: &Path) -> Result<Value, ClientError> {
    let v1 = http.get_json(&format!(
        "/agent?directory={}",
        crate::http::encode_component(&directory.to_string_lossy())
    ));
    if let Ok(r) = &v1
        && r.body.is_array()
    {
        return Ok(r.body.clone());
    }
    let path = format!(
        "/api/agent?location%5Bdirectory%5D={}",
        crate::http::encode_component(&directory.to_string_lossy())
    );
    // A location loads lazily on opencode 2: its first answers list no agent yet.
    let until = std::time::Instant::now() + Duration::from_secs(30);
    let first = loop {
        match http.get_json(&path) {
            Ok(r) => match agents_from_v2(&r.body) {
                Some(list) if list.as_array().is_some_and(Vec::is_empty) => {
                    if std::time::Instant::now() >= until {
                        return Ok(list);
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
                Some(list) => return Ok(list),
                None => {
                    return Err(ClientError::TempServer {
                        detail: "GET /api/agent did not answer {data: [...]}".into(),
                    });
                }
            },
            Err(e) => break e,
        }
    };
    // Neither route answered as opencode does: the 1.x route's error says most.
    match v1 {
        Err(e) => Err(e),
        Ok(_) if matches!(first, ClientError::Unauthorized { .. }) => Err(first),
        Ok(_) => Err(ClientError::TempServer {
            detail: "GET /agent did not answer a list".into(),
        }),
    }
}

/// The agents opencode 2 ships with (observed on the 2.0 preview), which 1.x marks `native`.
const V2_BUILT_IN: [&str; 7] = [
    "build",
    "plan",
    "general",
    "explore",
    "compaction",
    "title",
    "summary",
];

/// opencode 2's agent list (`{data: [{id, description, mode, hidden, permissions: [{action,
/// resource, effect}]}]}`) in 1.x's shape (`[{name, description, mode, hidden, native,
/// permission: [{permission, pattern, action}]}]`).
pub fn agents_from_v2(body: &Value) -> Option<Value> {
    let list = body.get("data")?.as_array()?;
    Some(Value::Array(
        list.iter()
            .filter_map(|a| {
                let id = a.get("id")?.as_str()?;
                let rules: Vec<Value> = a
                    .get("permissions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        serde_json::json!({
                            "permission": r.get("action").cloned().unwrap_or(Value::Null),
                            "pattern": r.get("resource").cloned().unwrap_or(Value::Null),
                            "action": r.get("effect").cloned().unwrap_or(Value::Null),
                        })
                    })
                    .collect();
                Some(serde_json::json!({
                    "name": id,
                    "description": a.get("description").cloned().unwrap_or(Value::Null),
                    "mode": a.get("mode").cloned().unwrap_or(Value::Null),
                    "hidden": a.get("hidden").cloned().unwrap_or(Value::Bool(false)),
                    "native": V2_BUILT_IN.contains(&id),
                    "permission": rules,
                }))
            })
            .collect(),
    ))
}

/// What opencode resolves for one run's configuration: its agents with their rulesets and the
/// ids of the tools it registers (built-in, then the project's and plugins' own).
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// `GET /agent`, as in [`AgentReport::agents`].
    pub agents: Value,
    /// `GET /experimental/tool/ids`: `["invalid", "bash", "read", …, "mytool"]`; a name twice
    /// means a project or plugin tool has a built-in's name.
    pub tool_ids: Vec<String>,
}

/// Asks a temporary `opencode serve` in `directory`, started with `env` (a run's environment,
/// with the run's `OPENCODE_CONFIG_CONTENT`), what it resolves: every agent's permission ruleset
/// and the tool ids (see [`RunReport`]). Used to check a read-only run before it starts.
///
/// # Errors
/// As [`ask_agents`].
pub fn ask_run_permissions(
    cfg: &ClientConfig,
    directory: &Path,
    env: &ChildEnv,
    startup: Duration,
    cancel: Option<&std::sync::atomic::AtomicBool>,
) -> Result<RunReport, ClientError> {
    with_temporary_server(
        cfg,
        directory,
        env,
        startup,
        cancel,
        "a temporary `opencode serve` asked for a run's permissions",
        |http| {
            let agents = agent_list(http, directory)?;
            // opencode 2 lists no tool ids (no such route): only the agents' rules are checked
            // there, and no project or plugin tool is known to shadow a read tool.
            if http.get_json("/api/health").is_ok() && http.get_json("/global/health").is_err() {
                return Ok(RunReport {
                    agents,
                    tool_ids: Vec::new(),
                });
            }
            // The tool registry waits for opencode's install of the project's tool
            // dependencies (`.opencode/node_modules`, 20-60 s on first use): a call that times
            // out is made again while the startup allowance lasts.
            let deadline = bridge_proc::deadline::after(startup);
            let ids = loop {
                match http.get_json("/experimental/tool/ids") {
                    Ok(r) => break r.body,
                    Err(ClientError::ServiceTimeout { .. })
                        if std::time::Instant::now() < deadline =>
                    {
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            let Some(ids) = ids.as_array() else {
                return Err(ClientError::TempServer {
                    detail: "GET /experimental/tool/ids did not answer a list".into(),
                });
            };
            Ok(RunReport {
                agents,
                tool_ids: ids
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            })
        },
    )
}

/// The configured plugins, `file:///x/y.js` shown as `/x/y.js`.
fn plugins_of(config: &Value) -> Vec<String> {
    config
        .get("plugin")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(|p| p.strip_prefix("file://").unwrap_or(p).to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plugins_are_listed_as_configured() {
        let cfg =
            json!({"plugin": ["oh-my-opencode-slim@1.2.0", "file:///p/.opencode/plugin/a.js", 3]});
        assert_eq!(
            plugins_of(&cfg),
            ["oh-my-opencode-slim@1.2.0", "/p/.opencode/plugin/a.js"]
        );
        assert!(plugins_of(&json!({})).is_empty());
    }
}
