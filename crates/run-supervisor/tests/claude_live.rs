//! Delegated `claude -p` runs with the real Claude Code against the fake Anthropic endpoint of
//! `bridge_testkit::fake_claude_api` (loopback only, isolated HOME).

use crate::common;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bridge_testkit::fake_claude_api::{CLAUDE_OK_TEXT, FakeClaudeApi, USAGE_RESET_EPOCH, WRITTEN};
use bridge_testkit::require_claude;
use run_supervisor::{
    CancelOutcome, FailureKind, ProcId, Runner, StartError, Supervisor, SupervisorConfig, TaskSpec,
    TaskState,
};

use common::{assert_no_zombies, finish, wait_until};

const RUN_LIMIT: Duration = Duration::from_secs(120);

struct World {
    fake: FakeClaudeApi,
    _home: tempfile::TempDir,
    root: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World {
            fake: FakeClaudeApi::start().expect("fake endpoint"),
            _home: tempfile::tempdir().unwrap(),
            root: tempfile::tempdir().unwrap(),
        }
    }

    fn supervisor(&self, claude: &Path) -> Supervisor {
        Supervisor::new(self.config(claude))
    }

    fn config(&self, claude: &Path) -> SupervisorConfig {
        SupervisorConfig {
            claude_bin: Some(claude.to_path_buf()),
            opencode_bin: Some("/bin/true".into()),
            root: self.root.path().to_path_buf(),
            env: self.fake.claude_env(self._home.path()),
            kill_grace: Duration::from_secs(3),
            retries: 1,
            retry_delay: Duration::from_millis(100),
            ..SupervisorConfig::default()
        }
    }

    fn dir(&self, name: &str) -> std::path::PathBuf {
        let d = self.root.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d.canonicalize().unwrap()
    }
}

fn spec(cwd: &Path, model: &str, prompt: &str, read_only: bool) -> TaskSpec {
    let mut s = TaskSpec::new(prompt, cwd, "worker", "P/worker: claude test");
    s.model = Some(model.into());
    s.read_only = read_only;
    s
}

#[tokio::test]
async fn live_claude_plain_answer_with_session_usage_and_no_mcp() {
    let claude = require_claude!();
    let w = World::new();
    // With a registry: the finished task goes to the usage ledger.
    let state = tempfile::tempdir().unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        state_dir: Some(state.path().to_path_buf()),
        ..w.config(&claude)
    });
    let cwd = w.dir("plain");
    let id = sup
        .start(spec(&cwd, "claude-fake-text", "Say hello.", true))
        .unwrap();
    assert_eq!(sup.runner(id), Some(Runner::Claude));
    let s = finish(&sup, id, RUN_LIMIT).await;
    let out = sup.result(id, None, None).unwrap();
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}\n{}", out.stderr_tail);
    assert_eq!(out.final_text, CLAUDE_OK_TEXT);
    assert_eq!(s.session_id.as_deref().map(str::len), Some(36), "{s:?}");
    assert!(s.tokens.input > 0 && s.tokens.output > 0, "{:?}", s.tokens);
    assert!(s.cost > 0.0);
    // Its cost is what `claude -p` reported (total_cost_usd), with the Claude-equivalent of
    // its tokens; the ledger has it under the claude engine.
    let u = s.usage.clone().expect("usage recorded");
    assert_eq!(u.basis, run_supervisor::usage::CostBasis::Reported, "{u:?}");
    assert_eq!((u.cost, u.tokens), (s.cost, s.tokens));
    assert!(u.claude_equivalent.is_some_and(|c| c > 0.0), "{u:?}");
    let l = run_supervisor::usage::ledger::read(state.path()).unwrap();
    assert_eq!(l.rows.len(), 1, "{l:?}");
    assert_eq!(l.rows[0].engine_name(), "claude");
    assert_eq!(l.rows[0].usage, u);
    assert_eq!(s.attempts, 1);
    assert_eq!(
        s.opencode_version, None,
        "a Claude run reports no opencode version"
    );
    // The run offered only the read-only tools and no MCP tool at all.
    let main: Vec<_> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| !r.tools.is_empty())
        .collect();
    assert!(!main.is_empty());
    for r in &main {
        // Claude Code 2.1.328 also sends a `DeferredToolPlaceholder` entry, which is no tool.
        let mut t = r.tools.clone();
        t.retain(|n| n != "DeferredToolPlaceholder");
        t.sort();
        assert_eq!(t, ["Glob", "Grep", "Read"], "tools offered: {:?}", r.tools);
    }
    assert_no_zombies().await;
}

