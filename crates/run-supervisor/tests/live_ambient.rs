//! No ambient authority, and protected paths in editing runs, with the real opencode 1.18.33:
//! the fake model (`script`) makes the agent's shell do the forbidden thing (connect to a unix
//! socket the test listens on, read another process's environment, make a device, plant a git
//! hook, `.mcp.json` and git config), and the listener and the disk are checked afterwards;
//! then the same task with `OPENCODE_BRIDGE_SANDBOX=off` shows the attack lands. The runs get
//! the widest permissions opencode has (`--auto`, editing), so only the kernel stands in the
//! way. Each test runs on both engines (`opencode run`, and a session on the warm local
//! `opencode serve`, started inside the same fence).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::live::{bash, call, fenced_supervisor, run_to_end as run, sent};
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use run_supervisor::{Engine, Sandbox, Supervisor, TaskSpec, TaskState};

fn supervisor(
    oc: &Path,
    sb: &OpencodeSandbox,
    root: &Path,
    sandbox: Sandbox,
    engine: Engine,
) -> Supervisor {
    fenced_supervisor(oc, sb, root, sandbox, engine, None)
}

/// A root with a git project in it, and a directory outside the root.
struct World {
    sb: OpencodeSandbox,
    root: PathBuf,
    proj: PathBuf,
    outside: PathBuf,
}

