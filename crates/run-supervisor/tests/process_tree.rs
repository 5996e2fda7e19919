//! Process-tree behaviour of the supervisor against our fake `opencode`: cancel, timeout and
//! shutdown in the cancel mode leave no survivor and no zombie (a default shutdown leaves runs
//! running); limits, retries, capture and classification.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use run_supervisor::{
    CancelOutcome, FailureKind, ProcId, ProcessKind, StartError, Supervisor, SupervisorConfig,
    TaskSpec, TaskState,
};

struct World {
    root: tempfile::TempDir,
    prompts: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World {
            root: tempfile::tempdir().unwrap(),
            prompts: tempfile::tempdir().unwrap(),
        }
    }

    fn proj(&self) -> PathBuf {
        let p = self.root.path().join("proj");
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn config(&self) -> SupervisorConfig {
        SupervisorConfig {
            opencode_bin: Some(bridge_testkit::bins::fake_opencode()),
            // Our fake opencode stands for `opencode run` processes; it cannot serve.
            engine: run_supervisor::Engine::Run,
            root: self.root.path().to_path_buf(),
            kill_grace: Duration::from_millis(400),
            retry_delay: Duration::from_millis(50),
            prompt_dir: self.prompts.path().to_path_buf(),
            // The fake writes its pids and markers beside the task's tree; the fence is proven
            // on real runs (tests/live_fence.rs).
            sandbox: run_supervisor::Sandbox::Off,
            ..SupervisorConfig::default()
        }
    }

    /// [`config`](Self::config), with the fake's descendants' pids written to the file
    /// returned (the `tree` scenario).
    fn config_with_pidfile(&self) -> (SupervisorConfig, PathBuf) {
        let pidfile = self.root.path().join("pids");
        let mut cfg = self.config();
        cfg.env.push((
            "FAKE_OPENCODE_PIDFILE".into(),
            pidfile.display().to_string(),
        ));
        (cfg, pidfile)
    }

    fn spec(&self, scenario: &str) -> TaskSpec {
        TaskSpec::new(
            format!("scenario: {scenario}\nDo the thing."),
            self.proj(),
            "worker",
            "PROJ/worker: do the thing",
        )
    }
}

fn report_field<'a>(report: &'a str, key: &str) -> &'a str {
    let start = report
        .find(&format!("{key}="))
        .unwrap_or_else(|| panic!("no {key} in {report}"))
        + key.len()
        + 1;
    let rest = &report[start..];
    // Values are space-free except `title` and `config`, which tests read differently.
    rest.split(' ').next().unwrap_or("")
}

#[tokio::test]
async fn cancel_kills_a_term_ignoring_grandchild_and_a_setsid_escapee() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let (cfg, pidfile) = w.config_with_pidfile();
    let sup = Supervisor::new(cfg);
    let id = sup.start(w.spec("tree")).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), running).await;
    let root = ProcId::of(s.pid.unwrap()).unwrap();
    let kids = read_pidfile(&pidfile, 2).await;
    assert_eq!(kids.len(), 2, "both descendants started");
    // The escapee really left the group.
    let escapee = procfs::process::Process::new(kids[1].pid)
        .unwrap()
        .stat()
        .unwrap();
    assert_ne!(
        escapee.pgrp, root.pid,
        "setsid escapee is outside the group"
    );

    let t0 = Instant::now();
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
    let took = t0.elapsed();
    let s = sup.status(id).unwrap();
    assert_eq!(s.state, TaskState::Cancelled);
    assert_eq!(s.pid, None);
    assert_all_dead(&[root]);
    assert_all_dead(&kids);
    assert_no_zombies().await;
    // The TERM-ignoring grandchild needs the SIGKILL after the grace period.
    assert!(took >= Duration::from_millis(400), "cancel took {took:?}");
    assert_eq!(
        sup.cancel(id).await,
        CancelOutcome::AlreadyFinished(TaskState::Cancelled)
    );
}