#[tokio::test]
async fn live_claude_tool_sets_are_enforced_read_only_vs_editing() {
    let claude = require_claude!();
    let w = World::new();
    let sup = w.supervisor(&claude);
    let ro = w.dir("ro");
    let ed = w.dir("ed");
    let outside = tempfile::tempdir().unwrap();
    let ro_target = ro.join("nope.txt");
    let ed_target = ed.join("made.txt");
    let out_target = outside.path().join("escape.txt");
    std::fs::write(ro.join("notes.txt"), "the secret word is pelican\n").unwrap();

    let a = sup
        .start(spec(
            &ro,
            "claude-fake-write",
            &format!("Write the file.\nWRITE_PATH={}", ro_target.display()),
            true,
        ))
        .unwrap();
    let b = sup
        .start(spec(
            &ed,
            "claude-fake-write",
            &format!("Write the file.\nWRITE_PATH={}", ed_target.display()),
            false,
        ))
        .unwrap();
    let c = sup
        .start(spec(
            &ed,
            "claude-fake-write",
            &format!("Write the file.\nWRITE_PATH={}", out_target.display()),
            false,
        ))
        .unwrap();
    let d = sup
        .start(spec(
            &ro,
            "claude-fake-read",
            &format!("Read it.\nREAD_PATH={}", ro.join("notes.txt").display()),
            true,
        ))
        .unwrap();
    for id in [a, b, c, d] {
        let s = finish(&sup, id, RUN_LIMIT).await;
        assert_eq!(s.state, TaskState::Succeeded, "task {id}: {s:?}");
        // The real `claude -p` runs inside the kernel fence too, and works there.
        assert!(
            s.sandbox
                .as_deref()
                .is_some_and(|t| t.starts_with("confined (Landlock ABI ")),
            "task {id}: {s:?}"
        );
    }
    // Read-only: Write does not exist for the run; nothing is written.
    let ra = sup.result(a, None, None).unwrap();
    assert!(!ro_target.exists(), "a read-only run wrote a file");
    assert_eq!(ra.tool_calls.len(), 1);
    assert_eq!(ra.tool_calls[0].tool, "Write");
    assert_eq!(ra.tool_calls[0].status, "error");
    let err = ra.tool_calls[0].error.clone().unwrap_or_default();
    assert!(err.contains("No such tool available: Write"), "{err}");
    assert!(ra.final_text.contains("error: true"), "{}", ra.final_text);
    // Editing: a write inside the task's directory is accepted ...
    let rb = sup.result(b, None, None).unwrap();
    assert_eq!(std::fs::read_to_string(&ed_target).unwrap(), WRITTEN);
    assert_eq!(rb.tool_calls[0].status, "completed", "{:?}", rb.tool_calls);
    assert_eq!(rb.tool_calls[0].title.as_deref(), ed_target.to_str());
    // ... one outside it is denied without a prompt.
    let rc = sup.result(c, None, None).unwrap();
    assert!(
        !out_target.exists(),
        "an editing run wrote outside its directory"
    );
    assert_eq!(rc.tool_calls[0].status, "error", "{:?}", rc.tool_calls);
    // Read-only tools work.
    let rd = sup.result(d, None, None).unwrap();
    assert_eq!(rd.tool_calls[0].tool, "Read");
    assert_eq!(rd.tool_calls[0].status, "completed");
    assert!(rd.final_text.contains("pelican"), "{}", rd.final_text);
    // What each run was offered.
    let offered: Vec<Vec<String>> = w
        .fake
        .requests()
        .into_iter()
        .filter(|r| !r.tools.is_empty())
        .map(|r| r.tools)
        .collect();
    assert!(offered.iter().any(|t| t.contains(&"Write".to_owned())));
    assert!(
        offered
            .iter()
            .all(|t| !t.iter().any(|n| n.starts_with("mcp__")))
    );
    assert_no_zombies().await;
}

