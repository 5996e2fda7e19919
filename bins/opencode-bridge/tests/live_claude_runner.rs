//! The `claude -p` runner and sync runs over raw JSON-RPC with the built binary: the real Claude
//! Code against our fake Anthropic endpoint, and the real opencode against our fake LLM.

use crate::common;

use bridge_testkit::fake_claude_api::{CLAUDE_OK_TEXT, FakeClaudeApi};
use bridge_testkit::fake_llm::OK_TEXT;
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_claude, require_opencode};
use common::{Server, World};
use serde_json::json;
use std::time::{Duration, Instant};

fn claude_server(world: &World, fake: &FakeClaudeApi, claude: &std::path::Path) -> Server {
    let mut env: Vec<(String, String)> = fake.claude_env(&world.path("home"));
    env.push(("CLAUDE_BIN".into(), claude.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_KILL_GRACE_MS".into(), "2000".into()));
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut s = Server::start(world, &env);
    s.initialize();
    s
}

#[test]
fn live_claude_runs_sync_and_async_are_visible_cancellable_and_quota_aware() {
    let claude = require_claude!();
    let world = World::new();
    let fake = FakeClaudeApi::start().unwrap();
    let mut server = claude_server(&world, &fake, &claude);

    // A sync run that finishes in time answers with its result.
    let t0 = Instant::now();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello.", "cwd": "demo", "model": "claude-fake-text", "wait_s": 50}),
    );
    assert!(!is_error, "{text}");
    assert!(
        text.starts_with("task 1 finished within wait_s=50"),
        "{text}"
    );
    assert!(text.contains("succeeded"), "{text}");
    assert!(text.contains("runner: claude"), "{text}");
    assert!(text.contains(CLAUDE_OK_TEXT), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(50));
    let (status, _) = server.call_text(3, "opencode_status", json!({"id": "1"}));
    assert!(status.contains("runner: claude"), "{status}");
    assert!(status.contains("model: claude-fake-text"), "{status}");
    let (list, _) = server.call_text(4, "opencode_list", json!({}));
    assert!(list.contains("task 1"), "{list}");

    // A sync run that does not finish in time returns the task id; it shows in the process
    // table as the bridge's claude -p run, and cancel stops it.
    let (text, is_error) = server.call_text(
        5,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Take your time.", "cwd": "demo", "model": "claude-fake-slow", "wait_s": 3}),
    );
    assert!(!is_error, "{text}");
    assert!(text.starts_with("started task 2"), "{text}");
    assert!(text.contains("runner: claude"), "{text}");
    assert!(text.contains("still running after wait_s=3"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let procs = loop {
        let (p, _) = server.call_text(6, "opencode_processes", json!({}));
        if p.contains("[task 2]") || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let row = procs
        .lines()
        .find(|l| l.contains("[task 2]"))
        .unwrap_or_else(|| panic!("no row for task 2: {procs}"));
    assert!(row.contains("claude -p"), "{row}");
    let pid: i32 = row
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {row}"));
    let (text, is_error) = server.call_text(7, "opencode_cancel", json!({"id": "2"}));
    assert!(!is_error, "{text}");
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err(),
        "claude pid {pid} survived the cancel"
    );
    let (procs, _) = server.call_text(8, "opencode_processes", json!({}));
    assert!(!procs.contains("[task 2]"), "{procs}");

    // A usage-limit refusal names its reset time; later Claude starts are refused early.
    let (text, _) = server.call_text(
        9,
        "opencode_start",
        json!({"tier": "easy", "prompt": "hi", "cwd": "demo", "model": "claude-fake-usage", "wait_s": 50}),
    );
    assert!(text.contains("failure: quota"), "{text}");
    // The fake names 2030-01-01, past the 7-day horizon: the reset is held to it, and said so.
    assert!(
        text.contains("at the latest") && !text.contains("2030-01-01"),
        "{text}"
    );
    let until = text
        .split("resets at ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no reset time: {text}"))
        .to_owned();
    let (text, is_error) = server.call_text(
        10,
        "opencode_start",
        json!({"tier": "easy", "prompt": "hi", "cwd": "demo", "model": "sonnet"}),
    );
    assert!(is_error, "{text}");
    assert!(
        text.contains(&format!("until {until}")) && text.contains("claude"),
        "{text}"
    );
}

#[test]
fn live_opencode_sync_run_returns_the_result_directly() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let mut env: Vec<(String, String)> = sb
        .env()
        .into_iter()
        .filter(|(k, _)| k.starts_with("XDG_") || k.starts_with("OPENCODE_DISABLE"))
        .collect();
    env.push(("OPENCODE_BIN".into(), oc.to_string_lossy().into_owned()));
    env.push((
        "OPENCODE_BRIDGE_ROOT".into(),
        sb.project_dir().to_string_lossy().into_owned(),
    ));
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut server = Server::start_in(&world, &env, sb.project_dir());
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hello, then stop.", "model": "fk/ok", "wait_s": 55}),
    );
    assert!(!is_error, "{text}");
    assert!(
        text.starts_with("task 1 finished within wait_s=55"),
        "{text}"
    );
    assert!(text.contains("runner: opencode"), "{text}");
    assert!(text.contains(OK_TEXT), "{text}");
}
