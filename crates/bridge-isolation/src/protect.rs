//! The protected paths of an editing run's project, checked after the run and put back.
//!
//! An editing agent may write its project, but not the paths that run later outside any fence
//! (`bridge_fence::protected::PROTECTED`: git's hooks and config, Claude Code's and opencode's
//! project settings, `.mcp.json`, `.envrc`, editor tasks). Where the kernel can keep them
//! read-only (a mount namespace), it does; this is the check that holds everywhere, and the
//! second layer where the first exists: [`Protected::take`] records them before the run (type,
//! mode, stat data, a symlink's target, a file's content up to [`MAX_FILE`], a directory's
//! entries, bounded by [`MAX_ENTRIES`] and [`MAX_BYTES`]), and [`Protected::restore`] after it
//! finds every protected path added, changed or removed, puts back what was there (removes what
//! was added) and names them. The task then fails (kind `agent`).
//!
//! Nothing is followed: entries are read with `lstat`, a symlink is recorded as its target, and
//! nothing is written through a directory that is no longer a real directory (a run may have
//! replaced `.git/hooks` with a symlink to elsewhere: the symlink is removed, the directory made
//! again, and its files written into it).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Files larger than this are compared by their stat data only, and cannot be put back.
pub const MAX_FILE: u64 = 1024 * 1024;
/// Most content kept in one record.
pub const MAX_BYTES: u64 = 32 * 1024 * 1024;
/// Most entries recorded in one record.
pub const MAX_ENTRIES: usize = 20_000;
/// Most paths named in a failure.
const MAX_NAMED: usize = 20;

/// What opencode itself adds to a project's `.opencode/` when it loads a plugin there whose
/// dependencies were not installed (seen with 1.18.33): an npm install. Like anything added to
/// a protected path it is removed after the run (it is code the next opencode would load), but
/// it is not the agent's doing, so its addition alone does not fail the task; the audit line
/// counts it. A change to what was there before still does.
pub const RUNNER_INSTALL: &[&str] = &[
    ".opencode/node_modules",
    ".opencode/.gitignore",
    ".opencode/package.json",
    ".opencode/package-lock.json",
    ".opencode/bun.lock",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        mode: u32,
        /// Size, inode, mtime and ctime: what tells a file over [`MAX_FILE`] changed.
        stamp: (u64, u64, i64, i64, i64, i64),
        bytes: Option<Vec<u8>>,
    },
    Link(PathBuf),
    Dir {
        mode: u32,
    },
    /// A socket, fifo or device: compared by type only, removed if added.
    Other,
}

impl Entry {
    /// Whether `self` (after) is the same as `before`.
    fn same_as(&self, before: &Entry) -> bool {
        match (before, self) {
            (
                Entry::File {
                    mode: m0,
                    stamp: s0,
                    bytes: b0,
                },
                Entry::File {
                    mode: m1,
                    stamp: s1,
                    bytes: b1,
                },
            ) => {
                m0 == m1
                    && match (b0, b1) {
                        (Some(a), Some(b)) => a == b,
                        _ => s0 == s1,
                    }
            }
            (a, b) => a == b,
        }
    }
}

/// The protected paths of one project at one moment (see the module docs).
#[derive(Debug, Clone)]
pub struct Protected {
    top: PathBuf,
    entries: BTreeMap<PathBuf, Entry>,
    truncated: bool,
}

/// What [`Protected::restore`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Each protected path added, changed or removed (relative to the project's top), with
    /// what was done: `added, removed`, `changed, restored`, `removed, restored`, or why it
    /// could not be put back.
    pub paths: Vec<(String, String)>,
    /// Entries of [`RUNNER_INSTALL`] that were added, and removed.
    pub installed: usize,
}

impl Restored {
    /// The failure message naming every path (the first [`MAX_NAMED`], then how many more).
    pub fn message(&self) -> Option<String> {
        if self.paths.is_empty() {
            return None;
        }
        let mut named: Vec<String> = self
            .paths
            .iter()
            .take(MAX_NAMED)
            .map(|(p, how)| format!("{p} ({how})"))
            .collect();
        if self.paths.len() > MAX_NAMED {
            named.push(format!("and {} more", self.paths.len() - MAX_NAMED));
        }
        Some(format!(
            "the run changed protected paths of the project, which run later outside any fence (git, Claude Code, opencode, editors): {}",
            named.join(", ")
        ))
    }
}

