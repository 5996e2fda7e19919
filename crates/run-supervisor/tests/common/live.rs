//! Helpers of the live tests: what the scripted fake model calls, what it was sent, the
//! supervisors the attack and serve tests use, and one task run to its end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bridge_testkit::{FakeLlm, OpencodeSandbox};
use run_supervisor::{Engine, Sandbox, Supervisor, SupervisorConfig, TaskOutput, TaskSpec};

/// One tool call of the scripted model (`fk/script`).
pub fn call(tool: &str, args: serde_json::Value) -> String {
    format!("CALL {tool} {args}\n")
}

/// The scripted model runs `command` in the agent's shell.
pub fn bash(command: &str) -> String {
    call(
        "bash",
        serde_json::json!({"command": command, "description": "attack"}),
    )
}

/// The scripted model writes `content` to `path` with the write tool.
pub fn write(path: &Path, content: &str) -> String {
    call(
        "write",
        serde_json::json!({"filePath": path, "content": content}),
    )
}

/// Everything the fake model was sent (tool results included).
pub fn sent(llm: &FakeLlm) -> String {
    llm.requests()
        .iter()
        .map(|r| r.body.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Starts `spec` and waits (up to 240 s) for its result.
pub async fn run_to_end(sup: &Supervisor, spec: TaskSpec) -> TaskOutput {
    let id = sup.start(spec).unwrap();
    tokio::time::timeout(Duration::from_secs(240), sup.wait(id))
        .await
        .unwrap_or_else(|_| panic!("task {id} did not finish: {:?}", sup.status(id)));
    sup.result(id, None, None).unwrap()
}

/// One run at a time under `root` on `engine`, with the fence as `sandbox` says: the
/// supervisor of the attack tests.
pub fn fenced_supervisor(
    oc: &Path,
    sb: &OpencodeSandbox,
    root: &Path,
    sandbox: Sandbox,
    engine: Engine,
    state_dir: Option<PathBuf>,
) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        engine,
        opencode_bin: Some(oc.to_path_buf()),
        root: root.to_path_buf(),
        env: sb.env(),
        state_dir,
        max_parallel: 1,
        kill_grace: Duration::from_secs(3),
        quiet_after: Duration::from_secs(600),
        sandbox,
        ..SupervisorConfig::default()
    })
}

/// Up to four tasks at once on the warm local server of `oc`, quick retries.
pub fn serve_supervisor(oc: &Path, sb: &OpencodeSandbox, state_dir: Option<PathBuf>) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        opencode_bin: Some(oc.to_path_buf()),
        root: sb.root().to_path_buf(),
        env: sb.env(),
        state_dir,
        max_parallel: 4,
        kill_grace: Duration::from_secs(3),
        retry_delay: Duration::from_millis(100),
        quiet_after: Duration::from_secs(600),
        engine: Engine::Serve,
        ..SupervisorConfig::default()
    })
}

/// A task of `agent` on the fake provider's `model`, labelled `{tag}/{agent}: {model}`.
pub fn fake_spec(cwd: &Path, agent: &str, tag: &str, model: &str, prompt: &str) -> TaskSpec {
    let mut s = TaskSpec::new(prompt, cwd, agent, format!("{tag}/{agent}: {model}"));
    s.model = Some(format!("fk/{model}"));
    s
}