#[tokio::test]
async fn a_run_and_everything_it_starts_run_nicer_than_the_bridge() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let (mut cfg, pidfile) = w.config_with_pidfile();
    assert_eq!(cfg.run_nice, 10, "the default");
    let own = nice_of(None);
    let sup = Supervisor::new(cfg.clone());
    let id = sup.start(w.spec("tree")).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), running).await;
    let root = ProcId::of(s.pid.unwrap()).unwrap();
    let kids = read_pidfile(&pidfile, 2).await;
    let nicer = (own + 10).min(19);
    assert_eq!(nice_of(Some(root.pid)), nicer, "the run");
    for k in &kids {
        assert_eq!(
            nice_of(Some(k.pid)),
            nicer,
            "what the run started, the setsid escapee too"
        );
    }
    assert_eq!(nice_of(None), own, "the bridge keeps its own priority");
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);

    // 0: the run starts at the bridge's priority.
    cfg.run_nice = 0;
    let sup = Supervisor::new(cfg);
    let id = sup.start(w.spec("hang")).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), running).await;
    assert_eq!(nice_of(s.pid), own);
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
    assert_no_zombies().await;
}

#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let (cfg, pidfile) = w.config_with_pidfile();
    let sup = Supervisor::new(cfg);
    let mut spec = w.spec("tree");
    spec.timeout = Some(Duration::from_millis(1500));
    let id = sup.start(spec).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), running).await;
    let root = ProcId::of(s.pid.unwrap()).unwrap();
    let kids = read_pidfile(&pidfile, 2).await;
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::TimedOut);
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Timeout);
    assert!(f.advice.contains("timeout"), "{}", f.advice);
    assert_all_dead(&[root]);
    assert_all_dead(&kids);
    assert_no_zombies().await;
}

/// By default a shutdown leaves the runs running (their groups go on) and says so in their
/// records; no new task is accepted.
#[tokio::test]
async fn a_shutdown_leaves_every_run_running_and_recorded_and_refuses_new_ones() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let state = tempfile::tempdir().unwrap();
    let (mut cfg, pidfile) = w.config_with_pidfile();
    cfg.state_dir = Some(state.path().to_path_buf());
    let sup = Supervisor::new(cfg);
    let a = sup.start(w.spec("tree")).unwrap();
    let b = sup.start(w.spec("silent")).unwrap();
    let mut roots = Vec::new();
    for id in [a, b] {
        let s = wait_until(&sup, id, Duration::from_secs(20), running).await;
        roots.push(ProcId::of(s.pid.unwrap()).unwrap());
    }
    // The tree's descendants are all started before the shutdown: one forked after the test's
    // cleanup looked for them would be left behind as a zombie of ours (the test process is
    // the runs' subreaper), as it once was in CI.
    let kids = read_pidfile(&pidfile, 2).await;
    sup.shutdown().await;
    for (id, root) in [a, b].into_iter().zip(&roots) {
        assert!(root.is_alive(), "the run of task {id} was stopped");
        let text =
            std::fs::read_to_string(state.path().join(format!("tasks/{id}/task.json"))).unwrap();
        let t: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(t["state"], "running", "{t}");
        assert_eq!(t["run"]["pid"], root.pid, "{t}");
    }
    assert!(matches!(
        sup.start(w.spec("ok")),
        Err(StartError::ShuttingDown)
    ));
    // The test's own cleanup: these runs are its children.
    let mut known: std::collections::BTreeSet<ProcId> = kids.iter().copied().collect();
    for root in &roots {
        bridge_proc::terminate_tree(*root, &mut known, Duration::from_millis(400)).await;
    }
    // SIGKILL is not instant under load: keep reaping each root until it is gone (it became
    // a zombie of ours only after terminate_tree returned, once in CI).
    for _ in 0..200 {
        for root in &roots {
            bridge_proc::reap_if_our_zombie(*root);
        }
        if roots.iter().all(|r| !r.exists()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bridge_proc::sweep(&known, Duration::from_secs(2)).await;
    assert_no_zombies().await;
}

#[tokio::test]
async fn in_the_cancel_mode_shutdown_stops_every_task_and_refuses_new_ones() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let (mut cfg, pidfile) = w.config_with_pidfile();
    cfg.on_exit = run_supervisor::OnExit::Cancel;
    let sup = Supervisor::new(cfg);
    let a = sup.start(w.spec("tree")).unwrap();
    let b = sup.start(w.spec("ignore-term")).unwrap();
    let c = sup.start(w.spec("silent")).unwrap();
    let mut roots = Vec::new();
    for id in [a, b, c] {
        let s = wait_until(&sup, id, Duration::from_secs(20), running).await;
        roots.push(ProcId::of(s.pid.unwrap()).unwrap());
    }
    let kids = read_pidfile(&pidfile, 2).await;
    sup.shutdown().await;
    for id in [a, b, c] {
        let s = sup.status(id).unwrap();
        assert_eq!(s.state, TaskState::Cancelled);
        assert!(s.failure.unwrap().message.contains("shut down"));
    }
    assert_all_dead(&roots);
    assert_all_dead(&kids);
    assert_no_zombies().await;
    assert!(matches!(
        sup.start(w.spec("ok")),
        Err(StartError::ShuttingDown)
    ));
}

