//! `isolation: "worktree"`: an editing task in its own git worktree, its change applied to the
//! caller's checkout only when asked.
//!
//! Layout under the state directory:
//!
//! - `worktrees/<id>/`: a detached worktree (`git worktree add --detach`, no branch) of the
//!   repository containing the task's cwd, at that repository's `HEAD`, with the caller's
//!   uncommitted changes (`git diff --binary HEAD`) and untracked, non-ignored files copied in,
//!   so the agent sees the tree as the caller has it. The run's cwd is the same relative
//!   directory inside it.
//! - `worktrees/<id>.json`: what the worktree is ([`WorktreeInfo`]): the caller's repository,
//!   the relative cwd, the `HEAD` it started from and the tree the agent started from (`base`).
//! - `worktrees/<id>.index`: a private index (`GIT_INDEX_FILE`) used to write the base tree and,
//!   when the run ends, the tree the agent left; the worktree's own index is not touched.
//! - `worktrees/<id>.patch`: the change (`git diff --binary base end`), written when the run
//!   ends.
//!
//! In the caller's repository only `git worktree` metadata is written (`.git/worktrees/<id>`)
//! and objects (blobs and trees of the snapshots, unreachable, left to `git gc`); no commit, no
//! ref, no branch, no index write, no hook, filter or fsmonitor of the repository run (every git here is built by
//! [`crate::git::command`]). [`apply`] reads the
//! patch's files and merges each one three-way against the caller's current file (`git
//! merge-file`, output to stdout); only when every file merges cleanly is anything written, so a
//! conflict leaves the checkout as it was.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Name of the directory under the state directory.
pub const DIR: &str = "worktrees";

/// Whether a task runs in the caller's checkout or in a worktree of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In the caller's checkout (the default).
    #[default]
    None,
    /// In a detached git worktree under the state directory; the change is applied with
    /// [`apply`].
    Worktree,
}

impl Isolation {
    /// `none` or `worktree`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Isolation::None => "none",
            Isolation::Worktree => "worktree",
        }
    }
}

/// What a task's worktree is, kept in `worktrees/<id>.json` so it survives a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeInfo {
    /// The task.
    pub task: u64,
    /// Top directory of the caller's checkout (where [`apply`] writes).
    pub repo: PathBuf,
    /// The task's cwd relative to `repo`.
    pub rel: PathBuf,
    /// The worktree directory.
    pub dir: PathBuf,
    /// The commit the worktree was made at (the caller's `HEAD` then).
    pub head: String,
    /// The tree the agent started from: `head` plus the caller's uncommitted changes and
    /// untracked files.
    pub base: String,
    /// When it was made (ms since the epoch).
    pub created_ms: u64,
    /// When the run's change was collected (ms since the epoch); `None` while it runs.
    #[serde(default)]
    pub ended_ms: Option<u64>,
    /// `git diff --stat` of the change, once collected.
    #[serde(default)]
    pub stat: String,
    /// The worktree's administrative directory (`<git dir>/worktrees/<name>`), as git reported
    /// it when the worktree was made, before any run: the one git directory an editing run of
    /// the task may write ([`WorktreeInfo::own`]). Absent in records of older bridges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<PathBuf>,
    /// The repository's git directory (its common dir), as git reported it then: read by the
    /// task's runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common: Option<PathBuf>,
}

impl WorktreeInfo {
    /// The run's working directory inside the worktree.
    pub fn run_cwd(&self) -> PathBuf {
        run_cwd(&self.dir, &self.rel)
    }

    /// The worktree as the fence knows it ([`bridge_fence::project_of`]): the git directories
    /// recorded when the bridge made it, never what its `.git` file says now.
    pub fn own(&self) -> Option<bridge_fence::OwnWorktree> {
        Some(bridge_fence::OwnWorktree {
            dir: self.dir.clone(),
            admin: self.admin.clone()?,
            common: self.common.clone()?,
        })
    }
}

fn run_cwd(dir: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        dir.to_path_buf()
    } else {
        dir.join(rel)
    }
}

/// Where a task's worktree will be, decided before it exists (so the run's cwd is known when
/// the task is accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The task.
    pub task: u64,
    /// Top of the caller's checkout.
    pub repo: PathBuf,
    /// The cwd relative to `repo`.
    pub rel: PathBuf,
    /// The worktree directory (`<state>/worktrees/<id>`).
    pub dir: PathBuf,
}

impl Plan {
    /// The run's working directory inside the worktree.
    pub fn run_cwd(&self) -> PathBuf {
        run_cwd(&self.dir, &self.rel)
    }
}

/// The change a worktree task made, once its run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The worktree.
    pub info: WorktreeInfo,
    /// `git diff --binary` from what the agent started from to what it left (empty: no change).
    pub patch: String,
    /// `git diff --stat` of the same.
    pub stat: String,
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Top of the checkout written to.
    pub repo: PathBuf,
    /// The files written or removed, with how: `applied` (the caller had not changed it),
    /// `merged` (three-way with the caller's own edits), `deleted`, `unchanged` (the caller
    /// already had the same content).
    pub files: Vec<(String, &'static str)>,
}

/// Why [`apply`] wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// These files changed on both sides in ways that do not merge; nothing was written.
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<(String, String)>),
    /// The change touches these protected paths (`bridge_fence::protected`), which the caller
    /// did not name in `allow_protected`; nothing was written.
    #[error("the change touches protected paths, nothing was written: {}", .0.join(", "))]
    Protected(Vec<String>),
    /// Anything else (the message says what to do).
    #[error("{0}")]
    Other(String),
}

fn conflict_message(files: &[(String, String)]) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|(p, why)| format!("{p} ({why})"))
        .collect();
    format!(
        "the change does not apply cleanly, nothing was written: {}. Resolve these files in your checkout (or discard the change with discard=true)",
        list.join(", ")
    )
}

