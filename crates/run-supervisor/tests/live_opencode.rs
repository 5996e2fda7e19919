//! The supervisor with the real opencode 1.18.33 and our fake LLM: answers, tools, every
//! provider failure the real binary can show, permission auto-reject, subagents, cancel.
//!
//! Each test names the real binary through `OPENCODE_BRIDGE_TEST_OPENCODE` (skipped outside CI
//! when unset). Every opencode runs in an isolated sandbox and talks only to 127.0.0.1.

use crate::common;

use std::path::Path;
use std::time::Duration;

use bridge_policy::roster::{AgentInfo, AgentSource, config_overlay};
use bridge_testkit::fake_llm::OK_TEXT;
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::*;
use run_supervisor::{
    CancelOutcome, FailureKind, ProcId, ProcessKind, Supervisor, SupervisorConfig, TaskId,
    TaskSpec, TaskState,
};
use serde_json::json;

const RUN_LIMIT: Duration = Duration::from_secs(240);

fn supervisor(oc: &Path, sb: &OpencodeSandbox, max_parallel: usize) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        opencode_bin: Some(oc.to_path_buf()),
        // These are `opencode run`'s own tests (processes, stdout); live_serve.rs is the server's.
        engine: run_supervisor::Engine::Run,
        root: sb.root().to_path_buf(),
        env: sb.env(),
        max_parallel,
        kill_grace: Duration::from_secs(3),
        retry_delay: Duration::from_millis(100),
        quiet_after: Duration::from_secs(600),
        ..SupervisorConfig::default()
    })
}

fn spec(cwd: &Path, model: &str) -> TaskSpec {
    let mut s = TaskSpec::new(
        "Say hello, then stop.",
        cwd,
        "worker",
        format!("LIVE/worker: scenario {model}"),
    );
    s.model = Some(format!("fk/{model}"));
    s
}

