//! What a read-only run must leave as it found it, beyond what `git status` shows: a bounded
//! stat snapshot of its tree, `.git/` and ignored paths included, and of a tree outside git.
//!
//! `git status` (the [`crate::changes`] snapshot) sees tracked and untracked files but not
//! `.git/` (config, hooks, attributes: where a write makes git run code later), not ignored
//! paths (`node_modules/`, `.env`, build output), and nothing at all in a directory that is not a
//! git checkout. So a read-only task also takes a [`Footprint`] before the run: every entry
//! under the tree's top (the git checkout's top, or the cwd outside git), breadth first, each
//! with its type, size, mode, inode, mtime and ctime (`lstat`, symlinks not followed, no
//! other file system entered), plus the repository's git directory when it lies outside the top
//! (a linked worktree's). [`Footprint::changes_since`] takes it again after the run and names
//! every entry added, removed or changed. The ctime cannot be set back by a process, so a write
//! that restores the mtime is still seen.
//!
//! Left out, in a git directory only: `objects/` (but `objects/info/`, where `alternates`
//! lives, is kept), `logs/`, the `index` file and `worktrees/` (the linked worktrees'
//! metadata, which the bridge's own isolated tasks add and remove; a linked worktree's own git
//! directory is compared when the task runs in it): content-addressed, append-only or
//! rewritten by git's own bookkeeping, and running no code; and the `opencode` file at the top
//! of a git directory, where opencode itself caches the project's id on its first run there
//! (seen with 1.18.33; a text file no tool reads as code). A directory whose entries were all recorded is
//! compared through its entries (its own mtime moves whenever git rewrites a file in it).
//!
//! Bounded: at most [`MAX_ENTRIES`] entries. When the tree has more, the first ones in
//! breadth-first order are compared (shallow paths first), a directory that was not listed
//! is compared by its own stamp (an entry added or removed in it shows), and the note says how
//! much was compared.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Most entries recorded in one footprint.
pub const MAX_ENTRIES: usize = 100_000;

/// One entry's stat data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dir: bool,
    mode: u32,
    size: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dir: m.is_dir(),
            mode: m.mode(),
            size: if m.is_dir() { 0 } else { m.size() },
            ino: m.ino(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The tree of a read-only run at one moment (see the module docs).
#[derive(Debug, Clone)]
pub struct Footprint {
    top: PathBuf,
    /// Subtrees not recorded (the runner's own data, state, cache and config directories).
    skip: Vec<PathBuf>,
    /// Where the walk starts: the top, then git directories outside it.
    starts: Vec<(PathBuf, bool)>,
    entries: BTreeMap<PathBuf, Stamp>,
    /// Directories whose every entry was recorded.
    listed: BTreeSet<PathBuf>,
    truncated: bool,
}

/// What changed between two footprints.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Touched {
    /// The entries added, removed or changed: relative to the top when under it, else
    /// absolute; sorted.
    pub paths: Vec<String>,
    /// Set when not everything could be compared (the tree is larger than [`MAX_ENTRIES`]).
    pub note: Option<String>,
}

/// The git directories of the checkout containing `dir`, and its top; `None` outside git.
fn git_layout(dir: &Path) -> Option<(PathBuf, Vec<PathBuf>)> {
    let out = crate::git::output(
        dir,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-dir",
            "--git-common-dir",
        ],
    )?;
    let text = String::from_utf8_lossy(&out);
    let mut lines = text.lines().map(|l| PathBuf::from(l.trim()));
    let top = lines.next()?;
    let mut dirs: Vec<PathBuf> = lines.collect();
    dirs.sort();
    dirs.dedup();
    Some((top, dirs))
}

/// Left out of a git directory: `objects/` but its `info/`, `logs/`, `worktrees/`, `index`,
/// and opencode's own `opencode` file at its top.
fn skipped_in_git_dir(
    name: &std::ffi::OsStr,
    parent_is_objects: bool,
    parent_is_top: bool,
    is_dir: bool,
) -> bool {
    if parent_is_objects {
        return name != "info";
    }
    (is_dir && (name == "logs" || name == "worktrees"))
        || (!is_dir && (name == "index" || (parent_is_top && name == "opencode")))
}

