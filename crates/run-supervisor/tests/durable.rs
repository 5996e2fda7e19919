//! The durable registry, waiting on several tasks, labels, follow-ups and changed files, with
//! our fake `opencode`. A bridge killed with `kill -9` is tested through the real binary in
//! `bins/opencode-bridge/tests/durable.rs`; here a dead bridge is a process we start and kill.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use run_supervisor::{
    CancelOutcome, ChangeSource, FailureKind, ProcId, Supervisor, SupervisorConfig, TaskSpec,
    TaskState,
};
use serde_json::json;

struct World {
    root: tempfile::TempDir,
    state: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World {
            root: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
        }
    }

    fn proj(&self) -> PathBuf {
        let p = self.root.path().join("proj");
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn supervisor(&self) -> Supervisor {
        Supervisor::new(sup_config(self))
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

fn sup_config(w: &World) -> SupervisorConfig {
    SupervisorConfig {
        opencode_bin: Some(bridge_testkit::bins::fake_opencode()),
        // Our fake opencode stands for `opencode run` processes; it cannot serve.
        engine: run_supervisor::Engine::Run,
        root: w.root.path().to_path_buf(),
        kill_grace: Duration::from_millis(400),
        prompt_dir: w.root.path().join("prompts"),
        state_dir: Some(w.state.path().to_path_buf()),
        subreaper: false,
        // The fake writes its pids and markers beside the task's tree; the fence is proven
        // on real runs (tests/live_fence.rs).
        sandbox: run_supervisor::Sandbox::Off,
        ..SupervisorConfig::default()
    }
}

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn finished_tasks_and_their_output_outlive_the_supervisor() {
    let w = World::new();
    let (id, label_id) = {
        let a = w.supervisor();
        assert_eq!(a.state_dir(), Some(w.state.path()));
        let id = a.start(w.spec("ok")).unwrap();
        let mut labelled = w.spec("exit:3");
        labelled.label = Some("batch-7".into());
        let label_id = a.start(labelled).unwrap();
        finish(&a, id, LIMIT).await;
        finish(&a, label_id, LIMIT).await;
        (id, label_id)
    };
    // A new supervisor on the same state directory (a restarted bridge).
    let b = w.supervisor();
    let list = b.list();
    assert_eq!(
        list.iter().map(|t| t.id).collect::<Vec<_>>(),
        [id, label_id]
    );
    let ok = b.status(id).unwrap();
    assert_eq!(ok.state, TaskState::Succeeded);
    assert_eq!(
        ok.session_id.as_deref(),
        Some("ses_fake0000000000000000000001")
    );
    assert_eq!(ok.tokens.input, 8);
    let out = b.result(id, None, None).unwrap();
    assert!(
        out.final_text.contains("stdin_bytes="),
        "{}",
        out.final_text
    );
    assert_eq!(out.text.text, out.final_text);
    let failed = b.status(label_id).unwrap();
    assert_eq!(failed.state, TaskState::Failed);
    assert_eq!(failed.label.as_deref(), Some("batch-7"));
    assert_eq!(failed.failure.unwrap().kind, FailureKind::Exit);
    assert_eq!(failed.exit_code, Some(3));
    assert!(
        b.result(label_id, None, None)
            .unwrap()
            .stderr_tail
            .contains("failing on purpose with code 3")
    );
    // Ids go on from the registry, never reused.
    let next = b.start(w.spec("ok")).unwrap();
    assert!(next > label_id);
    finish(&b, next, LIMIT).await;
    assert_eq!(
        b.cancel(id).await,
        CancelOutcome::AlreadyFinished(TaskState::Succeeded)
    );
}

#[tokio::test]
async fn two_supervisors_share_one_state_dir_without_stepping_on_each_other() {
    let w = World::new();
    let a = w.supervisor();
    let b = w.supervisor();
    let mut ids = Vec::new();
    for i in 0..4 {
        let sup = if i % 2 == 0 { &a } else { &b };
        ids.push(sup.start(w.spec("hang")).unwrap());
    }
    let mut sorted = ids.clone();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        4,
        "ids are unique across supervisors: {ids:?}"
    );
    let a_task = ids[0];
    wait_until(&a, a_task, LIMIT, |s| s.pid.is_some()).await;
    // b sees a's task as another bridge's, and does not cancel it.
    let seen = wait_until(&b, a_task, LIMIT, |s| {
        s.pid.is_some() && s.session_id.is_some()
    })
    .await;
    assert_eq!(seen.state, TaskState::Running);
    assert_eq!(seen.other_bridge, Some(std::process::id() as i32));
    assert!(!seen.orphaned);
    assert!(matches!(
        b.cancel(a_task).await,
        CancelOutcome::OtherBridge { .. }
    ));
    assert_eq!(b.list().len(), 4);
    for (i, id) in ids.iter().enumerate() {
        let owner = if i % 2 == 0 { &a } else { &b };
        assert_eq!(owner.cancel(*id).await, CancelOutcome::Cancelled);
    }
    for id in &ids {
        assert_eq!(a.status(*id).unwrap().state, TaskState::Cancelled);
        assert_eq!(b.status(*id).unwrap().state, TaskState::Cancelled);
    }
}

/// A process in its own group that lives until killed, with its identity.
fn spawn_sleeper() -> (std::process::Child, ProcId) {
    use std::os::unix::process::CommandExt;
    let child = Command::new("sleep")
        .arg("300")
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let id = ProcId::of(child.id() as i32).unwrap();
    (child, id)
}

/// A bridge process that is gone: a process we started and reaped.
fn dead_bridge() -> ProcId {
    let mut child = Command::new("true").spawn().unwrap();
    let id = ProcId {
        pid: child.id() as i32,
        start_time: ProcId::of(child.id() as i32).map_or(1, |p| p.start_time),
    };
    child.wait().unwrap();
    id
}

fn write_record(state: &Path, id: u64, owner: ProcId, run: Option<ProcId>, cwd: &Path) {
    let dir = state.join("tasks").join(id.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let t = json!({
        "id": id, "owner": {"pid": owner.pid, "start_time": owner.start_time},
        "label": "night", "agent": "worker", "title": "PROJ/worker: long job",
        "cwd": cwd, "model": null, "read_only": false, "continues": null,
        "state": "running", "attempts": 1, "accepted_ms": now - 90_000, "finished_ms": null,
        "session_id": "ses_orphan", "run": run.map(|r| json!({"pid": r.pid, "start_time": r.start_time})),
        "failure": null, "exit_code": null,
        "tokens": {"input": 1, "output": 2, "reasoning": 0, "cache_read": 0, "cache_write": 0},
        "cost": 0.0, "tool_calls": 0, "opencode_version": "1.18.33", "updated_ms": now
    });
    std::fs::write(dir.join("task.json"), serde_json::to_vec(&t).unwrap()).unwrap();
}

#[tokio::test]
async fn a_run_that_outlived_its_bridge_is_an_orphan_and_can_be_cancelled() {
    let w = World::new();
    let (mut sleeper, run) = spawn_sleeper();
    write_record(w.state.path(), 41, dead_bridge(), Some(run), &w.proj());
    let sup = w.supervisor();
    let s = sup.status(41).unwrap();
    assert_eq!(s.state, TaskState::Running);
    assert!(s.orphaned);
    assert_eq!(s.pid, Some(run.pid));
    assert!(s.elapsed >= Duration::from_secs(90), "{:?}", s.elapsed);
    assert_eq!(s.label.as_deref(), Some("night"));
    assert_eq!(sup.list().len(), 1);
    assert_eq!(sup.cancel(41).await, CancelOutcome::Cancelled);
    // Gone (the sweep reaps it here, where it happens to be our own child).
    let _ = sleeper.try_wait();
    assert!(!run.exists(), "the orphaned run is gone");
    let after = w.supervisor().status(41).unwrap();
    assert_eq!(after.state, TaskState::Cancelled);
    assert!(!after.orphaned);
    // A reused pid is never signalled: the record names a start time that no longer matches.
    let (mut other, real) = spawn_sleeper();
    let fake_run = ProcId {
        pid: real.pid,
        start_time: real.start_time + 1,
    };
    write_record(w.state.path(), 42, dead_bridge(), Some(fake_run), &w.proj());
    let s = sup.status(42).unwrap();
    assert_eq!(s.state, TaskState::Failed, "not an orphan: {s:?}");
    assert!(real.is_alive(), "the unrelated process was not touched");
    other.kill().unwrap();
    other.wait().unwrap();
}

#[tokio::test]
async fn only_the_newest_saved_finished_tasks_stay_in_memory() {
    let w = World::new();
    let sup = w.supervisor();
    let n = run_supervisor::FINISHED_IN_MEMORY + 4;
    let mut ids = Vec::new();
    let mut first = None;
    for _ in 0..n {
        let id = sup.start(w.spec("ok")).unwrap();
        finish(&sup, id, LIMIT).await;
        if first.is_none() {
            first = Some((sup.status(id).unwrap(), sup.result(id, None, None).unwrap()));
        }
        ids.push(id);
    }
    assert_eq!(sup.tasks_in_memory(), run_supervisor::FINISHED_IN_MEMORY);
    // The forgotten ones are answered from the registry, as they were.
    let (status, out) = first.unwrap();
    let again = sup.result(ids[0], None, None).unwrap();
    assert!(
        out.final_text.contains("stdin_bytes="),
        "{}",
        out.final_text
    );
    assert_eq!(again.text.text, out.text.text);
    assert_eq!(again.final_text, out.final_text);
    assert_eq!(again.tool_calls, out.tool_calls);
    let s = sup.status(ids[0]).unwrap();
    assert_eq!(
        (s.state, s.session_id, s.tokens.input),
        (status.state, status.session_id, status.tokens.input)
    );
    assert_eq!(sup.list().len(), n);
    assert_eq!(
        sup.cancel(ids[0]).await,
        CancelOutcome::AlreadyFinished(TaskState::Succeeded)
    );
    // Without a registry nothing is forgotten before the 200-task limit.
    let mem = Supervisor::new(SupervisorConfig {
        state_dir: None,
        ..sup_config(&w)
    });
    for _ in 0..n {
        let id = mem.start(w.spec("ok")).unwrap();
        finish(&mem, id, LIMIT).await;
    }
    assert_eq!(mem.tasks_in_memory(), n);
}

#[tokio::test]
async fn a_run_whose_output_stops_mid_line_fails_and_says_where_the_answer_is() {
    let w = World::new();
    let sup = w.supervisor();
    let id = sup.start(w.spec("cut")).unwrap();
    let s = finish(&sup, id, LIMIT).await;
    assert_eq!(s.state, TaskState::Failed, "{s:?}");
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Exit);
    assert!(
        f.message.contains("middle of an event line"),
        "{}",
        f.message
    );
    assert_eq!(
        s.session_id.as_deref(),
        Some("ses_fake0000000000000000000001")
    );
}

#[tokio::test]
async fn reading_a_lost_task_writes_nothing_and_the_next_open_records_it() {
    let w = World::new();
    let sup = w.supervisor();
    // Its bridge and run die while this supervisor runs.
    write_record(
        w.state.path(),
        8,
        dead_bridge(),
        Some(dead_bridge()),
        &w.proj(),
    );
    let record = || std::fs::read_to_string(w.state.path().join("tasks/8/task.json")).unwrap();
    let s = sup.status(8).unwrap();
    assert_eq!(s.state, TaskState::Failed);
    assert!(s.lost, "{s:?}");
    assert!(sup.list().iter().any(|t| t.id == 8 && t.lost));
    assert!(
        record().contains("\"running\""),
        "a read wrote: {}",
        record()
    );
    drop(sup);
    // Decided once, when a supervisor opens the registry.
    let again = w.supervisor();
    let text = record();
    assert!(
        text.contains("\"lost\": true") && text.contains("\"failed\""),
        "{text}"
    );
    let s = again.status(8).unwrap();
    assert!(s.lost && s.failure.unwrap().message.starts_with("lost:"));
}

#[tokio::test]
async fn a_task_whose_bridge_and_run_are_gone_is_lost() {
    let w = World::new();
    write_record(
        w.state.path(),
        7,
        dead_bridge(),
        Some(dead_bridge()),
        &w.proj(),
    );
    let sup = w.supervisor();
    let s = sup.status(7).unwrap();
    assert_eq!(s.state, TaskState::Failed);
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Exit);
    assert!(f.message.starts_with("lost:"), "{}", f.message);
    assert_eq!(s.session_id.as_deref(), Some("ses_orphan"));
    assert_eq!(
        sup.cancel(7).await,
        CancelOutcome::AlreadyFinished(TaskState::Failed)
    );
    // Settled once, on disk: it is now a finished task like any other, and prunable.
    let again = w.supervisor();
    assert!(
        again
            .status(7)
            .unwrap()
            .failure
            .unwrap()
            .message
            .starts_with("lost:")
    );
    drop(again);
    // Pruning takes tasks that ended *more* than the age ago, in whole milliseconds: let one
    // pass, or a settle and a prune within the same millisecond keep the task.
    std::thread::sleep(Duration::from_millis(5));
    let pruned = Supervisor::new(SupervisorConfig {
        state_dir: Some(w.state.path().to_path_buf()),
        prune_after: Duration::ZERO,
        subreaper: false,
        ..SupervisorConfig::default()
    });
    assert!(
        pruned.status(7).is_none(),
        "finished and older than the age: pruned"
    );
}

