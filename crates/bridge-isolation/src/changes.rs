//! The files an editing task changed, with a short diff stat.
//!
//! In a git working tree the supervisor looks at the tree before the task starts and again when
//! it ends ([`GitSnapshot::take`]) and compares the two ([`GitSnapshot::changes_since`]). Only
//! read-only git commands run (`status`, `diff --numstat`, `rev-parse`), built by
//! [`crate::git::command`]: with `GIT_OPTIONAL_LOCKS=0` so not even the index is refreshed (the
//! repository is never modified), and with no fsmonitor, hook, filter or diff driver of the
//! repository run.
//! Files that were already dirty before the task keep their content in the snapshot (up to
//! 1 MiB each), so the stat counts only what the task did to them.
//!
//! Outside git, the completed `write`/`edit`/`patch` tool calls of the run name the files
//! ([`from_tool_calls`]); there is no diff stat then.
//!
//! Two tasks editing one tree at the same time each see the other's changes too.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::calls::ToolCall;

/// Where the list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeSource {
    /// git status and diff before and after the task.
    Git,
    /// The run's completed file-writing tool calls (no diff stat).
    ToolCalls,
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Path relative to the repository root (git), or as the tool call named it.
    pub path: String,
    /// Lines added (`None`: binary file, or no stat available).
    pub added: Option<u64>,
    /// Lines removed (`None`: binary file, or no stat available).
    pub removed: Option<u64>,
    /// `added`, `modified` or `deleted` (git); `written` (tool calls).
    pub status: String,
}

/// The files a task changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedFiles {
    /// How they were found.
    pub source: ChangeSource,
    /// The files, sorted by path.
    pub files: Vec<FileChange>,
}

/// Largest dirty file whose content is kept in a snapshot.
const KEEP_BYTES: u64 = 1024 * 1024;

/// A tree with more changed or untracked files than this is not snapshotted (the tool calls
/// name the files instead): reading them all would cost too much.
pub const MAX_DIRTY_FILES: usize = 5000;

/// The state of a git working tree at one moment.
#[derive(Debug, Clone)]
pub struct GitSnapshot {
    top: PathBuf,
    /// Dirty paths (relative to `top`) with a hash and (when small) the content of each file.
    dirty: BTreeMap<String, FileState>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileState {
    hash: Option<u64>,
    content: Option<Vec<u8>>,
}

fn git(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    crate::git::output(dir, args)
}

fn hash_bytes(b: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

fn read_state(path: &Path) -> FileState {
    match std::fs::read(path) {
        Ok(bytes) => FileState {
            hash: Some(hash_bytes(&bytes)),
            content: (bytes.len() as u64 <= KEEP_BYTES).then_some(bytes),
        },
        Err(_) => FileState {
            hash: None,
            content: None,
        },
    }
}

/// `git status --porcelain -z` paths (the new name for renames).
fn dirty_paths(top: &Path) -> Option<Vec<String>> {
    let out = git(
        top,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        ],
    )?;
    let mut paths = Vec::new();
    for entry in out.split(|&b| b == 0).filter(|e| e.len() > 3) {
        paths.push(String::from_utf8_lossy(&entry[3..]).into_owned());
    }
    Some(paths)
}

fn line_count(b: &[u8]) -> u64 {
    if b.is_empty() {
        return 0;
    }
    let n = b.iter().filter(|&&c| c == b'\n').count() as u64;
    if b.ends_with(b"\n") { n } else { n + 1 }
}

fn is_binary(b: &[u8]) -> bool {
    b.iter().take(8000).any(|&c| c == 0)
}

/// Lines added and removed between two texts, counting lines as a multiset (order-blind, which
/// is enough for a short stat).
fn line_delta(before: &[u8], after: &[u8]) -> (u64, u64) {
    let mut counts: HashMap<&[u8], i64> = HashMap::new();
    for l in before.split(|&c| c == b'\n') {
        *counts.entry(l).or_default() -= 1;
    }
    for l in after.split(|&c| c == b'\n') {
        *counts.entry(l).or_default() += 1;
    }
    let added = counts.values().filter(|&&v| v > 0).sum::<i64>() as u64;
    let removed = counts.values().filter(|&&v| v < 0).map(|v| -v).sum::<i64>() as u64;
    (added, removed)
}

impl GitSnapshot {
    /// Snapshots the git working tree containing `dir`; `None` when `dir` is not in one, git
    /// is missing, or the tree has more than [`MAX_DIRTY_FILES`] changed or untracked files.
    pub fn take(dir: &Path) -> Option<GitSnapshot> {
        let top = git(dir, &["rev-parse", "--show-toplevel"])?;
        let top = PathBuf::from(String::from_utf8_lossy(&top).trim());
        let mut dirty = BTreeMap::new();
        let paths = dirty_paths(&top)?;
        if paths.len() > MAX_DIRTY_FILES {
            return None;
        }
        for p in paths {
            let state = read_state(&top.join(&p));
            dirty.insert(p, state);
        }
        Some(GitSnapshot { top, dirty })
    }

