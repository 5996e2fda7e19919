//! Task tools against a stand-in `opencode` (a shell script): start returns at once, status and
//! list see the task, cancel and stdin EOF stop its whole process group, refusals say why.

use crate::common;

use common::{
    Server, World, assert_stopped_with_its_run, fake_opencode, group_alive, redact,
    start_sleeping_task, wait_for_pid,
};
use serde_json::json;
use std::time::{Duration, Instant};

fn start_env(world: &World) -> Vec<(&'static str, String)> {
    vec![
        (
            "OPENCODE_BIN",
            fake_opencode(world).to_string_lossy().into_owned(),
        ),
        ("OPENCODE_BRIDGE_KILL_GRACE_MS", "500".into()),
    ]
}

/// The environment of a bridge whose clean stop cancels its running tasks.
fn cancel_on_exit(world: &World) -> Vec<(&'static str, String)> {
    let mut env = start_env(world);
    env.push(("OPENCODE_BRIDGE_ON_EXIT", "cancel".into()));
    env
}

#[test]
fn in_the_cancel_mode_stdin_eof_stops_a_running_task_and_its_process_group() {
    let world = World::new();
    let mut server = Server::start(&world, &cancel_on_exit(&world));
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "List the files in src and summarise them", "cwd": "demo"}),
    );
    assert!(!is_error, "{text}");
    assert!(
        text.starts_with("started task 1: agent worker, tier easy, mode blueprint"),
        "{text}"
    );
    assert!(
        text.contains("title: DEMO/worker: List the files in src"),
        "{text}"
    );
    let pgid = wait_for_pid(&world.path("pids.group"));
    let child = wait_for_pid(&world.path("pids.child"));
    assert!(group_alive(pgid));

    let (status, _) = server.call_text(3, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  "), "{status}");
    assert!(
        status.contains("running") || status.contains("starting"),
        "{status}"
    );
    let (list, _) = server.call_text(4, "opencode_list", json!({}));
    assert!(list.contains("1 delegated task(s); 1 unfinished"), "{list}");

    server.close_stdin();
    assert_stopped_with_its_run(&mut server, "stdin closed", pgid, &[child]);
}

