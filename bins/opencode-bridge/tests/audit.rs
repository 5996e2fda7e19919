//! Integrity around a run: one prompter per session (a follow-up into a busy session is
//! refused, naming who holds it) and the post-run audit (a run that used another agent or model
//! than asked fails closed, kind `agent` / `model`), with the fake opencode.

use crate::common::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};

/// A stand-in opencode TUI that has session `id` open (`opencode -s <id>`): the fake opencode
/// under the name `opencode`, so the process table counts it.
fn fake_tui(world: &World, id: &str) -> std::process::Child {
    let bin = world.path("tui/opencode");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(bridge_testkit::bins::fake_opencode(), &bin).unwrap();
    Command::new(&bin)
        .args(["-s", id])
        .env("FAKE_OPENCODE_SCENARIO", "tui")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_follow_up_into_a_busy_session_is_refused_and_says_who_holds_it() {
    let world = World::new();
    let (db, map) = fixture_store(&world);
    let id = |name: &str| map["sessions"][name]["id"].as_str().unwrap().to_owned();
    let (in_tui, in_task) = (id("ok"), id("toolbash"));
    let mut tui = fake_tui(&world, &in_tui);
    let fake = fake_opencode(&world);
    let mut server = Server::start(
        &world,
        &[
            ("OPENCODE_BIN", fake.to_string_lossy().into_owned()),
            ("OPENCODE_DB", db.to_string_lossy().into_owned()),
        ],
    );
    server.initialize();
    let follow_up = |session: &str| json!({"tier": "easy", "prompt": "And then?", "session": session, "cwd": "demo", "agent": "worker"});
    let (t, is_error) = server.call_text(1, "opencode_start", follow_up(&in_tui));
    assert!(is_error, "{t}");
    assert!(
        t.starts_with(&format!(
            "refused: session {in_tui} is busy, held by an opencode TUI (pid {})",
            tui.id()
        )),
        "{t}"
    );
    assert!(
        t.contains("continue there, or close the session in that TUI"),
        "{t}"
    );
    tui.kill().unwrap();
    tui.wait().unwrap();

    // A follow-up of ours holds its session while it runs (the fake run hangs).
    let (t, is_error) = server.call_text(2, "opencode_start", follow_up(&in_task));
    assert!(!is_error, "{t}");
    assert!(t.starts_with("started task 1:"), "{t}");
    let (t, is_error) = server.call_text(3, "opencode_start", follow_up(&in_task));
    assert!(is_error, "{t}");
    assert!(
        t.starts_with(&format!(
            "refused: session {in_task} is busy, held by task 1 of this bridge"
        )),
        "{t}"
    );
    assert!(t.contains("opencode_wait ids=[\"1\"]"), "{t}");
    assert!(t.contains("opencode_cancel id=1"), "{t}");
    let (t, _) = server.call_text(4, "opencode_cancel", json!({"id": "1"}));
    assert!(t.contains("cancelled"), "{t}");
    // Free again: the TUI is gone, the task ended.
    let (t, is_error) = server.call_text(5, "opencode_start", follow_up(&in_tui));
    assert!(!is_error, "{t}");
    let (t, _) = server.call_text(6, "opencode_cancel", json!({"id": "2"}));
    assert!(t.contains("cancelled"), "{t}");
}

/// Starts a task in a world whose opencode is the fake (with `scenario` on the prompt's first
/// line) and returns its status and result texts once it ended.
fn run_recorded(scenario: &str, args: Value) -> (String, String) {
    let world = World::new();
    let mut server = Server::with_fake_opencode(&world);
    server.initialize();
    let mut start = json!({"tier": "easy", "prompt": format!("scenario: {scenario}\nSay hello"), "cwd": "demo"});
    for (k, v) in args.as_object().unwrap() {
        start[k] = v.clone();
    }
    let (t, is_error) = server.call_text(1, "opencode_start", start);
    assert!(!is_error && t.starts_with("started task 1:"), "{t}");
    let (w, _) = server.call_text(2, "opencode_wait", json!({"ids": ["1"], "timeout_s": 55}));
    assert!(w.starts_with("all 1 task(s) finished"), "{w}");
    let (status, _) = server.call_text(3, "opencode_status", json!({"id": "1"}));
    let (result, _) = server.call_text(4, "opencode_result", json!({"id": "1"}));
    (status, result)
}

#[test]
fn a_run_that_used_another_agent_or_model_fails_closed() {
    // The record matches the request: the task succeeds and the result says it was audited.
    let (status, result) = run_recorded("recorded:-:-", json!({"model": "fk/ok"}));
    assert!(status.contains("succeeded"), "{status}");
    assert!(
        result.contains("\naudited: agent worker, model fk/ok in 1 assistant message\n"),
        "{result}"
    );
    // Another agent: failed, kind agent, naming both.
    let (status, result) = run_recorded("recorded:build:-", json!({"model": "fk/ok"}));
    assert!(status.contains("failed"), "{status}");
    assert!(
        status.contains("agent: opencode ran agent `build` instead of the asked `worker`"),
        "{status}"
    );
    assert!(result.contains("opencode agent list"), "{result}");
    // Another model: failed, kind model.
    let (status, _) = run_recorded("recorded:-:fk/other", json!({"model": "fk/ok"}));
    assert!(status.contains("failed"), "{status}");
    assert!(
        status.contains("model: opencode used model `fk/other` instead of the asked `fk/ok`"),
        "{status}"
    );
    // A run whose session is in no store is not failed: it was not audited.
    let (status, result) = run_recorded("ok", json!({"model": "fk/ok"}));
    assert!(status.contains("succeeded"), "{status}");
    assert!(result.contains("\nnot audited: "), "{result}");
}

#[test]
fn live_a_follow_up_into_a_session_a_real_run_works_in_is_refused() {
    let oc = bridge_testkit::require_opencode!();
    let llm = bridge_testkit::FakeLlm::start().unwrap();
    llm.set_slow_secs(300);
    let sb = bridge_testkit::OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let mut env = sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push((
        "OPENCODE_BRIDGE_ROOT",
        sb.project_dir().to_string_lossy().into_owned(),
    ));
    env.push(("OPENCODE_BRIDGE_KILL_GRACE_MS", "2000".into()));
    let mut server = Server::start_in(&world, &env, sb.project_dir());
    server.initialize();
    let (t, _) = server.call_text(
        1,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Tell a long story", "model": "fk/slow"}),
    );
    assert!(t.starts_with("started task 1:"), "{t}");
    // The real run is streaming (the fake model takes 300 s): wait until its session is known.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let session = loop {
        let (s, _) = server.call_text(2, "opencode_status", json!({"id": "1"}));
        if let Some(sid) = s
            .lines()
            .find_map(|l| l.strip_prefix("session: "))
            .filter(|s| s.starts_with("ses_"))
        {
            break sid.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no session: {s}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    let (t, is_error) = server.call_text(
        3,
        "opencode_start",
        json!({"tier": "easy", "prompt": "And then?", "session": session}),
    );
    assert!(is_error, "{t}");
    assert!(
        t.starts_with(&format!(
            "refused: session {session} is busy, held by task 1 of this bridge"
        )),
        "{t}"
    );
    let (t, _) = server.call_text(4, "opencode_cancel", json!({"id": "1"}));
    assert!(t.contains("cancelled"), "{t}");
    assert!(
        llm.chat_requests("slow")
            .iter()
            .all(|r| !r.body.contains("And then?")),
        "the refused follow-up never reached the model"
    );
}
