//! The real client: Claude Code (pinned, from npm) registers the built server with
//! `claude mcp add`, connects to it, and runs whole turns with `claude -p` against our fake
//! Anthropic endpoint, which scripts the tool calls and records the results Claude Code sends
//! back. Assertions are on what the fake endpoint received.

use crate::common::show;
use bridge_testkit::fake_anthropic::{
    FakeAnthropic, Seen, Step, call, call_with, poll, status_until_finished, text,
};
use bridge_testkit::fake_llm::OK_TEXT;
use bridge_testkit::{FakeLlm, OpencodeSandbox, real_claude, real_opencode};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const SERVER: &str = "opencode-bridge";

struct ClaudeWorld {
    claude: PathBuf,
    home: tempfile::TempDir,
    root: PathBuf,
    extra_env: Vec<(String, String)>,
}

impl ClaudeWorld {
    fn new(claude: PathBuf) -> ClaudeWorld {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("projects");
        std::fs::create_dir_all(root.join("demo")).unwrap();
        ClaudeWorld {
            claude,
            home,
            root,
            extra_env: Vec::new(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.claude);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .current_dir(self.root.join("demo"));
        cmd
    }

    /// `claude mcp add --scope user opencode-bridge -e ... -- <binary>`.
    fn register(&self, env: &[(&str, String)]) {
        let mut cmd = self.command();
        cmd.args(["mcp", "add", "--scope", "user", SERVER]);
        for (k, v) in env {
            cmd.arg("-e").arg(format!("{k}={v}"));
        }
        cmd.arg("--").arg(env!("CARGO_BIN_EXE_opencode-bridge"));
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "mcp add failed: {}", show(&out));
    }

    fn run_prompt(&self, fake: &FakeAnthropic, allowed: &[&str]) -> Output {
        let mut cmd = self.command();
        for (k, v) in fake.claude_env().into_iter().chain(self.extra_env.clone()) {
            cmd.env(k, v);
        }
        let tools: Vec<String> = allowed
            .iter()
            .map(|t| format!("mcp__{SERVER}__{t}"))
            .collect();
        cmd.args(["-p", "Use the opencode bridge tools as scripted."])
            .arg("--allowedTools")
            .arg(tools.join(","))
            .args(["--output-format", "json", "--max-turns", "100"]);
        cmd.output().unwrap()
    }
}

fn claude_or_skip() -> Option<PathBuf> {
    let found = real_claude();
    if found.is_none() {
        eprintln!("skipping: OPENCODE_BRIDGE_TEST_CLAUDE is not set (scripts/test.sh sets it)");
    }
    found
}

fn root_env(world: &ClaudeWorld) -> Vec<(&'static str, String)> {
    vec![(
        "OPENCODE_BRIDGE_ROOT",
        world.root.to_string_lossy().into_owned(),
    )]
}

#[test]
fn live_claude_mcp_get_reports_connected() {
    let Some(claude) = claude_or_skip() else {
        return;
    };
    let world = ClaudeWorld::new(claude);
    world.register(&root_env(&world));
    let out = world
        .command()
        .args(["mcp", "get", SERVER])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout.contains("Connected"), "{}", show(&out));
}

fn assert_path_exists(p: &Path) {
    assert!(p.exists(), "{} should exist", p.display());
}

#[test]
fn live_claude_drives_policy_and_validation_errors() {
    let Some(claude) = claude_or_skip() else {
        return;
    };
    let world = ClaudeWorld::new(claude);
    assert_path_exists(&world.root);
    world.register(&root_env(&world));
    let script: Vec<Step> = vec![
        call("opencode_policy", json!({})),
        call(
            "opencode_start",
            json!({"tier": "hard", "prompt": "design the experiment"}),
        ),
        call("opencode_sessions", json!({"limit": 0})),
        text("finished"),
    ];
    let fake = FakeAnthropic::start(SERVER, script).unwrap();
    let out = world.run_prompt(
        &fake,
        &["opencode_policy", "opencode_start", "opencode_sessions"],
    );
    assert!(
        out.status.success(),
        "{}\nunknown: {:?}",
        show(&out),
        fake.unknown()
    );
    let results = fake.tool_results();
    assert_eq!(results.len(), 3, "{results:#?}");
    let policy = &results[0];
    assert!(!policy.is_error, "{policy:?}");
    assert!(policy.text.contains("blueprint"), "{}", policy.text);
    let refused = &results[1];
    assert!(refused.is_error, "{refused:?}");
    assert!(refused.text.contains("hard"), "{}", refused.text);
    let invalid = &results[2];
    assert!(invalid.is_error, "{invalid:?}");
    assert!(invalid.text.contains("`limit`"), "{}", invalid.text);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("finished"), "{stdout}");
}