#[tokio::test]
async fn wait_for_any_or_all_with_a_timeout() {
    let w = World::new();
    let sup = w.supervisor();
    let quick = sup.start(w.spec("ok")).unwrap();
    let slow = sup.start(w.spec("hang")).unwrap();
    let any = sup
        .wait_for(&[slow, quick, 999], false, Duration::from_secs(20))
        .await;
    assert!(any.satisfied);
    assert_eq!(
        any.finished.iter().map(|s| s.id).collect::<Vec<_>>(),
        [quick]
    );
    assert_eq!(any.running.iter().map(|s| s.id).collect::<Vec<_>>(), [slow]);
    assert_eq!(any.unknown, [999]);
    let started = std::time::Instant::now();
    let all = sup
        .wait_for(&[quick, slow], true, Duration::from_millis(700))
        .await;
    assert!(!all.satisfied, "the hanging task is still running");
    assert!(started.elapsed() >= Duration::from_millis(700));
    assert_eq!(all.running.len(), 1);
    let waiter = {
        let sup = sup.clone();
        tokio::spawn(async move { sup.wait_for(&[quick, slow], true, LIMIT).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sup.cancel(slow).await, CancelOutcome::Cancelled);
    let all = waiter.await.unwrap();
    assert!(all.satisfied);
    assert_eq!(all.finished.len(), 2);
}

#[tokio::test]
async fn a_follow_up_names_its_session() {
    let w = World::new();
    let sup = w.supervisor();
    let mut spec = w.spec("ok");
    spec.session = Some("ses_earlier".into());
    let id = sup.start(spec).unwrap();
    let s = finish(&sup, id, LIMIT).await;
    assert_eq!(s.continues.as_deref(), Some("ses_earlier"));
    let report = sup.result(id, None, None).unwrap().final_text;
    // The fake reports the title it got: none, since a follow-up keeps the session's title.
    assert!(report.contains(" title=- "), "{report}");
    assert_eq!(
        w.supervisor().status(id).unwrap().continues.as_deref(),
        Some("ses_earlier")
    );
}

#[tokio::test]
async fn an_editing_task_lists_the_files_it_changed_in_git() {
    let w = World::new();
    let proj = w.proj();
    bridge_testkit::git_repo(&proj, &[("README", "r\n")]);
    let head = std::fs::read(proj.join(".git/HEAD")).unwrap();
    let sup = w.supervisor();
    let mut spec = w.spec("ok");
    // The fake writes its report to this file: a change in the tree.
    spec.env = vec![(
        "FAKE_OPENCODE_RECORD".into(),
        proj.join("report.txt").to_string_lossy().into_owned(),
    )];
    let id = sup.start(spec).unwrap();
    finish(&sup, id, LIMIT).await;
    let changed = sup.result(id, None, None).unwrap().changed_files.unwrap();
    assert_eq!(changed.source, ChangeSource::Git);
    assert_eq!(changed.files.len(), 1, "{changed:?}");
    assert_eq!(changed.files[0].path, "report.txt");
    assert_eq!(changed.files[0].status, "added");
    assert_eq!(changed.files[0].added, Some(1));
    assert_eq!(std::fs::read(proj.join(".git/HEAD")).unwrap(), head);
    // Kept in the registry too.
    let again = w.supervisor().result(id, None, None).unwrap();
    assert_eq!(again.changed_files, Some(changed));
    // A read-only agent's task is not tracked.
    let mut ro = w.spec("ok");
    ro.read_only = true;
    let id = sup.start(ro).unwrap();
    finish(&sup, id, LIMIT).await;
    assert_eq!(sup.result(id, None, None).unwrap().changed_files, None);
}

#[tokio::test]
async fn outside_git_the_write_tool_calls_name_the_files() {
    let w = World::new();
    let proj = w.proj();
    let events = w.root.path().join("events.jsonl");
    let write = json!({"type":"tool_use","timestamp":1,"sessionID":"ses_w","part":{"type":"tool","tool":"write","callID":"c","state":{"status":"completed","input":{"filePath": proj.join("notes.md"),"content":"x"},"output":"Wrote file successfully.","title": proj.join("notes.md"),"time":{"start":1,"end":2}},"id":"p","sessionID":"ses_w","messageID":"m"}});
    let text = json!({"type":"text","timestamp":2,"sessionID":"ses_w","part":{"messageID":"m2","type":"text","text":"done"}});
    let fin = json!({"type":"step_finish","timestamp":3,"sessionID":"ses_w","part":{"messageID":"m2","reason":"stop","type":"step-finish","tokens":{"input":1,"output":1},"cost":0}});
    std::fs::write(&events, format!("{write}\n{text}\n{fin}\n")).unwrap();
    let sup = w.supervisor();
    let mut spec = w.spec("replay");
    spec.env = vec![(
        "FAKE_OPENCODE_EVENTS".into(),
        events.to_string_lossy().into_owned(),
    )];
    let id = sup.start(spec).unwrap();
    let s = finish(&sup, id, LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let changed = sup.result(id, None, None).unwrap().changed_files.unwrap();
    assert_eq!(changed.source, ChangeSource::ToolCalls);
    assert_eq!(changed.files.len(), 1);
    assert_eq!(changed.files[0].path, "notes.md");
    // A write's content is its lines added; what it replaced is not in its input.
    assert_eq!(
        (changed.files[0].added, changed.files[0].removed),
        (Some(1), None)
    );
}

/// The Stop hook's view (`registry::unsettled`): a task is recorded with the Claude Code session
/// of its bridge, stays unsettled while it runs and after it ends until its result is marked
/// read, and only for that session; a cancelled task is settled.
#[tokio::test]
async fn a_client_sessions_tasks_are_unsettled_until_their_result_is_read() {
    use run_supervisor::registry::unsettled;
    let w = World::new();
    let sup = Supervisor::new(SupervisorConfig {
        client_session: Some("claude-A".into()),
        ..sup_config(&w)
    });
    let ids = |who: &str| {
        unsettled(w.state.path(), who)
            .into_iter()
            .map(|u| (u.id, u.running))
            .collect::<Vec<_>>()
    };
    let hang = sup.start(w.spec("hang")).unwrap();
    let ok = sup.start(w.spec("ok")).unwrap();
    finish(&sup, ok, LIMIT).await;
    // Nothing has read the finished result yet; the other task still runs.
    assert_eq!(ids("claude-A"), [(hang, true), (ok, false)]);
    assert_eq!(ids("claude-B"), []);
    sup.mark_read(ok);
    // Marking a running task does nothing: only a finished result can be read.
    sup.mark_read(hang);
    assert_eq!(sup.cancel(hang).await, CancelOutcome::Cancelled);
    drop(sup);
    assert_eq!(ids("claude-A"), []);
}