#[tokio::test]
async fn live_claude_api_errors_are_classified_and_retried_by_the_same_rules() {
    let claude = require_claude!();
    let w = World::new();
    let sup = w.supervisor(&claude);
    let cwd = w.dir("errors");
    let cases = [
        ("claude-fake-429", true, FailureKind::RateLimit, "429", 2),
        ("claude-fake-529", true, FailureKind::Overloaded, "529", 2),
        ("claude-fake-401", true, FailureKind::Auth, "401", 1),
        (
            "claude-fake-long",
            true,
            FailureKind::ContextLength,
            "too long",
            1,
        ),
        // An editing task is never retried.
        ("claude-fake-529", false, FailureKind::Overloaded, "529", 1),
    ];
    let ids: Vec<_> = cases
        .iter()
        .map(|(m, ro, ..)| sup.start(spec(&cwd, m, "hi", *ro)).unwrap())
        .collect();
    for (id, (model, _, kind, needle, attempts)) in ids.into_iter().zip(cases) {
        let s = finish(&sup, id, RUN_LIMIT).await;
        assert_eq!(s.state, TaskState::Failed, "{model}: {s:?}");
        let f = s.failure.clone().unwrap();
        assert_eq!(f.kind, kind, "{model}: {f:?}");
        assert!(f.message.contains(needle), "{model}: {}", f.message);
        assert!(!f.advice.is_empty());
        assert_eq!(s.attempts, attempts, "{model}: attempts");
    }
    let auth = sup
        .list()
        .into_iter()
        .find(|s| s.model.as_deref() == Some("claude-fake-401"))
        .unwrap();
    assert!(
        auth.failure.unwrap().advice.contains("log in"),
        "Claude-specific auth advice"
    );
    assert_no_zombies().await;
}

#[tokio::test]
async fn live_claude_usage_limit_opens_a_quota_window_that_refuses_later_starts() {
    let claude = require_claude!();
    let w = World::new();
    let sup = w.supervisor(&claude);
    let cwd = w.dir("quota");
    let id = sup
        .start(spec(&cwd, "claude-fake-usage", "hi", true))
        .unwrap();
    let s = finish(&sup, id, RUN_LIMIT).await;
    let f = s.failure.clone().expect("a failure");
    assert_eq!(f.kind, FailureKind::Quota, "{f:?}");
    // The fake names 2030-01-01, years past the 7-day horizon: the window is held to the
    // horizon, and the message says so.
    assert!(
        f.message.contains("at the latest") && !f.message.contains("2030-01-01"),
        "{}",
        f.message
    );
    assert_eq!(s.attempts, 1, "quota is not retried");
    let named = UNIX_EPOCH + Duration::from_secs(USAGE_RESET_EPOCH);
    let windows = sup.quota_windows();
    assert_eq!(windows.len(), 1, "{windows:?}");
    let (account, until) = windows[0].clone();
    assert_eq!(account, "claude");
    let horizon = SystemTime::now() + run_supervisor::quota::HORIZON;
    assert!(until < named && until <= horizon, "{windows:?}");
    assert!(
        until + Duration::from_secs(600) > horizon,
        "held short of the horizon: {windows:?}"
    );
    let until_text = run_supervisor::utc::format(until);
    // Any later Claude start is refused at once, naming the time.
    let requests_before = w.fake.requests().len();
    match sup.start(spec(&cwd, "sonnet", "hi", true)) {
        Err(e @ StartError::QuotaWindow { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&until_text) && msg.contains("claude"), "{msg}");
        }
        other => panic!("expected a quota refusal, got {other:?}"),
    }
    assert_eq!(w.fake.requests().len(), requests_before);
    // Another account is not affected.
    let oc = sup
        .start(spec(&cwd, "openai/gpt-5", "hi", true))
        .expect("an opencode model still starts");
    assert_eq!(sup.runner(oc), Some(Runner::Opencode));
    let _ = finish(&sup, oc, RUN_LIMIT).await;
    assert!(SystemTime::now() < until);
}

