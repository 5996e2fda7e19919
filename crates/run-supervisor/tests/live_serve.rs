//! The serve engine with the real `opencode serve` 1.18.33 and our fake LLM: tasks as sessions
//! on the bridge's warm local server. Answers, edits in the task's directory, a read-only agent
//! made by its model to write (write tool, shell, an allowlisted shell command) writing nothing,
//! follow-ups, cancel and the time limit ending the task and freeing its session, a provider
//! error's kind, and a configuration changed between two tasks seen by the second.

use crate::common;

use std::path::Path;
use std::time::Duration;

use bridge_policy::roster::{AgentInfo, AgentSource, config_overlay};
use bridge_testkit::fake_llm::OK_TEXT;
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::live::{
    StopNotedServers, call, fake_spec, noted_servers, owner_gone, serve_supervisor,
};
use common::*;
use run_supervisor::{
    CancelOutcome, Engine, FailureKind, OnExit, Supervisor, SupervisorConfig, TaskSpec, TaskState,
};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(240);

fn supervisor(oc: &Path, sb: &OpencodeSandbox) -> Supervisor {
    serve_supervisor(oc, sb, None)
}

fn spec(cwd: &Path, model: &str, prompt: &str) -> TaskSpec {
    fake_spec(cwd, "worker", "SERVE", model, prompt)
}

async fn done(sup: &Supervisor, id: u64) -> run_supervisor::TaskSnapshot {
    finish(sup, id, LIMIT).await
}

#[tokio::test]
async fn live_serve_runs_answers_edits_follow_ups_and_keeps_read_only_agents_read_only() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# app\n")]);
    let sub = proj.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let sup = supervisor(&oc, &sb);

    // An answer and an edit in a subdirectory, at once.
    let ok = sup
        .start(spec(&sub, "ok", "Say hello, then stop."))
        .unwrap();
    let edit = sup
        .start(spec(&sub, "toolwrite", "Write the file."))
        .unwrap();
    for id in [ok, edit] {
        let s = done(&sup, id).await;
        assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
        assert_eq!(s.engine, "serve");
        assert!(s.session_id.as_deref().unwrap().starts_with("ses_"));
        assert!(s.tokens.input + s.tokens.output > 0, "tokens counted");
        assert!(
            s.sandbox.as_deref().unwrap_or("").starts_with("confined"),
            "{:?}",
            s.sandbox
        );
        assert_eq!(sup.result(id, None, None).unwrap().final_text, OK_TEXT);
    }
    let wrote = sup.result(edit, None, None).unwrap();
    assert_eq!(wrote.tool_calls[0].tool, "write");
    assert_eq!(
        std::fs::read_to_string(sub.join("hello.txt")).unwrap(),
        "hi from fake\n",
        "the editing agent wrote in the task's cwd"
    );
    assert!(
        llm.chat_requests("ok")
            .iter()
            .any(|r| r.body.contains("Say hello, then stop.")),
        "the prompt reached the model"
    );

    // The warm server is fenced like a run: an editing agent writes its project, and nothing
    // outside the root, by the write tool or the shell.
    let outside = tempfile::tempdir().unwrap();
    let escape = spec(
        &sub,
        "script",
        &[
            call(
                "write",
                json!({"filePath": outside.path().join("tool.txt"), "content": "x"}),
            ),
            call(
                "bash",
                json!({"command": format!("echo x > {}", outside.path().join("shell.txt").display()), "description": "w"}),
            ),
            call(
                "write",
                json!({"filePath": sub.join("inside.txt"), "content": "in"}),
            ),
        ]
        .concat(),
    );
    let escape = sup.start(escape).unwrap();
    let s = done(&sup, escape).await;
    assert_eq!(s.engine, "serve");
    assert_eq!(
        std::fs::read_to_string(sub.join("inside.txt")).unwrap(),
        "in",
        "the project is written: {s:?}"
    );
    for f in ["tool.txt", "shell.txt"] {
        assert!(
            !outside.path().join(f).exists(),
            "{f} was written outside the root"
        );
    }

    // A follow-up in the first task's session.
    let first = sup.status(ok).unwrap().session_id.unwrap();
    let mut again = spec(&sub, "ok", "And once more.");
    again.session = Some(first.clone());
    let again = sup.start(again).unwrap();
    let s = done(&sup, again).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.session_id.as_deref(), Some(first.as_str()));

    // A read-only agent whose own config allowlists a shell command; its model tries the
    // write tool, a shell write and the allowlisted command redirected into a file.
    let oracle = AgentInfo::from_config(
        "oracle",
        &json!({"mode": "primary", "permission": {"edit": "deny", "bash": {"git status*": "allow", "*": "deny"}}}),
        AgentSource::ConfigContent,
    );
    let mut ro = spec(
        &proj,
        "script",
        &[
            call(
                "write",
                json!({"filePath": proj.join("ro-write.txt"), "content": "x"}),
            ),
            call(
                "bash",
                json!({"command": format!("echo x > {}", proj.join("ro-shell.txt").display()), "description": "w"}),
            ),
            call(
                "bash",
                json!({"command": format!("git status > {}", proj.join("ro-allowed.txt").display()), "description": "w"}),
            ),
        ]
        .concat(),
    );
    ro.agent = "oracle".into();
    ro.read_only = true;
    ro.config_overlay = config_overlay(&oracle);
    ro.env.push((
        "OPENCODE_CONFIG_CONTENT".into(),
        json!({"agent": {"oracle": {"mode": "primary", "permission": {"edit": "deny", "bash": {"git status*": "allow", "*": "deny"}}}}}).to_string(),
    ));
    let ro = sup.start(ro).unwrap();
    let s = done(&sup, ro).await;
    assert_eq!(s.engine, "serve");
    for f in ["ro-write.txt", "ro-shell.txt", "ro-allowed.txt"] {
        assert!(
            !proj.join(f).exists(),
            "the read-only agent wrote {f}: {s:?}"
        );
    }
    let out = sup.result(ro, None, None).unwrap();
    assert!(
        out.tool_calls.len() >= 3,
        "the model did try: {:?}",
        out.tool_calls
    );
    assert!(
        out.tool_calls.iter().all(|c| c.status == "error"),
        "every write was refused: {:?}",
        out.tool_calls
    );

    // A provider error keeps its kind on a server.
    let auth = sup.start(spec(&sub, "e401", "Hello?")).unwrap();
    let s = done(&sup, auth).await;
    assert_eq!(s.state, TaskState::Failed, "{s:?}");
    assert_eq!(s.failure.as_ref().unwrap().kind, FailureKind::Auth, "{s:?}");
}