/// The directories a run's own runner writes as part of its normal work, which a footprint
/// leaves out when they lie inside the tree (a read-only task in the home directory): opencode's
/// data, state, cache and config directories (`$XDG_*_HOME/opencode`, by default under `~`),
/// Claude Code's `~/.claude` (or `CLAUDE_CONFIG_DIR`) and `~/.claude.json`, and the temporary
/// directory. `var` reads the run's environment.
pub fn runner_dirs(var: impl Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let home = var("HOME").map(PathBuf::from);
    let xdg = |name: &str, default: &str| {
        var(name)
            .filter(|v| Path::new(v).is_absolute())
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    let mut dirs: Vec<PathBuf> = [
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_STATE_HOME", ".local/state"),
        ("XDG_CACHE_HOME", ".cache"),
        ("XDG_CONFIG_HOME", ".config"),
    ]
    .iter()
    .filter_map(|(n, d)| xdg(n, d))
    .map(|d| d.join("opencode"))
    .collect();
    match var("CLAUDE_CONFIG_DIR").filter(|v| !v.is_empty()) {
        Some(d) => dirs.push(PathBuf::from(d)),
        None => dirs.extend(home.as_ref().map(|h| h.join(".claude"))),
    }
    dirs.extend(home.as_ref().map(|h| h.join(".claude.json")));
    dirs.push(
        var("TMPDIR")
            .filter(|v| Path::new(v).is_absolute())
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
    );
    dirs
}

impl Footprint {
    /// Records the tree containing `cwd`: the git checkout's top and its git directories, or
    /// `cwd` itself outside git; entries at or under a path of `skip` are left out (never the
    /// top itself: a `skip` path that contains the top is ignored).
    pub fn take(cwd: &Path, skip: &[PathBuf]) -> Footprint {
        let (top, git_dirs) = git_layout(cwd).unwrap_or_else(|| (cwd.to_path_buf(), Vec::new()));
        let mut starts = vec![(top.clone(), false)];
        for d in git_dirs {
            if !d.starts_with(&top) {
                starts.push((d, true));
            }
        }
        let skip = skip
            .iter()
            .filter(|p| p.starts_with(&top) && **p != top)
            .cloned()
            .collect();
        Footprint::walk(top, starts, skip)
    }

    fn walk(top: PathBuf, starts: Vec<(PathBuf, bool)>, skip: Vec<PathBuf>) -> Footprint {
        let mut fp = Footprint {
            top,
            skip,
            starts: starts.clone(),
            entries: BTreeMap::new(),
            listed: BTreeSet::new(),
            truncated: false,
        };
        // (directory, inside a git directory, it is an `objects` directory)
        let mut queue: VecDeque<(PathBuf, bool, bool, u64)> = VecDeque::new();
        for (start, git) in starts {
            let Ok(m) = std::fs::symlink_metadata(&start) else {
                continue;
            };
            fp.entries.insert(start.clone(), Stamp::of(&m));
            if m.is_dir() {
                queue.push_back((start, git, false, m.dev()));
            }
        }
        'walk: while let Some((dir, git, objects, dev)) = queue.pop_front() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut names: Vec<std::ffi::OsString> = rd.flatten().map(|e| e.file_name()).collect();
            names.sort();
            let git_top = git
                && (dir.file_name().is_some_and(|n| n == ".git")
                    || fp.starts.iter().any(|(s, g)| *g && *s == dir));
            for name in names {
                let path = dir.join(&name);
                let Ok(m) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                let is_dir = m.is_dir();
                if git && skipped_in_git_dir(&name, objects, git_top, is_dir) {
                    continue;
                }
                if fp.skip.contains(&path) {
                    continue;
                }
                if fp.entries.len() >= MAX_ENTRIES {
                    fp.truncated = true;
                    break 'walk;
                }
                fp.entries.insert(path.clone(), Stamp::of(&m));
                if is_dir && m.dev() == dev {
                    // A `.git` directory anywhere is a git directory (the checkout's own, or a
                    // nested repository's).
                    let child_git = git || name == ".git";
                    let child_objects = git && !objects && name == "objects";
                    queue.push_back((path, child_git, child_objects, dev));
                }
            }
            fp.listed.insert(dir);
        }
        fp
    }

    fn shown(&self, p: &Path) -> String {
        match p.strip_prefix(&self.top) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
            _ => p.to_string_lossy().into_owned(),
        }
    }

    /// Walks the same tree again and names what changed since this footprint was taken.
    pub fn changes_since(&self) -> Touched {
        let now = Footprint::walk(self.top.clone(), self.starts.clone(), self.skip.clone());
        self.compare(&now)
    }

    fn compare(&self, now: &Footprint) -> Touched {
        let mut paths: BTreeSet<String> = BTreeSet::new();
        for (p, b) in &self.entries {
            match now.entries.get(p) {
                Some(a) if a.dir && b.dir => {
                    // Listed both times: its entries say what changed. Otherwise its own
                    // stamp is all there is.
                    let listed = self.listed.contains(p) && now.listed.contains(p);
                    if !listed && (a.mtime != b.mtime || a.ctime != b.ctime) {
                        paths.insert(self.shown(p));
                    }
                }
                Some(a) if a != b => {
                    paths.insert(self.shown(p));
                }
                Some(_) => {}
                None => {
                    // Gone, or only not reached this time.
                    let seen = p.parent().is_some_and(|d| now.listed.contains(d));
                    if seen {
                        paths.insert(self.shown(p));
                    }
                }
            }
        }
        // Added: named when the nearest directory that existed before was listed then; in a
        // new directory, its files (a new directory with entries is named by them).
        use std::ops::Bound::{Excluded, Unbounded};
        for (p, a) in &now.entries {
            if self.entries.contains_key(p) {
                continue;
            }
            let before = p
                .ancestors()
                .skip(1)
                .find(|d| self.entries.contains_key(*d));
            if !before.is_some_and(|d| self.listed.contains(d)) {
                continue;
            }
            let has_children = a.dir
                && now
                    .entries
                    .range::<PathBuf, _>((Excluded(p), Unbounded))
                    .next()
                    .is_some_and(|(q, _)| q.starts_with(p));
            // A directory made only to hold a skipped one (`~/.local/share` for opencode's data).
            let holds_skipped = a.dir && self.skip.iter().any(|s| s.starts_with(p));
            if !has_children && !holds_skipped {
                paths.insert(self.shown(p));
            }
        }
        let note = (self.truncated || now.truncated).then(|| {
            format!(
                "the tree has more than {MAX_ENTRIES} entries: only the first {MAX_ENTRIES} (breadth first) were compared one by one, the rest by their directory"
            )
        });
        Touched {
            paths: paths.into_iter().collect(),
            note,
        }
    }

    /// How many entries were recorded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No entry was recorded (the tree could not be read).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    }

    #[test]
    fn git_dir_ignored_paths_and_tracked_files_are_all_seen() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("repo");
        std::fs::create_dir(&r).unwrap();
        bridge_testkit::git_repo(&r, &[(".gitignore", "target/\n.env\n"), ("a.txt", "a\n")]);
        write(&r.join("target/debug/out"), "built\n");
        write(&r.join(".env"), "X=1\n");
        write(&r.join("sub/deep/x.txt"), "x\n");
        let fp = Footprint::take(&r.join("sub"), &[]);
        assert_eq!(fp.top, r.canonicalize().unwrap_or(r.clone()));
        assert!(fp.changes_since().paths.is_empty(), "nothing changed yet");
        // What a read-only run must not do.
        let git = r.join(".git");
        let mut cfg = std::fs::read_to_string(git.join("config")).unwrap();
        cfg.push_str("[core]\n\tfsmonitor = /tmp/evil\n");
        write(&git.join("config"), &cfg);
        write(&git.join("hooks/pre-commit"), "#!/bin/sh\n");
        write(&git.join("info/attributes"), "* filter=x\n");
        write(&r.join("target/debug/out"), "BUILT\n");
        write(&r.join(".env"), "X=2\n");
        std::fs::remove_file(r.join("sub/deep/x.txt")).unwrap();
        // git's own bookkeeping is not a finding.
        write(&git.join("index"), "rewritten");
        write(&git.join("logs/HEAD"), "more\n");
        write(&git.join("objects/ab/cdef"), "obj");
        write(&git.join("opencode"), "0123abcd");
        let t = fp.changes_since();
        assert_eq!(
            t.paths,
            [
                ".env",
                ".git/config",
                ".git/hooks/pre-commit",
                ".git/info/attributes",
                "sub/deep/x.txt",
                "target/debug/out",
            ],
            "{t:?}"
        );
        assert_eq!(t.note, None);
        // objects/info/alternates is kept.
        let fp = Footprint::take(&r, &[]);
        write(&git.join("objects/info/alternates"), "/elsewhere\n");
        assert_eq!(fp.changes_since().paths, [".git/objects/info/alternates"]);
    }

    #[test]
    fn a_tree_outside_git_is_compared_and_a_restored_mtime_still_shows() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(&r.join("a/b.txt"), "b\n");
        let home = r.join("home");
        let var = |k: &str| (k == "HOME").then(|| home.display().to_string());
        let fp = Footprint::take(r, &runner_dirs(var));
        let t = std::fs::metadata(r.join("a/b.txt"))
            .unwrap()
            .modified()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(&r.join("a/b.txt"), "B\n");
        std::fs::File::options()
            .write(true)
            .open(r.join("a/b.txt"))
            .unwrap()
            .set_modified(t)
            .unwrap();
        write(&r.join("new/file"), "n\n");
        std::fs::create_dir(r.join("empty")).unwrap();
        // What the runner itself writes in its own directories is not the agent's.
        write(&home.join(".local/share/opencode/opencode.db"), "db");
        write(&home.join(".claude/projects/x.jsonl"), "{}");
        assert_eq!(fp.changes_since().paths, ["a/b.txt", "empty", "new/file"]);
    }

    #[test]
    fn a_tree_over_the_cap_compares_what_it_listed_and_says_so() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().to_path_buf();
        write(&r.join("a.txt"), "a\n");
        write(&r.join("big/x"), "x\n");
        let mut fp = Footprint::walk(r.clone(), vec![(r.clone(), false)], Vec::new());
        // Pretend the walk stopped after the top's entries: `big` was not listed.
        fp.listed.remove(&r.join("big"));
        fp.entries.remove(&r.join("big/x"));
        fp.truncated = true;
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(&r.join("big/y"), "y\n");
        let t = fp.changes_since();
        assert_eq!(t.paths, ["big"], "the unlisted directory's stamp moved");
        assert!(t.note.unwrap().contains("more than"));
    }
}
