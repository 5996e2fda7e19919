//! A long answer from the real opencode 1.18.33 reaches the summary whole.
//!
//! opencode 1.18.33 prints a text part as one event line when the part is complete, so a 1 MiB
//! answer is one line of about 1 MB, followed by its `step_finish`. Observed: when it exits
//! while its stdout pipe is full, what it has not yet written is lost. With the default
//! 64 KiB pipe the bridge then saw the long line cut off and no `step_finish`, and the task
//! "succeeded" with no text and no tokens. The supervisor now gives a run an (unlinked) file
//! for its stdout, whose writes complete at once, and follows it; a 3 MiB answer, whose line
//! is larger than any pipe, arrives whole too.
//!
//! Needs `OPENCODE_BRIDGE_TEST_OPENCODE` (skipped outside CI when unset). The run works in an
//! isolated sandbox and talks only to the fake LLM on 127.0.0.1.

use std::time::Duration;

use bridge_testkit::fake_llm::{HUGE_BYTES, LONG_BYTES};
use bridge_testkit::{FakeLlm, OpencodeSandbox};
use run_supervisor::{Supervisor, SupervisorConfig, TaskSnapshot, TaskSpec, TaskState};

/// Runs the real opencode on the fake LLM's `model` until it ends: the supervisor (which keeps
/// the sandbox and the fake alive), the task id and its final snapshot.
async fn run_model(
    model: &str,
) -> Option<(Supervisor, u64, TaskSnapshot, FakeLlm, OpencodeSandbox)> {
    // Panics under CI=true when the binary is missing; skips with a note elsewhere.
    let Some(oc) = bridge_testkit::sandbox::real_opencode() else {
        eprintln!(
            "note: skipping: set {} to the real opencode binary to run it",
            bridge_testkit::sandbox::OPENCODE_ENV
        );
        return None;
    };
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let sup = Supervisor::new(SupervisorConfig {
        opencode_bin: Some(oc),
        // These are `opencode run`'s own tests (processes, stdout); live_serve.rs is the server's.
        engine: run_supervisor::Engine::Run,
        root: sb.root().to_path_buf(),
        env: sb.env(),
        kill_grace: Duration::from_secs(3),
        quiet_after: Duration::from_secs(600),
        ..SupervisorConfig::default()
    });
    let mut spec = TaskSpec::new(
        format!("Write the {model} answer."),
        sb.project_dir(),
        "worker",
        format!("LIVE/worker: a {model} answer"),
    );
    spec.model = Some(format!("fk/{model}"));
    let id = sup.start(spec).unwrap();
    let snap = tokio::time::timeout(Duration::from_secs(300), sup.wait(id))
        .await
        .expect("the run finished within 300 s")
        .expect("the task is known");
    assert_eq!(snap.state, TaskState::Succeeded, "{snap:?}");
    Some((sup, id, snap, llm, sb))
}

#[tokio::test]
async fn live_a_long_answer_arrives_whole() {
    let Some((sup, id, snap, _llm, _sb)) = run_model("long").await else {
        return;
    };
    assert!(
        snap.tokens.output > 0,
        "the step_finish after the long line arrived: {snap:?}"
    );
    let out = sup.result(id, None, Some(200)).unwrap();
    assert_eq!(out.malformed_lines, 0, "no line was cut off");
    assert_eq!(
        out.text.total_chars, LONG_BYTES,
        "the whole answer is in the text"
    );
    assert!(out.text.text.ends_with("DONE"), "{}", out.text.text);
    assert!(out.final_text.starts_with("0: the quick brown fox"));
}

#[tokio::test]
async fn live_an_answer_larger_than_any_pipe_arrives_whole() {
    let Some((sup, id, snap, _llm, _sb)) = run_model("huge").await else {
        return;
    };
    assert_eq!(
        snap.tokens.output,
        (HUGE_BYTES / 4) as u64,
        "the step_finish after the huge line arrived: {snap:?}"
    );
    let out = sup.result(id, None, Some(200)).unwrap();
    assert_eq!(out.malformed_lines, 0, "no line was cut off");
    assert!(out.text.text.ends_with("DONE"), "{}", out.text.text);
    // The text over the 2 MB output cap is cut from the middle, and says how much.
    assert_eq!(
        out.stdout_bytes_dropped,
        (HUGE_BYTES - 2 * 1024 * 1024) as u64
    );
    assert!(out.final_text.starts_with("0: the quick brown fox"));
}