async fn run_all(sup: &Supervisor, specs: Vec<(String, TaskSpec)>) -> Vec<(String, TaskId)> {
    let mut ids = Vec::new();
    for (name, s) in specs {
        // Start in waves: wait for a free slot when the parallel limit is reached.
        let id = loop {
            match sup.start(s.clone()) {
                Ok(id) => break id,
                Err(run_supervisor::StartError::Busy { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("{name} not started: {e}"),
            }
        };
        ids.push((name, id));
    }
    for (name, id) in &ids {
        let s = tokio::time::timeout(RUN_LIMIT, sup.wait(*id))
            .await
            .unwrap_or_else(|_| panic!("{name} did not finish: {:?}", sup.status(*id)));
        assert!(s.is_some());
    }
    ids
}

#[tokio::test]
async fn live_answers_and_tool_calls_work_in_the_task_directory() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    // A subdirectory: the sandbox's PWD points at the project root, the task must still work
    // (and write) in its own directory.
    let sub = sb.project_dir().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let sup = supervisor(&oc, &sb, 3);
    let ids = run_all(
        &sup,
        vec![
            ("ok".into(), spec(&sub, "ok")),
            ("toolwrite".into(), spec(&sub, "toolwrite")),
            ("toolbash".into(), spec(&sub, "toolbash")),
        ],
    )
    .await;
    for (name, id) in &ids {
        let s = sup.status(*id).unwrap();
        assert_eq!(s.state, TaskState::Succeeded, "{name}: {s:?}");
        assert!(s.session_id.as_deref().unwrap().starts_with("ses_"));
        assert!(
            s.tokens.input + s.tokens.output > 0,
            "{name}: tokens counted"
        );
        assert_eq!(s.opencode_version.as_deref(), Some("1.18.33"));
        let out = sup.result(*id, None, None).unwrap();
        assert_eq!(out.final_text, OK_TEXT, "{name}");
        assert_eq!(out.malformed_lines, 0);
    }
    let write = sup.result(ids[1].1, None, None).unwrap();
    assert_eq!(write.tool_calls[0].tool, "write");
    assert_eq!(write.tool_calls[0].status, "completed");
    assert_eq!(
        std::fs::read_to_string(sub.join("hello.txt")).unwrap(),
        "hi from fake\n",
        "the file is written in the task's cwd"
    );
    assert!(!sb.project_dir().join("hello.txt").exists());
    let bash = sup.result(ids[2].1, None, None).unwrap();
    assert_eq!(bash.tool_calls[0].tool, "bash");
    assert_eq!(bash.tool_calls[0].status, "completed");
    // The prompt arrived verbatim (stdin, no added quotes).
    assert!(
        llm.chat_requests("ok")
            .iter()
            .any(|r| r.body.contains("\"Say hello, then stop.\"")
                && !r.body.contains("\\\"Say hello"))
    );
}

struct Expect {
    model: &'static str,
    kind: FailureKind,
    says: &'static str,
}

#[tokio::test]
async fn live_provider_errors_are_classified_with_message_and_advice() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let sup = supervisor(&oc, &sb, 4);
    let cases = [
        Expect {
            model: "e401",
            kind: FailureKind::Auth,
            says: "401",
        },
        Expect {
            model: "e403",
            kind: FailureKind::Auth,
            says: "403",
        },
        Expect {
            model: "e404",
            kind: FailureKind::Model,
            says: "404",
        },
        Expect {
            model: "e429",
            kind: FailureKind::RateLimit,
            says: "429",
        },
        Expect {
            model: "equota",
            kind: FailureKind::Quota,
            says: "quota",
        },
        Expect {
            model: "e529",
            kind: FailureKind::Overloaded,
            says: "529",
        },
        Expect {
            model: "e500",
            kind: FailureKind::Overloaded,
            says: "500",
        },
        Expect {
            model: "e503",
            kind: FailureKind::Overloaded,
            says: "503",
        },
        Expect {
            model: "e400",
            kind: FailureKind::InvalidRequest,
            says: "400",
        },
        Expect {
            model: "length",
            kind: FailureKind::OutputLimit,
            says: "length",
        },
        Expect {
            model: "doesnotexist",
            kind: FailureKind::Model,
            says: "Unexpected server error",
        },
        Expect {
            model: "ectx",
            kind: FailureKind::ContextLength,
            says: "context",
        },
    ];
    let ids = run_all(
        &sup,
        cases
            .iter()
            .map(|c| (c.model.to_string(), spec(sb.project_dir(), c.model)))
            .collect(),
    )
    .await;
    for (c, (_, id)) in cases.iter().zip(&ids) {
        let s = sup.status(*id).unwrap();
        assert_eq!(s.state, TaskState::Failed, "{}: {s:?}", c.model);
        let f = s.failure.clone().unwrap();
        assert_eq!(f.kind, c.kind, "{}: {f:?}", c.model);
        assert!(
            f.message.to_lowercase().contains(&c.says.to_lowercase()),
            "{}: message {:?} lacks {:?}",
            c.model,
            f.message,
            c.says
        );
        assert!(f.advice.len() > 40, "{}: advice {:?}", c.model, f.advice);
        assert_eq!(
            s.attempts, 1,
            "{}: editing agents are never retried",
            c.model
        );
    }
    // opencode did retry the transient ones itself (1 + 5 requests).
    assert!(llm.chat_requests("e429").len() >= 6);

    // A context overflow that compaction fixes is not a failure (though 1.x exits 1).
    let id = sup.start(spec(sb.project_dir(), "ectx1")).unwrap();
    let s = finish(&sup, id, RUN_LIMIT).await;
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    assert_eq!(s.exit_code, Some(1));
}

#[tokio::test]
async fn live_network_and_midstream_errors_are_classified() {
    // opencode retries these five times with its own backoff (no retry headers are possible),
    // so this test takes about a minute and a half.
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let closed = bridge_testkit::http::closed_port();
    let down = OpencodeSandbox::new(&format!("http://127.0.0.1:{closed}/v1")).unwrap();
    let sup = supervisor(&oc, &sb, 2);
    let sup_down = supervisor(&oc, &down, 2);
    let a = sup_down.start(spec(down.project_dir(), "ok")).unwrap();
    let b = sup.start(spec(sb.project_dir(), "midstream")).unwrap();
    let sa = finish(&sup_down, a, RUN_LIMIT).await;
    let sb_ = finish(&sup, b, RUN_LIMIT).await;
    let fa = sa.failure.clone().unwrap();
    assert_eq!(fa.kind, FailureKind::Network, "{sa:?}");
    assert!(fa.message.contains("Cannot connect"), "{}", fa.message);
    // An editing agent is not retried by the supervisor (opencode itself retried 5 times).
    assert_eq!(sa.attempts, 1, "{sa:?}");
    let fb = sb_.failure.clone().unwrap();
    assert_eq!(fb.kind, FailureKind::Overloaded, "{sb_:?}");
    assert!(
        fb.message.contains("upstream model crashed"),
        "{}",
        fb.message
    );
}