fn session_of(seen: &Seen) -> String {
    let re = regex::Regex::new(r"session: (ses_[0-9A-Za-z]+)").unwrap();
    seen.results
        .iter()
        .rev()
        .find_map(|r| re.captures(&r.text).map(|c| c[1].to_string()))
        .unwrap_or_else(|| "ses_unknown".into())
}

/// The real Claude Code and the real opencode, or `None` (with a note) outside CI when either
/// is not configured; under `CI=true` a missing one fails the test.
fn claude_and_opencode_or_skip() -> Option<(PathBuf, PathBuf)> {
    let claude = claude_or_skip()?;
    let Some(oc) = real_opencode() else {
        eprintln!("skipping: OPENCODE_BRIDGE_TEST_OPENCODE is not set");
        return None;
    };
    Some((claude, oc))
}

/// The whole loop with the real Claude Code and the real opencode (answering through the fake
/// LLM), sessions read from opencode's own store (the default backend): policy, start -> status -> result, sessions, session output, rename, processes, cancel.
#[test]
fn live_claude_drives_every_tool_on_a_real_opencode_run() {
    let Some((claude, oc)) = claude_and_opencode_or_skip() else {
        return;
    };
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(120);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = ClaudeWorld::new(claude);
    let project = sb.project_dir().to_string_lossy().into_owned();
    let mut env: Vec<(&str, String)> = Vec::new();
    let sandbox_env = sb.env();
    for (k, v) in &sandbox_env {
        if k != "PWD" && k != "HOME" {
            env.push((k.as_str(), v.clone()));
        }
    }
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_ROOT", project.clone()));
    env.push(("OPENCODE_BRIDGE_MODEL", "fk/ok".into()));
    env.push(("OPENCODE_BRIDGE_KILL_GRACE_MS", "1000".into()));
    env.push(("RUST_LOG", "opencode_bridge=debug".into()));
    // A run engine task has the pid and process-table row this script waits for; the other
    // Claude Code tests here delegate on the default engine, serve.
    env.push(("OPENCODE_BRIDGE_ENGINE", "run".into()));
    world.register(&env);

    let script: Vec<Step> = vec![
        call("opencode_policy", json!({})),
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Say hello to the reviewers\nKeep it short.", "lane": "docs"}),
        ),
        status_until_finished("1"),
        call("opencode_result", json!({"id": "1"})),
        call("opencode_sessions", json!({"limit": 10})),
        call_with(
            "opencode_session_output",
            |seen| json!({"id": session_of(seen), "mode": "tail"}),
        ),
        call_with(
            "opencode_session_rename",
            |seen| json!({"id": session_of(seen), "title": "DOCS/worker: greet the reviewers briefly"}),
        ),
        call_with(
            "opencode_session_rename",
            |seen| json!({"id": session_of(seen), "title": "hello"}),
        ),
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Stream a long answer slowly", "model": "fk/slow"}),
        ),
        poll(
            "opencode_status",
            |_| json!({"id": "2"}),
            |r| r.contains("pid ") || r.contains("failed"),
            Duration::from_millis(500),
            120,
        ),
        call("opencode_processes", json!({})),
        call("opencode_cancel", json!({"id": "2"})),
        call("opencode_list", json!({})),
        text("finished"),
    ];
    let fake = FakeAnthropic::start(SERVER, script).unwrap();
    let all: Vec<&str> = vec![
        "opencode_policy",
        "opencode_start",
        "opencode_status",
        "opencode_result",
        "opencode_sessions",
        "opencode_session_output",
        "opencode_session_rename",
        "opencode_processes",
        "opencode_cancel",
        "opencode_list",
    ];
    let out = world.run_prompt(&fake, &all);
    let results = fake.tool_results();
    let dump = || format!("{}\nresults: {results:#?}", show(&out));
    assert!(out.status.success(), "{}", dump());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("finished"),
        "{}",
        dump()
    );

    let one = |tool: &str| -> Vec<String> {
        fake.results_of(tool)
            .into_iter()
            .map(|r| {
                assert!(!r.is_error, "{tool} failed: {}", r.text);
                r.text
            })
            .collect()
    };
    assert!(one("opencode_policy")[0].starts_with("mode: blueprint"));
    let starts = one("opencode_start");
    assert!(
        starts[0].starts_with("started task 1: agent worker, tier easy, mode blueprint"),
        "{}",
        starts[0]
    );
    assert!(
        starts[0].contains("title: DOCS/worker: Say hello to the reviewers"),
        "{}",
        starts[0]
    );
    let statuses = one("opencode_status");
    let done = |r: &str| r.contains("succeeded") || r.contains("failed") || r.contains("timed_out");
    let first_done = statuses
        .iter()
        .find(|s| s.starts_with("task 1") && done(s))
        .expect("task 1 ended");
    assert!(first_done.contains("succeeded"), "{first_done}");
    let result = &one("opencode_result")[0];
    assert!(result.contains(OK_TEXT), "{result}");
    let sessions = &one("opencode_sessions")[0];
    assert!(
        sessions.contains("DOCS/worker: Say hello to the reviewers"),
        "{sessions}"
    );
    assert!(sessions.contains("succeeded"), "{sessions}");
    assert!(sessions.contains("backend store"), "{sessions}");
    let output = &one("opencode_session_output")[0];
    assert!(output.contains(OK_TEXT), "{output}");
    assert!(output.contains("user: "), "{output}");
    let renames = one("opencode_session_rename");
    assert!(renames[0].contains("renamed ses_"), "{}", renames[0]);
    assert!(!renames[0].contains("warning"), "{}", renames[0]);
    assert!(
        renames[1].contains("warning: the title breaks"),
        "{}",
        renames[1]
    );
    assert!(starts[1].starts_with("started task 2"), "{}", starts[1]);
    let procs = &one("opencode_processes")[0];
    assert!(procs.contains("[task 2]"), "{procs}");
    let cancel = &one("opencode_cancel")[0];
    assert!(cancel.starts_with("task 2 cancelled"), "{cancel}");
    let list = &one("opencode_list")[0];
    assert!(list.contains("2 delegated task(s); 0 unfinished"), "{list}");
    // The fake LLM really served the delegated run, with the bridge's run instructions.
    let chats = llm.chat_requests("ok");
    assert!(
        chats
            .iter()
            .any(|r| r.body.contains("Never commit or push") || r.body.contains("never commit")),
        "run instructions missing"
    );
    for r in &results {
        eprintln!("--- {:?}\n{}", r.tool, r.text);
    }
}