const SLOW_START_PLUGIN: &str = r#"export const SlowStart = async () => ({
  "chat.message": async () => { await new Promise((r) => setTimeout(r, 2000)); },
});
"#;

#[tokio::test]
async fn live_serve_cancel_and_time_limit_leave_no_busy_session() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    // Far longer than the test: a turn the stop does not end keeps the session busy to the end.
    llm.set_slow_secs(600);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    // A user plugin that takes 2 s over each new message, before the server's loop for the
    // turn begins: the window a loaded machine opens by chance, held open.
    let plugins = sb.config_home().join("opencode/plugin");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("slow-start.js"), SLOW_START_PLUGIN).unwrap();
    let proj = sb.project_dir().to_path_buf();
    let sup = supervisor(&oc, &sb);

    // Cancelled as soon as its session exists: the stop comes right after `prompt_async`'s
    // reply, before the server's loop for the turn has begun, where an abort alone is answered
    // `true` and lost (the turn then runs on).
    let slow = sup.start(spec(&proj, "slow", "Take your time.")).unwrap();
    wait_until(&sup, slow, LIMIT, |s| s.session_id.is_some()).await;
    assert!(matches!(sup.cancel(slow).await, CancelOutcome::Cancelled));
    let session = sup.status(slow).unwrap().session_id.unwrap();
    // The session is free again: a follow-up in it answers (a turn the stop missed would hold
    // the session for the slow model's 600 s).
    let mut next = spec(&proj, "ok", "Still there?");
    next.session = Some(session.clone());
    let next = sup.start(next).unwrap();
    let s = done(&sup, next).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(sup.result(next, None, None).unwrap().final_text, OK_TEXT);

    // Again in the same session, cancelled while the model streams.
    let mut again = spec(&proj, "slow", "Take your time again.");
    again.session = Some(session.clone());
    let again = sup.start(again).unwrap();
    let s = wait_until(&sup, again, LIMIT, |s| {
        s.last_event_age.is_some() || s.state.is_finished()
    })
    .await;
    assert_eq!(s.state, TaskState::Running, "{s:?}");
    assert!(matches!(sup.cancel(again).await, CancelOutcome::Cancelled));
    let mut next = spec(&proj, "ok", "And now?");
    next.session = Some(session.clone());
    let next = sup.start(next).unwrap();
    let s = done(&sup, next).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");

    let mut timed = spec(&proj, "slow", "Take longer.");
    timed.timeout = Some(Duration::from_secs(4));
    let timed = sup.start(timed).unwrap();
    let s = done(&sup, timed).await;
    assert_eq!(s.state, TaskState::TimedOut, "{s:?}");
    let session = s.session_id.unwrap();
    let mut after = spec(&proj, "ok", "Done?");
    after.session = Some(session);
    let after = sup.start(after).unwrap();
    assert_eq!(done(&sup, after).await.state, TaskState::Succeeded);
    sup.shutdown().await;
}