impl Protected {
    /// Records the protected paths of the project whose top is `top`.
    pub fn take(top: &Path) -> Protected {
        let mut p = Protected {
            top: top.to_path_buf(),
            entries: BTreeMap::new(),
            truncated: false,
        };
        let mut budget = MAX_BYTES;
        for rel in bridge_fence::protected::PROTECTED {
            p.record(Path::new(rel), &mut budget);
        }
        p
    }

    /// Whether the record is complete (false: more than [`MAX_ENTRIES`] entries).
    pub fn complete(&self) -> bool {
        !self.truncated
    }

    fn record(&mut self, rel: &Path, budget: &mut u64) {
        if self.entries.len() >= MAX_ENTRIES {
            self.truncated = true;
            return;
        }
        let abs = self.top.join(rel);
        if !real_dirs_between(&self.top, &abs) {
            return;
        }
        let Ok(meta) = std::fs::symlink_metadata(&abs) else {
            return;
        };
        let entry = entry_of(&abs, &meta, budget);
        let is_dir = matches!(entry, Entry::Dir { .. });
        self.entries.insert(rel.to_path_buf(), entry);
        if is_dir && let Ok(list) = std::fs::read_dir(&abs) {
            let mut names: Vec<_> = list.flatten().map(|e| e.file_name()).collect();
            names.sort();
            for n in names {
                self.record(&rel.join(n), budget);
            }
        }
    }

    /// Records the paths again, puts back every protected path that was added, changed or
    /// removed since [`take`](Self::take), and names them.
    pub fn restore(&self) -> Restored {
        let now = Protected::take(&self.top);
        let paths: BTreeSet<&PathBuf> = self.entries.keys().chain(now.entries.keys()).collect();
        let mut out = Restored::default();
        // What was added goes first, deepest first.
        for rel in paths.iter().rev() {
            if !self.entries.contains_key(*rel) && now.entries.contains_key(*rel) {
                let abs = self.top.join(rel);
                let how = match remove(&self.top, &abs) {
                    Ok(()) if RUNNER_INSTALL.iter().any(|i| rel.starts_with(i)) => {
                        out.installed += 1;
                        continue;
                    }
                    Ok(()) => "added, removed".to_owned(),
                    Err(e) => format!("added, not removed: {e}"),
                };
                out.paths.push((rel.display().to_string(), how));
            }
        }
        // Then what changed or went, parents first.
        for rel in &paths {
            let Some(before) = self.entries.get(*rel) else {
                continue;
            };
            let was = match now.entries.get(*rel) {
                Some(after) if after.same_as(before) => continue,
                Some(_) => "changed",
                None => "removed",
            };
            let how = match put_back(&self.top, &self.top.join(rel), before) {
                Ok(()) => format!("{was}, restored"),
                Err(e) => format!("{was}, not restored: {e}"),
            };
            out.paths.push((rel.display().to_string(), how));
        }
        out.paths.sort();
        out
    }
}

fn entry_of(abs: &Path, meta: &std::fs::Metadata, budget: &mut u64) -> Entry {
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Entry::Link(std::fs::read_link(abs).unwrap_or_default());
    }
    if ft.is_dir() {
        return Entry::Dir {
            mode: meta.mode() & 0o7777,
        };
    }
    if !ft.is_file() {
        return Entry::Other;
    }
    let size = meta.size();
    let bytes = (size <= MAX_FILE && size <= *budget)
        .then(|| std::fs::read(abs).ok())
        .flatten();
    if let Some(b) = &bytes {
        *budget = budget.saturating_sub(b.len() as u64);
    }
    Entry::File {
        mode: meta.mode() & 0o7777,
        stamp: (
            size,
            meta.ino(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
        ),
        bytes,
    }
}

/// Whether every directory from `top` down to `abs`'s parent is a real directory (no
/// symlink), so that writing `abs` writes under `top`.
fn real_dirs_between(top: &Path, abs: &Path) -> bool {
    let Ok(rel) = abs.strip_prefix(top) else {
        return false;
    };
    let mut dir = top.to_path_buf();
    let mut parts: Vec<_> = rel.components().collect();
    parts.pop();
    for c in parts {
        dir.push(c);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            _ => return false,
        }
    }
    true
}

