//! `isolation: "worktree"` with the real opencode 1.18.33 and the fake LLM: the agent writes in
//! its own worktree, the caller's checkout (and an uncommitted edit in it) stays as it was, the
//! result shows the patch, `opencode_apply` brings it in or discards it, a conflict writes
//! nothing, no worktree is left and HEAD, refs and the index never change; two editing tasks
//! without isolation that write one file at once are each warned of the other.

use crate::common;

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::{Server, World};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// git's answer, read without taking optional locks (so reading does not refresh the index).
fn read_git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What must never change in the caller's repository.
fn fixed(dir: &Path) -> (String, String, Vec<u8>) {
    (
        read_git(dir, &["rev-parse", "HEAD"]),
        read_git(dir, &["for-each-ref"]),
        std::fs::read(dir.join(".git/index")).unwrap(),
    )
}

// On both engines: an `opencode run` per task, and sessions on the warm local `opencode serve`.
#[test]
fn live_run_an_isolated_task_is_applied_or_discarded_and_never_touches_the_checkout_meanwhile() {
    an_isolated_task_is_applied_or_discarded_and_never_touches_the_checkout_meanwhile("run");
}

#[test]
fn live_serve_an_isolated_task_is_applied_or_discarded_and_never_touches_the_checkout_meanwhile() {
    an_isolated_task_is_applied_or_discarded_and_never_touches_the_checkout_meanwhile("serve");
}