fn world(llm: &FakeLlm) -> World {
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let top = sb.root().canonicalize().unwrap();
    let root = top.join("projects");
    let proj = root.join("app");
    let outside = top.join("outside");
    for d in [&proj, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    bridge_testkit::git_repo(
        &proj,
        &[
            ("README.md", "# app\n"),
            (".mcp.json", "{\"mcpServers\": {}}\n"),
        ],
    );
    World {
        sb,
        root,
        proj,
        outside,
    }
}

/// One editing task of the scripted model in `w.proj`, with the widest permissions.
async fn editing_task(
    oc: &Path,
    w: &World,
    sandbox: Sandbox,
    engine: Engine,
    prompt: &str,
) -> run_supervisor::TaskOutput {
    let sup = supervisor(oc, &w.sb, &w.root, sandbox, engine);
    let mut spec = TaskSpec::new(prompt, &w.proj, "worker", "LIVE/worker: ambient authority");
    spec.model = Some("fk/script".into());
    spec.auto_approve = true;
    let out = run(&sup, spec).await;
    // Run where asked: a server that did not start would have fallen back to `run`.
    assert_eq!(out.snapshot.engine, engine.as_str(), "{:?}", out.snapshot);
    out
}

fn succeeded(out: &run_supervisor::TaskOutput) {
    assert_eq!(
        out.snapshot.state,
        TaskState::Succeeded,
        "{:?}",
        out.snapshot
    );
}

/// Everything a listener got from the connections made to it so far.
fn received(listener: &std::os::unix::net::UnixListener) -> String {
    let mut got = String::new();
    while let Ok((mut s, _)) = listener.accept() {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        got.push_str(&format!("[connection: {text}]"));
    }
    got
}

#[tokio::test]
async fn live_run_an_agent_reaches_no_unix_socket_no_other_environment_and_makes_no_device() {
    no_ambient_authority(Engine::Run).await;
}

#[tokio::test]
async fn live_serve_an_agent_reaches_no_unix_socket_no_other_environment_and_makes_no_device() {
    no_ambient_authority(Engine::Serve).await;
}

#[tokio::test]
async fn live_run_an_editing_agent_cannot_plant_git_hooks_config_or_mcp_json() {
    protected_paths_stay(Engine::Run).await;
}

#[tokio::test]
async fn live_serve_an_editing_agent_cannot_plant_git_hooks_config_or_mcp_json() {
    protected_paths_stay(Engine::Serve).await;
}

/// The agent's shell connects to a unix socket outside the root (python and node, as an
/// ssh-agent or D-Bus client would), reads the environment of another process of the user's
/// (where another warm server keeps its password), and makes a device node; git and node
/// still work. With the fence off, each lands.
async fn no_ambient_authority(engine: Engine) {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let w = world(&llm);
    let sock = w.outside.join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut other = std::process::Command::new("sleep")
        .arg("600")
        .env("OTHER_SERVER_PASSWORD", "pw-31-ambient-e9c2")
        .spawn()
        .unwrap();
    let dev = w.outside.join("made-dev");
    let shm = format!("/dev/shm/live-ambient-{}", std::process::id());
    let prompt = [
        "Do these steps.\n".to_owned(),
        bash(&format!(
            "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{sock}'); s.sendall(b'PY-SIGNED')\"; \
             node -e \"const c = require('net').connect('{sock}', () => c.write('NODE-SIGNED', () => process.exit(0))); c.on('error', e => console.log('node: ' + e.code))\"; \
             tr '\\0' '\\n' < /proc/{pid}/environ | grep OTHER_SERVER; \
             mknod {shm} c 1 3 && echo MADE-A-DEVICE-$((6*7)); \
             node -e \"console.log('NODE-RUNS-' + 6*7)\"; git log --oneline | grep -q init && echo GIT-RUNS-$((6*7))",
            sock = sock.display(),
            pid = other.id(),
        )),
    ]
    .concat();
    let out = editing_task(&oc, &w, Sandbox::Auto, engine, &prompt).await;
    succeeded(&out);
    let fenced = sent(&llm);
    let got = received(&listener);
    let made = Path::new(&shm).exists();
    let _ = std::fs::remove_file(&shm);
    assert!(
        out.snapshot
            .sandbox
            .as_deref()
            .is_some_and(|t| t.starts_with("confined")),
        "{:?}",
        out.snapshot
    );
    assert_eq!(got, "", "the run connected to the unix socket");
    assert!(
        !fenced.contains("pw-31-ambient-e9c2"),
        "another process's environment reached the model"
    );
    assert!(
        !made && !fenced.contains("MADE-A-DEVICE-42"),
        "the run made a device"
    );
    assert!(
        fenced.contains("NODE-RUNS-42") && fenced.contains("GIT-RUNS-42"),
        "node and git work under the fence: {}",
        &fenced[fenced.len().saturating_sub(3000)..]
    );
    assert!(!dev.exists());

    // The control: the same task with the fence off.
    let llm = FakeLlm::start().unwrap();
    let w2 = World {
        sb: OpencodeSandbox::new(&llm.base_url()).unwrap(),
        root: w.root.clone(),
        proj: w.proj.clone(),
        outside: w.outside.clone(),
    };
    succeeded(&editing_task(&oc, &w2, Sandbox::Off, engine, &prompt).await);
    let open = sent(&llm);
    let got = received(&listener);
    let made = Path::new(&shm).exists();
    let _ = std::fs::remove_file(&shm);
    other.kill().unwrap();
    let _ = other.wait();
    assert!(
        got.contains("PY-SIGNED") && got.contains("NODE-SIGNED"),
        "without the fence both clients connect: {got}"
    );
    assert!(
        open.contains("pw-31-ambient-e9c2"),
        "without the fence the environment is read: {}",
        open.split("\"role\":\"tool\"")
            .nth(1)
            .unwrap_or("")
            .chars()
            .take(2000)
            .collect::<String>()
    );
    if is_root() {
        assert!(made, "without the fence root makes the device");
    }
}

/// Whether the tests run as root (where capabilities are what stands in the way of `mknod`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// The agent's attack on the protected paths of its project: a git hook and `.mcp.json` with
/// its write tool, a hook, `.mcp.json` and git's config with its shell, `.git` moved aside
/// (when `move_git`); then an ordinary edit and a commit.
fn plant(w: &World, move_git: bool) -> String {
    [
        "Edit the project.\n".to_owned(),
        call(
            "write",
            serde_json::json!({"filePath": w.proj.join(".mcp.json"), "content": "{\"mcpServers\": {\"evil\": {\"command\": \"sh\"}}}"}),
        ),
        call(
            "write",
            serde_json::json!({"filePath": w.proj.join(".git/hooks/post-checkout"), "content": "#!/bin/sh\nexit 0\n"}),
        ),
        bash(&format!(
            "printf '#!/bin/sh\\ntouch {o}/hook-ran\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
             echo '{{}}' > .mcp.json; git config core.fsmonitor 'touch {o}/fsmonitor'; {mv} \
             echo edited > done.txt; git add done.txt && git -c user.name=a -c user.email=a@b.invalid commit -q -m edited && echo COMMITTED-$((6*7))",
            o = w.outside.display(),
            mv = if move_git { "mv .git .git-aside;" } else { "" }
        )),
    ]
    .concat()
}

/// The agent writes a git hook, `.mcp.json` and git's config of its project, with its write
/// tool and its shell, and tries to move `.git` aside; the rest of the project is written and
/// git commits. With the fence off, the hook and `.mcp.json` land.
async fn protected_paths_stay(engine: Engine) {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    let w = world(&llm);
    let hook = w.proj.join(".git/hooks/pre-commit");
    let out = editing_task(&oc, &w, Sandbox::Auto, engine, &plant(&w, true)).await;
    succeeded(&out);
    let fenced = sent(&llm);
    assert!(!hook.exists(), "the shell planted a hook");
    assert!(
        !w.proj.join(".git/hooks/post-checkout").exists(),
        "the write tool planted a hook"
    );
    assert!(!w.outside.join("hook-ran").exists(), "the planted hook ran");
    assert_eq!(
        std::fs::read_to_string(w.proj.join(".mcp.json")).unwrap(),
        "{\"mcpServers\": {}}\n",
        ".mcp.json was rewritten"
    );
    let config = std::fs::read_to_string(w.proj.join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(!w.proj.join(".git-aside").exists(), ".git was moved aside");
    assert_eq!(
        std::fs::read_to_string(w.proj.join("done.txt")).unwrap(),
        "edited\n"
    );
    assert!(
        fenced.contains("COMMITTED-42"),
        "git commits in an editing run: {}",
        &fenced[fenced.len().saturating_sub(3000)..]
    );
    let refused = out.tool_calls.iter().filter(|c| c.error.is_some()).count();
    assert_eq!(refused, 2, "both writes were refused: {:?}", out.tool_calls);

    // The control: the same task with the fence off.
    let llm = FakeLlm::start().unwrap();
    let w = world(&llm);
    // Without the fence the plants land (the hook runs at the run's own commit); the check
    // after the run, which holds with the fence off too, puts them back and names them.
    let out = editing_task(&oc, &w, Sandbox::Off, engine, &plant(&w, false)).await;
    assert!(
        w.outside.join("hook-ran").exists(),
        "without the fence the hook lands and runs at the commit"
    );
    let failure = out.snapshot.failure.clone().expect("the plants are named");
    for named in [
        ".git/hooks/pre-commit (added, removed)",
        ".mcp.json (changed, restored)",
    ] {
        assert!(failure.message.contains(named), "{named}: {failure:?}");
    }
    assert!(!w.proj.join(".git/hooks/pre-commit").exists());
}
