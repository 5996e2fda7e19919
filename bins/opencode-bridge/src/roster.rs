//! The roster as opencode runs it: opencode is asked for its agents (with its plugins, in the
//! environment a run gets), and the answer is cached by the identity of every configuration
//! source it reads, so a policy call stays fast. The bridge's own reading of the agent files is
//! the fallback when opencode cannot be asked, and is then labelled so.
//!
//! Identity ([`fingerprint`]): for each existing configuration file and agent/mode/plugin directory
//! opencode reads for the directory (global, `OPENCODE_CONFIG`, `OPENCODE_CONFIG_DIR`, every
//! `opencode.json(c)` and `.opencode/` from the worktree root down, `~/.opencode`), its path,
//! size, mtime and inode; the files named by `{file:…}` references in those configs; every
//! `OPENCODE_*` variable; and the opencode binary itself. Answers are kept in memory and in
//! `<state dir>/roster-cache/` (a new bridge or a CLI call reuses them).

use bridge_policy::{Roster, SystemEnv};
use opencode_client::ClientError;
use opencode_client::agents::{ASK_STARTUP_TIMEOUT, AgentReport, ask_agents};
use opencode_client::backend::{ChildEnv, ClientConfig};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
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

/// Where the roster comes from, with its cache.
#[derive(Debug)]
pub struct RosterSource {
    client: Option<ClientConfig>,
    env: ChildEnv,
    cache_dir: Option<PathBuf>,
    memory: Mutex<HashMap<u64, Arc<Asked>>>,
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
            files_only,
            stopping: AtomicBool::new(false),
            asking: AtomicUsize::new(0),
            one_ask: Mutex::new(()),
            root: PathBuf::from("/"),
        }
    }

    /// Asks only about directories inside `root` (the caller checks that; see `app::fence`), and
    /// walks their configuration up to `root` at most, never above it.
    pub fn within(mut self, root: &Path) -> RosterSource {
        self.root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        self
    }

    /// Stops asks in flight (their temporary servers are stopped and reaped) and waits for them,
    /// at most `limit`.
    pub async fn stop(&self, limit: std::time::Duration) {
        self.stopping.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + limit;
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
    stat_into(&bin, &mut h);
    // Only sources that exist count, so directories of one project with the same sources share
    // one answer; a source that appears changes the set.
    for path in config_sources(cwd, root).into_iter().filter(|p| p.exists()) {
        stat_into(&path, &mut h);
        if path.is_dir() {
            walk_into(&path, 0, &mut h);
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            for referenced in file_references(&text, path.parent().unwrap_or(Path::new("/"))) {
                stat_into(&referenced, &mut h);
            }
        }
    }
    h.finish()
}

/// The files and directories opencode reads configuration and agents from, for `cwd` (the
/// project's from the worktree root, or `root` when that is lower, down to `cwd`).
fn config_sources(cwd: &Path, root: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let var = |k: &str| {
        std::env::var(k)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from)
    };
    let global = var("XDG_CONFIG_HOME")
        .map(|x| x.join("opencode"))
        .or_else(|| home.as_ref().map(|h| h.join(".config/opencode")));
    let mut out = Vec::new();
    let dir_sources = |dir: &Path, out: &mut Vec<PathBuf>| {
        for f in [
            "config.json",
            "opencode.json",
            "opencode.jsonc",
            "package.json",
            "agent",
            "agents",
            "mode",
            "modes",
            "plugin",
            "plugins",
        ] {
            out.push(dir.join(f));
        }
    };
    if let Some(g) = &global {
        dir_sources(g, &mut out);
    }
    if let Some(c) = var(bridge_env::OPENCODE_CONFIG.name) {
        out.push(c);
    }
    if let Some(d) = var(bridge_env::OPENCODE_CONFIG_DIR.name) {
        dir_sources(&d, &mut out);
    }
    let worktree = cwd
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or_else(|| cwd.ancestors().last().unwrap_or(cwd));
    for dir in cwd
        .ancestors()
        .take_while(|d| d.starts_with(worktree) && d.starts_with(root))
    {
        out.push(dir.join("opencode.json"));
        out.push(dir.join("opencode.jsonc"));
        dir_sources(&dir.join(".opencode"), &mut out);
    }
    if let Some(h) = &home {
        dir_sources(&h.join(".opencode"), &mut out);
    }
    out
}

/// `{file:PATH}` references in a config text, resolved against its directory (`~/` from home).
fn file_references(text: &str, base: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("{file:") {
        rest = &rest[at + 6..];
        let Some(end) = rest.find('}') else { break };
        let raw = rest[..end].trim();
        let path = match raw.strip_prefix("~/") {
            Some(r) => std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default()
                .join(r),
            None => base.join(raw),
        };
        out.push(path);
        rest = &rest[end..];
    }
    out
}

fn stat_into(path: &Path, h: &mut impl Hasher) {
    path.hash(h);
    match std::fs::metadata(path) {
        Ok(m) => (m.len(), m.mtime(), m.mtime_nsec(), m.ino()).hash(h),
        Err(_) => 0u8.hash(h),
    }
}

/// Every entry below an agent, mode or plugin directory (bounded; `node_modules` skipped).
fn walk_into(dir: &Path, depth: usize, h: &mut impl Hasher) {
    if depth > 6 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).take(4000).collect();
    paths.sort();
    for p in paths {
        if p.file_name().is_some_and(|n| n == "node_modules") {
            continue;
        }
        stat_into(&p, h);
        if p.is_dir() {
            walk_into(&p, depth + 1, h);
        }
    }
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
    fn file_references_resolve_against_the_config_and_home() {
        let refs = file_references(
            r#"{"a": "{file:./prompts/a.md}", "k": "{file:~/.secrets/key}"}"#,
            Path::new("/cfg"),
        );
        assert_eq!(refs[0], PathBuf::from("/cfg/./prompts/a.md"));
        assert!(refs[1].ends_with(".secrets/key"));
    }

    #[test]
    fn the_fingerprint_changes_with_an_agent_file() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        std::fs::create_dir_all(proj.join(".git")).unwrap();
        std::fs::create_dir_all(proj.join(".opencode/agents")).unwrap();
        let bin = Path::new("/bin/sh");
        let fingerprint = |p: &Path, b: &Path| fingerprint(p, tmp.path(), b);
        let a = fingerprint(&proj, bin);
        assert_eq!(a, fingerprint(&proj, bin));
        std::fs::write(proj.join(".opencode/agents/x.md"), "---\nmode: all\n---\n").unwrap();
        let b = fingerprint(&proj, bin);
        assert_ne!(a, b);
        std::fs::write(proj.join("opencode.json"), r#"{"x": "{file:missing}"}"#).unwrap();
        let c = fingerprint(&proj, bin);
        std::fs::write(proj.join("missing"), "now here").unwrap();
        assert_ne!(c, fingerprint(&proj, bin));
    }

    #[test]
    fn the_walk_stops_at_the_root() {
        // A worktree whose top lies above the root: its configuration there is not looked at.
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("repo");
        let root = top.join("root");
        let proj = root.join("p");
        std::fs::create_dir_all(top.join(".git")).unwrap();
        std::fs::create_dir_all(&proj).unwrap();
        let sources = config_sources(&proj, &root);
        assert!(sources.contains(&proj.join("opencode.json")));
        assert!(sources.contains(&root.join("opencode.json")));
        assert!(
            !sources
                .iter()
                .any(|s| s.starts_with(&top) && !s.starts_with(&root))
        );
    }
}