fn an_isolated_task_is_applied_or_discarded_and_never_touches_the_checkout_meanwhile(engine: &str) {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# demo\n")]);
    // The caller's own work in progress: an uncommitted edit and an untracked file.
    std::fs::write(proj.join("README.md"), "# demo\nmine\n").unwrap();
    std::fs::write(proj.join("notes.txt"), "notes\n").unwrap();
    let before = fixed(&proj);
    let status_before = read_git(&proj, &["status", "--porcelain"]);

    let mut env = common::sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_ROOT", proj.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_MODEL", "fk/toolwrite".into()));
    env.push(("OPENCODE_BRIDGE_ENGINE", engine.into()));
    let mut server = Server::start_in(&world, &env, &proj);
    server.initialize();
    let mut next = 100;
    let start = |server: &mut Server, n: i64| {
        server.call_text(
            n,
            "opencode_start",
            json!({"tier": "easy", "prompt": "Write the greeting file", "isolation": "worktree"}),
        )
    };

    // 1. Isolated write, then apply.
    let (t, is_error) = start(&mut server, 2);
    assert!(!is_error, "{t}");
    assert!(t.contains("isolation: worktree "), "{t}");
    let id = t
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_owned();
    let status = common::until_ended(&mut server, &id, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    // Run where asked (a server that did not start would have fallen back to `run`).
    assert!(status.contains(&format!("engine: {engine}")), "{status}");
    assert!(
        !proj.join("hello.txt").exists(),
        "the checkout is not touched"
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("README.md")).unwrap(),
        "# demo\nmine\n"
    );
    assert_eq!(read_git(&proj, &["status", "--porcelain"]), status_before);
    assert_eq!(fixed(&proj), before);
    // The change outlives the bridge: a new one shows and applies it.
    server.close_stdin();
    assert!(server.wait_exit(Duration::from_secs(20)).is_some());
    let mut server = Server::start_in(&world, &env, &proj);
    server.initialize();
    let (result, _) = server.call_text(3, "opencode_result", json!({"id": id}));
    assert!(
        result.contains("changed files (1, from git):\n  hello.txt +1 -0 (added)"),
        "{result}"
    );
    assert!(result.contains("isolated change (worktree "), "{result}");
    assert!(result.contains("+++ b/hello.txt\n"), "{result}");
    assert!(result.contains("+hi from fake\n"), "{result}");
    assert!(
        !result.contains("+mine") && !result.contains("notes.txt"),
        "the caller's own changes are what the agent started from, not its change: {result}"
    );
    let full = server.call(30, "opencode_result", json!({"id": id}));
    let isolated = &full["result"]["structuredContent"]["isolated"];
    assert_eq!(isolated["collected"], true, "{full}");
    assert!(
        isolated["patch"]
            .as_str()
            .unwrap()
            .contains("+hi from fake\n"),
        "{full}"
    );
    assert_eq!(
        isolated["checkout"],
        proj.to_string_lossy().as_ref(),
        "{full}"
    );
    let wt = world.path("xdg/state/opencode-bridge/worktrees");
    assert!(wt.join(&id).is_dir());
    let (applied, is_error) = server.call_text(4, "opencode_apply", json!({"id": id}));
    assert!(!is_error, "{applied}");
    assert!(applied.contains("change applied to "), "{applied}");
    assert!(applied.contains("  hello.txt (applied)"), "{applied}");
    assert_eq!(
        std::fs::read_to_string(proj.join("hello.txt")).unwrap(),
        "hi from fake\n"
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("README.md")).unwrap(),
        "# demo\nmine\n"
    );
    assert!(!wt.join(&id).exists(), "the worktree is removed");
    let (again, is_error) = server.call_text(5, "opencode_apply", json!({"id": id}));
    assert!(is_error && again.contains("no worktree change"), "{again}");

    // 2. A conflict: the caller writes the same new file meanwhile; nothing is written, then
    // discard removes the worktree.
    std::fs::remove_file(proj.join("hello.txt")).unwrap();
    let (t, _) = start(&mut server, 6);
    let id2 = t
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_owned();
    let status = common::until_ended(&mut server, &id2, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    std::fs::write(proj.join("hello.txt"), "the caller's own\n").unwrap();
    let (conflict, is_error) = server.call_text(7, "opencode_apply", json!({"id": id2}));
    assert!(is_error, "{conflict}");
    assert!(
        conflict.contains("nothing was written (1 conflicting files)"),
        "{conflict}"
    );
    assert!(conflict.contains("\n  hello.txt: "), "{conflict}");
    assert_eq!(
        std::fs::read_to_string(proj.join("hello.txt")).unwrap(),
        "the caller's own\n"
    );
    assert!(wt.join(&id2).is_dir(), "kept after a conflict");
    let (gone, is_error) =
        server.call_text(8, "opencode_apply", json!({"id": id2, "discard": true}));
    assert!(!is_error, "{gone}");
    assert!(gone.contains("change discarded"), "{gone}");
    assert_eq!(
        std::fs::read_to_string(proj.join("hello.txt")).unwrap(),
        "the caller's own\n"
    );

    // 3. Two editing tasks without isolation in one checkout at once, both writing hello.txt:
    // each result warns, naming both tasks and the file.
    std::fs::remove_file(proj.join("hello.txt")).unwrap();
    let plain = json!({"tier": "easy", "prompt": "Write the greeting file"});
    let (a, _) = server.call_text(9, "opencode_start", plain.clone());
    let (b, _) = server.call_text(10, "opencode_start", plain);
    let task_id = |t: &str| {
        t.strip_prefix("started task ")
            .and_then(|r| r.split(':').next())
            .unwrap()
            .to_owned()
    };
    let (a, b) = (task_id(&a), task_id(&b));
    common::until_ended(&mut server, &a, &mut next);
    common::until_ended(&mut server, &b, &mut next);
    let (ra, _) = server.call_text(11, "opencode_result", json!({"id": a}));
    assert!(
        ra.contains(&format!(
            "warning: tasks {a} and {b} both edited hello.txt in the same checkout"
        )),
        "{ra}"
    );
    let (rb, _) = server.call_text(12, "opencode_result", json!({"id": b}));
    assert!(
        rb.contains(&format!("warning: tasks {b} and {a} both edited hello.txt")),
        "{rb}"
    );
    // The isolated tasks above ran at other times: no warning there.
    assert!(!rb.contains(&format!("and {id2} ")), "{rb}");
    std::fs::remove_file(proj.join("hello.txt")).unwrap();

    // No worktree is left anywhere; HEAD, refs and the index never moved.
    assert_eq!(std::fs::read_dir(&wt).unwrap().count(), 0, "{wt:?}");
    assert_eq!(
        read_git(&proj, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    assert_eq!(fixed(&proj), before);
}

/// Outside git an isolated start is refused, saying what to do; `doctor` names a worktree
/// whose task the registry does not know. (The fake opencode: nothing runs.)
#[test]
fn isolation_outside_git_is_refused_and_doctor_names_a_stray_worktree() {
    let world = World::new();
    let env = [(
        "OPENCODE_BIN",
        common::fake_opencode(&world).to_string_lossy().into_owned(),
    )];
    let mut server = Server::start(&world, &env);
    server.initialize();
    let (t, is_error) = server.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Fix the typo", "cwd": "demo", "isolation": "worktree"}),
    );
    assert!(is_error, "{t}");
    assert!(
        t.contains("needs a git repository") && t.contains("run the task without isolation"),
        "{t}"
    );
    let (t, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Fix the typo", "isolation": "sideways"}),
    );
    assert!(is_error && t.contains("isolation"), "{t}");
    let (t, is_error) = server.call_text(3, "opencode_apply", json!({"id": "77"}));
    assert!(is_error && t.contains("77"), "{t}");
    drop(server);

    let stray = world.path("xdg/state/opencode-bridge/worktrees/42");
    std::fs::create_dir_all(&stray).unwrap();
    let out = common::run_cli(&world, &env, &["doctor"]);
    let out = String::from_utf8_lossy(&out.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("worktrees"))
        .unwrap_or_else(|| panic!("no worktrees line:\n{out}"));
    assert!(line.starts_with("warn"), "{line}");
    assert!(
        line.contains("task 42, which the registry does not know")
            && line.contains("git worktree remove --force"),
        "{line}"
    );
}