/// The bridge's environment for live tests with the real opencode answering through `llm`.
fn live_bridge_env(sb: &OpencodeSandbox, oc: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = sb
        .env()
        .into_iter()
        .filter(|(k, _)| k != "PWD" && k != "HOME")
        .collect();
    env.push(("OPENCODE_BIN".into(), oc.to_string_lossy().into_owned()));
    env.push((
        "OPENCODE_BRIDGE_ROOT".into(),
        sb.project_dir().to_string_lossy().into_owned(),
    ));
    env.push(("OPENCODE_BRIDGE_MODEL".into(), "fk/ok".into()));
    env.push(("OPENCODE_BRIDGE_KILL_GRACE_MS".into(), "1000".into()));
    env.push(("OPENCODE_BRIDGE_RETRIES".into(), "0".into()));
    env
}

/// Claude Code with MCP tasks on in SDK mode: the feature flag forced through the disk cache of
/// feature values, and background tasks enabled.
fn enable_background_tasks(world: &mut ClaudeWorld) {
    std::fs::write(
        world.home.path().join(".claude.json"),
        json!({"hasCompletedOnboarding": true, "cachedGrowthBookFeatures": {"tengu_glowing_lark": true}})
            .to_string(),
    )
    .unwrap();
    world.extra_env.push((
        "CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF".into(),
        "1".into(),
    ));
    world
        .extra_env
        .push(("CLAUDE_AUTO_BACKGROUND_TASKS".into(), "1".into()));
}

