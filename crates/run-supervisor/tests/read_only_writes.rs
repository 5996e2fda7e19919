//! Writes the read-only audit used not to see: a read-only run (the fake opencode, writing
//! without any tool call) that changes `.git/config`, a hook and an ignored file, or a file of a
//! tree outside git, fails closed with kind `agent`, the files named; a read-only run that
//! writes nothing passes.

use std::path::Path;
use std::time::Duration;

use crate::common::finish;
use run_supervisor::{FailureKind, Supervisor, SupervisorConfig, TaskSpec, TaskState};

fn sup(root: &Path, prompts: &Path) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        opencode_bin: Some(bridge_testkit::bins::fake_opencode()),
        // Our fake opencode stands for `opencode run` processes; it cannot serve.
        engine: run_supervisor::Engine::Run,
        root: root.to_path_buf(),
        kill_grace: Duration::from_millis(400),
        prompt_dir: prompts.to_path_buf(),
        // The audit behind the fence: the fake's writes must land for the audit to see them.
        sandbox: run_supervisor::Sandbox::Off,
        ..SupervisorConfig::default()
    })
}

fn read_only(cwd: &Path, scenario: &str) -> TaskSpec {
    let mut s = TaskSpec::new(
        format!("scenario: {scenario}\nLook around."),
        cwd,
        "explorer",
        "PROJ/explorer: look",
    );
    s.read_only = true;
    s
}

#[tokio::test]
async fn a_read_only_run_that_writes_git_config_a_hook_or_an_ignored_file_fails_naming_them() {
    let root = tempfile::tempdir().unwrap();
    let prompts = tempfile::tempdir().unwrap();
    let proj = root.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    bridge_testkit::git_repo(
        &proj,
        &[(".gitignore", "target/\n.env\n"), ("README.md", "# demo\n")],
    );
    std::fs::create_dir(proj.join("target")).unwrap();
    std::fs::write(proj.join("target/out.log"), "built\n").unwrap();
    let sup = sup(root.path(), prompts.path());

    // Writing nothing passes.
    let id = sup.start(read_only(&proj, "ok")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Succeeded, "{:?}", s.failure);

    let id = sup
        .start(read_only(
            &proj,
            "writes:.git/config,.git/hooks/pre-commit,target/out.log,.env",
        ))
        .unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    let f = s.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::Agent, "{}", f.message);
    assert!(
        f.message.ends_with(
            "changed while read-only agent `explorer` ran: .env, .git/config, .git/hooks/pre-commit, target/out.log"
        ),
        "{}",
        f.message
    );
    let r = sup.result(id, None, None).expect("a result");
    let text = format!("{r:?}");
    assert!(text.contains(".git/hooks/pre-commit"), "{text}");
}

#[tokio::test]
async fn a_read_only_run_that_writes_in_a_tree_outside_git_fails_naming_the_file() {
    let root = tempfile::tempdir().unwrap();
    let prompts = tempfile::tempdir().unwrap();
    let proj = root.path().join("plain");
    std::fs::create_dir_all(proj.join("docs")).unwrap();
    std::fs::write(proj.join("docs/a.md"), "a\n").unwrap();
    let sup = sup(root.path(), prompts.path());
    let id = sup
        .start(read_only(&proj, "writes:docs/a.md,new/notes.txt"))
        .unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    let f = s.failure.expect("a failure");
    assert_eq!(f.kind, FailureKind::Agent);
    assert!(
        f.message.ends_with("ran: docs/a.md, new/notes.txt"),
        "{}",
        f.message
    );
}