#[tokio::test]
async fn live_claude_cancel_leaves_no_process_and_the_table_lists_the_run() {
    let claude = require_claude!();
    let w = World::new();
    let sup = w.supervisor(&claude);
    let cwd = w.dir("slow");
    let id = sup
        .start(spec(&cwd, "claude-fake-slow", "take your time", true))
        .unwrap();
    let s = wait_until(&sup, id, RUN_LIMIT, |s| {
        s.state == TaskState::Running && s.session_id.is_some()
    })
    .await;
    let pid = s.pid.expect("a running pid");
    let root = ProcId::of(pid).expect("claude process");
    let table = sup.processes();
    let row = table
        .iter()
        .find(|p| p.task_id == Some(id))
        .unwrap_or_else(|| panic!("task {id} not in the process table: {table:?}"));
    assert_eq!(row.pid, pid);
    assert_eq!(row.kind.as_str(), "claude -p");
    assert_eq!(row.session_id, s.session_id);
    assert_eq!(row.model.as_deref(), Some("claude-fake-slow"));
    assert_eq!(row.cwd.as_deref(), Some(cwd.as_path()));
    // Everything claude started is in its process group (or its descendants).
    let tree: Vec<ProcId> = procfs::process::all_processes()
        .unwrap()
        .flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|st| st.pgrp == pid)
        .filter_map(|st| ProcId::of(st.pid))
        .collect();
    assert!(tree.contains(&root));
    // The real claude -p runs 10 nicer than the supervisor (the default).
    let nicer = (common::nice_of(None) + 10).min(19);
    assert_eq!(common::nice_of(Some(pid)), nicer, "the claude -p run");
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
    let s = sup.status(id).unwrap();
    assert_eq!(s.state, TaskState::Cancelled);
    assert!(s.failure.is_none());
    common::assert_all_dead(&tree);
    assert!(!sup.processes().iter().any(|p| p.task_id == Some(id)));
    assert_no_zombies().await;
}

#[tokio::test]
async fn live_claude_run_past_its_time_limit_is_stopped() {
    let claude = require_claude!();
    let w = World::new();
    let sup = w.supervisor(&claude);
    let cwd = w.dir("timeout");
    let mut sp = spec(&cwd, "claude-fake-slow", "take your time", true);
    sp.timeout = Some(Duration::from_secs(4));
    let id = sup.start(sp).unwrap();
    let running = wait_until(&sup, id, RUN_LIMIT, |s| s.pid.is_some()).await;
    let root = ProcId::of(running.pid.unwrap()).expect("claude process");
    let s = finish(&sup, id, RUN_LIMIT).await;
    assert_eq!(s.state, TaskState::TimedOut, "{s:?}");
    assert_eq!(s.failure.unwrap().kind, FailureKind::Timeout);
    assert!(!root.exists(), "claude survived its timeout");
    assert_no_zombies().await;
}