/// Runs one SDK-mode session (`-p --input-format stream-json`): sends `prompt`, keeps stdin open
/// until `until` holds for the fake endpoint's requests (or `limit` passes), then closes it.
fn run_sdk_session(
    world: &ClaudeWorld,
    fake: &FakeAnthropic,
    allowed: &[&str],
    prompt: &str,
    until: impl Fn(&FakeAnthropic) -> bool,
    limit: Duration,
) -> (Output, bool) {
    use std::io::Write;
    let mut cmd = world.command();
    for (k, v) in fake.claude_env().into_iter().chain(world.extra_env.clone()) {
        cmd.env(k, v);
    }
    let tools: Vec<String> = allowed
        .iter()
        .map(|t| format!("mcp__{SERVER}__{t}"))
        .collect();
    cmd.args([
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
    ])
    .arg("--allowedTools")
    .arg(tools.join(","))
    .args(["--max-turns", "50"])
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"type": "user", "message": {"role": "user", "content": prompt}})
    )
    .unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + limit;
    let mut reached = false;
    while std::time::Instant::now() < deadline {
        if until(fake) {
            reached = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let the last turn finish before the session ends.
    std::thread::sleep(Duration::from_secs(2));
    drop(stdin);
    (child.wait_with_output().unwrap(), reached)
}

fn mentions(body: &serde_json::Value, needle: &str) -> bool {
    body.get("messages")
        .is_some_and(|m| m.to_string().contains(needle))
}

/// SDK mode with background tasks: the model starts a delegation, the bridge answers with an MCP
/// task, Claude Code polls tasks/get by itself, and a later request to the model carries the task
/// notification with the run's answer; the model never calls status, wait or result.
#[test]
fn live_sdk_mode_delegation_runs_as_a_task_and_its_result_reaches_the_model() {
    let Some((claude, oc)) = claude_and_opencode_or_skip() else {
        return;
    };
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let mut world = ClaudeWorld::new(claude);
    enable_background_tasks(&mut world);
    let env = live_bridge_env(&sb, &oc);
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    world.register(&env);
    let script: Vec<Step> = vec![
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Say hello to the reviewers"}),
        ),
        text("Delegated; I will wait for the notification."),
        text("The delegated task reported back."),
    ];
    let fake = FakeAnthropic::start(SERVER, script).unwrap();
    let (out, reached) = run_sdk_session(
        &world,
        &fake,
        &[
            "opencode_start",
            "opencode_status",
            "opencode_wait",
            "opencode_result",
        ],
        "Delegate the greeting to opencode.",
        |fake| {
            fake.requests()
                .iter()
                .any(|b| mentions(b, "task-notification") && mentions(b, OK_TEXT))
        },
        Duration::from_secs(180),
    );
    let bodies = fake.requests();
    if let Ok(path) = std::env::var("OPENCODE_BRIDGE_TEST_DUMP") {
        let _ = std::fs::write(
            path,
            serde_json::to_string_pretty(&bodies).unwrap_or_default(),
        );
    }
    let dump = || {
        format!(
            "{}\nresults: {:#?}\nlast request: {}",
            show(&out),
            fake.tool_results(),
            bodies
                .last()
                .map(|b| b["messages"].to_string())
                .unwrap_or_default()
                .chars()
                .rev()
                .take(3000)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        )
    };
    assert!(
        reached,
        "no request carried the task notification with the run's answer\n{}",
        dump()
    );
    // The start came back as a background task, not as the start text.
    let starts = fake.results_of("opencode_start");
    assert_eq!(starts.len(), 1, "{}", dump());
    assert!(
        starts[0].text.contains("started server-side task 1"),
        "{}",
        dump()
    );
    // Only the start was called: no status, wait or result.
    let called: Vec<Option<String>> = fake.tool_results().into_iter().map(|r| r.tool).collect();
    assert_eq!(
        called,
        vec![Some("opencode_start".to_owned())],
        "{}",
        dump()
    );
}