/// opencode loads a directory's configuration once per server: a warm server would keep
/// serving what the project said when it first worked there. A permission the user tightens
/// between two tasks holds for the second, as it would for a new `opencode run`: the server that
/// loaded the old configuration is retired and a new one started.
#[tokio::test]
async fn live_serve_a_configuration_changed_between_tasks_holds_for_the_next_one() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# app\n")]);
    let config = |bash: &str| {
        json!({"agent": {"scribe": {"mode": "primary", "description": "writes",
                                    "permission": {"edit": "allow", "bash": bash}}}})
        .to_string()
    };
    std::fs::write(proj.join("opencode.json"), config("allow")).unwrap();
    let sup = supervisor(&oc, &sb);
    let task = |file: &str| {
        let mut s = spec(
            &proj,
            "script",
            &call(
                "bash",
                json!({"command": format!("echo x > {file}"), "description": "write"}),
            ),
        );
        s.agent = "scribe".into();
        s.auto_approve = true;
        s
    };
    let first = sup.start(task("before.txt")).unwrap();
    let s = done(&sup, first).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.engine, "serve");
    assert!(proj.join("before.txt").exists(), "the shell was allowed");

    // The user denies the shell to that agent.
    std::fs::write(proj.join("opencode.json"), config("deny")).unwrap();
    let second = sup.start(task("after.txt")).unwrap();
    let s = done(&sup, second).await;
    assert_eq!(s.engine, "serve");
    assert!(
        !proj.join("after.txt").exists(),
        "the shell ran under the old configuration: {s:?}"
    );
    let out = sup.result(second, None, None).unwrap();
    // The model did call it; a tool its permissions deny outright is not offered, so the call
    // is `invalid` (under the old configuration it was `bash`, completed).
    assert!(!out.tool_calls.is_empty(), "{s:?}");
    assert!(
        out.tool_calls
            .iter()
            .all(|c| c.tool == "invalid" || c.status == "error"),
        "{:?}",
        out.tool_calls
    );
    sup.shutdown().await;
}

/// At most `OPENCODE_BRIDGE_SERVE_MAX` warm servers: a task in another project stops the server
/// idle longest first; a server with a task running is kept even past the limit.
#[tokio::test]
async fn live_serve_keeps_at_most_serve_max_warm_servers() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(600);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let one = sb.project_dir().to_path_buf();
    let two = sb.root().join("two");
    let three = sb.root().join("three");
    for p in [&one, &two, &three] {
        std::fs::create_dir_all(p).unwrap();
        bridge_testkit::git_repo(p, &[("README.md", "# app\n")]);
    }
    let state = tempfile::tempdir().unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        opencode_bin: Some(oc.to_path_buf()),
        root: sb.root().to_path_buf(),
        env: sb.env(),
        max_parallel: 4,
        quiet_after: Duration::from_secs(600),
        engine: Engine::Serve,
        state_dir: Some(state.path().to_path_buf()),
        serve_max: 1,
        ..SupervisorConfig::default()
    });
    let first = sup.start(spec(&one, "ok", "Hello?")).unwrap();
    assert_eq!(done(&sup, first).await.state, TaskState::Succeeded);
    let after_one = noted_servers(state.path());
    assert_eq!(after_one.len(), 1, "{after_one:?}");
    // Another project: the first project's idle server makes room.
    let slow = sup.start(spec(&two, "slow", "Take your time.")).unwrap();
    wait_until(&sup, slow, LIMIT, |s| s.last_event_age.is_some()).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while noted_servers(state.path()).contains(&after_one[0]) {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle server was not stopped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{}", after_one[0])).exists(),
        "the idle server still runs"
    );
    // The process table names the warm server and the task on it.
    let warm: Vec<_> = sup
        .processes()
        .into_iter()
        .filter(|p| p.bridge_server.is_some())
        .collect();
    assert_eq!(warm.len(), 1, "{warm:?}");
    let w = warm[0].bridge_server.as_ref().unwrap();
    assert_eq!((&w.tasks, w.held), (&vec![slow], true), "{warm:?}");
    // A third project while the second's server works: that one stays, the limit is passed.
    let third = sup.start(spec(&three, "ok", "Hello?")).unwrap();
    assert_eq!(done(&sup, third).await.state, TaskState::Succeeded);
    let mut serving: Vec<_> = sup
        .processes()
        .into_iter()
        .filter_map(|p| p.bridge_server.map(|w| w.tasks))
        .collect();
    serving.sort();
    assert_eq!(serving, vec![vec![], vec![slow]], "one idle, one working");
    assert_eq!(sup.status(slow).unwrap().state, TaskState::Running);
    assert_eq!(noted_servers(state.path()).len(), 2);
    assert!(matches!(sup.cancel(slow).await, CancelOutcome::Cancelled));
    sup.shutdown().await;
    assert_eq!(
        noted_servers(state.path()),
        Vec::<i32>::new(),
        "shutdown stops them all"
    );
}

