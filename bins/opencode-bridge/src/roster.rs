//! The roster as opencode runs it: opencode is asked for its agents (with its plugins, in the
//! environment a run gets), and the answer is cached by the identity of every configuration
//! source it reads, so a policy call stays fast. The bridge's own reading of the agent files is
//! the fallback when opencode cannot be asked, and is then labelled so.
//!
//! Identity ([`fingerprint`]): the identity of every configuration source opencode reads for the
//! directory ([`opencode_client::config_files`]: paths, sizes, mtimes and inodes of the config
//! files, agent, mode, plugin, tool and command directories and `{file:…}` references); every
//! `OPENCODE_*` variable; and the opencode binary itself. Answers are kept in memory and in
//! `<state dir>/roster-cache/` (a new bridge or a CLI call reuses them).

use bridge_policy::permission::Ruleset;
use bridge_policy::roster::{READ_TOOLS, config_content, harden_read_only, read_only_violation};
use bridge_policy::{Roster, SystemEnv};
use bridge_render::tasks::ReadOnlyRefusal;
use opencode_client::ClientError;
use opencode_client::agents::{ASK_STARTUP_TIMEOUT, AgentReport, ask_agents, ask_run_permissions};
use opencode_client::backend::{ChildEnv, ClientConfig};
use opencode_client::config_files;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// `OPENCODE_BRIDGE_ROSTER=files` skips asking opencode (the file reader only).
pub const ENV_ROSTER: &str = bridge_env::ROSTER.name;

/// What asking opencode gave, as cached.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Asked {
    /// The agents and plugins.
    Listed {
        agents: serde_json::Value,
        plugins: Vec<String>,
        via: String,
    },
    /// opencode refused to load its configuration, with its message.
    Refused { message: String },
}

/// What checking a read-only run's permissions with opencode gave ([`RosterSource::check_read_only`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ReadOnlyCheck {
    /// opencode resolves the agent default-deny under this overlay (the one asked for, or it
    /// with what undid it denied by key): the run gets exactly this overlay.
    Checked(serde_json::Value),
    /// opencode is not asked in this bridge (`why`): the run gets the overlay as it was, with a
    /// warning.
    Unchecked {
        overlay: serde_json::Value,
        why: String,
    },
    /// The run is refused.
    Refused(#[serde(with = "refusal")] ReadOnlyRefusal),
}

/// What [`ReadOnlyRefusal`] is in the on-disk cache.
mod refusal {
    use bridge_render::tasks::ReadOnlyRefusal;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    enum Stored {
        Undone(String, String, String, Option<String>),
        ShadowedTool(String),
        Missing,
        NotAsked(String),
    }