/// The task id Claude Code gave the background call (`use TaskStop with task_id "…"`).
fn claude_task_id(seen: &Seen) -> String {
    let re = regex::Regex::new(r#"TaskStop with task_id "([^"]+)""#).unwrap();
    seen.results
        .iter()
        .find_map(|r| re.captures(&r.text).map(|c| c[1].to_string()))
        .unwrap_or_else(|| "unknown".into())
}

fn notification_in(bodies: &[serde_json::Value], status: &str) -> Option<String> {
    let tag = format!("<status>{status}</status>");
    bodies.iter().rev().find_map(|b| {
        let text = b.get("messages")?.to_string();
        let at = text.find("<task-notification>")?;
        let note = &text[at..];
        note.contains(&tag)
            .then(|| note.chars().take(4000).collect())
    })
}

/// A run that fails (the fake LLM answers 401) reaches the model as a failed task with its kind;
/// TaskStop from the model cancels a running delegation (tasks/cancel) and leaves no process.
#[test]
fn live_sdk_mode_a_failed_run_is_a_failed_task_and_task_stop_cancels_the_run() {
    let Some((claude, oc)) = claude_and_opencode_or_skip() else {
        return;
    };
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(300);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let mut world = ClaudeWorld::new(claude);
    enable_background_tasks(&mut world);
    let env = live_bridge_env(&sb, &oc);
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    world.register(&env);
    let script: Vec<Step> = vec![
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Say hello", "model": "fk/e401"}),
        ),
        text("Waiting for the first delegation."),
        // The failed task's notification turn: start a slow one, then stop it.
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Stream slowly", "model": "fk/slow"}),
        ),
        Box::new(|seen: &Seen| {
            // Give the run time to start its process before stopping it.
            std::thread::sleep(Duration::from_secs(8));
            bridge_testkit::fake_anthropic::Action::Call {
                name: "=TaskStop".into(),
                input: json!({"task_id": claude_task_id_of_last(seen)}),
            }
        }),
        text("Stopped it."),
        text("Done."),
    ];
    let fake = FakeAnthropic::start(SERVER, script).unwrap();
    let (out, reached) = run_sdk_session(
        &world,
        &fake,
        &["opencode_start"],
        "Delegate twice.",
        |fake| {
            notification_in(&fake.requests(), "failed").is_some()
                && fake
                    .tool_results()
                    .iter()
                    .any(|r| r.tool.as_deref() == Some("=TaskStop"))
        },
        Duration::from_secs(240),
    );
    let bodies = fake.requests();
    if let Ok(path) = std::env::var("OPENCODE_BRIDGE_TEST_DUMP") {
        let _ = std::fs::write(
            path,
            serde_json::to_string_pretty(&bodies).unwrap_or_default(),
        );
    }
    let dump = || format!("{}\nresults: {:#?}", show(&out), fake.tool_results());
    assert!(reached, "{}", dump());
    let failed = notification_in(&bodies, "failed").unwrap();
    // Claude Code folds the spacing of the result; the kind and its advice are there.
    assert!(
        failed.contains("task 1 failed") && failed.contains("failure: auth"),
        "{failed}"
    );
    // The stopped run: no process of it is left, and its task reads cancelled.
    std::thread::sleep(Duration::from_secs(3));
    // Only this test's runs count (their environment names its sandbox): other tests on the
    // machine run `fk/slow` too.
    let ours = sb.root().to_string_lossy().into_owned();
    let alive: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let args = std::fs::read(e.path().join("cmdline")).ok()?;
            let args = String::from_utf8_lossy(&args).replace('\0', " ");
            let env = std::fs::read(e.path().join("environ")).ok()?;
            (args.contains("run")
                && args.contains("fk/slow")
                && String::from_utf8_lossy(&env).contains(&ours))
            .then_some(args)
        })
        .collect();
    assert!(
        alive.is_empty(),
        "the stopped run is still alive: {alive:?}"
    );
    // The bridge recorded the stopped task as cancelled (its registry, under the sandbox's state).
    let record = sb.root().join("state/opencode-bridge/tasks/2/task.json");
    let task: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", record.display(), dump()));
    assert_eq!(task["state"], "cancelled", "{task}");
    let stop = fake
        .tool_results()
        .into_iter()
        .find(|r| r.tool.as_deref() == Some("=TaskStop"))
        .unwrap_or_else(|| panic!("no TaskStop result\n{}", dump()));
    assert!(!stop.is_error, "{stop:?}");
}

/// The task id of the newest background call.
fn claude_task_id_of_last(seen: &Seen) -> String {
    let last = Seen {
        results: seen.results.iter().rev().take(1).cloned().collect(),
    };
    claude_task_id(&last)
}

/// With tool search on (Claude Code's default), the first model request carries the full
/// schema of each always-loaded tool, and the others wait behind tool search.
#[test]
fn live_tool_search_keeps_the_always_loaded_tools_in_the_first_request() {
    let Some(claude) = claude_or_skip() else {
        return;
    };
    let mut world = ClaudeWorld::new(claude);
    world.register(&root_env(&world));
    world
        .extra_env
        .push(("ENABLE_TOOL_SEARCH".into(), "true".into()));
    let fake = FakeAnthropic::start(SERVER, vec![text("nothing to do")]).unwrap();
    let out = world.run_prompt(&fake, &["opencode_start"]);
    assert!(out.status.success(), "{}", show(&out));
    let bodies = fake.requests();
    let first = bodies
        .iter()
        .find(|b| {
            b.get("tools")
                .is_some_and(|t| t.to_string().contains("mcp__"))
        })
        .unwrap_or_else(|| panic!("no main-loop request: {bodies:#?}"));
    let tools = first["tools"].as_array().unwrap();
    let schema_of = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == format!("mcp__{SERVER}__{name}"))
            .map(|t| t["input_schema"].clone())
    };
    for name in [
        "opencode_start",
        "opencode_wait",
        "opencode_result",
        "opencode_policy",
    ] {
        let schema = schema_of(name).unwrap_or_else(|| panic!("{name} not loaded: {tools:#?}"));
        assert!(schema["properties"].is_object(), "{name}: {schema}");
    }
    assert!(
        schema_of("opencode_start").unwrap()["properties"]["tier"]["enum"].is_array(),
        "the full schema of opencode_start"
    );
    // Deferred ones are not sent with a schema.
    assert!(schema_of("opencode_session_rename").is_none(), "{tools:#?}");
}