/// Shutting down in the cancel mode (`OPENCODE_BRIDGE_ON_EXIT=cancel`) with a served task
/// running: the task is recorded stopped by the shutdown, its turn aborted, and its local server
/// (no other bridge on it) is stopped with it.
#[tokio::test]
async fn live_serve_a_cancel_mode_shutdown_stops_a_running_task_and_its_server() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(600);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    let state = tempfile::tempdir().unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        opencode_bin: Some(oc.to_path_buf()),
        root: sb.root().to_path_buf(),
        env: sb.env(),
        quiet_after: Duration::from_secs(600),
        engine: Engine::Serve,
        state_dir: Some(state.path().to_path_buf()),
        on_exit: OnExit::Cancel,
        ..SupervisorConfig::default()
    });
    let slow = sup.start(spec(&proj, "slow", "Take your time.")).unwrap();
    wait_until(&sup, slow, LIMIT, |s| s.last_event_age.is_some()).await;
    let servers = noted_servers(state.path());
    assert_eq!(servers.len(), 1, "{servers:?}");
    sup.shutdown().await;
    let s = sup.status(slow).unwrap();
    assert_eq!(s.state, TaskState::Cancelled, "{s:?}");
    assert!(
        !Path::new(&format!("/proc/{}", servers[0])).exists(),
        "the server outlived the shutdown"
    );
    assert_eq!(noted_servers(state.path()), Vec::<i32>::new());
}

/// Issue 32, on the library: a shutdown (the default, leave) leaves a served turn running on its
/// warm server, which stays; the next supervisor on the state directory shows the task running,
/// adopts the server and follows the turn to its answer; the server then stops once it has had
/// no turn for the idle time, leaving no note and no process.
#[tokio::test]
async fn live_serve_a_turn_left_at_shutdown_is_followed_to_its_answer_by_the_next_supervisor() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(10);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    let state = tempfile::tempdir().unwrap();
    let _cleanup = StopNotedServers(state.path().join("serve"));
    let config = || SupervisorConfig {
        opencode_bin: Some(oc.to_path_buf()),
        root: sb.root().to_path_buf(),
        env: sb.env(),
        quiet_after: Duration::from_secs(600),
        engine: Engine::Serve,
        state_dir: Some(state.path().to_path_buf()),
        serve_idle: Duration::from_secs(3),
        ..SupervisorConfig::default()
    };
    let first = Supervisor::new(config());
    let mut capped = spec(&proj, "slow", "Take your time.");
    capped.max_cost_usd = Some(7.5);
    let slow = first.start(capped).unwrap();
    wait_until(&first, slow, LIMIT, |s| s.last_event_age.is_some()).await;
    let servers = noted_servers(state.path());
    assert_eq!(servers.len(), 1, "{servers:?}");
    let server = run_supervisor::ProcId::of(servers[0]).unwrap();
    first.shutdown().await;
    drop(first);
    assert!(
        server.is_alive(),
        "the server was stopped with a turn on it"
    );
    assert_eq!(noted_servers(state.path()), servers, "its note stays");
    owner_gone(state.path(), slow);

    let second = Supervisor::new(config());
    let s = second.status(slow).unwrap();
    assert_eq!(s.state, TaskState::Running, "{s:?}");
    // The first supervisor's reservation went with it; the adopting one reserves again, so
    // the running task counts against the budgets of every bridge on the state directory.
    let reservations = || run_supervisor::usage::reserve::read(state.path()).unwrap();
    assert!(reservations().is_empty(), "{:?}", reservations());
    assert_eq!(second.follow_left_tasks().await, vec![slow]);
    let held = reservations();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].project, proj, "{held:?}");
    // Its cap came with it: it reserves the cap, as the first bridge did.
    assert_eq!(held[0].amount_usd, 7.5, "{held:?}");
    // The process table shows the server, held once the task follows its turn there.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let held: Vec<_> = second
            .processes()
            .into_iter()
            .filter_map(|p| p.bridge_server.map(|w| (p.pid, w)))
            .collect();
        let on_it = held
            .iter()
            .any(|(pid, w)| *pid == server.pid && w.tasks == vec![slow]);
        if on_it && held.iter().any(|(_, w)| w.held) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the adopted server and its task: {held:?}; {:?}",
            second.status(slow)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let s = done(&second, slow).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let out = second.result(slow, None, None).unwrap();
    assert!(out.final_text.contains("DONE"), "{}", out.final_text);
    // Released once its spend is on the ledger.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !reservations().is_empty() {
        assert!(std::time::Instant::now() < deadline, "{:?}", reservations());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // No turn for the idle time: the server stops, and its files go.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server.is_alive() || !noted_servers(state.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle server was not stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<_> = std::fs::read_dir(state.path().join("serve"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    second.shutdown().await;
}
