//! Nothing of a repository runs in the bridge: a repository whose config plants every hook of
//! git's that runs code (fsmonitor, hooks, clean/smudge/process filters named in
//! `.gitattributes` and `.git/info/attributes`, `diff.external`, a diff driver's textconv and
//! command, a merge driver, the pager, an included config file, a submodule's own filter, a
//! configured hook) goes through every git path the
//! bridge runs (the changed-files snapshot before and after, an isolated worktree's creation,
//! collection, apply and discard), and none of the planted commands ever runs.

use std::path::{Path, PathBuf};

use run_supervisor::changes::GitSnapshot;
use run_supervisor::worktree;

/// `evil.sh NAME`: touches `<marks>/NAME`, then passes stdin through (so a filter "works").
fn plant(repo: &Path, marks: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = marks.parent().unwrap().join("evil.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntouch '{}'/\"$1\"\ncat 2>/dev/null\nexit 0\n",
            marks.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = script.display();
    let set = |k: &str, v: &str| bridge_testkit::git(repo, &["config", k, v]);
    set("core.fsmonitor", &format!("{s} fsmonitor"));
    set("core.pager", &format!("{s} pager"));
    set("core.sshCommand", &format!("{s} ssh"));
    set("diff.external", &format!("{s} diff-external"));
    set("diff.evil.textconv", &format!("{s} textconv"));
    set("diff.evil.command", &format!("{s} diff-command"));
    set("merge.evil.driver", &format!("{s} merge-driver"));
    set("filter.evil.clean", &format!("{s} clean"));
    set("filter.evil.smudge", &format!("{s} smudge"));
    set("filter.evil.required", "true");
    set("filter.proc.process", &format!("{s} process"));
    set("filter.proc.required", "true");
    // A second config file, included: where a planted key may hide.
    let extra = repo.join(".git/extra.cfg");
    std::fs::write(
        &extra,
        format!("[filter \"hidden\"]\n\tclean = {s} hidden-clean\n\tsmudge = {s} hidden-smudge\n"),
    )
    .unwrap();
    set("include.path", &extra.display().to_string());
    std::fs::write(
        repo.join(".git/info/attributes"),
        "*.md filter=proc\n*.cfg filter=hidden\n",
    )
    .unwrap();
    let hooks = repo.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for h in [
        "post-checkout",
        "post-index-change",
        "pre-commit",
        "post-commit",
        "reference-transaction",
        "pre-auto-gc",
        "post-merge",
        "fsmonitor-watchman",
    ] {
        let p = hooks.join(h);
        std::fs::write(&p, format!("#!/bin/sh\n{s} hook-{h}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    script
}

fn marks(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn no_planted_git_command_runs_in_any_git_path_of_the_bridge() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("repo");
    let marks_dir = d.path().join("marks");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&marks_dir).unwrap();
    bridge_testkit::git_repo(
        &repo,
        &[
            (".gitattributes", "*.txt filter=evil diff=evil merge=evil\n"),
            ("a.txt", "1\n2\n3\n4\n5\n6\n7\n8\n"),
            ("b.md", "b\n"),
            ("c.cfg", "c\n"),
        ],
    );
    // A submodule with a filter of its own, in its own config (which the superproject's
    // `git config --list` does not show): a `git status` looking into it would run it.
    let subsrc = d.path().join("subsrc");
    std::fs::create_dir_all(&subsrc).unwrap();
    bridge_testkit::git_repo(
        &subsrc,
        &[
            (".gitattributes", "*.txt filter=subevil\n"),
            ("s.txt", "s\n"),
        ],
    );
    bridge_testkit::git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &subsrc.display().to_string(),
            "sub",
        ],
    );
    bridge_testkit::git(&repo, &["commit", "-q", "-m", "sub"]);
    let script = plant(&repo, &marks_dir);
    let s = script.display();
    bridge_testkit::git(
        &repo.join("sub"),
        &["config", "filter.subevil.clean", &format!("{s} sub-clean")],
    );
    // A configured hook (git 2.54+; older git ignores the keys).
    bridge_testkit::git(&repo, &["config", "hook.evil.event", "post-checkout"]);
    bridge_testkit::git(
        &repo,
        &["config", "hook.evil.command", &format!("{s} config-hook")],
    );
    // The planted commands do run when git is run plainly (the fixture is live).
    std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["diff", "HEAD"])
        .output()
        .unwrap();
    assert!(
        marks(&marks_dir).contains(&"fsmonitor".to_owned()),
        "the planted fsmonitor should run under a plain git diff (the fixture): {:?}",
        marks(&marks_dir)
    );
    for m in marks(&marks_dir) {
        std::fs::remove_file(marks_dir.join(m)).unwrap();
    }
    // The caller's uncommitted edits: every filtered file is dirty, so git has to read them.
    std::fs::write(repo.join("a.txt"), "ONE\n2\n3\n4\n5\n6\n7\n8\n").unwrap();
    std::fs::write(repo.join("b.md"), "b\nmore\n").unwrap();
    std::fs::write(repo.join("c.cfg"), "c\nmore\n").unwrap();
    std::fs::write(repo.join("new.txt"), "untracked\n").unwrap();
    // Same size, new mtime: only the content (through the filter) can tell.
    std::fs::write(repo.join("sub/s.txt"), "t\n").unwrap();

    let ran = |stage: &str| {
        assert_eq!(
            marks(&marks_dir),
            Vec::<String>::new(),
            "{stage}: a command planted in the repository ran in the bridge ({})",
            script.display()
        );
    };

    // The changed-files snapshot, before and after a task.
    let snap = GitSnapshot::take(&repo).expect("a git tree");
    std::fs::write(repo.join("a.txt"), "ONE\n2\n3\n4\n5\n6\n7\n8\n9\n").unwrap();
    std::fs::remove_file(repo.join("c.cfg")).unwrap();
    let changed = snap.changes_since().expect("changes");
    assert!(
        changed.files.iter().any(|f| f.path == "a.txt"),
        "{changed:?}"
    );
    ran("the changed-files snapshot");
    std::fs::write(repo.join("c.cfg"), "c\nmore\n").unwrap();

    // An isolated task: the worktree, the agent's work in it, the change collected and applied.
    let state = d.path().join("state");
    let plan = worktree::plan(&repo, Some(&state), 1).expect("plan");
    let info = worktree::create(&plan, &state);
    ran("the worktree's creation");
    let info = info.expect("worktree");
    assert_eq!(
        std::fs::read_to_string(info.dir.join("a.txt")).unwrap(),
        "ONE\n2\n3\n4\n5\n6\n7\n8\n9\n",
        "the caller's edit is carried"
    );
    std::fs::write(info.dir.join("a.txt"), "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n9\n").unwrap();
    std::fs::write(info.dir.join("b.md"), "b\nmore\nagent\n").unwrap();
    let change = worktree::collect(&state, 1).expect("collect");
    ran("the worktree's collection");
    assert!(change.patch.contains("+EIGHT"), "{}", change.patch);
    // The caller edits a.txt meanwhile: a three-way merge.
    std::fs::write(repo.join("a.txt"), "1\n2\n3\n4\n5\n6\n7\n8\n9\n").unwrap();
    let applied = worktree::apply(&state, 1, &[]).expect("apply");
    assert!(!applied.files.is_empty());
    ran("the change's apply");
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "1\n2\n3\n4\n5\n6\n7\nEIGHT\n9\n"
    );
    // A second one, discarded.
    let plan = worktree::plan(&repo, Some(&state), 2).expect("plan");
    worktree::create(&plan, &state).expect("worktree");
    worktree::collect(&state, 2).expect("collect");
    worktree::discard(&state, 2).expect("discard");
    // And a snapshot after all that.
    assert!(GitSnapshot::take(&repo).is_some());
    ran("the discard and the last snapshot");
}