/// Interactive Claude Code on a pseudo-terminal: the parent keeps the master side, a reader
/// thread collects everything the UI draws, and keys are written to the master.
mod tty {
    use std::io::{Read, Write};
    use std::process::{Child, Command, Stdio};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    pub struct Tty {
        child: Child,
        keys: std::fs::File,
        out: Arc<Mutex<Vec<u8>>>,
    }

    impl Tty {
        /// Starts `cmd` with its stdin, stdout and stderr on a new 50x200 pseudo-terminal, in a
        /// process group of its own.
        pub fn spawn(mut cmd: Command) -> Tty {
            use std::os::unix::process::CommandExt;
            let size = nix::pty::Winsize {
                ws_row: 50,
                ws_col: 200,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            let pty = nix::pty::openpty(&size, None).expect("openpty");
            let slave = || Stdio::from(pty.slave.try_clone().unwrap());
            cmd.stdin(slave())
                .stdout(slave())
                .stderr(slave())
                .process_group(0);
            let child = cmd.spawn().expect("spawn claude on the pty");
            drop(cmd);
            drop(pty.slave);
            let master = std::fs::File::from(pty.master);
            let keys = master.try_clone().unwrap();
            let out = Arc::new(Mutex::new(Vec::new()));
            let sink = out.clone();
            std::thread::spawn(move || {
                let mut master = master;
                let mut buf = [0u8; 8192];
                // Ends with EIO once every holder of the slave side is gone.
                while let Ok(n) = master.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
            Tty { child, keys, out }
        }

        pub fn send(&mut self, keys: &str) {
            self.keys.write_all(keys.as_bytes()).unwrap();
            self.keys.flush().unwrap();
        }

        /// Everything drawn so far, without escape sequences.
        pub fn text(&self) -> String {
            plain(&self.out.lock().unwrap())
        }

        pub fn len(&self) -> usize {
            self.out.lock().unwrap().len()
        }

        /// The last `n` characters drawn, for failure messages.
        pub fn tail(&self, n: usize) -> String {
            let text = self.text();
            let skip = text.chars().count().saturating_sub(n);
            text.chars().skip(skip).collect()
        }

        /// Waits until `ready` holds for the text drawn since byte `from` (escape sequences
        /// removed), at most `limit`.
        pub fn wait_for(&self, from: usize, limit: Duration, ready: impl Fn(&str) -> bool) -> bool {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                let raw = self.out.lock().unwrap().get(from..).map(|b| b.to_vec());
                if raw.is_some_and(|b| ready(&plain(&b))) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            false
        }

        /// Waits until the UI has drawn nothing for `quiet` (at most `limit`).
        pub fn settle(&self, quiet: Duration, limit: Duration) {
            let deadline = Instant::now() + limit;
            let mut last = (self.len(), Instant::now());
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                let now = self.len();
                if now != last.0 {
                    last = (now, Instant::now());
                } else if last.1.elapsed() >= quiet {
                    return;
                }
            }
        }

        /// Waits for the process to end, at most `limit`.
        pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                if let Some(status) = self.child.try_wait().unwrap() {
                    return Some(status);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            None
        }
    }

    /// `raw` terminal output as text: escape sequences (CSI, OSC, DCS and two-byte ones) removed.
    pub fn plain(raw: &[u8]) -> String {
        let ansi = regex::Regex::new(
            r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[PX^_][^\x1b]*\x1b\\|\x1b.",
        )
        .unwrap();
        ansi.replace_all(&String::from_utf8_lossy(raw), "")
            .into_owned()
    }

    impl Drop for Tty {
        /// After a failure: SIGTERM to Claude Code's process group (the bridge in it stops its
        /// runs on SIGTERM), then SIGKILL for Claude Code if it is still there.
        fn drop(&mut self) {
            if self.child.try_wait().ok().flatten().is_none() {
                let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
                if self.wait_exit(Duration::from_secs(10)).is_none() {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                }
            }
        }
    }
}

/// Live processes (pid, command line) whose environment carries `needle` (`KEY=value`).
fn processes_with_env(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // A zombie is dead already, only not yet reaped.
        if stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
    }
    found
}

/// Every process carrying `needle` in its environment, sampled twice a second on a thread
/// until [`Sampler::seen`] (or drop).
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<std::collections::BTreeMap<u32, String>>>,
}

