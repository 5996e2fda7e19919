//! The post-run audit with the real opencode 1.18.33 and the fake LLM: a run the policy believed
//! read-only that wrote a file anyway fails closed (kind `agent`), naming the file and the call;
//! a read-only run that kept to reading passes and says it was audited. The session is read
//! from the sandbox's store through `opencode_client::usage`, as the MCP server reads it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use opencode_client::StoreSource;
use run_supervisor::audit::{SessionReader, Turn, Used};
use run_supervisor::{FailureKind, Supervisor, SupervisorConfig, TaskSpec, TaskState, ToolCall};

/// Reads the stores of the runs' worlds under a state directory, read-only.
#[derive(Debug)]
struct StoreReader(PathBuf);

impl SessionReader for StoreReader {
    fn read(&self, session_id: &str, since: SystemTime) -> Result<Used, String> {
        let ctx = crate::common::store_scan_context();
        let since_ms = since.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        let mut found = Err(format!(
            "no world under {} holds {session_id}",
            self.0.display()
        ));
        for db in crate::common::world_stores(&self.0) {
            let store = StoreSource::open(&db).map_err(|e| e.to_string())?;
            if let Ok(u) = opencode_client::usage::session_usage(&store, session_id, since_ms, &ctx)
            {
                found = Ok(u);
                break;
            }
        }
        let u = found?;
        Ok(Used {
            turns: u
                .turns
                .into_iter()
                .map(|t| Turn {
                    agent: t.agent,
                    model: t.model,
                })
                .collect(),
            tool_calls: u
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    tool: c.tool,
                    status: c.status.as_str().to_owned(),
                    title: None,
                    error: None,
                    ..Default::default()
                })
                .collect(),
        })
    }
}

/// A supervisor over the sandbox whose runs are audited from its store, one run at a time. The
/// audit is the line behind the kernel fence: with the fence on, the writes these tests make
/// are refused before the audit could see them (tests/live_fence.rs), so here a hole in both
/// lets them through and the audit must name them.
fn audited_supervisor(oc: &std::path::Path, sb: &OpencodeSandbox) -> Supervisor {
    audited_supervisor_on(oc, sb, run_supervisor::Engine::Run)
}

fn audited_supervisor_on(
    oc: &std::path::Path,
    sb: &OpencodeSandbox,
    engine: run_supervisor::Engine,
) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        opencode_bin: Some(oc.to_path_buf()),
        root: sb.root().to_path_buf(),
        env: sb.env(),
        max_parallel: 1,
        kill_grace: Duration::from_secs(3),
        quiet_after: Duration::from_secs(600),
        session_reader: Some(Arc::new(StoreReader(sb.root().join("bridge-state")))),
        state_dir: Some(sb.root().join("bridge-state")),
        sandbox: run_supervisor::Sandbox::Off,
        engine,
        ..SupervisorConfig::default()
    })
}

#[tokio::test]
async fn live_a_read_only_run_that_changed_a_file_fails_closed_naming_it() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# demo\n")]);
    let sup = audited_supervisor(&oc, &sb);
    // The policy believes both agents read-only. The first one's permissions do not hold (it
    // runs with `--auto` and no read-only overlay, as a hole in the policy would leave it), and
    // the fake model writes a file; the second only answers.
    let read_only = |model: &str| {
        let mut s = TaskSpec::new(
            "Write the greeting file.",
            &proj,
            "worker",
            format!("LIVE/worker: audit {model}"),
        );
        s.model = Some(format!("fk/{model}"));
        s.read_only = true;
        s
    };
    // One after the other: a read-only task counts every change made in its tree while it
    // runs, whoever made it.
    let mut ids = Vec::new();
    for model in ["ok", "toolwrite"] {
        let id = sup.start(read_only(model)).unwrap();
        tokio::time::timeout(Duration::from_secs(240), sup.wait(id))
            .await
            .unwrap_or_else(|_| panic!("task {id} did not finish: {:?}", sup.status(id)));
        ids.push(id);
    }
    let (kept, wrote) = (ids[0], ids[1]);
    assert!(proj.join("hello.txt").exists(), "the run did write");

    let s = sup.status(wrote).unwrap();
    assert_eq!(s.state, TaskState::Failed, "{s:?}");
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Agent);
    assert_eq!(
        f.message,
        "policy violation: the working tree changed while read-only agent `worker` ran: hello.txt"
    );
    let out = sup.result(wrote, None, None).unwrap();
    let changed = out.changed_files.expect("the changed files are named");
    assert_eq!(changed.files[0].path, "hello.txt");
    let audit = out.audit.unwrap();
    assert!(
        audit.starts_with("audited: agent worker, model fk/toolwrite in 2 assistant messages"),
        "{audit}"
    );
    assert!(
        audit.contains("also: policy violation: agent `worker` made tool calls its permissions deny: write (edit denied)"),
        "{audit}"
    );

    let s = sup.status(kept).unwrap();
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let out = sup.result(kept, None, None).unwrap();
    assert_eq!(
        out.audit.as_deref(),
        Some("audited: agent worker, model fk/ok in 1 assistant message")
    );
    assert!(out.changed_files.is_none());
}

