//! The serve engine on the real OpenCode 2.0 preview (`lildax` from npm
//! `@opencode-ai/cli-linux-x64@1.18.18`, `OPENCODE_BRIDGE_TEST_OPENCODE2`) and our fake LLM:
//! tasks as sessions on the bridge's warm local server of it, in the task's world and fence.
//! An answer with its usage, an edit, a follow-up in the same session, a read-only agent made
//! by its model to write writing nothing, a write outside the root refused by the fence, a
//! cancel and a time limit each ending the turn, and no server of ours left when the
//! supervisor ends.

use crate::common;

use std::path::Path;
use std::time::Duration;

use bridge_policy::roster::{AgentInfo, AgentSource, config_overlay};
use bridge_testkit::fake_llm::OK_TEXT;
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode2};
use common::live::{
    StopNotedServers, call, fake_spec, noted_servers, owner_gone, serve_supervisor,
    serve_supervisor_config,
};
use common::*;
use run_supervisor::{CancelOutcome, Supervisor, SupervisorConfig, TaskSpec, TaskState};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(240);

fn supervisor(oc: &Path, sb: &OpencodeSandbox) -> Supervisor {
    serve_supervisor(oc, sb, Some(sb.root().join("bridge-state")))
}

fn spec(cwd: &Path, model: &str, prompt: &str) -> TaskSpec {
    fake_spec(cwd, "build", "V2", model, prompt)
}

/// The `lildax` processes alive now whose environment names the sandbox (its worlds are in
/// it): the servers this test's supervisor started, or any the preview started on its own.
fn servers_of(oc: &Path, sb: &OpencodeSandbox) -> Vec<i32> {
    let exe = oc.canonicalize().unwrap();
    let root = sb.root().to_string_lossy().into_owned();
    procfs::process::all_processes()
        .unwrap()
        .flatten()
        .filter(|p| p.exe().is_ok_and(|e| e == exe))
        .filter(|p| p.stat().is_ok_and(|s| s.state != 'Z'))
        .filter(|p| {
            p.environ()
                .is_ok_and(|env| env.values().any(|v| v.to_string_lossy().contains(&root)))
        })
        .map(|p| p.pid)
        .collect()
}