fn git_cmd(dir: &Path, args: &[&str]) -> Result<Command, String> {
    crate::git::command(dir, args)
}

/// Runs git and returns stdout, or the first line of stderr as the error.
fn run(mut c: Command, what: &str) -> Result<Vec<u8>, String> {
    let out = c
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run git ({what}): {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Err(format!("git {what} failed: {}", line.trim()))
    }
}

/// `git diff` as every patch here is made: binary-safe, and blind to the user's settings that
/// would change its text (colour, external diff and textconv drivers, `diff.relative`, prefixes).
const DIFF: &[&str] = &[
    "diff",
    "--binary",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-relative",
    "--src-prefix=a/",
    "--dst-prefix=b/",
];

fn git(dir: &Path, args: &[&str], what: &str) -> Result<Vec<u8>, String> {
    run(git_cmd(dir, args)?, what)
}

fn git_with_index(dir: &Path, index: &Path, args: &[&str], what: &str) -> Result<Vec<u8>, String> {
    let mut c = git_cmd(dir, args)?;
    c.env("GIT_INDEX_FILE", index);
    run(c, what)
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8_lossy(&b).trim().to_owned()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `<state>/worktrees`.
pub fn root(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR)
}

fn info_path(state_dir: &Path, id: u64) -> PathBuf {
    root(state_dir).join(format!("{id}.json"))
}

fn index_path(state_dir: &Path, id: u64) -> PathBuf {
    root(state_dir).join(format!("{id}.index"))
}

fn patch_path(state_dir: &Path, id: u64) -> PathBuf {
    root(state_dir).join(format!("{id}.patch"))
}

/// A checkout found fit for an isolated task (see [`check`]); [`Checked::for_task`] names the
/// worktree once the task has its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Top of the caller's checkout.
    pub repo: PathBuf,
    /// The cwd relative to `repo`.
    pub rel: PathBuf,
    /// `<state>/worktrees`, canonical.
    pub root: PathBuf,
}

impl Checked {
    /// Where task `id`'s worktree will be.
    pub fn for_task(&self, id: u64) -> Plan {
        Plan {
            task: id,
            repo: self.repo.clone(),
            rel: self.rel.clone(),
            dir: self.root.join(id.to_string()),
        }
    }
}

/// Checks that `cwd` (canonical) can run isolated: it must be inside a git checkout with at
/// least one commit, and the state directory must be usable and outside that checkout. Only
/// reads the repository (and creates `<state>/worktrees`).
pub fn check(cwd: &Path, state_dir: Option<&Path>) -> Result<Checked, String> {
    let Some(state_dir) = state_dir else {
        return Err("isolation \"worktree\" needs the bridge's state directory (OPENCODE_BRIDGE_STATE_DIR), which is not usable: fix it, or start the task without isolation".into());
    };
    let top = git(cwd, &["rev-parse", "--show-toplevel"], "rev-parse").map_err(|_| {
        format!(
            "isolation \"worktree\" needs a git repository, and {} is not inside one: run the task without isolation, or `git init` and commit first",
            cwd.display()
        )
    })?;
    let top = PathBuf::from(text(top));
    let top = top.canonicalize().unwrap_or(top);
    git(
        &top,
        &["rev-parse", "--verify", "-q", "HEAD^{commit}"],
        "rev-parse HEAD",
    )
    .map_err(|_| {
        format!(
            "isolation \"worktree\" needs a commit to start from, and the repository at {} has none yet: commit once, or run the task without isolation",
            top.display()
        )
    })?;
    let rel = cwd
        .strip_prefix(&top)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    std::fs::create_dir_all(root(state_dir)).map_err(|e| {
        format!(
            "cannot create {} for the task's worktree ({e}): fix the state directory, or run without isolation",
            root(state_dir).display()
        )
    })?;
    let wt_root = root(state_dir)
        .canonicalize()
        .unwrap_or_else(|_| root(state_dir));
    if wt_root.starts_with(&top) {
        return Err(format!(
            "the state directory {} is inside the repository {}, so a worktree there would show in your checkout: set OPENCODE_BRIDGE_STATE_DIR outside it, or run without isolation",
            state_dir.display(),
            top.display()
        ));
    }
    Ok(Checked {
        repo: top,
        rel,
        root: wt_root,
    })
}

/// [`check`], then where task `id`'s worktree will be.
pub fn plan(cwd: &Path, state_dir: Option<&Path>, id: u64) -> Result<Plan, String> {
    check(cwd, state_dir).map(|c| c.for_task(id))
}

/// Makes the worktree of `plan`: detached at the caller's `HEAD`, with the caller's uncommitted
/// changes and untracked (not ignored) files carried over, and the starting tree recorded.
/// On failure nothing is left behind.
pub fn create(plan: &Plan, state_dir: &Path) -> Result<WorktreeInfo, String> {
    let r = create_inner(plan, state_dir);
    if r.is_err() {
        let _ = remove_dir(plan.task, &plan.repo, &plan.dir, state_dir);
    }
    r
}