/// The attack of issue 22 through the real opencode: repository code is planted into `.git`
/// while a task the policy believes read-only runs (`core.fsmonitor`, a filter named in
/// `.git/info/attributes`, a `post-checkout` hook) and an ignored file is written. Its task fails
/// naming every one of those files; and nothing planted runs in the bridge afterwards: not in the
/// next editing task's before/after snapshots, not in an isolated worktree made, collected and
/// discarded in that repository. A plain `git status` at the end shows the planted code is live.
///
/// On `run` the agent plants it with one `bash` call (its permissions did not hold: the hole of
/// [`audited_supervisor`]). On a server the session's default-deny rules refuse that call, so the
/// plant comes from beside the agent, which is the same to the audit: a read-only task counts
/// every change made in its tree while it runs, whoever made it.
#[tokio::test]
async fn live_run_planted_repository_code_is_named_by_the_audit_and_never_runs_in_the_bridge() {
    planted_code_is_named_by_the_audit_and_never_runs_in_the_bridge(run_supervisor::Engine::Run)
        .await;
}

#[tokio::test]
async fn live_serve_planted_repository_code_is_named_by_the_audit_and_never_runs_in_the_bridge() {
    planted_code_is_named_by_the_audit_and_never_runs_in_the_bridge(run_supervisor::Engine::Serve)
        .await;
}

async fn planted_code_is_named_by_the_audit_and_never_runs_in_the_bridge(
    engine: run_supervisor::Engine,
) {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(
        &proj,
        &[("README.md", "# demo\n"), (".gitignore", "target/\n")],
    );
    let sup = audited_supervisor_on(&oc, &sb, engine);
    let ran = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&proj)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ran-"))
            .collect();
        v.sort();
        v
    };
    let task = |model: &str, read_only: bool| {
        let mut s = TaskSpec::new(
            "Do the job.",
            &proj,
            "worker",
            format!("LIVE/worker: {model}"),
        );
        s.model = Some(format!("fk/{model}"));
        s.read_only = read_only;
        s
    };
    let wait = |id| {
        let sup = &sup;
        async move {
            tokio::time::timeout(Duration::from_secs(240), sup.wait(id))
                .await
                .unwrap_or_else(|_| panic!("task {id} did not finish: {:?}", sup.status(id)));
        }
    };

    let planted = if engine == run_supervisor::Engine::Run {
        let id = sup.start(task("toolplant", true)).unwrap();
        wait(id).await;
        id
    } else {
        llm.set_slow_secs(10);
        let id = sup.start(task("slow", true)).unwrap();
        // Planted once the model is answering (the task's footprint was taken before).
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        while sup.status(id).unwrap().last_event_age.is_none() {
            assert!(std::time::Instant::now() < deadline, "{:?}", sup.status(id));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let planted = std::process::Command::new("sh")
            .arg("-c")
            .arg(bridge_testkit::fake_llm::PLANT_COMMAND)
            .current_dir(&proj)
            .status()
            .unwrap();
        assert!(planted.success());
        wait(id).await;
        id
    };
    let config = std::fs::read_to_string(proj.join(".git/config")).unwrap();
    assert!(
        config.contains("ran-fsmonitor"),
        "the run planted: {config}"
    );
    let s = sup.status(planted).unwrap();
    assert_eq!(s.state, TaskState::Failed, "{s:?}");
    assert_eq!(s.engine, engine.as_str(), "{s:?}");
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Agent);
    assert_eq!(
        f.message,
        "policy violation: the working tree changed while read-only agent `worker` ran: .git/config, .git/hooks/post-checkout, .git/info/attributes, target/planted.log"
    );
    assert_eq!(ran(), Vec::<String>::new(), "after the planting task");

    // The next task in that repository: an editing one, snapshotted before and after.
    let edit = sup.start(task("toolwrite", false)).unwrap();
    wait(edit).await;
    let s = sup.status(edit).unwrap();
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let out = sup.result(edit, None, None).unwrap();
    let changed = out.changed_files.expect("changed files");
    assert!(
        changed.files.iter().any(|f| f.path == "hello.txt"),
        "{changed:?}"
    );
    assert_eq!(ran(), Vec::<String>::new(), "after the editing task");

    // An isolated worktree of the same repository, made, collected and discarded.
    let state = tempfile::tempdir().unwrap();
    std::fs::write(proj.join("README.md"), "# demo\nmore\n").unwrap();
    let plan = run_supervisor::worktree::plan(&proj, Some(state.path()), 1).unwrap();
    let info = run_supervisor::worktree::create(&plan, state.path()).unwrap();
    std::fs::write(info.dir.join("README.md"), "# demo\nmore\nagent\n").unwrap();
    run_supervisor::worktree::collect(state.path(), 1).unwrap();
    run_supervisor::worktree::discard(state.path(), 1).unwrap();
    assert_eq!(ran(), Vec::<String>::new(), "after the worktree");

    // The planted code is live: a plain git runs it.
    std::process::Command::new("git")
        .arg("-C")
        .arg(&proj)
        .args(["status", "--porcelain"])
        .output()
        .unwrap();
    assert!(
        ran().contains(&"ran-fsmonitor".to_owned()),
        "a plain git status should run the planted fsmonitor: {:?}",
        ran()
    );
}