impl Sampler {
    fn start(needle: String) -> Sampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = std::collections::BTreeMap::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                seen.extend(processes_with_env(&needle));
                std::thread::sleep(Duration::from_millis(500));
            }
            seen
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling; every (pid, command line) seen.
    fn seen(mut self) -> std::collections::BTreeMap<u32, String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Interactive Claude Code (no `-p`) on a pseudo-terminal, with MCP tasks at its default (no
/// feature flag forced): the model starts a delegation, the bridge answers with an MCP task, the
/// run finishes in the real opencode, and a later request to the model carries the task
/// notification with the run's answer, the model never having called status, wait or result.
/// `/exit` then ends Claude Code, and no process of the session (Claude Code, the bridge,
/// opencode) is left.
#[test]
fn live_interactive_claude_code_delegation_runs_as_a_task_and_leaves_no_process() {
    let Some((claude, oc)) = claude_and_opencode_or_skip() else {
        return;
    };
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = ClaudeWorld::new(claude);
    let script: Vec<Step> = vec![
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Say hello to the reviewers"}),
        ),
        text("Delegated; I will wait for the notification."),
        text("The delegated task reported back."),
    ];
    let fake = FakeAnthropic::start(SERVER, script).unwrap();
    let fake_key = fake
        .claude_env()
        .into_iter()
        .find_map(|(k, v)| (k == "ANTHROPIC_API_KEY").then_some(v))
        .unwrap();
    let project = world.root.join("demo");
    // No dialog may block the UI: onboarding done, a theme chosen, the key approved (Claude
    // Code remembers the last 20 characters of a key), the folder trusted. Written before
    // `claude mcp add`, which adds the server to this file.
    std::fs::write(
        world.home.path().join(".claude.json"),
        json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": {
                "approved": [fake_key[fake_key.len().saturating_sub(20)..].to_string()],
                "rejected": []
            },
            "projects": {project.to_string_lossy(): {
                "hasTrustDialogAccepted": true,
                "hasCompletedProjectOnboarding": true
            }}
        })
        .to_string(),
    )
    .unwrap();
    let mut env = live_bridge_env(&sb, &oc);
    // A warm server whose bridge Claude Code ended before the bridge's exit finished is left
    // to its watcher, which stops it once idle this long: nothing of the session outlives that.
    env.push(("OPENCODE_BRIDGE_SERVE_IDLE_MS".into(), "5000".into()));
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    world.register(&env);
    // Every process of the session inherits this HOME: Claude Code passes it to the bridge,
    // the bridge to opencode.
    let marker = format!("HOME={}", world.home.path().display());
    let sampler = Sampler::start(marker.clone());
    let mut cmd = world.command();
    for (k, v) in fake.claude_env() {
        cmd.env(k, v);
    }
    cmd.env("TERM", "xterm-256color")
        .arg("--allowedTools")
        .arg(format!("mcp__{SERVER}__opencode_start"));
    let mut tty = tty::Tty::spawn(cmd);
    let dump = |tty: &tty::Tty, fake: &FakeAnthropic| {
        format!(
            "screen (last 4000 characters, escapes removed):\n{}\nresults: {:#?}\nrequests: {}",
            tty.tail(4000),
            fake.tool_results(),
            fake.requests().len()
        )
    };
    // The UI is up once it shows the input prompt and the mode line under it; then let it
    // finish drawing before typing.
    let ui_up = |s: &str| {
        s.contains('❯') && (s.contains("shift+tab to cycle") || s.contains("for shortcuts"))
    };
    assert!(
        tty.wait_for(0, Duration::from_secs(120), ui_up),
        "the UI never came up\n{}",
        dump(&tty, &fake)
    );
    tty.settle(Duration::from_secs(2), Duration::from_secs(30));
    // Type like a user: the text, then (once it is echoed in the input box) Enter.
    let typed = |tty: &mut tty::Tty, keys: &str| {
        let from = tty.len();
        tty.send(keys);
        assert!(
            tty.wait_for(from, Duration::from_secs(30), |s| squashed(s)
                .contains(&squashed(keys))),
            "{keys:?} was never echoed\n{}",
            dump(tty, &fake)
        );
        tty.settle(Duration::from_millis(500), Duration::from_secs(10));
        tty.send("\r");
    };
    typed(&mut tty, "Delegate the greeting to opencode.");
    let notified = |fake: &FakeAnthropic| {
        fake.requests()
            .iter()
            .any(|b| mentions(b, "task-notification") && mentions(b, OK_TEXT))
    };
    // The run takes 20-30 s of real opencode on a loaded 2-core machine; Claude Code polls
    // tasks/get by itself and starts a turn when the task completes.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while std::time::Instant::now() < deadline && !(notified(&fake) && fake.steps_done() >= 3) {
        std::thread::sleep(Duration::from_millis(250));
    }
    let bodies = fake.requests();
    if let Ok(path) = std::env::var("OPENCODE_BRIDGE_TEST_DUMP") {
        let _ = std::fs::write(
            path,
            serde_json::to_string_pretty(&bodies).unwrap_or_default(),
        );
    }
    let starts = fake.results_of("opencode_start");
    assert_eq!(starts.len(), 1, "{}", dump(&tty, &fake));
    // Claude Code's placeholder for a call answered with a task (the model is told to wait).
    assert!(
        starts[0].text.contains("started server-side task 1"),
        "{}",
        dump(&tty, &fake)
    );
    assert!(
        notified(&fake),
        "no request carried the task notification with the run's answer\n{}",
        dump(&tty, &fake)
    );
    let note = notification_in(&bodies, "completed").unwrap_or_default();
    assert!(note.contains("task 1  succeeded"), "{note}");
    // Only the start was called: no status, wait or result.
    let called: Vec<Option<String>> = fake.tool_results().into_iter().map(|r| r.tool).collect();
    assert_eq!(
        called,
        vec![Some("opencode_start".to_owned())],
        "{}",
        dump(&tty, &fake)
    );
    // The model's answer to the notification is on the screen: the session is idle again.
    assert!(
        tty.wait_for(0, Duration::from_secs(60), |s| squashed(s)
            .contains(&squashed("The delegated task reported back."))),
        "the answer to the notification was never shown\n{}",
        dump(&tty, &fake)
    );
    tty.settle(Duration::from_secs(2), Duration::from_secs(30));
    // Exit the way a user does.
    typed(&mut tty, "/exit");
    let status = tty.wait_exit(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "Claude Code did not exit cleanly on /exit: {status:?}\n{}",
        dump(&tty, &fake)
    );
    // Claude Code ends the bridge with SIGINT; give it time to finish (and a server it left, its
    // watcher time to stop it).
    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    let mut left = processes_with_env(&marker);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        left = processes_with_env(&marker);
    }
    let seen = sampler.seen();
    // The sampling saw the whole session: Claude Code, the bridge and the opencode run.
    for part in [
        claude_path_name(&world),
        "opencode-bridge".to_owned(),
        "opencode run".to_owned(),
    ] {
        assert!(
            seen.values().any(|c| c.contains(&part)),
            "no process like {part:?} was seen: {seen:#?}"
        );
    }
    assert!(
        left.is_empty(),
        "processes of the session left after exit: {left:#?}\n{}",
        dump(&tty, &fake)
    );
}

