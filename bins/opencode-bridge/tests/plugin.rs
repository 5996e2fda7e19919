//! The npm launcher (`npm/opencode-bridge/bin/opencode-bridge.js`, run by Node) and the Claude Code
//! plugin's files: versions locked to the workspace's, exit codes and signals passed through,
//! and SIGINT (how Claude Code stops a stdio server) reaching the bridge, which stops its runs.
//! The packages published and installed, and the plugin used by the real Claude Code, are in
//! `live_plugin.rs`.

use crate::common;

use common::{Server, World, assert_stopped_with_its_run, start_sleeping_task};
use serde_json::{Value, json};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn json_file(rel: &str) -> Value {
    let path = repo().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Node, which runs the launcher (and npm); under `CI=true` a missing one fails the test.
pub fn node_or_skip() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("node"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            !bridge_testkit::sandbox::in_ci(),
            "node is not on PATH: the launcher tests need Node 18 or later (scripts/test.sh needs it for npm too)"
        );
        eprintln!("skipping: node is not on PATH");
    }
    found
}

fn launcher() -> PathBuf {
    repo().join("npm/opencode-bridge/bin/opencode-bridge.js")
}

fn launch(node: &Path, binary: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(node);
    cmd.arg(launcher())
        .args(args)
        .env_remove("OPENCODE_BRIDGE_BINARY");
    if let Some(b) = binary {
        cmd.env("OPENCODE_BRIDGE_BINARY", b);
    }
    cmd
}

#[test]
fn every_version_is_the_workspace_version() {
    let launcher = json_file("npm/opencode-bridge/package.json");
    assert_eq!(launcher["version"], VERSION);
    let platforms = launcher["optionalDependencies"].as_object().unwrap();
    assert!(platforms.contains_key("opencode-bridge-linux-x64"));
    for (name, version) in platforms {
        assert_eq!(version, VERSION, "optionalDependencies.{name}");
        let pkg = json_file(&format!("npm/{name}/package.json"));
        assert_eq!(pkg["version"], VERSION, "npm/{name}");
        assert_eq!(pkg["name"], name.as_str());
        for field in ["os", "cpu", "libc"] {
            assert!(pkg[field].is_array(), "npm/{name} has no {field}");
        }
    }
    let plugin = json_file("plugin/.claude-plugin/plugin.json");
    assert_eq!(plugin["version"], VERSION);
    let market = json_file(".claude-plugin/marketplace.json");
    assert_eq!(market["name"], "opencode-bridge");
    let entry = &market["plugins"][0];
    assert_eq!(
        (&entry["name"], &entry["version"], &entry["source"]),
        (
            &json!("opencode-bridge"),
            &json!(VERSION),
            &json!("./plugin")
        )
    );
    // The server and the hook run the launcher of exactly this version.
    let pinned = format!("opencode-bridge@{VERSION}");
    let server = &json_file("plugin/.mcp.json")["mcpServers"]["opencode-bridge"];
    assert_eq!(server["command"], "npx");
    assert_eq!(server["args"], json!(["-y", pinned]));
    let hooks = json_file("plugin/hooks/hooks.json");
    assert_eq!(
        hooks["hooks"]["Stop"][0]["hooks"][0]["command"],
        format!("npx -y {pinned} hook stop")
    );
}

/// The binary's exit code comes back; a binary killed by a signal kills the launcher with the
/// same signal; SIGINT, SIGTERM and SIGHUP sent to the launcher reach the binary.
#[test]
fn the_launcher_passes_exit_codes_and_signals_through() {
    let Some(node) = node_or_skip() else {
        return;
    };
    let out = launch(
        &node,
        Some("/bin/sh"),
        &["-c", "echo \"args: $0 $1\"; exit 7", "a", "-b"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "args: a -b\n");
    let out = launch(&node, Some("/bin/sh"), &["-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(nix::sys::signal::Signal::SIGTERM as i32),
        "{out:?}"
    );
    // A child that exits with a code of its own on each forwarded signal.
    let script = "trap 'exit 41' INT; trap 'exit 42' TERM; trap 'exit 43' HUP; echo up; while :; do sleep 0.05; done";
    for (signal, code) in [
        (nix::sys::signal::Signal::SIGINT, 41),
        (nix::sys::signal::Signal::SIGTERM, 42),
        (nix::sys::signal::Signal::SIGHUP, 43),
    ] {
        let mut child = launch(&node, Some("/bin/sh"), &["-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut up = [0u8; 3];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut up).unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
        let status = wait_within(&mut child, Duration::from_secs(10));
        assert_eq!(status.code(), Some(code), "{signal}: {status:?}");
    }
}

fn wait_within(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the launcher did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Without the platform package (here: run from the source tree, nothing installed) and with
/// an override that names no file, one line says what is wrong and what to do.
#[test]
fn the_launcher_says_in_one_line_when_no_binary_fits() {
    let Some(node) = node_or_skip() else {
        return;
    };
    let out = launch(&node, None, &["--version"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let platform = format!("{}-{}", std::env::consts::OS, node_arch());
    assert!(err.contains(&platform), "{err}");
    assert!(err.contains("OPENCODE_BRIDGE_BINARY"), "{err}");
    let out = launch(&node, Some("/nonexistent/opencode-bridge"), &["--version"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("/nonexistent/opencode-bridge") && err.contains("OPENCODE_BRIDGE_BINARY"),
        "{err}"
    );
}

fn node_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Claude Code stops a stdio server with SIGINT. Sent to the launcher, it reaches the bridge,
/// which stops its running task's whole process group and exits 0; the launcher exits with it.
#[test]
fn sigint_to_the_launcher_stops_the_bridge_and_its_runs() {
    let Some(node) = node_or_skip() else {
        return;
    };
    let world = World::new();
    let env = [
        (
            "OPENCODE_BIN",
            common::fake_opencode(&world).to_string_lossy().into_owned(),
        ),
        ("OPENCODE_BRIDGE_KILL_GRACE_MS", "500".into()),
        ("OPENCODE_BRIDGE_BINARY", common::binary().to_string()),
    ];
    let mut cmd = Command::new(&node);
    cmd.arg(launcher());
    let mut server = Server::start_via(&world, &env, &world.root(), cmd);
    server.initialize();
    let pgid = start_sleeping_task(&mut server, &world, "easy", "Summarise the README");
    let bridge = bridge_pid_under(server.child.id() as i32);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // The launcher exits 0 with the bridge, and the bridge and its run are gone.
    assert_stopped_with_its_run(&mut server, "SIGINT to the launcher", pgid, &[bridge]);
}

/// The launcher's one child: the bridge.
fn bridge_pid_under(launcher: i32) -> i32 {
    let children = format!("/proc/{launcher}/task/{launcher}/children");
    let text = std::fs::read_to_string(&children).unwrap();
    let pids: Vec<i32> = text
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "{children}: {text}");
    pids[0]
}