fn remove(top: &Path, abs: &Path) -> Result<(), String> {
    if !real_dirs_between(top, abs) {
        // Its parent was replaced or removed: that is put back (or removed) on its own.
        return Ok(());
    }
    let meta = match std::fs::symlink_metadata(abs) {
        Ok(m) => m,
        Err(_) => return Ok(()),
    };
    let r = if meta.is_dir() {
        std::fs::remove_dir_all(abs)
    } else {
        std::fs::remove_file(abs)
    };
    r.map_err(|e| e.to_string())
}

fn put_back(top: &Path, abs: &Path, before: &Entry) -> Result<(), String> {
    if !real_dirs_between(top, abs) {
        return Err("a directory above it is no longer a directory".into());
    }
    let now = std::fs::symlink_metadata(abs).ok();
    let is_real_dir = now.as_ref().is_some_and(|m| m.is_dir());
    match before {
        Entry::Dir { mode } => {
            if !is_real_dir {
                if now.is_some() {
                    std::fs::remove_file(abs).map_err(|e| e.to_string())?;
                }
                std::fs::create_dir(abs).map_err(|e| e.to_string())?;
            }
            std::fs::set_permissions(abs, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| e.to_string())
        }
        Entry::Link(target) => {
            clear(abs, now.as_ref())?;
            std::os::unix::fs::symlink(target, abs).map_err(|e| e.to_string())
        }
        Entry::File {
            bytes: Some(bytes),
            mode,
            ..
        } => {
            // Never through a symlink or into a directory: what is there goes first, and
            // `create_new` (O_EXCL) refuses whatever came back meanwhile, a symlink included.
            clear(abs, now.as_ref())?;
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(*mode)
                .open(abs)
                .map_err(|e| e.to_string())?;
            f.write_all(bytes).map_err(|e| e.to_string())?;
            std::fs::set_permissions(abs, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| e.to_string())
        }
        Entry::File { bytes: None, .. } => {
            Err(format!("larger than {} MiB", MAX_FILE / (1024 * 1024)))
        }
        Entry::Other => Err("not a file, directory or symlink".into()),
    }
}