fn create_inner(plan: &Plan, state_dir: &Path) -> Result<WorktreeInfo, String> {
    let top = &plan.repo;
    let head = text(git(top, &["rev-parse", "HEAD"], "rev-parse HEAD")?);
    // Read the caller's state first, so the checkout below cannot change what is carried.
    let diff = git(
        top,
        &[DIFF, &["--ignore-submodules", "HEAD"]].concat(),
        "diff HEAD",
    )?;
    let untracked = git(
        top,
        &["ls-files", "--others", "--exclude-standard", "-z"],
        "ls-files",
    )?;
    let dir = plan.dir.to_string_lossy().into_owned();
    git(
        top,
        &["worktree", "add", "--detach", "--quiet", &dir, &head],
        "worktree add",
    )?;
    if !diff.is_empty() {
        let mut c = git_cmd(
            &plan.dir,
            &["apply", "--binary", "--whitespace=nowarn", "-"],
        )?;
        c.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .map_err(|e| format!("cannot run git apply: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let writer = std::thread::spawn(move || stdin.write_all(&diff));
        let out = child
            .wait_with_output()
            .map_err(|e| format!("git apply: {e}"))?;
        let _ = writer.join();
        if !out.status.success() {
            return Err(format!(
                "your uncommitted changes could not be carried into the worktree (git apply: {}): commit or stash them, or run without isolation",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
            ));
        }
    }
    // Where git put the worktree's administrative directory and the repository's git
    // directory, asked now, before any run could rewrite the worktree's `.git` file.
    let admin = text(git(
        &plan.dir,
        &["rev-parse", "--absolute-git-dir"],
        "rev-parse --absolute-git-dir",
    )?);
    let common = text(git(
        &plan.dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        "rev-parse --git-common-dir",
    )?);
    for p in untracked.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let p = String::from_utf8_lossy(p).into_owned();
        copy_entry(&top.join(&p), &plan.dir.join(&p))
            .map_err(|e| format!("cannot copy the untracked file {p} into the worktree: {e}"))?;
    }
    let index = index_path(state_dir, plan.task);
    let _ = std::fs::remove_file(&index);
    // Start from the worktree's own index (HEAD with the checkout's stat data), so `add -A`
    // hashes only what differs; `read-tree` if it cannot be found.
    let own = git(
        &plan.dir,
        &["rev-parse", "--git-path", "index"],
        "rev-parse",
    )
    .map(|p| plan.dir.join(text(p)))
    .ok()
    .filter(|p| std::fs::copy(p, &index).is_ok());
    if own.is_none() {
        git_with_index(&plan.dir, &index, &["read-tree", &head], "read-tree")?;
    }
    git_with_index(&plan.dir, &index, &["add", "-A"], "add")?;
    let base = text(git_with_index(
        &plan.dir,
        &index,
        &["write-tree"],
        "write-tree",
    )?);
    let info = WorktreeInfo {
        task: plan.task,
        repo: plan.repo.clone(),
        rel: plan.rel.clone(),
        dir: plan.dir.clone(),
        head,
        base,
        created_ms: now_ms(),
        ended_ms: None,
        stat: String::new(),
        admin: Some(PathBuf::from(admin)),
        common: Some(PathBuf::from(common)),
    };
    save(state_dir, &info)?;
    Ok(info)
}

fn copy_entry(from: &Path, to: &Path) -> std::io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let meta = std::fs::symlink_metadata(from)?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(from)?;
        std::os::unix::fs::symlink(target, to)
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!(
        "{}tmp",
        path.extension()
            .map(|e| format!("{}.", e.to_string_lossy()))
            .unwrap_or_default()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn save(state_dir: &Path, info: &WorktreeInfo) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(info).map_err(|e| e.to_string())?;
    write_atomic(&info_path(state_dir, info.task), &bytes).map_err(|e| {
        format!(
            "cannot write {}: {e}",
            info_path(state_dir, info.task).display()
        )
    })
}

/// The worktree of task `id`, if it has one that was neither applied nor discarded.
pub fn load(state_dir: &Path, id: u64) -> Option<WorktreeInfo> {
    let bytes = std::fs::read(info_path(state_dir, id)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The tree in the worktree now (through the private index).
fn tree_now(state_dir: &Path, info: &WorktreeInfo) -> Result<String, String> {
    let index = index_path(state_dir, info.task);
    if !index.exists() {
        git_with_index(&info.dir, &index, &["read-tree", &info.base], "read-tree")?;
    }
    git_with_index(&info.dir, &index, &["add", "-A"], "add")?;
    Ok(text(git_with_index(
        &info.dir,
        &index,
        &["write-tree"],
        "write-tree",
    )?))
}

/// Collects what the agent changed (when its run ended): writes `worktrees/<id>.patch` and
/// marks the worktree ended. Calling it again recomputes it.
pub fn collect(state_dir: &Path, id: u64) -> Result<Change, String> {
    let mut info = load(state_dir, id).ok_or_else(|| format!("task {id} has no worktree"))?;
    let end = tree_now(state_dir, &info)?;
    let tail = [
        "--no-renames",
        "--full-index",
        info.base.as_str(),
        end.as_str(),
    ];
    let patch = git(&info.dir, &[DIFF, &tail].concat(), "diff")?;
    let stat = git(
        &info.dir,
        &[
            "diff",
            "--stat",
            "--no-color",
            "--no-renames",
            &info.base,
            &end,
        ],
        "diff --stat",
    )?;
    write_atomic(&patch_path(state_dir, id), &patch)
        .map_err(|e| format!("cannot write the task's patch: {e}"))?;
    info.ended_ms = Some(now_ms());
    info.stat = String::from_utf8_lossy(&stat).into_owned();
    save(state_dir, &info)?;
    Ok(Change {
        stat: info.stat.clone(),
        info,
        patch: String::from_utf8_lossy(&patch).into_owned(),
    })
}

/// The change of an ended worktree task, as collected; `None` when there is no worktree or
/// its run has not ended. Reads files only (no git).
pub fn change(state_dir: &Path, id: u64) -> Option<Change> {
    let info = load(state_dir, id)?;
    info.ended_ms?;
    let patch = std::fs::read(patch_path(state_dir, id)).ok()?;
    Some(Change {
        stat: info.stat.clone(),
        info,
        patch: String::from_utf8_lossy(&patch).into_owned(),
    })
}

/// One entry of `git diff --raw`.
struct RawEntry {
    old_mode: String,
    new_mode: String,
    old_oid: String,
    new_oid: String,
    path: String,
}

const ZERO_OID_PREFIX: &str = "0000000000";

fn raw_entries(info: &WorktreeInfo, end: &str) -> Result<Vec<RawEntry>, String> {
    let out = git(
        &info.dir,
        &[
            "diff",
            "--raw",
            "-z",
            "--no-renames",
            "--full-index",
            "--no-abbrev",
            &info.base,
            end,
        ],
        "diff --raw",
    )?;
    let mut parts = out.split(|&b| b == 0).filter(|p| !p.is_empty());
    let mut v = Vec::new();
    while let (Some(head), Some(path)) = (parts.next(), parts.next()) {
        let head = String::from_utf8_lossy(head);
        let f: Vec<&str> = head.trim_start_matches(':').split(' ').collect();
        if f.len() < 5 {
            return Err(format!("unexpected git diff --raw line: {head}"));
        }
        v.push(RawEntry {
            old_mode: f[0].into(),
            new_mode: f[1].into(),
            old_oid: f[2].into(),
            new_oid: f[3].into(),
            path: String::from_utf8_lossy(path).into_owned(),
        });
    }
    Ok(v)
}

fn blob(dir: &Path, oid: &str) -> Result<Option<Vec<u8>>, String> {
    if oid.starts_with(ZERO_OID_PREFIX) && oid.bytes().all(|b| b == b'0') {
        return Ok(None);
    }
    git(dir, &["cat-file", "blob", oid], "cat-file").map(Some)
}

/// The caller's file as git would store it: its bytes, or a symlink's target.
fn current(path: &Path) -> Option<(Vec<u8>, bool)> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        let t = std::fs::read_link(path).ok()?;
        Some((t.as_os_str().as_encoded_bytes().to_vec(), true))
    } else if meta.is_file() {
        std::fs::read(path).ok().map(|b| (b, false))
    } else {
        None
    }
}

enum Action {
    Put {
        bytes: Vec<u8>,
        mode: String,
        how: &'static str,
    },
    Delete,
    Keep,
}

fn is_binary(b: &[u8]) -> bool {
    b.iter().take(8000).any(|&c| c == 0)
}

/// Three-way merge of one file with `git merge-file -p` (nothing written but temporary
/// inputs); `Ok(None)` on a conflict.
fn merge_file(
    tmp: &Path,
    ours: &[u8],
    base: &[u8],
    theirs: &[u8],
) -> Result<Option<Vec<u8>>, String> {
    std::fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
    let (o, b, t) = (tmp.join("ours"), tmp.join("base"), tmp.join("theirs"));
    for (p, c) in [(&o, ours), (&b, base), (&t, theirs)] {
        std::fs::write(p, c).map_err(|e| e.to_string())?;
    }
    let out = git_cmd(tmp, &["merge-file", "-p", "-q"])?
        .arg(&o)
        .arg(&b)
        .arg(&t)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git merge-file: {e}"))?;
    match out.status.code() {
        Some(0) => Ok(Some(out.stdout)),
        Some(n) if n > 0 && n < 128 => Ok(None),
        _ => Err("git merge-file failed".into()),
    }
}

/// Brings the change of ended task `id` into the caller's checkout. Each file the agent changed
/// is merged against the caller's file as it is now: taken as is where the caller has not
/// touched it since the task started, merged three-way where they did. If any file conflicts,
/// nothing is written and the files are named. On success the worktree is removed.
///
/// A change to a protected path (git's hooks and config, `.mcp.json`, Claude Code's and
/// opencode's project settings, editor tasks: `bridge_fence::protected::is_protected`) runs
/// later outside any fence, so it is applied only when `allow` names it (the path itself or a
/// directory above it); otherwise nothing is written and the paths are named.
pub fn apply(state_dir: &Path, id: u64, allow: &[String]) -> Result<Applied, ApplyError> {
    let info = load(state_dir, id).ok_or_else(|| {
        ApplyError::Other(format!(
            "task {id} has no worktree change to apply (it ran without isolation, or its change was already applied or discarded)"
        ))
    })?;
    if info.ended_ms.is_none() {
        return Err(ApplyError::Other(format!(
            "task {id} has not finished: wait for it (opencode_wait), then apply"
        )));
    }
    if !info.repo.is_dir() {
        return Err(ApplyError::Other(format!(
            "the checkout {} is gone: discard the change (discard=true)",
            info.repo.display()
        )));
    }
    let end = tree_now(state_dir, &info).map_err(ApplyError::Other)?;
    let entries = raw_entries(&info, &end).map_err(ApplyError::Other)?;
    let held = protected_not_allowed(&entries, allow);
    if !held.is_empty() {
        return Err(ApplyError::Protected(held));
    }
    let tmp = root(state_dir).join(format!(".merge-{id}"));
    let plan = plan_writes(&info, &entries, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    let plan = plan?;
    let mut files = Vec::new();
    for (path, w) in plan {
        let abs = info.repo.join(&path);
        match w {
            Action::Keep => files.push((path, "unchanged")),
            Action::Delete => {
                std::fs::remove_file(&abs).map_err(|e| {
                    ApplyError::Other(format!("cannot remove {}: {e}", abs.display()))
                })?;
                files.push((path, "deleted"));
            }
            Action::Put { bytes, mode, how } => {
                put(&abs, &bytes, &mode).map_err(|e| {
                    ApplyError::Other(format!("cannot write {}: {e}", abs.display()))
                })?;
                files.push((path, how));
            }
        }
    }
    remove_dir(id, &info.repo, &info.dir, state_dir).map_err(ApplyError::Other)?;
    Ok(Applied {
        repo: info.repo,
        files,
    })
}

/// The protected paths among `entries` that `allow` does not name.
fn protected_not_allowed(entries: &[RawEntry], allow: &[String]) -> Vec<String> {
    let allowed = |p: &Path| {
        allow
            .iter()
            .map(|a| Path::new(a.trim().trim_end_matches('/')))
            .any(|a| !a.as_os_str().is_empty() && p.starts_with(a))
    };
    entries
        .iter()
        .map(|e| e.path.as_str())
        .filter(|p| bridge_fence::protected::is_protected(Path::new(p)) && !allowed(Path::new(p)))
        .map(str::to_owned)
        .collect()
}

fn plan_writes(
    info: &WorktreeInfo,
    entries: &[RawEntry],
    tmp: &Path,
) -> Result<Vec<(String, Action)>, ApplyError> {
    let mut plan = Vec::new();
    let mut conflicts = Vec::new();
    for e in entries {
        if e.new_mode == "160000" || e.old_mode == "160000" {
            conflicts.push((e.path.clone(), "a submodule: not applied".into()));
            continue;
        }
        let abs = info.repo.join(&e.path);
        if std::fs::symlink_metadata(&abs).is_ok_and(|m| m.is_dir()) {
            conflicts.push((e.path.clone(), "a directory in your checkout".into()));
            continue;
        }
        let base = blob(&info.dir, &e.old_oid).map_err(ApplyError::Other)?;
        let theirs = blob(&info.dir, &e.new_oid).map_err(ApplyError::Other)?;
        let ours = current(&abs).map(|(b, _)| b);
        let w = if ours == base {
            match theirs {
                Some(bytes) => Action::Put {
                    bytes,
                    mode: e.new_mode.clone(),
                    how: "applied",
                },
                None => Action::Delete,
            }
        } else if ours == theirs {
            Action::Keep
        } else {
            match (&ours, &base, &theirs) {
                (Some(o), Some(b), Some(t))
                    if e.new_mode != "120000"
                        && !is_binary(o)
                        && !is_binary(b)
                        && !is_binary(t) =>
                {
                    match merge_file(tmp, o, b, t).map_err(ApplyError::Other)? {
                        Some(bytes) => Action::Put {
                            bytes,
                            mode: e.new_mode.clone(),
                            how: "merged",
                        },
                        None => {
                            conflicts.push((
                                e.path.clone(),
                                "you and the task changed the same lines".into(),
                            ));
                            continue;
                        }
                    }
                }
                (None, Some(_), _) => {
                    conflicts.push((e.path.clone(), "you deleted it, the task changed it".into()));
                    continue;
                }
                (Some(_), Some(_), None) => {
                    conflicts.push((e.path.clone(), "the task deleted it, you changed it".into()));
                    continue;
                }
                (Some(_), None, _) => {
                    conflicts.push((
                        e.path.clone(),
                        "you and the task both created it, differently".into(),
                    ));
                    continue;
                }
                _ => {
                    conflicts.push((
                        e.path.clone(),
                        "changed on both sides (binary or symlink)".into(),
                    ));
                    continue;
                }
            }
        };
        plan.push((e.path.clone(), w));
    }
    if conflicts.is_empty() {
        Ok(plan)
    } else {
        Err(ApplyError::Conflicts(conflicts))
    }
}

fn put(abs: &Path, bytes: &[u8], mode: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = abs.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = abs.with_file_name(format!(
        ".{}.opencode-bridge-apply",
        abs.file_name().unwrap_or_default().to_string_lossy()
    ));
    let _ = std::fs::remove_file(&tmp);
    if mode == "120000" {
        use std::os::unix::ffi::OsStrExt;
        std::os::unix::fs::symlink(Path::new(std::ffi::OsStr::from_bytes(bytes)), &tmp)?;
    } else {
        std::fs::write(&tmp, bytes)?;
        let exec = mode == "100755";
        let keep = std::fs::metadata(abs).map(|m| m.permissions().mode()).ok();
        let perm = match keep {
            Some(m) if exec => m | 0o111,
            Some(m) => m & !0o111,
            None if exec => 0o755,
            None => 0o644,
        };
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(perm))?;
    }
    std::fs::rename(&tmp, abs)
}

/// Throws the change of task `id` away: the worktree and its files are removed; the caller's
/// checkout is not touched.
pub fn discard(state_dir: &Path, id: u64) -> Result<WorktreeInfo, String> {
    let info = load(state_dir, id).ok_or_else(|| {
        format!("task {id} has no worktree (it ran without isolation, or its change was already applied or discarded)")
    })?;
    if info.ended_ms.is_none() {
        return Err(format!(
            "task {id} has not finished: cancel it (opencode_cancel) or wait for it, then discard"
        ));
    }
    remove_dir(id, &info.repo, &info.dir, state_dir)?;
    Ok(info)
}

/// Removes the worktree directory (through `git worktree remove`, so the repository's worktree
/// metadata goes too) and its files in the state directory.
fn remove_dir(id: u64, repo: &Path, dir: &Path, state_dir: &Path) -> Result<(), String> {
    let under = root(state_dir)
        .canonicalize()
        .unwrap_or_else(|_| root(state_dir));
    if dir.exists() && repo.is_dir() {
        let d = dir.to_string_lossy().into_owned();
        if git(
            repo,
            &["worktree", "remove", "--force", "--force", &d],
            "worktree remove",
        )
        .is_err()
        {
            // Not a worktree git knows (any more): its directory goes below.
        }
    }
    if dir.exists() && dir.starts_with(&under) {
        std::fs::remove_dir_all(dir)
            .map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    }
    if repo.is_dir() {
        // Metadata of a worktree whose directory is gone.
        let _ = git(repo, &["worktree", "prune"], "worktree prune");
    }
    for p in [
        index_path(state_dir, id),
        patch_path(state_dir, id),
        info_path(state_dir, id),
    ] {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// The task ids that have a worktree entry (`worktrees/<id>` or `worktrees/<id>.json`).
pub fn ids(state_dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(root(state_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".json")
                .unwrap_or(&name)
                .parse::<u64>()
                .ok()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Removes the worktrees of ended tasks that were neither applied nor discarded within `age`
/// of their end, and of tasks whose run never recorded an end and that `finished` says are
/// over (a bridge that died) and were made more than `age` ago. Returns how many went.
pub fn prune(state_dir: &Path, age: Duration, finished: impl Fn(u64) -> bool) -> usize {
    let cutoff = now_ms().saturating_sub(age.as_millis() as u64);
    let mut n = 0;
    for id in ids(state_dir) {
        let Some(info) = load(state_dir, id) else {
            continue;
        };
        let old = match info.ended_ms {
            Some(end) => end < cutoff,
            None => info.created_ms < cutoff && finished(id),
        };
        if old && remove_dir(id, &info.repo, &info.dir, state_dir).is_ok() {
            n += 1;
        }
    }
    n
}

/// Worktree entries whose task `known` does not know (for `doctor`): the id and the directory.
pub fn strays(state_dir: &Path, known: impl Fn(u64) -> bool) -> Vec<(u64, PathBuf)> {
    ids(state_dir)
        .into_iter()
        .filter(|&id| !known(id))
        .map(|id| {
            let dir = load(state_dir, id)
                .map(|i| i.dir)
                .unwrap_or_else(|| root(state_dir).join(id.to_string()));
            (id, dir)
        })
        .collect()
}

/// Top directory of the git checkout containing `dir` (canonical), if any.
pub fn checkout_of(dir: &Path) -> Option<PathBuf> {
    let top = PathBuf::from(text(
        git(dir, &["rev-parse", "--show-toplevel"], "rev-parse").ok()?,
    ));
    Some(top.canonicalize().unwrap_or(top))
}

/// The files a task's agent itself wrote (its completed write/edit/patch calls), as paths
/// relative to the checkout's top `top`; relative titles are taken as relative to the task's
/// `cwd`. (git's changed files would not do: two tasks in one tree each see the other's edits.)
pub fn files_written(calls: &[crate::calls::ToolCall], cwd: &Path, top: &Path) -> Vec<String> {
    let rel = cwd.strip_prefix(top).unwrap_or(Path::new(""));
    let mut v: Vec<String> = crate::changes::from_tool_calls(calls, top)
        .files
        .into_iter()
        .map(|f| {
            let p = Path::new(&f.path);
            // Absolute (outside the checkout), or already relative to the top.
            if p.is_absolute() || (!rel.as_os_str().is_empty() && p.starts_with(rel)) {
                f.path
            } else {
                rel.join(&f.path).to_string_lossy().into_owned()
            }
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The files in both lists (each sorted).
pub fn shared_files(a: &[String], b: &[String]) -> Vec<String> {
    a.iter()
        .filter(|f| b.binary_search(f).is_ok())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, args: &[&str]) {
        bridge_testkit::git(dir, args);
    }

    fn out(dir: &Path, args: &[&str]) -> String {
        text(git(dir, args, "test").unwrap())
    }

    /// A repository with two commits' worth of files and an uncommitted edit, an untracked file
    /// and an ignored one.
    fn repo() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("repo");
        std::fs::create_dir(&r).unwrap();
        sh(&r, &["init", "-q"]);
        std::fs::write(r.join("a.txt"), "1\n2\n3\n4\n5\n6\n7\n8\n").unwrap();
        std::fs::write(r.join("b.txt"), "b\n").unwrap();
        std::fs::write(r.join(".gitignore"), "target/\n").unwrap();
        std::fs::create_dir(r.join("sub")).unwrap();
        std::fs::write(r.join("sub/c.txt"), "c\n").unwrap();
        sh(&r, &["add", "."]);
        sh(&r, &["commit", "-q", "-m", "init"]);
        std::fs::write(r.join("b.txt"), "b\nmine\n").unwrap();
        std::fs::write(r.join("notes.txt"), "untracked\n").unwrap();
        std::fs::create_dir(r.join("target")).unwrap();
        std::fs::write(r.join("target/junk"), "ignored\n").unwrap();
        let r = r.canonicalize().unwrap();
        (d, r)
    }

    struct Before {
        head: String,
        refs: String,
        index: Vec<u8>,
        status: String,
    }

    fn before(r: &Path) -> Before {
        Before {
            head: out(r, &["rev-parse", "HEAD"]),
            refs: out(r, &["for-each-ref"]),
            index: std::fs::read(r.join(".git/index")).unwrap(),
            status: out(r, &["status", "--porcelain"]),
        }
    }

    fn assert_untouched_refs(r: &Path, b: &Before) {
        assert_eq!(out(r, &["rev-parse", "HEAD"]), b.head, "HEAD moved");
        assert_eq!(out(r, &["for-each-ref"]), b.refs, "a ref changed");
        assert_eq!(
            std::fs::read(r.join(".git/index")).unwrap(),
            b.index,
            "the caller's index was written"
        );
    }

    fn make(r: &Path, state: &Path, id: u64) -> WorktreeInfo {
        let p = plan(&r.join("sub"), Some(state), id).unwrap();
        create(&p, state).unwrap()
    }

    #[test]
    fn isolated_change_leaves_the_checkout_alone_until_applied() {
        let (d, r) = repo();
        let state = d.path().join("state");
        // Diff settings of the caller's that would make a patch unappliable are overridden.
        sh(&r, &["config", "diff.noprefix", "true"]);
        sh(&r, &["config", "diff.relative", "true"]);
        let b = before(&r);
        let info = make(&r, &state, 7);
        assert_eq!(info.run_cwd(), info.dir.join("sub"));
        // The git directories the fence grants, recorded as git made them.
        let own = info.own().unwrap();
        assert_eq!(own.common.canonicalize().unwrap(), r.join(".git"));
        assert!(own.admin.starts_with(&own.common) && own.admin.join("HEAD").is_file());
        // The agent sees the caller's tree: the uncommitted edit and the untracked file, not
        // the ignored one.
        assert_eq!(
            std::fs::read_to_string(info.dir.join("b.txt")).unwrap(),
            "b\nmine\n"
        );
        assert!(info.dir.join("notes.txt").exists());
        assert!(!info.dir.join("target/junk").exists());
        // A detached worktree, no branch.
        assert_eq!(
            out(&info.dir, &["rev-parse", "--abbrev-ref", "HEAD"]),
            "HEAD"
        );
        // The agent's work.
        std::fs::write(info.dir.join("a.txt"), "1\n2\n3\n4\n5\n6\n7\nEIGHT\n").unwrap();
        std::fs::write(info.dir.join("sub/new.txt"), "new\n").unwrap();
        std::fs::remove_file(info.dir.join("sub/c.txt")).unwrap();
        let c = collect(&state, 7).unwrap();
        assert!(c.patch.contains("+EIGHT"), "{}", c.patch);
        assert!(c.patch.contains("sub/new.txt"), "{}", c.patch);
        assert!(
            !c.patch.contains("mine") && !c.patch.contains("notes.txt"),
            "the caller's own changes are not in the patch: {}",
            c.patch
        );
        assert!(c.stat.contains("a.txt"), "{}", c.stat);
        let again = change(&state, 7).unwrap();
        assert_eq!((again.patch, again.stat), (c.patch.clone(), c.stat.clone()));
        // The checkout is as it was.
        assert_eq!(out(&r, &["status", "--porcelain"]), b.status);
        assert_untouched_refs(&r, &b);
        // Meanwhile the caller edits a.txt elsewhere: merged three-way.
        std::fs::write(r.join("a.txt"), "ONE\n2\n3\n4\n5\n6\n7\n8\n").unwrap();
        let a = apply(&state, 7, &[]).unwrap();
        assert_eq!(
            std::fs::read_to_string(r.join("a.txt")).unwrap(),
            "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n"
        );
        assert_eq!(
            std::fs::read_to_string(r.join("sub/new.txt")).unwrap(),
            "new\n"
        );
        assert!(!r.join("sub/c.txt").exists());
        assert_eq!(
            std::fs::read_to_string(r.join("b.txt")).unwrap(),
            "b\nmine\n"
        );
        let how: Vec<_> = a.files.iter().map(|(p, h)| (p.as_str(), *h)).collect();
        assert_eq!(
            how,
            [
                ("a.txt", "merged"),
                ("sub/c.txt", "deleted"),
                ("sub/new.txt", "applied")
            ]
        );
        // No worktree is left, in the state directory or in git's list.
        assert!(!info.dir.exists());
        assert!(load(&state, 7).is_none());
        assert!(ids(&state).is_empty());
        assert_eq!(
            out(&r, &["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count(),
            1
        );
        assert_eq!(out(&r, &["rev-parse", "HEAD"]), b.head);
        assert_eq!(out(&r, &["for-each-ref"]), b.refs);
    }

    #[test]
    fn protected_paths_are_applied_only_when_named() {
        let (d, r) = repo();
        let state = d.path().join("state");
        let info = make(&r, &state, 9);
        std::fs::write(info.dir.join(".mcp.json"), "{\"mcpServers\":{}}\n").unwrap();
        std::fs::create_dir_all(info.dir.join(".vscode")).unwrap();
        std::fs::write(info.dir.join(".vscode/tasks.json"), "{}\n").unwrap();
        std::fs::write(info.dir.join("ok.txt"), "ok\n").unwrap();
        collect(&state, 9).unwrap();
        let e = apply(&state, 9, &[]).unwrap_err();
        assert_eq!(
            e,
            ApplyError::Protected(vec![".mcp.json".into(), ".vscode/tasks.json".into()])
        );
        // Nothing was written, and the worktree is kept.
        for f in [".mcp.json", ".vscode", "ok.txt"] {
            assert!(!r.join(f).exists(), "{f} was written");
        }
        assert!(info.dir.exists());
        // Naming one is not naming the other.
        let e = apply(&state, 9, &[".mcp.json".into()]).unwrap_err();
        assert_eq!(e, ApplyError::Protected(vec![".vscode/tasks.json".into()]));
        // A named directory covers what is beneath it.
        let a = apply(&state, 9, &[".mcp.json".into(), ".vscode/".into()]).unwrap();
        assert_eq!(a.files.len(), 3, "{:?}", a.files);
        assert_eq!(
            std::fs::read_to_string(r.join(".vscode/tasks.json")).unwrap(),
            "{}\n"
        );
    }

    #[test]
    fn binary_files_modes_and_symlinks_come_through_exactly() {
        use std::os::unix::fs::PermissionsExt;
        let (d, r) = repo();
        std::fs::write(r.join("blob.bin"), [0u8, 1, 2, 3]).unwrap();
        sh(&r, &["add", "blob.bin"]);
        sh(&r, &["commit", "-q", "-m", "bin"]);
        // An untracked symlink of the caller's is carried over as a symlink.
        std::os::unix::fs::symlink("b.txt", r.join("link")).unwrap();
        let state = d.path().join("state");
        let info = make(&r, &state, 8);
        assert_eq!(
            std::fs::read_link(info.dir.join("link")).unwrap(),
            Path::new("b.txt")
        );
        std::fs::write(info.dir.join("blob.bin"), [0u8, 9, 9, 9, 255]).unwrap();
        let script = info.dir.join("run.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a.txt", info.dir.join("to-a")).unwrap();
        let c = collect(&state, 8).unwrap();
        assert!(c.patch.contains("GIT binary patch"), "{}", c.patch);
        apply(&state, 8, &[]).unwrap();
        assert_eq!(
            std::fs::read(r.join("blob.bin")).unwrap(),
            [0u8, 9, 9, 9, 255]
        );
        let mode = std::fs::metadata(r.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "{mode:o}");
        assert_eq!(
            std::fs::read_link(r.join("to-a")).unwrap(),
            Path::new("a.txt")
        );
        assert!(!info.dir.exists());
    }

    #[test]
    fn a_conflict_writes_nothing_and_discard_removes_the_worktree() {
        let (d, r) = repo();
        let state = d.path().join("state");
        let b = before(&r);
        let info = make(&r, &state, 3);
        std::fs::write(info.dir.join("a.txt"), "1\n2\nTASK\n4\n5\n6\n7\n8\n").unwrap();
        std::fs::write(info.dir.join("b.txt"), "b\nmine\ntask\n").unwrap();
        collect(&state, 3).unwrap();
        // The caller changes line 3 too; b.txt alone would apply.
        std::fs::write(r.join("a.txt"), "1\n2\nME\n4\n5\n6\n7\n8\n").unwrap();
        let e = apply(&state, 3, &[]).unwrap_err();
        let ApplyError::Conflicts(files) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(files[0].0, "a.txt");
        assert!(e.to_string().contains("nothing was written"), "{e}");
        assert_eq!(
            std::fs::read_to_string(r.join("b.txt")).unwrap(),
            "b\nmine\n",
            "no partial write"
        );
        assert_eq!(
            std::fs::read_to_string(r.join("a.txt")).unwrap(),
            "1\n2\nME\n4\n5\n6\n7\n8\n"
        );
        assert!(info.dir.exists(), "the change is kept after a conflict");
        let gone = discard(&state, 3).unwrap();
        assert_eq!(gone.dir, info.dir);
        assert!(!info.dir.exists());
        assert!(ids(&state).is_empty());
        assert!(discard(&state, 3).unwrap_err().contains("no worktree"));
        assert_eq!(
            std::fs::read_to_string(r.join("b.txt")).unwrap(),
            "b\nmine\n"
        );
        assert_untouched_refs(&r, &b);
        assert_eq!(
            out(&r, &["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count(),
            1
        );
    }

    #[test]
    fn refusals_say_what_to_do() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let plain = d.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        let e = plan(&plain, Some(&state), 1).unwrap_err();
        assert!(e.contains("needs a git repository"), "{e}");
        sh(&plain, &["init", "-q"]);
        let e = plan(&plain, Some(&state), 1).unwrap_err();
        assert!(e.contains("has none yet"), "{e}");
        let e = plan(&plain, None, 1).unwrap_err();
        assert!(e.contains("state directory"), "{e}");
        let (d2, r) = repo();
        let e = plan(&r, Some(&r.join("target/state")), 1).unwrap_err();
        assert!(e.contains("inside the repository"), "{e}");
        drop(d2);
        // Apply and discard before the end, or of a task without a worktree.
        let (d3, r) = repo();
        let state = d3.path().join("state");
        make(&r, &state, 5);
        assert!(
            matches!(apply(&state, 5, &[]), Err(ApplyError::Other(m)) if m.contains("not finished"))
        );
        assert!(discard(&state, 5).unwrap_err().contains("not finished"));
        assert!(
            matches!(apply(&state, 6, &[]), Err(ApplyError::Other(m)) if m.contains("no worktree"))
        );
    }

    #[test]
    fn files_written_are_relative_to_the_checkout_and_shared_ones_are_found() {
        let call = |tool: &str, title: &str| crate::calls::ToolCall {
            tool: tool.into(),
            status: "completed".into(),
            title: Some(title.into()),
            error: None,
            ..Default::default()
        };
        let top = Path::new("/p/repo");
        let a = files_written(
            &[
                call("write", "/p/repo/src/a.rs"),
                call("edit", "b.rs"),
                call("bash", "echo > c.rs"),
            ],
            &top.join("src"),
            top,
        );
        assert_eq!(a, ["src/a.rs", "src/b.rs"]);
        let b = files_written(
            &[call("edit", "src/b.rs"), call("write", "README.md")],
            top,
            top,
        );
        assert_eq!(b, ["README.md", "src/b.rs"]);
        assert_eq!(shared_files(&a, &b), ["src/b.rs"]);
        assert!(shared_files(&a, &["x".to_string()]).is_empty());
    }

    #[test]
    fn prune_removes_old_ended_worktrees_and_strays_are_named() {
        let (d, r) = repo();
        let state = d.path().join("state");
        let a = make(&r, &state, 1);
        let b = make(&r, &state, 2);
        collect(&state, 1).unwrap();
        // Not old enough: kept.
        assert_eq!(prune(&state, Duration::from_secs(3600), |_| true), 0);
        // Ended: pruned at age zero; the running one (no end, not finished) stays.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(prune(&state, Duration::ZERO, |_| false), 1);
        assert!(!a.dir.exists());
        assert!(b.dir.exists());
        assert_eq!(strays(&state, |id| id == 2), Vec::<(u64, PathBuf)>::new());
        assert_eq!(strays(&state, |_| false), vec![(2, b.dir.clone())]);
        // A task that never recorded an end but is known to be over.
        assert_eq!(prune(&state, Duration::ZERO, |_| true), 1);
        assert!(!b.dir.exists());
        assert_eq!(
            out(&r, &["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count(),
            1
        );
    }
}