    /// The files changed between this snapshot (taken before the task) and now.
    pub fn changes_since(&self) -> Option<ChangedFiles> {
        let now = GitSnapshot::take(&self.top)?;
        let mut files = Vec::new();
        // Numstat against HEAD for files that were clean before (exact, from git).
        let numstat = git(
            &self.top,
            &[
                "diff",
                "--numstat",
                "-z",
                "--no-renames",
                "--ignore-submodules=all",
                "HEAD",
            ],
        )
        .map(|o| parse_numstat(&o))
        .unwrap_or_default();
        let mut paths: Vec<&String> = now.dirty.keys().chain(self.dirty.keys()).collect();
        paths.sort();
        paths.dedup();
        for p in paths {
            let before = self.dirty.get(p);
            let after = now.dirty.get(p);
            let abs = self.top.join(p);
            let change = match (before, after) {
                (Some(b), Some(a)) if b == a => continue,
                (Some(b), Some(a)) if b.hash == a.hash => continue,
                (None, Some(_)) => {
                    // Clean (or absent) before.
                    if let Some(&(add, del)) = numstat.get(p.as_str()) {
                        let status = if !abs.exists() { "deleted" } else { "modified" };
                        FileChange {
                            path: p.clone(),
                            added: add,
                            removed: del,
                            status: status.into(),
                        }
                    } else {
                        // Untracked new file.
                        let bytes = std::fs::read(&abs).unwrap_or_default();
                        let bin = is_binary(&bytes);
                        FileChange {
                            path: p.clone(),
                            added: (!bin).then(|| line_count(&bytes)),
                            removed: (!bin).then_some(0),
                            status: "added".into(),
                        }
                    }
                }
                (Some(b), after) => {
                    // Dirty before; changed again, or back to the committed content.
                    let now_bytes = std::fs::read(&abs).ok();
                    let status = match (&now_bytes, after) {
                        (None, _) => "deleted",
                        (Some(_), None) => "restored",
                        (Some(_), Some(_)) if b.hash.is_none() => "added",
                        _ => "modified",
                    };
                    let before_bytes = match (&b.content, b.hash) {
                        (Some(c), _) => Some(c.clone()),
                        (None, None) => Some(Vec::new()),
                        (None, Some(_)) => None,
                    };
                    let committed = if after.is_none() {
                        git(&self.top, &["show", &format!("HEAD:{p}")])
                    } else {
                        None
                    };
                    let now_bytes = now_bytes.or(committed).unwrap_or_default();
                    let stat = before_bytes
                        .filter(|bb| !is_binary(bb) && !is_binary(&now_bytes))
                        .map(|bb| line_delta(&bb, &now_bytes));
                    FileChange {
                        path: p.clone(),
                        added: stat.map(|s| s.0),
                        removed: stat.map(|s| s.1),
                        status: status.into(),
                    }
                }
                (None, None) => continue,
            };
            files.push(change);
        }
        Some(ChangedFiles {
            source: ChangeSource::Git,
            files,
        })
    }
}

fn parse_numstat(out: &[u8]) -> HashMap<String, (Option<u64>, Option<u64>)> {
    let mut map = HashMap::new();
    for rec in out.split(|&b| b == 0) {
        let text = String::from_utf8_lossy(rec);
        let mut it = text.splitn(3, '\t');
        let (Some(a), Some(d), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        map.insert(
            path.trim_start_matches('\n').to_owned(),
            (a.trim().parse().ok(), d.trim().parse().ok()),
        );
    }
    map
}

/// Tools whose completed calls write the file named in their title.
const WRITING_TOOLS: &[&str] = &["write", "edit", "multiedit", "patch", "apply_patch"];

/// A path a tool call's title names, as seen from the task's `cwd`: relative to it when it is
/// inside. opencode 1.18 titles a file relative to its project's worktree, which outside git
/// is `/`: `/tmp/p/hello.txt` is titled `tmp/p/hello.txt`, so a relative title is read from `/`
/// too. Anything else (outside the cwd, not a path) is returned as it is.
pub fn relative_to(title: &str, cwd: &Path) -> String {
    let t = Path::new(title);
    let absolute = if t.is_absolute() {
        t.to_path_buf()
    } else {
        Path::new("/").join(t)
    };
    match absolute.strip_prefix(cwd) {
        Ok(p) if !p.as_os_str().is_empty() => p.to_string_lossy().into_owned(),
        _ => title.to_owned(),
    }
}

/// The files named by the run's completed file-writing tool calls (outside git), each with
/// the lines its calls added and removed where every call's input told them
/// (the runners' `line_counts`, in run-supervisor; one call that does not tell makes the
/// count unknown, never 0).
pub fn from_tool_calls(calls: &[ToolCall], cwd: &Path) -> ChangedFiles {
    let mut by_path: std::collections::BTreeMap<String, (Option<u64>, Option<u64>)> =
        std::collections::BTreeMap::new();
    for c in calls.iter().filter(|c| {
        // Claude Code names them `Write`, `Edit`, `MultiEdit`.
        c.status == "completed" && WRITING_TOOLS.contains(&c.tool.to_ascii_lowercase().as_str())
    }) {
        let Some(t) = c.title.as_deref().filter(|t| !t.trim().is_empty()) else {
            continue;
        };
        let sum = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(x, y)| x.saturating_add(y));
        let e = by_path
            .entry(relative_to(t, cwd))
            .or_insert((Some(0), Some(0)));
        *e = (sum(e.0, c.added), sum(e.1, c.removed));
    }
    ChangedFiles {
        source: ChangeSource::ToolCalls,
        files: by_path
            .into_iter()
            .map(|(path, (added, removed))| FileChange {
                path,
                added,
                removed,
                status: "written".into(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, args: &[&str]) {
        bridge_testkit::git(dir, args);
    }

    #[test]
    fn tool_call_paths_are_named_from_the_task_cwd() {
        let cwd = Path::new("/tmp/sb/proj");
        // opencode outside git: relative to `/`.
        assert_eq!(relative_to("tmp/sb/proj/hello.txt", cwd), "hello.txt");
        assert_eq!(relative_to("/tmp/sb/proj/src/a.rs", cwd), "src/a.rs");
        assert_eq!(relative_to("tmp/sb/other.txt", cwd), "tmp/sb/other.txt");
        assert_eq!(relative_to("echo hi", cwd), "echo hi");
        let calls = [ToolCall {
            tool: "write".into(),
            status: "completed".into(),
            title: Some("tmp/sb/proj/hello.txt".into()),
            error: None,
            ..Default::default()
        }];
        assert_eq!(from_tool_calls(&calls, cwd).files[0].path, "hello.txt");
    }

    fn find<'a>(c: &'a ChangedFiles, p: &str) -> &'a FileChange {
        c.files
            .iter()
            .find(|f| f.path == p)
            .unwrap_or_else(|| panic!("{p} not in {c:?}"))
    }

    #[test]
    fn git_changes_count_only_what_happened_after_the_snapshot() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        sh(r, &["init", "-q"]);
        std::fs::write(r.join("a.txt"), "1\n2\n3\n").unwrap();
        std::fs::write(r.join("b.txt"), "x\n").unwrap();
        std::fs::write(r.join("gone.txt"), "g\n").unwrap();
        sh(r, &["add", "."]);
        sh(r, &["commit", "-q", "-m", "init"]);
        // Dirty before the task: b.txt edited, notes.txt untracked, keep.txt untracked.
        std::fs::write(r.join("b.txt"), "x\ny\n").unwrap();
        std::fs::write(r.join("notes.txt"), "n\n").unwrap();
        std::fs::write(r.join("keep.txt"), "k\n").unwrap();
        let index_before = std::fs::read(r.join(".git/index")).unwrap();
        let snap = GitSnapshot::take(r).unwrap();
        // The task's work.
        std::fs::write(r.join("a.txt"), "1\nTWO\n3\n4\n").unwrap();
        std::fs::write(r.join("b.txt"), "x\ny\nz\n").unwrap();
        std::fs::create_dir(r.join("src")).unwrap();
        std::fs::write(r.join("src/new.rs"), "fn a() {}\nfn b() {}\n").unwrap();
        std::fs::remove_file(r.join("gone.txt")).unwrap();
        let c = snap.changes_since().unwrap();
        assert_eq!(c.source, ChangeSource::Git);
        let a = find(&c, "a.txt");
        assert_eq!(
            (a.added, a.removed, a.status.as_str()),
            (Some(2), Some(1), "modified")
        );
        let b = find(&c, "b.txt");
        assert_eq!(
            (b.added, b.removed),
            (Some(1), Some(0)),
            "only the task's line"
        );
        let n = find(&c, "src/new.rs");
        assert_eq!(
            (n.added, n.removed, n.status.as_str()),
            (Some(2), Some(0), "added")
        );
        let g = find(&c, "gone.txt");
        assert_eq!((g.removed, g.status.as_str()), (Some(1), "deleted"));
        assert_eq!(
            c.files.len(),
            4,
            "notes.txt and keep.txt were not touched: {c:?}"
        );
        // Nothing was written to the repository.
        assert_eq!(std::fs::read(r.join(".git/index")).unwrap(), index_before);
    }

    #[test]
    fn not_a_git_tree_gives_no_snapshot_and_tool_calls_name_the_files() {
        let d = tempfile::tempdir().unwrap();
        assert!(GitSnapshot::take(d.path()).is_none());
        let call = |tool: &str, status: &str, title: &str| ToolCall {
            tool: tool.into(),
            status: status.into(),
            title: Some(title.into()),
            error: None,
            ..Default::default()
        };
        let cwd = Path::new("/p/proj");
        let c = from_tool_calls(
            &[
                call("write", "completed", "/p/proj/hello.txt"),
                call("edit", "completed", "/p/proj/src/x.rs"),
                call("write", "error", "/p/proj/no.txt"),
                call("bash", "completed", "echo hi"),
                call("edit", "completed", "/p/proj/hello.txt"),
            ],
            cwd,
        );
        let paths: Vec<&str> = c.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["hello.txt", "src/x.rs"]);
        assert_eq!(c.source, ChangeSource::ToolCalls);
        // No call told its lines: unknown, never 0.
        assert!(
            c.files
                .iter()
                .all(|f| f.added.is_none() && f.removed.is_none())
        );
    }

