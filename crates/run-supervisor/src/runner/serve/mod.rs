//! The serve engine: a task is a session on an `opencode serve`, either a warm local server the
//! bridge starts, keeps and stops itself ([`pool`]), or a remote server named in the bridge's
//! config file ([`bridge_config::Server`]).
//!
//! A task on a server is driven like a run: the session is created with the task's title and
//! permission rules, the prompt goes with `prompt_async`, and the server's event stream is read
//! into the very lines `opencode run --format json` prints ([`events`]), so the parsing,
//! classification, retries, audit and results are the `run` runner's. Permission asks are
//! answered as `run` answers them: rejected for read-only agents (and when auto-approve is off),
//! approved once otherwise. A read-only agent's session also gets the policy's default-deny
//! rules appended with `PATCH` (never the prompt's `tools` field, which replaces a session's
//! rules for good), on top of the overlay its server was started with.

pub(crate) mod events;
pub(crate) mod notes;
pub(crate) mod pool;
pub(crate) mod session;
pub(crate) mod v2;

use std::path::{Path, PathBuf};

/// Where a served task runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// The bridge's own warm server.
    Local,
    /// A server of the config file, by name.
    Remote(String),
}

impl Place {
    /// How records and statuses name the engine: `serve` or `serve:<name>`.
    pub(crate) fn engine_name(&self) -> String {
        match self {
            Place::Local => "serve".to_owned(),
            Place::Remote(name) => format!("serve:{name}"),
        }
    }

    /// The place a record's engine names, if it names a server.
    pub(crate) fn of_engine_name(name: &str) -> Option<Place> {
        match name {
            "serve" => Some(Place::Local),
            _ => name
                .strip_prefix("serve:")
                .map(|n| Place::Remote(n.to_owned())),
        }
    }
}

/// What `doctor` learnt of a server of the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCheck {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// `opencode 1.18.33, 7 agents, root /srv/work`, or the one line that says what failed.
    pub outcome: Result<String, String>,
}

/// A client for a server of the config file (its password read from its variable).
pub fn server_client(
    server: &bridge_config::Server,
    timeout: std::time::Duration,
) -> Result<opencode_client::http::HttpClient, String> {
    client_for(server, timeout)
}

/// A client for a server of the config file (its password read from its variable).
pub(crate) fn client_for(
    server: &bridge_config::Server,
    timeout: std::time::Duration,
) -> Result<opencode_client::http::HttpClient, String> {
    use opencode_client::http::{BasicAuth, HttpClient};
    let password = server.password(|k| std::env::var(k).ok())?;
    let auth = password.map(|p| BasicAuth::new(server.username.clone(), p));
    HttpClient::new(&server.url, auth, timeout, 32 * 1024 * 1024)
        .map_err(|e| format!("server {} ({}): {e}", server.name, server.url))
}

/// One line for a failed call to a server of the config file: a refused password names the
/// variable it came from (not `OPENCODE_SERVER_PASSWORD`, which is the local server's).
pub(crate) fn call_error(
    server: &bridge_config::Server,
    e: opencode_client::ClientError,
) -> String {
    match e {
        opencode_client::ClientError::Unauthorized { .. } => format!(
            "server {} ({}) refused the password (401): check {} (user {}) against the server's OPENCODE_SERVER_PASSWORD",
            server.name,
            server.url,
            server
                .password_env
                .as_deref()
                .unwrap_or("password_env, which the config file does not set,"),
            server.username
        ),
        other => format!("server {} ({}): {other}", server.name, server.url),
    }
}

/// The agents a server resolves for the task directory `cwd` (under `local_root`, mapped to
/// the server's root): its `GET /agent` (`GET /api/agent` on opencode 2), the roster of tasks
/// placed there. Blocking.
pub fn server_agents(
    server: &bridge_config::Server,
    local_root: &Path,
    cwd: &Path,
    timeout: std::time::Duration,
) -> Result<serde_json::Value, String> {
    let http = client_for(server, timeout)?;
    let dir = map_dir(cwd, local_root, &server.root).ok_or_else(|| {
        format!(
            "{} is not under the bridge's root {}",
            cwd.display(),
            local_root.display()
        )
    })?;
    opencode_client::agents::agent_list(&http, &dir).map_err(|e| call_error(server, e))
}

/// Checks a server: reachable, the password accepted, its version and agents. Blocking.
pub fn check_server(server: &bridge_config::Server, timeout: std::time::Duration) -> ServerCheck {
    let outcome = (|| {
        let http = client_for(server, timeout)?;
        // opencode 1 answers `/global/health` with its version; opencode 2 only `/api/health`.
        let speaks = match http.get_json("/global/health") {
            Ok(health) => {
                let version = health
                    .body
                    .get("version")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("unknown")
                    .to_owned();
                format!("opencode {version}")
            }
            Err(e) => match opencode_client::Contract::of_server(&http) {
                Ok((opencode_client::Contract::V2, _)) => {
                    "opencode 2 (v2 contract, version not reported)".to_owned()
                }
                _ => return Err(call_error(server, e)),
            },
        };
        let agents = opencode_client::agents::agent_list(&http, &server.root)
            .map_err(|e| call_error(server, e))?;
        let n = agents.as_array().map_or(0, Vec::len);
        Ok(format!(
            "{speaks}, {n} agents, root {}",
            server.root.display()
        ))
    })();
    ServerCheck {
        name: server.name.clone(),
        url: server.url.clone(),
        outcome,
    }
}

/// The directory a remote server works in for a local `cwd` under `local_root`: the same path
/// below the server's `remote_root`. `None` when `cwd` is not under the local root.
pub(crate) fn map_dir(cwd: &Path, local_root: &Path, remote_root: &Path) -> Option<PathBuf> {
    let rel = cwd.strip_prefix(local_root).ok()?;
    Some(if rel.as_os_str().is_empty() {
        remote_root.to_path_buf()
    } else {
        remote_root.join(rel)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Engine;

    #[test]
    fn engines_and_places_read_and_show() {
        assert_eq!(Engine::parse(""), Ok(Engine::Serve));
        assert_eq!(Engine::parse("RUN"), Ok(Engine::Run));
        assert_eq!(Engine::default(), Engine::Serve);
        assert_eq!(Engine::parse(" Serve "), Ok(Engine::Serve));
        assert!(
            Engine::parse("server")
                .unwrap_err()
                .contains("run or serve")
        );
        assert_eq!(Place::of_engine_name("serve"), Some(Place::Local));
        assert_eq!(
            Place::of_engine_name(&Place::Remote("devbox".into()).engine_name()),
            Some(Place::Remote("devbox".into()))
        );
        assert_eq!(Place::of_engine_name("run"), None);
    }

    #[test]
    fn a_cwd_maps_below_the_servers_root() {
        let (l, r) = (Path::new("/home/u/work"), Path::new("/srv/work"));
        assert_eq!(
            map_dir(Path::new("/home/u/work"), l, r),
            Some(r.to_path_buf())
        );
        assert_eq!(
            map_dir(Path::new("/home/u/work/a/b"), l, r),
            Some(PathBuf::from("/srv/work/a/b"))
        );
        assert_eq!(map_dir(Path::new("/home/u/other"), l, r), None);
    }
}