#[tokio::test]
async fn live_missing_api_key_is_an_auth_failure() {
    let oc = require_opencode!();
    if std::env::var_os("ANTHROPIC_API_KEY").is_some() {
        // Under CI a live test fails rather than skips.
        assert!(
            !bridge_testkit::sandbox::in_ci(),
            "ANTHROPIC_API_KEY is set under CI: the missing-key case cannot be produced; unset it for the tests"
        );
        eprintln!("note: ANTHROPIC_API_KEY is set; the missing-key case cannot be produced");
        return;
    }
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::with_config(
        &llm.base_url(),
        json!({"provider": {
            "fk": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": llm.base_url(), "apiKey": "sk-test"}, "models": {"ok": {}}},
            "nokey": {"npm": "@ai-sdk/anthropic", "options": {"baseURL": llm.base_url()}, "models": {"m": {"name": "m"}}}
        }}),
    )
    .unwrap();
    let sup = supervisor(&oc, &sb, 1);
    let mut s = spec(sb.project_dir(), "ok");
    s.model = Some("nokey/m".into());
    let id = sup.start(s).unwrap();
    let st = finish(&sup, id, RUN_LIMIT).await;
    let f = st.failure.clone().unwrap();
    assert_eq!(f.kind, FailureKind::Auth, "{st:?}");
    assert!(f.message.contains("ProviderAuthError"), "{}", f.message);
}

#[tokio::test]
async fn live_permission_auto_reject_fails_the_task() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let sup = supervisor(&oc, &sb, 2);
    let mut strict = spec(sb.project_dir(), "toolread-denied");
    strict.auto_approve = false;
    let auto = spec(sb.project_dir(), "toolread-denied");
    let ids = run_all(&sup, vec![("strict".into(), strict), ("auto".into(), auto)]).await;
    let s = sup.status(ids[0].1).unwrap();
    assert_eq!(s.state, TaskState::Failed, "{s:?}");
    assert_eq!(s.exit_code, Some(0), "1.x exits 0 on an auto-reject");
    let f = s.failure.unwrap();
    assert_eq!(f.kind, FailureKind::Agent);
    assert!(f.message.contains("external_directory"), "{}", f.message);
    // With --auto (the default) the permission is granted and the run goes on.
    let s = sup.status(ids[1].1).unwrap();
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
}

#[tokio::test]
async fn live_a_subagent_runs_as_itself_not_as_the_default_agent() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::with_config(
        &llm.base_url(),
        json!({"agent": {"reviewer": {"mode": "subagent", "description": "Reviews", "prompt": "You are the reviewer subagent ZX81."}}}),
    )
    .unwrap();
    let sup = supervisor(&oc, &sb, 2);
    let mut right = spec(sb.project_dir(), "ok");
    right.agent = "reviewer".into();
    // The policy's overlay for an agent opencode knows as a subagent, as the bridge passes it;
    // without it opencode 1.x falls back to its default agent.
    let info = AgentInfo::from_config(
        "reviewer",
        &json!({"mode": "subagent"}),
        AgentSource::ConfigContent,
    );
    right.config_overlay = config_overlay(&info);
    let mut wrong = right.clone();
    wrong.config_overlay = None;
    let ids = run_all(&sup, vec![("right".into(), right), ("wrong".into(), wrong)]).await;
    let s = sup.status(ids[0].1).unwrap();
    assert_eq!(s.state, TaskState::Succeeded, "{s:?}");
    let out = sup.result(ids[0].1, None, None).unwrap();
    assert!(
        !out.stderr_tail.contains("Falling back"),
        "{}",
        out.stderr_tail
    );
    assert!(
        llm.chat_requests("ok")
            .iter()
            .any(|r| r.has_tools() && r.body.contains("ZX81")),
        "the reviewer's own prompt reached the model"
    );
    let s = sup.status(ids[1].1).unwrap();
    assert_eq!(s.state, TaskState::Failed, "{s:?}");
    assert_eq!(s.failure.unwrap().kind, FailureKind::Agent);
}