/// `text` without whitespace: the UI draws many spaces as cursor moves, so screen text is
/// compared squashed.
fn squashed(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The file name of the Claude Code binary as it appears in a command line.
fn claude_path_name(world: &ClaudeWorld) -> String {
    world
        .claude
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "claude".into())
}

/// Claude Code hands the model a result's `structuredContent` (as JSON) instead of its text, so
/// by default the bridge gives it no structured results and the model reads the text; with
/// `OPENCODE_BRIDGE_STRUCTURED=on` it would read the JSON (the reason for the default).
#[test]
fn live_claude_code_model_reads_the_text_of_tools_with_structured_results() {
    let Some(claude) = claude_or_skip() else {
        return;
    };
    for (setting, json_expected) in [(None, false), (Some("on"), true)] {
        let world = ClaudeWorld::new(claude.clone());
        let mut env = root_env(&world);
        if let Some(s) = setting {
            env.push(("OPENCODE_BRIDGE_STRUCTURED", s.to_owned()));
        }
        world.register(&env);
        let script: Vec<Step> = vec![
            call("opencode_policy", json!({})),
            call("opencode_list", json!({})),
            text("finished"),
        ];
        let fake = FakeAnthropic::start(SERVER, script).unwrap();
        let out = world.run_prompt(&fake, &["opencode_policy", "opencode_list"]);
        assert!(out.status.success(), "{setting:?}: {}", show(&out));
        let results = fake.tool_results();
        assert_eq!(results.len(), 2, "{setting:?}: {results:#?}");
        let (policy, list) = (&results[0].text, &results[1].text);
        if json_expected {
            let data: serde_json::Value = serde_json::from_str(policy.trim())
                .unwrap_or_else(|e| panic!("expected the structured JSON ({e}): {policy}"));
            assert_eq!(data["mode"], "blueprint", "{policy}");
        } else {
            assert!(policy.starts_with("mode: blueprint (from"), "{policy}");
            assert!(policy.contains("allowed agents:"), "{policy}");
            assert!(list.starts_with("0 delegated task(s)"), "{list}");
        }
    }
}