#[tokio::test]
async fn live_opencode2_answers_edits_follows_up_and_keeps_read_only_agents_read_only() {
    let oc = require_opencode2!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# app\n")]);
    let sup = supervisor(&oc, &sb);
    let caps = sup.capabilities().await.unwrap();
    assert_eq!(caps.contract, opencode_client::Contract::V2, "{caps:?}");

    // An answer, with its usage, and an edit (v2's `write` takes `path`).
    let ok = sup
        .start(spec(&proj, "ok", "Say hello, then stop."))
        .unwrap();
    let s = finish(&sup, ok, LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.engine, "serve");
    assert!(s.session_id.as_deref().unwrap().starts_with("ses_"));
    assert!(
        s.tokens.input + s.tokens.output > 0,
        "tokens counted: {s:?}"
    );
    assert!(
        s.sandbox.as_deref().unwrap_or("").starts_with("confined"),
        "{:?}",
        s.sandbox
    );
    assert_eq!(sup.result(ok, None, None).unwrap().final_text, OK_TEXT);
    let edit = sup
        .start(spec(&proj, "toolwrite", "Write the file."))
        .unwrap();
    let s = finish(&sup, edit, LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let out = sup.result(edit, None, None).unwrap();
    assert_eq!(out.tool_calls[0].tool, "write", "{out:?}");
    assert_eq!(
        std::fs::read_to_string(proj.join("hello.txt")).unwrap(),
        "hi from fake\n"
    );

    // A follow-up in the first task's session.
    let first = sup.status(ok).unwrap().session_id.unwrap();
    let mut again = spec(&proj, "ok", "And once more.");
    again.session = Some(first.clone());
    let again = sup.start(again).unwrap();
    let s = finish(&sup, again, LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.session_id.as_deref(), Some(first.as_str()));
    assert_eq!(sup.result(again, None, None).unwrap().final_text, OK_TEXT);
    assert!(
        llm.chat_requests("ok")
            .iter()
            .any(|r| r.body.contains("And once more.")),
        "the follow-up reached the model"
    );

    // The fence: an editing agent writes nothing outside the root, by tool or shell.
    let outside = tempfile::tempdir().unwrap();
    let escape = spec(
        &proj,
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
        ]
        .concat(),
    );
    let escape = sup.start(escape).unwrap();
    let s = finish(&sup, escape, LIMIT).await;
    assert!(s.state.is_finished(), "{s:?}");
    for f in ["tool.txt", "shell.txt"] {
        assert!(
            !outside.path().join(f).exists(),
            "{f} was written outside the root: {s:?}"
        );
    }

    // A read-only agent whose model tries the write tool and a shell write.
    let oracle = AgentInfo::from_config(
        "oracle",
        &json!({"mode": "primary", "permission": {"edit": "deny"}}),
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
        ]
        .concat(),
    );
    ro.agent = "oracle".into();
    ro.read_only = true;
    ro.config_overlay = config_overlay(&oracle);
    ro.env.push((
        "OPENCODE_CONFIG_CONTENT".into(),
        json!({"agent": {"oracle": {"mode": "primary", "permission": {"edit": "deny"}}}})
            .to_string(),
    ));
    let ro = sup.start(ro).unwrap();
    let s = finish(&sup, ro, LIMIT).await;
    assert_eq!(s.engine, "serve", "{s:?}");
    for f in ["ro-write.txt", "ro-shell.txt"] {
        assert!(
            !proj.join(f).exists(),
            "the read-only agent wrote {f}: {s:?}"
        );
    }
    let out = sup.result(ro, None, None).unwrap();
    assert!(
        !out.tool_calls.is_empty() && out.tool_calls.iter().all(|c| c.status == "error"),
        "the model tried, and every write was refused: {:?} {s:?}",
        out.tool_calls
    );

    // The sessions, read from the world's store as `opencode_sessions` and
    // `opencode_session_output` read them (opencode 2 keeps messages in `session_message`).
    use opencode_client::SessionSource;
    let ctx = store_scan_context();
    let stores = world_stores(&sb.root().join("bridge-state"));
    let mut seen = None;
    for db in &stores {
        let store = opencode_client::StoreSource::open(db).unwrap();
        let list = store
            .list(&opencode_client::SessionFilter::default(), &ctx)
            .unwrap();
        if list.sessions.iter().any(|s| s.id == first) {
            seen = Some(store.transcript(&first, None, &ctx).unwrap());
        }
    }
    let t = seen.unwrap_or_else(|| panic!("session {first} not listed in {stores:?}"));
    assert_eq!(
        t.session.state,
        opencode_client::SessionState::Succeeded,
        "{t:?}"
    );
    assert_eq!(t.total_messages, 4, "two prompts, two answers: {t:?}");
    let text = |m: &opencode_client::Message| -> String {
        m.parts
            .iter()
            .filter_map(|p| match p {
                opencode_client::Part::Text { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(text(&t.messages[2]), "And once more.", "{t:?}");
    assert_eq!(text(&t.messages[3]), OK_TEXT, "{t:?}");

    // Every server of ours stops with the supervisor; `api` was never called.
    // (Their stop, SIGTERM then SIGKILL after a grace, ends on the pool's threads.)
    sup.shutdown().await;
    drop(sup);
    let ours = || servers_of(&oc, &sb);
    for _ in 0..300 {
        if ours().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ours().is_empty(), "servers left running: {:?}", ours());
    assert!(
        !sb.root().join("state/opencode/server.json").exists(),
        "no background server was registered"
    );
}

#[tokio::test]
async fn live_opencode2_cancel_and_time_limit_end_the_turn() {
    let oc = require_opencode2!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(600);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    let sup = supervisor(&oc, &sb);

    let slow = sup.start(spec(&proj, "slow", "Take your time.")).unwrap();
    let s = wait_until(&sup, slow, LIMIT, |s| {
        s.session_id.is_some() || s.state.is_finished()
    })
    .await;
    assert_eq!(s.state, TaskState::Running, "{s:?}");
    // Let the turn begin streaming, then stop it.
    let first = llm.chat_requests("slow").len();
    for _ in 0..400 {
        if llm.chat_requests("slow").len() > first {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(matches!(sup.cancel(slow).await, CancelOutcome::Cancelled));
    let session = sup.status(slow).unwrap().session_id.unwrap();
    // The session is free again: a follow-up in it answers.
    let mut next = spec(&proj, "ok", "Still there?");
    next.session = Some(session.clone());
    let next = sup.start(next).unwrap();
    let s = finish(&sup, next, LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(sup.result(next, None, None).unwrap().final_text, OK_TEXT);

    let mut timed = spec(&proj, "slow", "Take longer.");
    timed.timeout = Some(Duration::from_secs(4));
    let timed = sup.start(timed).unwrap();
    let s = finish(&sup, timed, LIMIT).await;
    assert_eq!(s.state, TaskState::TimedOut, "{s:?}");
    let mut after = spec(&proj, "ok", "Done now?");
    after.session = s.session_id.clone();
    let after = sup.start(after).unwrap();
    let s = finish(&sup, after, LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");

    // Progress while a turn runs: the agent's finished shell call shows while its next step
    // waits on the provider (a 429 with a minute's retry-after), before the turn ends.
    let waiting = sup
        .start(spec(&proj, "tool429wait", "Run it, then answer."))
        .unwrap();
    let s = wait_until(&sup, waiting, LIMIT, |s| {
        s.tool_calls >= 1 || s.state.is_finished()
    })
    .await;
    assert_eq!(s.state, TaskState::Running, "{s:?}");
    assert!(matches!(
        sup.cancel(waiting).await,
        CancelOutcome::Cancelled
    ));
    sup.shutdown().await;
}

/// Issue 35 with issue 32: a turn on the preview left running at a shutdown (the default,
/// leave) is adopted by the next supervisor on the state directory and followed to its answer;
/// its server stops once idle.
#[tokio::test]
async fn live_opencode2_a_turn_left_at_shutdown_is_followed_to_its_answer() {
    let oc = require_opencode2!();
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(10);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let proj = sb.project_dir().to_path_buf();
    let state = tempfile::tempdir().unwrap();
    let _cleanup = StopNotedServers(state.path().join("serve"));
    let config = || SupervisorConfig {
        serve_idle: Duration::from_secs(3),
        ..serve_supervisor_config(&oc, &sb, Some(state.path().to_path_buf()))
    };
    let first = Supervisor::new(config());
    let slow = first.start(spec(&proj, "slow", "Take your time.")).unwrap();
    wait_until(&first, slow, LIMIT, |s| {
        s.session_id.is_some() || s.state.is_finished()
    })
    .await;
    // The turn is streaming on the server when the supervisor stops.
    for _ in 0..400 {
        if !llm.chat_requests("slow").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = llm.chat_requests("slow").len();
    assert!(asked > 0, "the turn did not begin");
    let servers = noted_servers(state.path());
    assert_eq!(servers.len(), 1, "{servers:?}");
    let server = run_supervisor::ProcId::of(servers[0]).unwrap();
    first.shutdown().await;
    drop(first);
    assert!(
        server.is_alive(),
        "the server was stopped with a turn on it"
    );
    owner_gone(state.path(), slow);

    let second = Supervisor::new(config());
    assert_eq!(second.follow_left_tasks().await, vec![slow]);
    let s = finish(&second, slow, LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let out = second.result(slow, None, None).unwrap();
    assert!(out.final_text.contains("DONE"), "{}", out.final_text);
    // The adopting supervisor followed the turn; it did not send it again.
    assert_eq!(llm.chat_requests("slow").len(), asked);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server.is_alive() || !noted_servers(state.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle server was not stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    second.shutdown().await;
}