    #[test]
    fn tool_call_line_counts_add_up_per_file_and_one_unknown_makes_the_count_unknown() {
        let call = |tool: &str, title: &str, added: Option<u64>, removed: Option<u64>| ToolCall {
            tool: tool.into(),
            status: "completed".into(),
            title: Some(title.into()),
            added,
            removed,
            ..Default::default()
        };
        let c = from_tool_calls(
            &[
                call("edit", "/p/a.txt", Some(2), Some(1)),
                call("edit", "/p/a.txt", Some(3), Some(4)),
                call("write", "/p/b.txt", Some(5), None),
                call("edit", "/p/c.txt", Some(1), Some(1)),
                call("edit", "/p/c.txt", None, None),
            ],
            Path::new("/p"),
        );
        let got: Vec<(&str, Option<u64>, Option<u64>)> = c
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.added, f.removed))
            .collect();
        assert_eq!(
            got,
            [
                ("a.txt", Some(5), Some(5)),
                ("b.txt", Some(5), None),
                ("c.txt", None, None)
            ]
        );
    }

    #[test]
    fn line_delta_counts_added_and_removed_lines() {
        assert_eq!(line_delta(b"a\nb\nc\n", b"a\nB\nc\nd\n"), (2, 1));
        assert_eq!(line_count(b""), 0);
        assert_eq!(line_count(b"x"), 1);
        assert_eq!(line_count(b"x\ny\n"), 2);
    }
}
