//! Which contract an opencode binary or server speaks: opencode 1.x (`opencode run`, `opencode
//! serve` with its `/session`, `/event` and `/global` routes) or opencode 2 (the 2.0 preview's
//! `lildax`, or an `opencode` with an `api` command: a server whose routes are all under `/api`,
//! sessions created with a location and prompted with `/api/session/{id}/prompt`).
//!
//! 1.18.33's `opencode serve` also answers most `/api` routes, so a server is told by what only
//! one line has: `GET /global/health` (1.x, with its version) or `GET /api/health` alone (2).

use crate::http::HttpClient;

/// The contract a binary or server speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Contract {
    /// opencode 1.x: `run`, `serve` with `/session/…`, `/event`, `/global/health`.
    #[default]
    V1,
    /// opencode 2 (the 2.0 preview): `api`, `service`, `serve` with `/api/…` routes only.
    V2,
}

impl Contract {
    /// `v1` or `v2`, as records and statuses name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Contract::V1 => "v1",
            Contract::V2 => "v2",
        }
    }

    /// One phrase for people: `opencode 1 (v1 contract)` or `opencode 2 (v2 contract, /api routes)`.
    pub fn describe(self) -> &'static str {
        match self {
            Contract::V1 => "opencode 1 (v1 contract: run, serve /session routes)",
            Contract::V2 => "opencode 2 (v2 contract: serve /api routes, no run)",
        }
    }

    /// The contract a top-level `--help` text describes: an `api` command is opencode 2's
    /// (1.18.33 has none).
    pub fn from_help(help: &str) -> Contract {
        if help_lists_api(help) {
            Contract::V2
        } else {
            Contract::V1
        }
    }

    /// [`Contract::V2`] for a binary with an `api` command
    /// ([`crate::backend::has_api_command`]).
    pub fn from_api_command(has_api: bool) -> Contract {
        if has_api { Contract::V2 } else { Contract::V1 }
    }

    /// What a server answering on `http` speaks, and its version when it says one:
    /// `/global/health` answers on 1.x only (`{healthy, version}`); `/api/health` alone is 2.
    /// `Err` with one line when it answers neither.
    pub fn of_server(http: &HttpClient) -> Result<(Contract, Option<String>), String> {
        let first = match http.get_json("/global/health") {
            Ok(r) => {
                let version = r
                    .body
                    .get("version")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned);
                return Ok((Contract::V1, version));
            }
            Err(e) => e,
        };
        match http.get_json("/api/health") {
            Ok(r) if r.body.get("healthy").is_some() => Ok((Contract::V2, None)),
            Ok(_) => Err(format!(
                "{} answers neither /global/health nor /api/health as opencode does",
                http.base()
            )),
            // The first route's error says best what is wrong (a refused password, no server).
            Err(_) => Err(first.to_string()),
        }
    }
}

/// The rules opencode 1 gives an agent whose configuration names none, in its config form
/// (what the 2.0 preview's `build` resolves to, *observed*): the preview gives such an agent no
/// rules at all, which the roster would read as read-only.
fn v1_default_permission() -> serde_json::Value {
    serde_json::json!({
        "*": "allow",
        "external_directory": "ask",
        "question": "deny",
        "plan_enter": "deny",
        "plan_exit": "deny",
        "read": {"*": "allow", "*.env": "ask", "*.env.*": "ask", "*.env.example": "allow"},
    })
}

/// An inline configuration (`OPENCODE_CONFIG_CONTENT`'s JSON) as an opencode 2 server should
/// read it: every agent it defines without a `permission` gets opencode 1's defaults, so an
/// agent means on both lines what it meant on 1 (the bridge's `worker` edits). Text that is
/// not a JSON object is returned as it is.
pub fn v2_inline_config(content: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(content) else {
        return content.to_owned();
    };
    let Some(agents) = v
        .get_mut("agent")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return content.to_owned();
    };
    for entry in agents.values_mut() {
        if let Some(e) = entry.as_object_mut()
            && !e.contains_key("permission")
        {
            e.insert("permission".into(), v1_default_permission());
        }
    }
    v.to_string()
}

/// Whether a `--help` text lists an `api` command (`opencode api …` or an `api` entry).
pub fn help_lists_api(help: &str) -> bool {
    help.lines().any(|l| {
        let mut words = l.split_whitespace();
        match words.next() {
            Some("api") => true,
            Some(w) if w.ends_with("opencode") || w.ends_with("opencode2") => {
                words.next() == Some("api")
            }
            _ => false,
        }
    })
}

impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `lildax --help` of the npm 1.18.18 preview, and opencode 1.18.33's command list.
    #[test]
    fn the_help_text_tells_the_lines_apart() {
        let v2 = "DESCRIPTION\n  OpenCode 2.0 preview command line interface\n\nSUBCOMMANDS\n  api        Make a request to the running server\n  debug      Debugging and troubleshooting tools\n  migrate    Migrate v1 data to v2\n  service    Manage the background server\n  serve      Start the v2 API server\n";
        let v1 = "Commands:\n  opencode run [message..]  run opencode with a message\n  opencode serve  starts a headless opencode server\n  opencode session  manage sessions\n";
        assert_eq!(Contract::from_help(v2), Contract::V2);
        assert_eq!(Contract::from_help(v1), Contract::V1);
        assert_eq!(Contract::V2.to_string(), "v2");
    }

    #[test]
    fn agents_without_rules_get_opencode_1s_defaults_on_opencode_2() {
        let out = v2_inline_config(
            r#"{"agent":{"worker":{"mode":"primary"},"ro":{"permission":{"*":"deny"}}}}"#,
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["agent"]["worker"]["permission"]["*"], "allow");
        assert_eq!(v["agent"]["worker"]["mode"], "primary");
        assert_eq!(
            v["agent"]["ro"]["permission"],
            serde_json::json!({"*": "deny"})
        );
        assert_eq!(v2_inline_config("not json"), "not json");
    }

    #[test]
    fn help_with_an_api_command_is_recognised() {
        let v2 = "Commands:\n  opencode api <request..>  call the service\n  opencode run\n";
        assert!(help_lists_api(v2));
        assert!(help_lists_api("COMMANDS\n  api     Send a request\n"));
        let v1 = "Commands:\n  opencode acp\n  opencode run [message..]\n  opencode serve\n";
        assert!(!help_lists_api(v1));
        assert!(!help_lists_api("the api is great"));
    }
}