    pub fn serialize<S: Serializer>(r: &ReadOnlyRefusal, s: S) -> Result<S::Ok, S::Error> {
        match r.clone() {
            ReadOnlyRefusal::Undone {
                permission,
                pattern,
                action,
                source,
            } => Stored::Undone(permission, pattern, action, source),
            ReadOnlyRefusal::ShadowedTool { tool } => Stored::ShadowedTool(tool),
            ReadOnlyRefusal::Missing => Stored::Missing,
            ReadOnlyRefusal::NotAsked { why } => Stored::NotAsked(why),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ReadOnlyRefusal, D::Error> {
        Ok(match Stored::deserialize(d)? {
            Stored::Undone(permission, pattern, action, source) => ReadOnlyRefusal::Undone {
                permission,
                pattern,
                action,
                source,
            },
            Stored::ShadowedTool(tool) => ReadOnlyRefusal::ShadowedTool { tool },
            Stored::Missing => ReadOnlyRefusal::Missing,
            Stored::NotAsked(why) => ReadOnlyRefusal::NotAsked { why },
        })
    }
}

/// Where the roster comes from, with its cache.
#[derive(Debug)]
pub struct RosterSource {
    client: Option<ClientConfig>,
    env: ChildEnv,
    cache_dir: Option<PathBuf>,
    memory: Mutex<HashMap<u64, Arc<Asked>>>,
    /// Read-only checks, by the roster's fingerprint, the agent and the overlay.
    checks: Mutex<HashMap<u64, ReadOnlyCheck>>,
    files_only: Option<String>,
    /// Set at shutdown: an ask in flight stops its temporary server.
    stopping: AtomicBool,
    /// Asks in flight.
    asking: AtomicUsize,
    /// One ask at a time: two `opencode serve` starting at once on a fresh data dir race in
    /// opencode's store migration (observed: `Failed query: CREATE TABLE workspace`).
    one_ask: Mutex<()>,
    /// The delegation root: the walk of a project's configuration stops there ([`Self::within`]).
    root: PathBuf,
}

impl RosterSource {
    /// `client`: how to start opencode (or why it cannot be started); `env`: the
    /// environment a run gets; `cache_dir`: where answers are kept on disk.
    pub fn new(
        client: Result<ClientConfig, String>,
        env: ChildEnv,
        cache_dir: Option<PathBuf>,
    ) -> RosterSource {
        let files_only = match (
            std::env::var(ENV_ROSTER).ok().as_deref().map(str::trim),
            &client,
        ) {
            (Some("files"), _) => Some(format!("{ENV_ROSTER}=files")),
            (_, Err(why)) => Some(why.clone()),
            _ => None,
        };
        let client = client.ok();
        RosterSource {
            client,
            env,
            cache_dir,
            memory: Mutex::new(HashMap::new()),
            checks: Mutex::new(HashMap::new()),
            files_only,
            stopping: AtomicBool::new(false),
            asking: AtomicUsize::new(0),
            one_ask: Mutex::new(()),
            root: PathBuf::from("/"),
        }
    }

    /// Asks only about directories inside `root` (the caller checks that; see `app::within_root`), and
    /// walks their configuration up to `root` at most, never above it.
    pub fn within(mut self, root: &Path) -> RosterSource {
        self.root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        self
    }

    /// Stops asks in flight (their temporary servers are stopped and reaped) and waits for them,
    /// at most `limit`.
    pub async fn stop(&self, limit: std::time::Duration) {
        self.stopping.store(true, Ordering::Relaxed);
        let deadline = bridge_proc::deadline::after_tokio(limit);
        while self.asking.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The roster for `cwd` from the cache, else the file reading (never asks opencode).
    pub fn roster_if_cached(&self, cwd: &Path) -> Roster {
        let files = Roster::load(&SystemEnv, cwd);
        match (&self.files_only, &self.client) {
            (None, Some(client)) => {
                match self.cached(fingerprint(cwd, &self.root, &client.opencode_bin)) {
                    Some(asked) => from_asked(&asked, files),
                    None => files.with_fallback_reason("opencode has not been asked yet"),
                }
            }
            (Some(why), _) => files.with_fallback_reason(why.clone()),
            _ => files,
        }
    }

    /// The roster for runs in `cwd`. Blocks while opencode is asked (seconds when nothing is
    /// cached); never fails: when opencode cannot be asked the file reading is returned, saying
    /// why.
    pub fn roster(&self, cwd: &Path) -> Roster {
        let files = Roster::load(&SystemEnv, cwd);
        if let Some(why) = &self.files_only {
            return files.with_fallback_reason(why.clone());
        }
        let Some(client) = &self.client else {
            return files;
        };
        let key = fingerprint(cwd, &self.root, &client.opencode_bin);
        let asked = match self.cached(key) {
            Some(a) => a,
            None => {
                let _one = self.one_ask.lock().unwrap_or_else(|e| e.into_inner());
                // The ask we waited for may have been this one.
                if let Some(a) = self.cached(key) {
                    return from_asked(&a, files);
                }
                self.asking.fetch_add(1, Ordering::Relaxed);
                let result = ask(client, cwd, &self.env, &self.stopping);
                self.asking.fetch_sub(1, Ordering::Relaxed);
                match result {
                    Ok(a) => {
                        let a = Arc::new(a);
                        self.store(key, &a);
                        a
                    }
                    Err(why) => return files.with_fallback_reason(why),
                }
            }
        };
        from_asked(&asked, files)
    }

    /// Checks a read-only run of `agent` in `cwd` with opencode before it starts: a temporary
    /// `opencode serve` there, with the run's exact `OPENCODE_CONFIG_CONTENT` (this overlay
    /// merged over the roster's), is asked for the agent's resolved ruleset and the tool ids.
    /// The ruleset must deny everything but the read tools after its last `* * deny`
    /// ([`read_only_violation`]), and no project or plugin tool may have a read tool's name.
    /// When a rule undoes the overlay (a key placed earlier by the project, a `mode` entry), it is
    /// denied by its own key ([`harden_read_only`]) and opencode is asked again; a rule that
    /// still stands refuses the run. Answers are cached by the roster's fingerprint of `cwd`, the
    /// agent and the overlay, so one serve (two when hardened) per configuration, not per task.
    ///
    /// `roster_from_opencode`: whether opencode answered the roster of `cwd`; when it did not
    /// (opencode cannot be asked in this environment), the run is [`ReadOnlyCheck::Unchecked`].
    pub fn check_read_only(
        &self,
        cwd: &Path,
        agent: &str,
        overlay: &serde_json::Value,
        roster_from_opencode: bool,
    ) -> ReadOnlyCheck {
        let unchecked = |why: String| ReadOnlyCheck::Unchecked {
            overlay: overlay.clone(),
            why,
        };
        if let Some(why) = &self.files_only {
            return unchecked(why.clone());
        }
        let Some(client) = &self.client else {
            return unchecked("opencode cannot be started".into());
        };
        let key = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            fingerprint(cwd, &self.root, &client.opencode_bin).hash(&mut h);
            agent.hash(&mut h);
            overlay.to_string().hash(&mut h);
            h.finish()
        };
        if let Some(c) = self.cached_check(key) {
            return c;
        }
        let _one = self.one_ask.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = self.cached_check(key) {
            return c;
        }
        self.asking.fetch_add(1, Ordering::Relaxed);
        let result = self.check_uncached(client, cwd, agent, overlay);
        self.asking.fetch_sub(1, Ordering::Relaxed);
        match result {
            Ok(check) => {
                self.store_check(key, &check);
                check
            }
            Err(why) if roster_from_opencode => {
                ReadOnlyCheck::Refused(ReadOnlyRefusal::NotAsked { why })
            }
            Err(why) => unchecked(why),
        }
    }

    fn check_uncached(
        &self,
        client: &ClientConfig,
        cwd: &Path,
        agent: &str,
        overlay: &serde_json::Value,
    ) -> Result<ReadOnlyCheck, String> {
        let ask =
            |overlay: &serde_json::Value| -> Result<Result<Ruleset, ReadOnlyRefusal>, String> {
                let env = self.env_with(overlay)?;
                tracing::debug!(cwd = %cwd.display(), agent, "asking opencode for a read-only run's permissions");
                let report = match ask_run_permissions(
                    client,
                    cwd,
                    &env,
                    ASK_STARTUP_TIMEOUT,
                    Some(&self.stopping),
                ) {
                    Ok(r) => r,
                    Err(ClientError::TempServer { detail }) => {
                        return Err(format!("opencode could not be asked: {detail}"));
                    }
                    Err(e) => return Err(format!("opencode could not be asked: {e}")),
                };
                if let Some(tool) = READ_TOOLS
                    .iter()
                    .find(|t| report.tool_ids.iter().filter(|id| id == *t).count() > 1)
                {
                    return Ok(Err(ReadOnlyRefusal::ShadowedTool {
                        tool: (*tool).to_owned(),
                    }));
                }
                let rules = report
                    .agents
                    .as_array()
                    .and_then(|list| {
                        list.iter()
                            .find(|a| a.get("name").and_then(|n| n.as_str()) == Some(agent))
                    })
                    .and_then(|a| a.get("permission"))
                    .and_then(Ruleset::from_opencode);
                Ok(rules.ok_or(ReadOnlyRefusal::Missing))
            };
        let rules = match ask(overlay)? {
            Ok(r) => r,
            Err(refusal) => return Ok(ReadOnlyCheck::Refused(refusal)),
        };
        let violation = read_only_violation(&rules);
        tracing::debug!(?violation, "read-only check, first ask");
        if violation.is_none() {
            return Ok(ReadOnlyCheck::Checked(overlay.clone()));
        }
        let hardened = harden_read_only(overlay, agent, &rules);
        let rules = match ask(&hardened)? {
            Ok(r) => r,
            Err(refusal) => return Ok(ReadOnlyCheck::Refused(refusal)),
        };
        Ok(match read_only_violation(&rules) {
            None => ReadOnlyCheck::Checked(hardened),
            Some(rule) => ReadOnlyCheck::Refused(ReadOnlyRefusal::Undone {
                source: permission_source(cwd, &self.root, agent, &rule.permission)
                    .map(|p| p.display().to_string()),
                action: format!("{:?}", rule.action).to_ascii_lowercase(),
                permission: rule.permission,
                pattern: rule.pattern,
            }),
        })
    }

    /// The roster's environment with `overlay` merged over its `OPENCODE_CONFIG_CONTENT`: what
    /// the run gets (`run_supervisor::command` merges the same overlay over the same content).
    fn env_with(&self, overlay: &serde_json::Value) -> Result<ChildEnv, String> {
        const CONTENT: &str = bridge_env::OPENCODE_CONFIG_CONTENT.name;
        let mut env = self.env.clone();
        let existing = env
            .set
            .iter()
            .rev()
            .find(|(k, _)| k == CONTENT)
            .map(|(_, v)| v.clone());
        let content = config_content(existing.as_deref(), Some(overlay))?;
        env.set.retain(|(k, _)| k != CONTENT);
        env.set.push((CONTENT.into(), content));
        Ok(env)
    }

    fn cached_check(&self, key: u64) -> Option<ReadOnlyCheck> {
        if let Some(c) = self.checks.lock().ok()?.get(&key) {
            return Some(c.clone());
        }
        let path = self.cache_dir.as_ref()?.join(format!("ro-{key:016x}.json"));
        let check: ReadOnlyCheck = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        if let Ok(mut m) = self.checks.lock() {
            m.insert(key, check.clone());
        }
        Some(check)
    }

    fn store_check(&self, key: u64, check: &ReadOnlyCheck) {
        if let Ok(mut m) = self.checks.lock() {
            if m.len() >= 64 {
                m.clear();
            }
            m.insert(key, check.clone());
        }
        if let Some(dir) = &self.cache_dir
            && std::fs::create_dir_all(dir).is_ok()
            && let Ok(bytes) = serde_json::to_vec(check)
        {
            let tmp = dir.join(format!(".ro-{key:016x}.{}.tmp", std::process::id()));
            if std::fs::write(&tmp, bytes).is_ok() {
                let _ = std::fs::rename(&tmp, dir.join(format!("ro-{key:016x}.json")));
            }
        }
    }

    fn cached(&self, key: u64) -> Option<Arc<Asked>> {
        if let Some(a) = self.memory.lock().ok()?.get(&key) {
            return Some(a.clone());
        }
        let path = self.cache_dir.as_ref()?.join(format!("{key:016x}.json"));
        let asked: Asked = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        let asked = Arc::new(asked);
        if let Ok(mut m) = self.memory.lock() {
            m.insert(key, asked.clone());
        }
        Some(asked)
    }

    fn store(&self, key: u64, asked: &Arc<Asked>) {
        if let Ok(mut m) = self.memory.lock() {
            if m.len() >= 64 {
                m.clear();
            }
            m.insert(key, asked.clone());
        }
        if let Some(dir) = &self.cache_dir
            && std::fs::create_dir_all(dir).is_ok()
            && let Ok(bytes) = serde_json::to_vec(asked.as_ref())
        {
            // Written whole then renamed, so a reader never sees half a file.
            let tmp = dir.join(format!(".{key:016x}.{}.tmp", std::process::id()));
            if std::fs::write(&tmp, bytes).is_ok() {
                let _ = std::fs::rename(&tmp, dir.join(format!("{key:016x}.json")));
            }
        }
    }
}

fn from_asked(asked: &Asked, files: Roster) -> Roster {
    match asked {
        Asked::Listed {
            agents,
            plugins,
            via,
        } => Roster::from_opencode(agents, &files, plugins.clone(), via),
        Asked::Refused { message } => files
            .with_fallback_reason("opencode refuses to load its configuration")
            .with_load_error(message.clone()),
    }
}

/// Asks opencode; a refusal to load the configuration is an answer (cached), anything else an
/// error (not cached: the next call tries again).
fn ask(
    client: &ClientConfig,
    cwd: &Path,
    env: &ChildEnv,
    stopping: &AtomicBool,
) -> Result<Asked, String> {
    let dir = if cwd.is_dir() {
        cwd.to_path_buf()
    } else {
        return Err(format!("{} is not a directory", cwd.display()));
    };
    match ask_agents(client, &dir, env, ASK_STARTUP_TIMEOUT, Some(stopping)) {
        Ok(AgentReport {
            agents,
            plugins,
            via,
        }) => Ok(Asked::Listed {
            agents,
            plugins,
            via,
        }),
        Err(ClientError::OpencodeRefused { message }) => Ok(Asked::Refused { message }),
        Err(ClientError::TempServer { detail }) => {
            Err(format!("opencode could not be asked: {detail}"))
        }
        Err(e) => Err(format!("opencode could not be asked: {e}")),
    }
}

/// The identity of everything opencode reads to build the roster of `cwd` (see the module docs);
/// of the project's sources, only those at or below `root`.
pub fn fingerprint(cwd: &Path, root: &Path, opencode_bin: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("OPENCODE_") || k == "HOME" || k == "XDG_CONFIG_HOME")
        .collect();
    vars.sort();
    vars.hash(&mut h);
    let bin = which(opencode_bin);
    config_files::stat_into(&bin, &mut h);
    config_files::identity_into(cwd, root, &|k| std::env::var(k).ok(), &mut h);
    h.finish()
}

/// The configuration file that most likely sets permission key `key` for `agent` in `cwd`:
/// the last of the files opencode reads (config files in its order, then the agent's markdown
/// files) that names both. A guess for messages, never for decisions.
fn permission_source(cwd: &Path, root: &Path, agent: &str, key: &str) -> Option<PathBuf> {
    let leaf = agent.rsplit('/').next().unwrap_or(agent);
    let mut found = None;
    for path in config_files::sources(cwd, root, &|k| std::env::var(k).ok()) {
        let candidates: Vec<PathBuf> = if path.is_dir() {
            vec![
                path.join(format!("{agent}.md")),
                path.join(format!("{leaf}.md")),
            ]
        } else {
            vec![path]
        };
        for file in candidates {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let is_md = file.extension().is_some_and(|e| e == "md");
            let names_agent = is_md || text.contains(&format!("\"{agent}\""));
            let names_key = text.contains(&format!("\"{key}\""))
                || text.contains(&format!("'{key}'"))
                || (is_md
                    && text
                        .lines()
                        .any(|l| l.trim_start().starts_with(&format!("{key}:"))));
            if names_agent && names_key {
                found = Some(file);
            }
        }
    }
    found
}

/// The binary `bin` names, found as everywhere else ([`bridge_env::Program::find`]); as given
/// when it cannot be found.
fn which(bin: &Path) -> PathBuf {
    bridge_env::OPENCODE
        .find(Some(bin))
        .unwrap_or_else(|_| bin.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_covers_the_binary_and_the_configuration() {
        // The configuration's own identity is config_files' (tested there); here: it is in.
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        std::fs::create_dir_all(proj.join(".opencode/agents")).unwrap();
        let fingerprint = |b: &str| fingerprint(&proj, tmp.path(), Path::new(b));
        let a = fingerprint("/bin/sh");
        assert_eq!(a, fingerprint("/bin/sh"));
        assert_ne!(a, fingerprint("/bin/ls"));
        std::fs::write(proj.join(".opencode/agents/x.md"), "---\nmode: all\n---\n").unwrap();
        assert_ne!(a, fingerprint("/bin/sh"));
    }
}