/// The serve engine keeps the audit and isolation: a read-only task on the warm local server is
/// audited from the store like a run; an isolated editing task writes in its own worktree (the
/// server for it is fenced to that worktree), the checkout stays untouched until the change is
/// applied.
#[tokio::test]
async fn live_serve_tasks_are_audited_and_isolated_ones_apply_into_the_checkout() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# demo\n")]);
    let state = tempfile::tempdir().unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        opencode_bin: Some(oc.to_path_buf()),
        root: sb.root().to_path_buf(),
        env: sb.env(),
        max_parallel: 2,
        kill_grace: Duration::from_secs(3),
        quiet_after: Duration::from_secs(600),
        session_reader: Some(Arc::new(StoreReader(state.path().to_path_buf()))),
        state_dir: Some(state.path().to_path_buf()),
        engine: run_supervisor::Engine::Serve,
        ..SupervisorConfig::default()
    });
    let mut ro = TaskSpec::new(
        "Read the readme.",
        &proj,
        "worker",
        "LIVE/worker: serve audit",
    );
    ro.model = Some("fk/ok".into());
    ro.read_only = true;
    let ro = sup.start(ro).unwrap();
    let mut iso = TaskSpec::new("Write the file.", &proj, "worker", "LIVE/worker: serve iso");
    iso.model = Some("fk/toolwrite".into());
    iso.isolation = run_supervisor::Isolation::Worktree;
    let iso = sup.start(iso).unwrap();
    for id in [ro, iso] {
        let s = tokio::time::timeout(Duration::from_secs(240), sup.wait(id))
            .await
            .unwrap_or_else(|_| panic!("task {id} did not finish: {:?}", sup.status(id)))
            .unwrap();
        assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
        assert_eq!(s.engine, "serve");
    }
    assert_eq!(
        sup.result(ro, None, None).unwrap().audit.as_deref(),
        Some("audited: agent worker, model fk/ok in 1 assistant message")
    );
    assert!(
        !proj.join("hello.txt").exists(),
        "the isolated task left the checkout alone"
    );
    let applied = run_supervisor::worktree::apply(state.path(), iso, &[]).unwrap();
    assert_eq!(applied.files, vec![("hello.txt".to_owned(), "applied")]);
    assert_eq!(
        std::fs::read_to_string(proj.join("hello.txt")).unwrap(),
        "hi from fake\n"
    );
    sup.shutdown().await;
}