#[tokio::test]
async fn an_opencode_that_ignores_sigterm_is_killed_after_the_grace() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let id = sup.start(w.spec("ignore-term")).unwrap();
    // Wait for the step_start: by then the re-exec that ignores SIGTERM is done.
    let s = wait_until(&sup, id, Duration::from_secs(20), |s| {
        running(s) && s.last_event_age.is_some() && s.session_id.is_some()
    })
    .await;
    let root = ProcId::of(s.pid.unwrap()).unwrap();
    let t0 = Instant::now();
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
    assert!(t0.elapsed() >= Duration::from_millis(400));
    assert_all_dead(&[root]);
    assert_no_zombies().await;
}

#[tokio::test]
async fn endless_output_is_capped_with_head_and_tail() {
    let w = World::new();
    let mut cfg = w.config();
    cfg.env.push(("FAKE_OPENCODE_FLOOD_MB".into(), "50".into()));
    let sup = Supervisor::new(cfg);
    let id = sup.start(w.spec("flood")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(120)).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let out = sup.result(id, None, None).unwrap();
    assert!(
        out.stdout_bytes_dropped > 40 * 1024 * 1024,
        "{}",
        out.stdout_bytes_dropped
    );
    assert_eq!(out.final_text, "FLOOD END");
    // The text kept is bounded (2 MB) and the default result shows the last 60 000 chars.
    assert!(out.text.truncated);
    assert!(
        out.text.total_chars <= 2 * 1024 * 1024 + 200,
        "{}",
        out.text.total_chars
    );
    assert!(out.text.text.ends_with("FLOOD END"));
    assert!(out.text.text.chars().count() < 60_100);
    let head = sup.result(id, Some(100), Some(100)).unwrap();
    assert!(head.text.text.starts_with(&"x".repeat(100)));
    assert!(head.text.text.contains("characters cut"));
    // Asking for more than the reply cap still gives at most 100 000 characters.
    let big = sup.result(id, Some(3_000_000), None).unwrap();
    assert!(big.text.text.chars().count() < 100_100);
}

#[tokio::test]
async fn a_silent_run_is_flagged_quiet() {
    let w = World::new();
    let mut cfg = w.config();
    cfg.quiet_after = Duration::from_millis(300);
    let sup = Supervisor::new(cfg);
    let id = sup.start(w.spec("hang")).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), |s| s.quiet).await;
    assert_eq!(s.state, TaskState::Running);
    assert!(s.last_event_age.unwrap() >= Duration::from_millis(300));
    assert_eq!(
        s.session_id.as_deref(),
        Some("ses_fake0000000000000000000001")
    );
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
}

#[tokio::test]
async fn exit_codes_are_classified_with_stderr() {
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let id = sup.start(w.spec("exit:3")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    assert_eq!(s.exit_code, Some(3));
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Exit);
    assert!(
        f.message.contains("code 3") && f.message.contains("failing on purpose"),
        "{}",
        f.message
    );
    let out = sup.result(id, None, None).unwrap();
    assert!(out.stderr_tail.contains("failing on purpose"));
}