fn clear(abs: &Path, now: Option<&std::fs::Metadata>) -> Result<(), String> {
    match now {
        Some(m) if m.is_dir() => std::fs::remove_dir_all(abs).map_err(|e| e.to_string()),
        Some(_) => std::fs::remove_file(abs).map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(top.join(".git/hooks")).unwrap();
        std::fs::write(top.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(top.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        std::fs::create_dir_all(top.join(".claude")).unwrap();
        std::fs::write(top.join(".claude/settings.json"), "{}").unwrap();
        std::fs::write(top.join("src.rs"), "fn main() {}\n").unwrap();
        (d, top)
    }

    #[test]
    fn nothing_changed_is_nothing_named() {
        let (_d, top) = project();
        let p = Protected::take(&top);
        std::fs::write(top.join("src.rs"), "edited\n").unwrap();
        // Touched but the same content: not a change.
        std::fs::write(top.join(".git/config"), "[core]\n").unwrap();
        assert_eq!(p.restore(), Restored::default());
        assert_eq!(Restored::default().message(), None);
    }

    #[test]
    fn added_changed_and_removed_paths_are_put_back_and_named() {
        let (_d, top) = project();
        let p = Protected::take(&top);
        std::fs::write(top.join(".git/hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
        std::fs::write(top.join(".git/config"), "[core]\nfsmonitor = evil\n").unwrap();
        std::fs::remove_file(top.join(".claude/settings.json")).unwrap();
        std::fs::write(top.join(".mcp.json"), "{}").unwrap();
        std::fs::create_dir_all(top.join(".vscode")).unwrap();
        std::fs::write(top.join(".vscode/tasks.json"), "{}").unwrap();
        let r = p.restore();
        let named: Vec<(&str, &str)> = r
            .paths
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                (".claude/settings.json", "removed, restored"),
                (".git/config", "changed, restored"),
                (".git/hooks/pre-commit", "added, removed"),
                (".mcp.json", "added, removed"),
                (".vscode", "added, removed"),
                (".vscode/tasks.json", "added, removed"),
            ]
        );
        assert_eq!(
            std::fs::read_to_string(top.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert_eq!(
            std::fs::read_to_string(top.join(".claude/settings.json")).unwrap(),
            "{}"
        );
        for gone in [".git/hooks/pre-commit", ".mcp.json", ".vscode"] {
            assert!(!top.join(gone).exists(), "{gone}");
        }
        assert_eq!(
            std::fs::read_to_string(top.join("src.rs")).unwrap(),
            "fn main() {}\n"
        );
        let m = r.message().unwrap();
        assert!(m.contains(".git/hooks/pre-commit (added, removed)"), "{m}");
        // Everything is back: a second look finds nothing.
        assert_eq!(p.restore(), Restored::default());
    }

    #[test]
    fn a_directory_replaced_by_a_symlink_is_made_again_and_nothing_is_written_through_it() {
        let (d, top) = project();
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let p = Protected::take(&top);
        std::fs::remove_dir_all(top.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink(&outside, top.join(".git/hooks")).unwrap();
        let r = p.restore();
        assert!(
            r.paths
                .contains(&(".git/hooks".into(), "changed, restored".into())),
            "{r:?}"
        );
        assert!(
            std::fs::symlink_metadata(top.join(".git/hooks"))
                .unwrap()
                .is_dir()
        );
        assert_eq!(
            std::fs::read_to_string(top.join(".git/hooks/pre-commit.sample")).unwrap(),
            "#!/bin/sh\n"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // A file replaced by a symlink: the link goes, the file comes back, the target is
        // not written.
        let p = Protected::take(&top);
        let target = outside.join("victim");
        std::fs::write(&target, "theirs").unwrap();
        std::fs::remove_file(top.join(".git/config")).unwrap();
        std::os::unix::fs::symlink(&target, top.join(".git/config")).unwrap();
        p.restore();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "theirs");
        assert!(
            std::fs::symlink_metadata(top.join(".git/config"))
                .unwrap()
                .is_file()
        );
    }

    #[test]
    fn what_opencode_installs_is_removed_without_failing_and_a_change_to_it_fails() {
        let (_d, top) = project();
        std::fs::create_dir_all(top.join(".opencode/plugin")).unwrap();
        std::fs::write(top.join(".opencode/plugin/p.js"), "export {}").unwrap();
        let p = Protected::take(&top);
        std::fs::create_dir_all(top.join(".opencode/node_modules/dep")).unwrap();
        std::fs::write(top.join(".opencode/node_modules/dep/index.js"), "x").unwrap();
        std::fs::write(top.join(".opencode/package.json"), "{}").unwrap();
        let r = p.restore();
        assert_eq!((r.paths.len(), r.installed), (0, 4), "{r:?}");
        assert!(!top.join(".opencode/node_modules").exists());
        assert!(!top.join(".opencode/package.json").exists());
        // Installed before the run: a change to it is the run's.
        std::fs::create_dir_all(top.join(".opencode/node_modules/dep")).unwrap();
        std::fs::write(top.join(".opencode/node_modules/dep/index.js"), "x").unwrap();
        let p = Protected::take(&top);
        std::fs::write(top.join(".opencode/node_modules/dep/index.js"), "evil").unwrap();
        std::fs::write(top.join(".opencode/plugin/q.js"), "evil").unwrap();
        let r = p.restore();
        assert_eq!(
            r.paths,
            [
                (
                    ".opencode/node_modules/dep/index.js".into(),
                    "changed, restored".into()
                ),
                (".opencode/plugin/q.js".into(), "added, removed".into()),
            ]
        );
        assert_eq!(
            std::fs::read_to_string(top.join(".opencode/node_modules/dep/index.js")).unwrap(),
            "x"
        );
    }

    #[test]
    fn a_large_file_is_compared_by_its_stat_and_named_when_it_cannot_be_put_back() {
        let (_d, top) = project();
        std::fs::write(top.join(".mcp.json"), vec![b' '; (MAX_FILE + 1) as usize]).unwrap();
        let p = Protected::take(&top);
        std::fs::write(top.join(".mcp.json"), b"{}").unwrap();
        let r = p.restore();
        assert_eq!(
            r.paths,
            [(
                ".mcp.json".into(),
                "changed, not restored: larger than 1 MiB".into()
            )]
        );
    }
}
