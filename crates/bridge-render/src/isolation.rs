//! `isolation: "worktree"`: the start note, the change in `opencode_result`, and what
//! `opencode_apply` did.

use run_supervisor::worktree::{Applied, ApplyError, Change, WorktreeInfo};
use run_supervisor::{Cut, TaskId, cut_text};

/// Characters of a patch shown when the caller gives neither `head` nor `tail` (the agent's
/// text keeps its own 60 000, so both fit one reply).
pub const PATCH_CHARS: usize = 30_000;

/// Appended to `opencode_start`'s text for an isolated task (`repo`: the caller's checkout,
/// once the worktree is made).
pub fn started(dir: &str, repo: Option<&str>) -> String {
    let checkout = repo.map_or("your checkout".to_string(), |r| {
        format!("your checkout {r}")
    });
    format!(
        "isolation: worktree {dir} ({checkout} is not touched; opencode_result shows the patch, opencode_apply brings it in or discards it)\n"
    )
}

/// The part of a patch a result shows: `head` / `tail` as asked, else its first
/// [`PATCH_CHARS`] characters.
pub fn cut_patch(patch: &str, head: Option<usize>, tail: Option<usize>) -> Cut {
    match (head, tail) {
        (None, None) => cut_text(patch, Some(PATCH_CHARS), None),
        _ => cut_text(patch, head, tail),
    }
}

/// The change of an isolated task in `opencode_result`: diff stat, then the patch, cut by
/// `head` / `tail` (default: its first [`PATCH_CHARS`] characters).
pub fn change(id: TaskId, c: &Change, head: Option<usize>, tail: Option<usize>) -> String {
    let repo = c.info.repo.display();
    if c.patch.is_empty() {
        return format!(
            "isolated change: none (the agent changed nothing in its worktree {})\nnext: opencode_apply id={id} discard=true removes the worktree\n",
            c.info.dir.display()
        );
    }
    let cut = cut_patch(&c.patch, head, tail);
    let mut out = format!(
        "isolated change (worktree {}, not in your checkout {repo} yet):\n",
        c.info.dir.display()
    );
    for l in c.stat.lines().filter(|l| !l.trim().is_empty()) {
        out.push_str(&format!("  {}\n", l.trim()));
    }
    out.push_str(&format!(
        "patch ({} characters{}):\n",
        cut.total_chars,
        if cut.truncated {
            "; cut: pass head or tail to page it"
        } else {
            ""
        }
    ));
    out.push_str(cut.text.trim_end());
    out.push('\n');
    out.push_str(&format!(
        "next: opencode_apply id={id} brings it into {repo}; opencode_apply id={id} discard=true throws it away\n"
    ));
    out
}

/// An isolated task whose run ended without its change being collected (its bridge died).
pub fn not_collected(id: TaskId, info: &WorktreeInfo) -> String {
    format!(
        "isolated change: not collected yet (worktree {}); opencode_apply id={id} collects and applies it, discard=true throws it away\n",
        info.dir.display()
    )
}

/// `opencode_apply`: what was written.
pub fn applied(id: TaskId, a: &Applied) -> String {
    if a.files.is_empty() {
        return format!(
            "task {id}: nothing to apply (the agent changed no file); its worktree is removed\n"
        );
    }
    let mut out = format!(
        "task {id}: change applied to {} ({} files; nothing committed or staged); its worktree is removed\n",
        a.repo.display(),
        a.files.len()
    );
    for (path, how) in &a.files {
        out.push_str(&format!("  {path} ({how})\n"));
    }
    out
}