#[tokio::test]
async fn the_run_gets_its_cwd_pwd_args_and_a_clean_environment() {
    let w = World::new();
    let mut cfg = w.config();
    cfg.default_model = Some("prov/model#high".into());
    cfg.env.push(("OPENCODE_RUN_ID".into(), "run_other".into()));
    cfg.env
        .push(("OPENCODE_SERVER_PASSWORD".into(), "pw".into()));
    cfg.env.push(("PWD".into(), "/somewhere/else".into()));
    let sup = Supervisor::new(cfg);
    let mut spec = w.spec("ok");
    spec.agent = "reviewer".into();
    // The policy's overlay for a subagent (what the bridge passes), applied as it is.
    spec.config_overlay = Some(serde_json::json!({"agent": {"reviewer": {"mode": "all"}}}));
    let id = sup.start(spec).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.tokens.input, 8);
    let out = sup.result(id, None, None).unwrap();
    let r = out.final_text.clone();
    let proj = w.proj().canonicalize().unwrap();
    assert_eq!(report_field(&r, "pwd"), proj.display().to_string());
    assert_eq!(report_field(&r, "cwd"), proj.display().to_string());
    assert_eq!(report_field(&r, "agent"), "reviewer");
    assert_eq!(report_field(&r, "model"), "prov/model");
    assert_eq!(report_field(&r, "variant"), "high");
    assert_eq!(report_field(&r, "auto"), "true");
    assert_eq!(report_field(&r, "standalone"), "false");
    assert_eq!(report_field(&r, "dropped_env"), "-");
    assert!(r.contains("title=PROJ/worker: do the thing "), "{r}");
    let config: serde_json::Value =
        serde_json::from_str(&r[r.find("config=").unwrap() + 7..]).unwrap();
    assert_eq!(config["agent"]["reviewer"]["mode"], "all");
    assert!(config["agent"]["worker"]["prompt"].is_string());
    assert_eq!(s.opencode_version.as_deref(), Some("1.18.33"));
}

#[tokio::test]
async fn standalone_is_passed_only_when_the_binary_advertises_it() {
    let w = World::new();
    let mut cfg = w.config();
    cfg.env
        .push(("FAKE_OPENCODE_STANDALONE".into(), "1".into()));
    cfg.env
        .push(("FAKE_OPENCODE_VERSION".into(), "2.2.7".into()));
    let sup = Supervisor::new(cfg);
    let caps = sup.capabilities().await.unwrap();
    assert!(caps.standalone);
    assert_eq!(caps.version, "2.2.7");
    let id = sup.start(w.spec("ok")).unwrap();
    finish(&sup, id, Duration::from_secs(20)).await;
    let r = sup.result(id, None, None).unwrap().final_text;
    assert_eq!(report_field(&r, "standalone"), "true");
}

#[tokio::test]
async fn an_oversized_prompt_goes_in_an_attached_file() {
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let mut spec = w.spec("ok");
    spec.prompt = format!("scenario: ok\n{}", "p".repeat(150_000));
    let len = spec.prompt.len();
    let id = sup.start(spec).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Succeeded);
    let r = sup.result(id, None, None).unwrap().final_text;
    let file = report_field(&r, "file");
    assert!(
        file.starts_with(&w.prompts.path().display().to_string()),
        "{r}"
    );
    assert_eq!(report_field(&r, "file_bytes"), len.to_string());
    let stdin: usize = report_field(&r, "stdin_bytes").parse().unwrap();
    assert!(stdin < 1000, "stdin carries only a pointer to the file");
    assert!(
        !Path::new(file).exists(),
        "the prompt file is removed after the task"
    );
}

#[tokio::test]
async fn start_refusals_say_what_to_do() {
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let outside = tempfile::tempdir().unwrap();
    let mut spec = w.spec("ok");
    spec.cwd = outside.path().to_path_buf();
    let e = sup.start(spec).unwrap_err();
    assert!(matches!(e, StartError::CwdOutsideRoot { .. }));
    assert!(e.to_string().contains("OPENCODE_BRIDGE_ROOT"));
    let mut spec = w.spec("ok");
    spec.cwd = w.proj().join("../..");
    assert!(matches!(
        sup.start(spec),
        Err(StartError::CwdOutsideRoot { .. })
    ));

    let mut cfg = w.config();
    cfg.opencode_bin = Some(w.root.path().join("no-such-opencode"));
    let e = Supervisor::new(cfg).start(w.spec("ok")).unwrap_err();
    assert!(matches!(e, StartError::BinaryMissing(_)));
    assert!(e.to_string().contains("OPENCODE_BIN"), "{e}");
}