#[tokio::test]
async fn live_cancel_of_a_real_run_leaves_nothing_behind() {
    let oc = require_opencode!();
    let _g = SERIAL.lock().await;
    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(120);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let sup = supervisor(&oc, &sb, 1);
    let id = sup.start(spec(sb.project_dir(), "slow")).unwrap();
    // Running and streaming from the model (step_start carried the session id).
    let s = wait_until(&sup, id, Duration::from_secs(90), |s| {
        running(s) && s.session_id.is_some()
    })
    .await;
    let root = ProcId::of(s.pid.unwrap()).unwrap();
    let table = sup.processes();
    let p = table
        .iter()
        .find(|p| p.pid == root.pid)
        .expect("in the process table");
    assert_eq!(p.kind, ProcessKind::Run);
    assert_eq!(p.title.as_deref(), Some("LIVE/worker: scenario slow"));
    assert_eq!(p.agent.as_deref(), Some("worker"));
    assert_eq!(p.task_id, Some(id));
    let kids: Vec<ProcId> = descendants_of(root.pid);
    // The real run and what it started run 10 nicer than the supervisor (the default).
    let nicer = (common::nice_of(None) + 10).min(19);
    assert_eq!(common::nice_of(Some(root.pid)), nicer, "the opencode run");
    for k in &kids {
        assert_eq!(common::nice_of(Some(k.pid)), nicer, "what opencode started");
    }
    assert_eq!(sup.cancel(id).await, CancelOutcome::Cancelled);
    assert_all_dead(&[root]);
    assert_all_dead(&kids);
    assert_no_zombies().await;
}

fn descendants_of(pid: i32) -> Vec<ProcId> {
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    let all: Vec<(i32, i32)> = procfs::process::all_processes()
        .unwrap()
        .flatten()
        .filter_map(|p| p.stat().ok().map(|s| (s.pid, s.ppid)))
        .collect();
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &all {
            if pp == p {
                if let Some(id) = ProcId::of(c) {
                    out.push(id);
                }
                frontier.push(c);
            }
        }
    }
    out
}

#[tokio::test]
async fn live_the_process_table_shows_a_real_opencode_serve() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let mut child = sb
        .command(&oc, ["serve", "--port", "0", "--hostname", "127.0.0.1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let listening = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let _ = out.read_line(&mut line);
        line
    });
    let line = tokio::time::timeout(Duration::from_secs(60), listening)
        .await
        .expect("serve started")
        .unwrap();
    let table = run_supervisor::proctable::scan();
    let found = table.iter().find(|p| p.pid == child.id() as i32).cloned();
    child.kill().unwrap();
    child.wait().unwrap();
    let p = found.unwrap_or_else(|| panic!("serve ({line}) not in {table:#?}"));
    assert_eq!(p.kind, ProcessKind::Serve);
    assert_eq!(p.cwd.as_deref(), Some(sb.project_dir()));
    assert!(p.elapsed < Duration::from_secs(120));
    assert_eq!(p.task_id, None);
}

#[tokio::test]
async fn live_an_oversized_prompt_reaches_the_model_through_the_attached_file() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let sup = supervisor(&oc, &sb, 1);
    let mut s = spec(sb.project_dir(), "ok");
    let filler: String = (0..3000)
        .map(|i| format!("line {i:05} of the oversized task text\n"))
        .collect();
    s.prompt = format!("HEAD-MARKER-QX7 start of the task\n{filler}");
    assert!(s.prompt.len() > 100_000);
    let id = sup.start(s).unwrap();
    let st = finish(&sup, id, RUN_LIMIT).await;
    assert_eq!(st.state, TaskState::Succeeded, "{st:?}");
    let reqs = llm.chat_requests("ok");
    let main = reqs
        .iter()
        .find(|r| r.has_tools())
        .expect("the model was asked");
    assert!(
        main.body.contains("HEAD-MARKER-QX7"),
        "the file's content reached the model"
    );
    assert!(
        main.body
            .contains("The complete task is in the attached file")
    );
    // opencode inlines the first 50 KB of the file and tells the model how to read on; the
    // file lives under /tmp/opencode/, which agents may read without asking.
    assert!(
        main.body.contains("Use offset="),
        "the model is told how to read the rest"
    );
}
