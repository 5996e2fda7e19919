//! What opencode reads its configuration from for a directory, and the identity of all of it:
//! whether anything an opencode process would load there has changed since. The roster's cache
//! and the warm servers of the serve engine are keyed by it, so an edited agent, permission,
//! plugin, tool or command is seen by the next task as it would be by a new `opencode run`.
//!
//! Sources: the global config directory (`$XDG_CONFIG_HOME/opencode`, else
//! `~/.config/opencode`), `OPENCODE_CONFIG`, `OPENCODE_CONFIG_DIR`, every `opencode.json(c)` and
//! `.opencode/` from the worktree root (or `root`, when lower) down to the directory, and
//! `~/.opencode`; in each directory its config files and its agent, mode, plugin, tool and
//! command directories. The identity is each existing source's path, size, mtime and inode,
//! every entry below those directories (bounded; `node_modules` skipped), and the files named by
//! `{file:…}` references in the config files. Only `stat` and reads of config files: no
//! process, no network.

use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Hashes the identity of every configuration source of `cwd` (see the module docs) into `h`;
/// `env` looks the variables up (`HOME`, `XDG_CONFIG_HOME`, `OPENCODE_CONFIG`,
/// `OPENCODE_CONFIG_DIR`) as the opencode process would see them.
pub fn identity_into(
    cwd: &Path,
    root: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    h: &mut impl Hasher,
) {
    let home = env("HOME")
        .filter(|v| !v.trim().is_empty())
        .map(PathBuf::from);
    // Only sources that exist count, so directories of one project with the same sources share
    // one identity; a source that appears changes the set.
    for path in sources(cwd, root, env).into_iter().filter(|p| p.exists()) {
        stat_into(&path, h);
        if path.is_dir() {
            walk_into(&path, 0, h);
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            let base = path.parent().unwrap_or(Path::new("/"));
            for referenced in file_references(&text, base, home.as_deref()) {
                stat_into(&referenced, h);
            }
        }
    }
}

/// [`identity_into`] as one number.
pub fn identity(cwd: &Path, root: &Path, env: &dyn Fn(&str) -> Option<String>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    identity_into(cwd, root, env, &mut h);
    h.finish()
}

/// The files and directories opencode reads configuration, agents, plugins, tools and commands
/// from, for `cwd` (the
/// project's from the worktree root, or `root` when that is lower, down to `cwd`).
pub fn sources(cwd: &Path, root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    let home = var("HOME");
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
            "tool",
            "tools",
            "command",
            "commands",
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
fn file_references(text: &str, base: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("{file:") {
        rest = &rest[at + 6..];
        let Some(end) = rest.find('}') else { break };
        let raw = rest[..end].trim();
        let path = match raw.strip_prefix("~/") {
            Some(r) => home.unwrap_or(Path::new("")).join(r),
            None => base.join(raw),
        };
        out.push(path);
        rest = &rest[end..];
    }
    out
}

pub fn stat_into(path: &Path, h: &mut impl Hasher) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn file_references_resolve_against_the_config_and_home() {
        let refs = file_references(
            r#"{"a": "{file:./prompts/a.md}", "k": "{file:~/.secrets/key}"}"#,
            Path::new("/cfg"),
            Some(Path::new("/home/u")),
        );
        assert_eq!(refs[0], PathBuf::from("/cfg/./prompts/a.md"));
        assert_eq!(refs[1], PathBuf::from("/home/u/.secrets/key"));
    }

    #[test]
    fn the_identity_changes_with_an_agent_a_tool_a_command_and_a_referenced_file() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        std::fs::create_dir_all(proj.join(".git")).unwrap();
        std::fs::create_dir_all(proj.join(".opencode/agents")).unwrap();
        let id = || identity(&proj, tmp.path(), &no_env);
        let a = id();
        assert_eq!(a, id());
        std::fs::write(proj.join(".opencode/agents/x.md"), "---\nmode: all\n---\n").unwrap();
        let b = id();
        assert_ne!(a, b);
        std::fs::create_dir_all(proj.join(".opencode/tool")).unwrap();
        std::fs::write(proj.join(".opencode/tool/t.js"), "export default {}").unwrap();
        let c = id();
        assert_ne!(b, c);
        std::fs::create_dir_all(proj.join(".opencode/command")).unwrap();
        let d = id();
        assert_ne!(c, d);
        std::fs::write(proj.join("opencode.json"), r#"{"x": "{file:missing}"}"#).unwrap();
        let e = id();
        std::fs::write(proj.join("missing"), "now here").unwrap();
        assert_ne!(e, id());
    }

    #[test]
    fn the_global_directory_comes_from_the_given_environment() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("p");
        let xdg = tmp.path().join("xdg");
        std::fs::create_dir_all(xdg.join("opencode/agent")).unwrap();
        std::fs::create_dir_all(&proj).unwrap();
        let xdg_s = xdg.to_string_lossy().into_owned();
        let env = move |k: &str| (k == "XDG_CONFIG_HOME").then(|| xdg_s.clone());
        let before = identity(&proj, tmp.path(), &env);
        std::fs::write(xdg.join("opencode/agent/y.md"), "hi").unwrap();
        assert_ne!(before, identity(&proj, tmp.path(), &env));
        assert!(sources(&proj, tmp.path(), &env).contains(&xdg.join("opencode/opencode.json")));
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
        let sources = sources(&proj, &root, &no_env);
        assert!(sources.contains(&proj.join("opencode.json")));
        assert!(sources.contains(&root.join("opencode.json")));
        assert!(
            !sources
                .iter()
                .any(|s| s.starts_with(&top) && !s.starts_with(&root))
        );
    }
}