#[tokio::test]
async fn the_parallel_limit_is_enforced() {
    let w = World::new();
    let mut cfg = w.config();
    cfg.max_parallel = 1;
    let sup = Supervisor::new(cfg);
    let a = sup.start(w.spec("hang")).unwrap();
    let e = sup.start(w.spec("ok")).unwrap_err();
    assert!(
        matches!(
            e,
            StartError::Busy {
                running: 1,
                limit: 1
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("OPENCODE_BRIDGE_MAX_PARALLEL"));
    assert_eq!(sup.cancel(a).await, CancelOutcome::Cancelled);
    let b = sup.start(w.spec("ok")).unwrap();
    assert_eq!(
        finish(&sup, b, Duration::from_secs(20)).await.state,
        TaskState::Succeeded
    );
    assert_eq!(sup.list().len(), 2);
}

#[tokio::test]
async fn transient_failures_of_read_only_agents_are_retried() {
    let w = World::new();
    let counter = w.root.path().join("count");
    let mut cfg = w.config();
    cfg.env.push((
        "FAKE_OPENCODE_COUNTER".into(),
        counter.display().to_string(),
    ));
    let sup = Supervisor::new(cfg);
    let mut spec = w.spec("flaky:1");
    spec.read_only = true;
    let id = sup.start(spec).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.attempts, 2);

    // Always failing: 1 + 2 retries, then the rate limit is reported.
    std::fs::write(&counter, "0").unwrap();
    let mut spec = w.spec("flaky:99");
    spec.read_only = true;
    let id = sup.start(spec).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    assert_eq!(s.attempts, 3);
    assert_eq!(s.failure.unwrap().kind, FailureKind::RateLimit);

    // An editing agent is never replayed.
    std::fs::write(&counter, "0").unwrap();
    let id = sup.start(w.spec("flaky:1")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    assert_eq!(s.attempts, 1);
    assert_eq!(s.failure.unwrap().kind, FailureKind::RateLimit);
}

#[tokio::test]
async fn a_pending_retry_can_be_cancelled() {
    let w = World::new();
    let counter = w.root.path().join("count");
    let mut cfg = w.config();
    cfg.retry_delay = Duration::from_secs(60);
    cfg.env.push((
        "FAKE_OPENCODE_COUNTER".into(),
        counter.display().to_string(),
    ));
    let sup = Supervisor::new(cfg);
    let mut spec = w.spec("flaky:1");
    spec.read_only = true;
    let id = sup.start(spec).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), |s| {
        s.state == TaskState::Retrying
    })
    .await;
    assert!(s.retry_in.unwrap() > Duration::from_secs(50));
    assert_eq!(s.failure.unwrap().kind, FailureKind::RateLimit);
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
}

#[tokio::test]
async fn a_context_overflow_loop_is_stopped() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let id = sup.start(w.spec("overflow-loop")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::ContextLength);
    assert!(f.message.contains("context overflows"), "{}", f.message);
    assert_no_zombies().await;
}

#[tokio::test]
async fn an_agent_fallback_fails_the_task() {
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let id = sup.start(w.spec("fallback")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Agent);
    assert!(f.message.contains("Falling back"));
}

