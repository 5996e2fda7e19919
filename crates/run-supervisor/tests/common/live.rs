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
    Supervisor::new(serve_supervisor_config(oc, sb, state_dir))
}

/// The configuration of [`serve_supervisor`].
pub fn serve_supervisor_config(
    oc: &Path,
    sb: &OpencodeSandbox,
    state_dir: Option<PathBuf>,
) -> SupervisorConfig {
    SupervisorConfig {
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
    }
}

/// A task of `agent` on the fake provider's `model`, labelled `{tag}/{agent}: {model}`.
pub fn fake_spec(cwd: &Path, agent: &str, tag: &str, model: &str, prompt: &str) -> TaskSpec {
    let mut s = TaskSpec::new(prompt, cwd, agent, format!("{tag}/{agent}: {model}"));
    s.model = Some(format!("fk/{model}"));
    s
}

/// The notes of the warm servers running (`<state>/serve/<pid>.json`): their pids.
pub fn noted_servers(state: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir(state.join("serve"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".json")?.parse().ok()
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort();
    pids
}

/// The test's own cleanup, should it fail half-way: the servers noted in a state directory are
/// stopped (a server left running is the behaviour under test, so nothing else stops it).
pub struct StopNotedServers(pub std::path::PathBuf);

impl Drop for StopNotedServers {
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            let note: Option<serde_json::Value> = std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            if let Some(n) = note
                && let (Some(pid), Some(start)) = (n["pid"].as_i64(), n["start_time"].as_u64())
            {
                let server = run_supervisor::ProcId {
                    pid: pid as i32,
                    start_time: start,
                };
                bridge_proc::stop_left_group(server, Duration::from_secs(3));
            }
        }
    }
}

/// Points a task's record at a bridge that is gone (in-process, both supervisors are the same
/// process, so the first one's end is played by its record).
pub fn owner_gone(state: &Path, id: u64) {
    let path = state.join(format!("tasks/{id}/task.json"));
    let mut t: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = run_supervisor::ProcId::of(child.id() as i32).unwrap();
    child.wait().unwrap();
    t["owner"] = serde_json::json!({"pid": dead.pid, "start_time": dead.start_time});
    std::fs::write(&path, serde_json::to_vec(&t).unwrap()).unwrap();
}