/// `opencode_apply` with a conflict: the files, one per line, and what to do.
pub fn conflict(id: TaskId, e: &ApplyError) -> String {
    match e {
        ApplyError::Conflicts(files) => {
            let mut out = format!(
                "task {id}: the change does not apply cleanly; nothing was written ({} conflicting files):\n",
                files.len()
            );
            for (path, why) in files {
                out.push_str(&format!("  {path}: {why}\n"));
            }
            out.push_str(&format!(
                "next: resolve these files in your checkout and call opencode_apply id={id} again, or opencode_apply id={id} discard=true; the worktree is kept until then\n"
            ));
            out
        }
        ApplyError::Protected(paths) => {
            let named: Vec<String> = paths.iter().map(|p| format!("{p:?}")).collect();
            format!(
                "task {id}: refused: the change touches protected paths, which run later outside any fence (git, Claude Code, opencode, editors): {}; nothing was written. Read them in the patch (opencode_result id={id}), then apply with allow_protected=[{}] to take them too, or discard=true\n",
                paths.join(", "),
                named.join(", ")
            )
        }
        ApplyError::Other(m) => format!("task {id}: {m}"),
    }
}

/// `opencode_apply discard=true`.
pub fn discarded(id: TaskId, info: &WorktreeInfo) -> String {
    format!(
        "task {id}: change discarded; worktree {} removed, your checkout {} was not touched\n",
        info.dir.display(),
        info.repo.display()
    )
}

/// Two editing tasks without isolation that touched the same files of one checkout.
pub fn overlap(id: TaskId, other: TaskId, files: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut list: Vec<&str> = files.iter().take(SHOWN).map(String::as_str).collect();
    let more = files.len().saturating_sub(SHOWN);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    list.sort_unstable();
    format!(
        "warning: tasks {id} and {other} both edited {}{more} in the same checkout at the same time; check these files (isolation=worktree keeps editing tasks apart)\n",
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn info() -> WorktreeInfo {
        WorktreeInfo {
            task: 4,
            repo: PathBuf::from("/p/repo"),
            rel: PathBuf::new(),
            dir: PathBuf::from("/s/worktrees/4"),
            head: "abc".into(),
            base: "def".into(),
            created_ms: 0,
            ended_ms: Some(1),
            stat: String::new(),
            admin: None,
            common: None,
        }
    }

    #[test]
    fn the_patch_is_cut_to_its_head_by_default_and_paged_by_tail() {
        let patch = format!("diff --git a/x b/x\n{}", "+line\n".repeat(10_000));
        let c = Change {
            info: info(),
            patch,
            stat: " x | 10000 +\n 1 file changed\n".into(),
        };
        let t = change(4, &c, None, None);
        assert!(t.contains("  x | 10000 +\n"), "{t}");
        assert!(t.contains("diff --git a/x b/x"), "{t}");
        assert!(t.contains("cut: pass head or tail"), "{t}");
        assert!(t.len() < PATCH_CHARS + 1000, "{}", t.len());
        assert!(t.contains("opencode_apply id=4 discard=true"), "{t}");
        let end = change(4, &c, None, Some(100));
        assert!(!end.contains("diff --git"), "{end}");
        let none = change(
            4,
            &Change {
                info: info(),
                patch: String::new(),
                stat: String::new(),
            },
            None,
            None,
        );
        assert!(none.contains("isolated change: none"), "{none}");
    }

    #[test]
    fn conflicts_are_listed_file_by_file() {
        let e = ApplyError::Conflicts(vec![
            (
                "a.txt".into(),
                "you and the task changed the same lines".into(),
            ),
            (
                "b.bin".into(),
                "changed on both sides (binary or symlink)".into(),
            ),
        ]);
        let t = conflict(4, &e);
        assert!(
            t.contains("nothing was written (2 conflicting files)"),
            "{t}"
        );
        assert!(t.contains("\n  a.txt: you and the task"), "{t}");
        assert!(t.contains("\n  b.bin: "), "{t}");
        let w = overlap(3, 5, &["src/b.rs".into(), "src/a.rs".into()]);
        assert!(
            w.contains("tasks 3 and 5 both edited src/a.rs, src/b.rs"),
            "{w}"
        );
    }
}