#[tokio::test]
async fn a_recovered_error_with_exit_1_is_a_success() {
    let w = World::new();
    let events = w.root.path().join("events.jsonl");
    std::fs::write(
        &events,
        [
            r#"{"type":"error","timestamp":1,"sessionID":"ses_r","error":{"name":"ContextOverflowError","data":{"message":"maximum context length is 10 tokens"}}}"#,
            r#"{"type":"step_start","timestamp":2,"sessionID":"ses_r","part":{"messageID":"m2","type":"step-start"}}"#,
            r#"{"type":"text","timestamp":2,"sessionID":"ses_r","part":{"messageID":"m2","type":"text","text":"recovered. DONE"}}"#,
            r#"{"type":"step_finish","timestamp":2,"sessionID":"ses_r","part":{"messageID":"m2","reason":"stop","type":"step-finish","tokens":{"input":1,"output":1}}}"#,
            "garbage line",
        ]
        .join("\n"),
    )
    .unwrap();
    let mut cfg = w.config();
    cfg.env
        .push(("FAKE_OPENCODE_EVENTS".into(), events.display().to_string()));
    cfg.env.push(("FAKE_OPENCODE_EXIT".into(), "1".into()));
    let sup = Supervisor::new(cfg);
    let id = sup.start(w.spec("replay")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.exit_code, Some(1));
    let out = sup.result(id, None, None).unwrap();
    assert_eq!(out.final_text, "recovered. DONE");
    assert_eq!(out.malformed_lines, 1);
}

#[tokio::test]
async fn the_process_table_shows_our_fake_runs() {
    let w = World::new();
    // The table recognises opencode by name: run the fake as `opencode`.
    let bindir = w.root.path().join("bin");
    std::fs::create_dir_all(&bindir).unwrap();
    let named = bindir.join("opencode");
    std::fs::copy(bridge_testkit::bins::fake_opencode(), &named).unwrap();
    let mut cfg = w.config();
    cfg.opencode_bin = Some(named);
    let sup = Supervisor::new(cfg);
    let mut spec = w.spec("hang");
    spec.title = "LANE/worker: exact title with  spaces".into();
    let id = sup.start(spec).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), |s| {
        running(s) && s.session_id.is_some()
    })
    .await;
    let table = sup.processes();
    let p = table
        .iter()
        .find(|p| p.pid == s.pid.unwrap())
        .unwrap_or_else(|| panic!("run not in {table:#?}"));
    assert_eq!(p.kind, ProcessKind::Run);
    assert_eq!(
        p.title.as_deref(),
        Some("LANE/worker: exact title with  spaces")
    );
    assert_eq!(p.agent.as_deref(), Some("worker"));
    assert_eq!(
        p.cwd.as_deref(),
        Some(w.proj().canonicalize().unwrap().as_path())
    );
    assert_eq!(p.task_id, Some(id));
    assert_eq!(
        p.session_id.as_deref(),
        Some("ses_fake0000000000000000000001")
    );
    // The plain scan sees it too, without task information.
    let plain = run_supervisor::proctable::scan();
    let q = plain.iter().find(|q| q.pid == p.pid).unwrap();
    assert_eq!(q.task_id, None);
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
    assert!(
        run_supervisor::proctable::scan()
            .iter()
            .all(|q| q.pid != p.pid)
    );
}

#[tokio::test]
async fn old_finished_tasks_are_forgotten_first() {
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let n = run_supervisor::MAX_FINISHED_TASKS + 2;
    for _ in 0..n {
        let id = sup.start(w.spec("exit:0")).unwrap();
        finish(&sup, id, Duration::from_secs(20)).await;
    }
    let list = sup.list();
    assert_eq!(list.len(), run_supervisor::MAX_FINISHED_TASKS);
    assert!(sup.status(1).is_none() && sup.status(2).is_none());
    assert!(sup.status(n as u64).is_some());
    assert_eq!(list[0].id, 3);
}

#[tokio::test]
async fn a_binary_that_is_not_opencode_fails_the_task_as_spawn() {
    let w = World::new();
    let mut cfg = w.config();
    cfg.opencode_bin = Some(PathBuf::from("/bin/true"));
    let sup = Supervisor::new(cfg);
    let id = sup.start(w.spec("ok")).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Failed);
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Spawn);
    assert!(
        f.message.contains("does not look like opencode"),
        "{}",
        f.message
    );
    assert!(f.advice.contains("OPENCODE_BIN"));
}