#[tokio::test]
async fn live_claude_follow_up_resumes_the_session() {
    let claude = require_claude!();
    let w = World::new();
    let sup = w.supervisor(&claude);
    let cwd = w.dir("follow");
    let first = sup
        .start(spec(
            &cwd,
            "claude-fake-text",
            "First question: MARKER-ONE",
            true,
        ))
        .unwrap();
    let s1 = finish(&sup, first, RUN_LIMIT).await;
    assert_eq!(s1.state, TaskState::Succeeded, "{s1:?}");
    let session = s1.session_id.clone().expect("a session id");
    let mut follow = spec(
        &cwd,
        "claude-fake-text",
        "Second question: MARKER-TWO",
        true,
    );
    follow.session = Some(session.clone());
    let second = sup.start(follow).unwrap();
    let s2 = finish(&sup, second, RUN_LIMIT).await;
    assert_eq!(s2.state, TaskState::Succeeded, "{s2:?}");
    assert_eq!(s2.session_id.as_deref(), Some(session.as_str()));
    // The follow-up's request carried the first exchange.
    let last = w
        .fake
        .requests()
        .into_iter()
        .rev()
        .find(|r| !r.tools.is_empty())
        .unwrap();
    let body = last.body.to_string();
    assert!(
        body.contains("MARKER-ONE") && body.contains("MARKER-TWO"),
        "{body}"
    );
}

/// A repository's `.claude/settings.json` and `settings.local.json`, and the user's own
/// `settings.json` (where an earlier run's hook planted one), whose hooks write a marker in
/// Claude Code's config dir (which the run may write), at session start, prompt submit and
/// stop. Returns the markers.
fn plant_hooks(cwd: &Path, config_dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::create_dir_all(cwd.join(".claude")).unwrap();
    let mut markers = Vec::new();
    for (file, label) in [
        (cwd.join(".claude/settings.json"), "project"),
        (cwd.join(".claude/settings.local.json"), "local"),
        (config_dir.join("settings.json"), "user"),
    ] {
        let mut hooks = serde_json::Map::new();
        for event in ["SessionStart", "UserPromptSubmit", "Stop"] {
            let marker = config_dir.join(format!("hook-{label}-{event}"));
            let command = format!("touch '{}'", marker.display());
            hooks.insert(
                event.into(),
                serde_json::json!([{"hooks": [{"type": "command", "command": command}]}]),
            );
            markers.push(marker);
        }
        std::fs::write(file, serde_json::json!({ "hooks": hooks }).to_string()).unwrap();
    }
    markers
}

#[tokio::test]
async fn live_claude_no_hook_runs_in_a_delegated_run_neither_the_repositorys_nor_the_users() {
    let claude = require_claude!();
    let w = World::new();
    let config_dir = w._home.path().join(".claude");
    std::fs::create_dir_all(&config_dir).unwrap();
    let cwd = w.dir("hooked");
    let markers = plant_hooks(&cwd, &config_dir);
    let sup = w.supervisor(&claude);
    let id = sup
        .start(spec(&cwd, "claude-fake-text", "Say hello.", true))
        .unwrap();
    let s = finish(&sup, id, RUN_LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    for m in &markers {
        assert!(!m.exists(), "a hook ran: {}", m.display());
    }
    // The control: the same binary, in the same directory, without the runner's flags, runs
    // the project's hooks (so the test above would see them if they ran).
    let mut direct = std::process::Command::new(&claude);
    direct
        .args([
            "-p",
            "--output-format=stream-json",
            "--verbose",
            "--model=claude-fake-text",
        ])
        .current_dir(&cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .env_remove("CLAUDECODE")
        .env_remove("CLAUDE_CODE_ENTRYPOINT")
        .env_remove("CLAUDE_CODE_SESSION_ID");
    for (k, v) in w.fake.claude_env(w._home.path()) {
        direct.env(k, v);
    }
    let status = direct.arg("Say hello.").status().unwrap();
    assert!(status.success(), "{status:?}");
    let ran: Vec<_> = markers.iter().filter(|m| m.exists()).collect();
    assert!(
        ran.len() == markers.len(),
        "without the flags the hooks run: only {ran:?} of {markers:?}"
    );
}