#[test]
fn cancel_stops_the_task_then_reports_it_ended() {
    let world = World::new();
    let mut server = Server::start(&world, &start_env(&world));
    server.initialize();
    let pgid = start_sleeping_task(
        &mut server,
        &world,
        "medium",
        "Write unit tests for the date parser",
    );
    // Cancel once the run's session is known (the fake prints it with its first event, a moment
    // after writing its pids), so the texts below do not depend on that race.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut poll = 100;
    loop {
        poll += 1;
        let (status, _) = server.call_text(poll, "opencode_status", json!({"id": "1"}));
        if !status.contains("session: (not known yet)") {
            break;
        }
        assert!(Instant::now() < deadline, "no session: {status}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (cancelled, is_error) = server.call_text(3, "opencode_cancel", json!({"id": "task 1"}));
    assert!(!is_error, "{cancelled}");
    assert!(cancelled.starts_with("task 1 cancelled"), "{cancelled}");
    assert!(!group_alive(pgid));
    let (again, _) = server.call_text(4, "opencode_cancel", json!({"id": "1"}));
    assert_eq!(
        again.trim(),
        "task 1 had already ended (cancelled); nothing was signalled"
    );
    let (status, _) = server.call_text(5, "opencode_status", json!({"id": "1"}));
    assert!(status.contains("cancelled"), "{status}");
    insta::assert_snapshot!("status_cancelled", redact(&status, &world));
    let (list, _) = server.call_text(7, "opencode_list", json!({}));
    insta::assert_snapshot!("list_after_cancel", redact(&list, &world));
    let (result, is_error) = server.call_text(8, "opencode_result", json!({"id": "1"}));
    assert!(!is_error, "{result}");
    insta::assert_snapshot!("result_cancelled", redact(&result, &world));
    let (unknown, is_error) = server.call_text(6, "opencode_status", json!({"id": "9"}));
    assert!(is_error);
    assert!(
        unknown.starts_with("no task 9 is known to this bridge"),
        "{unknown}"
    );
}

#[test]
fn refusals_say_why_and_what_to_do() {
    let world = World::new();
    std::fs::create_dir_all(world.path("outside")).unwrap();
    let mut env = start_env(&world);
    env.push(("OPENCODE_BRIDGE_MAX_PARALLEL", "1".into()));
    let mut server = Server::start(&world, &env);
    server.initialize();
    let outside = world.path("outside").to_string_lossy().into_owned();
    let cases = [
        (
            "hard tier",
            json!({"tier": "hard", "prompt": "Design the evaluation protocol"}),
        ),
        (
            "unsure tier",
            json!({"tier": "unsure", "prompt": "Fix the flaky test"}),
        ),
        (
            "agent refused in sensitive mode",
            json!({"tier": "easy", "prompt": "Make the landing page", "mode": "sensitive", "agent": "designer"}),
        ),
        (
            "fixer needs mechanical in sensitive mode",
            json!({"tier": "easy", "prompt": "Rename foo to bar everywhere", "mode": "sensitive", "agent": "fixer"}),
        ),
        (
            "secret in the prompt",
            json!({"tier": "easy", "prompt": "Deploy it with\nexport GITHUB_TOKEN=ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\nthen check the logs"}),
        ),
        (
            "cwd outside the root",
            json!({"tier": "easy", "prompt": "List the files", "cwd": outside}),
        ),
    ];
    let mut out = Vec::new();
    for (i, (what, args)) in cases.iter().enumerate() {
        let (text, is_error) = server.call_text(10 + i as i64, "opencode_start", args.clone());
        assert!(is_error, "{what}: {text}");
        out.push(format!("{what}:\n  {}", redact(&text, &world)));
    }
    // The parallel limit: one task runs, the second is refused.
    let (first, is_error) = server.call_text(
        30,
        "opencode_start",
        json!({"tier": "easy", "prompt": "List the files in the project"}),
    );
    assert!(!is_error, "{first}");
    let (busy, is_error) = server.call_text(
        31,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Count the lines in the project"}),
    );
    assert!(is_error, "{busy}");
    out.push(format!(
        "parallel limit reached:\n  {}",
        redact(&busy, &world)
    ));
    insta::assert_snapshot!("refusals", out.join("\n"));
}

#[test]
fn unknown_mode_value_in_the_environment_refuses() {
    let world = World::new();
    let mut env = start_env(&world);
    env.push(("OPENCODE_MODE", "sensitve".into()));
    let mut server = Server::start(&world, &env);
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "List the files"}),
    );
    assert!(is_error, "{text}");
    assert!(text.contains("OPENCODE_MODE"), "{text}");
    assert!(
        text.contains("blueprint, sensitive or insensitive"),
        "{text}"
    );
}

/// Starts a task on a bridge in the cancel mode, sends the bridge `signal`, and checks that it
/// exits cleanly having stopped the run's process group. Returns the world for more checks.
fn signal_stops_the_running_task(signal: nix::sys::signal::Signal) -> (World, String) {
    let world = World::new();
    let mut server = Server::start(&world, &cancel_on_exit(&world));
    server.initialize();
    let pgid = start_sleeping_task(
        &mut server,
        &world,
        "easy",
        "Summarise the README in five lines",
    );
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(server.child.id() as i32), signal).unwrap();
    assert_stopped_with_its_run(&mut server, signal.as_str(), pgid, &[]);
    let stderr = server.stderr();
    (world, stderr)
}

#[test]
fn in_the_cancel_mode_sigterm_stops_running_tasks_then_exits() {
    let (_world, stderr) = signal_stops_the_running_task(nix::sys::signal::Signal::SIGTERM);
    assert!(stderr.contains("SIGTERM"), "{stderr}");
}

/// Claude Code ends its stdio servers with SIGINT and sends no tasks/cancel: in the cancel mode
/// the bridge stops the runs it started (their whole process groups) and records them
/// cancelled, so a later bridge on the same state directory reports them as such instead of as
/// lost.
#[test]
fn in_the_cancel_mode_sigint_from_an_exiting_client_cancels_running_tasks_and_records_it() {
    let (world, _) = signal_stops_the_running_task(nix::sys::signal::Signal::SIGINT);
    let mut later = Server::start(&world, &start_env(&world));
    later.initialize();
    let (status, _) = later.call_text(3, "opencode_status", json!({"id": "1"}));
    assert!(status.starts_with("task 1  cancelled"), "{status}");
}