#[tokio::test]
async fn option_like_models_agents_and_sessions_are_refused_before_any_run() {
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let mut cases = Vec::new();
    let mut s = w.spec("ok");
    s.model = Some("--dir=/tmp/elsewhere".into());
    cases.push(("model", s));
    let mut s = w.spec("ok");
    s.model = Some("prov/model#--auto".into());
    cases.push(("model", s));
    let mut s = w.spec("ok");
    s.agent = "--agent=build".into();
    cases.push(("agent", s));
    let mut s = w.spec("ok");
    s.session = Some("-f".into());
    cases.push(("session id", s));
    for (what, spec) in cases {
        match sup.start(spec) {
            Err(StartError::InvalidSpec(m)) => {
                assert!(m.starts_with(&format!("the {what} `")), "{m}");
                assert!(m.contains("starts with `-`"), "{m}");
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(sup.list().is_empty(), "no task was accepted");
    // A title may start with `-`: it is passed as `--title=<title>` and stays a title.
    let mut spec = w.spec("ok");
    spec.title = "--file=/etc/passwd".into();
    let id = sup.start(spec).unwrap();
    let s = finish(&sup, id, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let r = sup.result(id, None, None).unwrap().final_text;
    assert_eq!(report_field(&r, "file"), "-", "{r}");
    assert!(r.contains("title=--file=/etc/passwd "), "{r}");
}

/// A follow-up into the session of an unfinished task is refused, naming the task (a server
/// would queue it behind that turn; a second run would write into it); once the task has ended
/// the same follow-up starts.
#[tokio::test]
async fn a_follow_up_into_a_session_in_use_is_refused_until_its_task_ends() {
    let _g = SERIAL.lock().await;
    let w = World::new();
    let sup = Supervisor::new(w.config());
    let id = sup.start(w.spec("hang")).unwrap();
    let s = wait_until(&sup, id, Duration::from_secs(20), |s| {
        s.session_id.is_some()
    })
    .await;
    let session = s.session_id.unwrap();
    let mut follow_up = w.spec("ok");
    follow_up.session = Some(format!(" {session} "));
    match sup.start(follow_up.clone()) {
        Err(e @ StartError::SessionInUse { .. }) => assert_eq!(
            e.to_string(),
            format!(
                "session {session} is in use by task {id}, which has not finished: wait for it (opencode_wait) or cancel it (opencode_cancel), then send the follow-up"
            )
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
    let next = sup.start(follow_up).unwrap();
    let s = finish(&sup, next, Duration::from_secs(20)).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
}

/// Where `opencode serve` cannot start, a task runs as `opencode run` and says why; the next
/// tasks do not try the server again (one that hangs at start would cost each task the whole
/// startup limit) and say so too.
#[tokio::test]
async fn a_local_server_that_cannot_start_is_not_tried_again_for_each_task() {
    use std::os::unix::fs::PermissionsExt;
    let _g = SERIAL.lock().await;
    let w = World::new();
    let tries = w.root.path().join("serve-tries");
    let wrapper = w.root.path().join("opencode");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = serve ]; then echo try >> '{}'; fi\nexec '{}' \"$@\"\n",
            tries.display(),
            bridge_testkit::bins::fake_opencode().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cfg = w.config();
    cfg.opencode_bin = Some(wrapper);
    cfg.engine = run_supervisor::Engine::Serve;
    let sup = Supervisor::new(cfg);
    for n in 0..3 {
        let id = sup.start(w.spec("ok")).unwrap();
        let s = finish(&sup, id, Duration::from_secs(30)).await;
        assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
        assert_eq!(s.engine, "run", "task {n}");
        let out = sup.result(id, None, None).unwrap();
        assert!(
            out.stderr_tail
                .contains("the local opencode serve could not start")
                && out
                    .stderr_tail
                    .contains("this task runs as `opencode run` instead"),
            "task {n}: {}",
            out.stderr_tail
        );
        if n > 0 {
            assert!(
                out.stderr_tail
                    .contains("the bridge tries again 300 s after that"),
                "{}",
                out.stderr_tail
            );
        }
    }
    let tried = std::fs::read_to_string(&tries).unwrap_or_default();
    assert_eq!(tried.lines().count(), 1, "serve was tried {tried:?}");
}
