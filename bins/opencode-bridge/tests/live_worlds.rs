//! What a run inherits, through the bridge binary with the real opencode 1.18.33: of the
//! bridge's environment a run gets only what it needs (no agent sockets, no D-Bus, no runtime
//! directory, no cloud or registry tokens), its model's provider key, and what the user names
//! in `OPENCODE_BRIDGE_PASS_ENV`. The fake model makes the agent's shell write its whole
//! environment into the project, and the file is read.

use crate::common;

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode};
use common::{Server, World};
use serde_json::json;

/// Variables of the bridge's that must not reach a run, with values the test can find.
const AMBIENT: &[(&str, &str)] = &[
    ("SSH_AUTH_SOCK", "/tmp/agent-sock-4471"),
    ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/tmp/dbus-4471"),
    ("XDG_RUNTIME_DIR", "/tmp/runtime-4471"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-4471"),
    ("GITHUB_TOKEN", "gh-token-4471"),
    ("NPM_TOKEN", "npm-token-4471"),
    ("NODE_OPTIONS", "--require=/tmp/evil-4471.js"),
];

/// Starts a bridge with the ambient variables, a provider key for `fk` and a variable only
/// `OPENCODE_BRIDGE_PASS_ENV` lets through; the task dumps its environment; returns it.
fn env_of_a_run(oc: &std::path::Path, pass_env: &str) -> String {
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = World::new();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# demo\n")]);
    let mut env = common::sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_ROOT", proj.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_MODEL", "fk/script".into()));
    env.push(("OPENCODE_BRIDGE_PASS_ENV", pass_env.into()));
    env.push(("FK_API_KEY", "fk-key-4471".into()));
    env.push(("MY_TOOL_SETTING", "mine-4471".into()));
    for (k, v) in AMBIENT {
        env.push((k, v.to_string()));
    }
    let mut server = Server::start_in(&world, &env, &proj);
    server.initialize();
    let call = json!({"command": "env > env.txt", "description": "dump"});
    let (t, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": format!("Dump it.\nCALL bash {call}\n")}),
    );
    assert!(!is_error, "{t}");
    let id = t
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_owned();
    let mut next = 100;
    let status = common::until_ended(&mut server, &id, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    std::fs::read_to_string(proj.join("env.txt")).unwrap_or_else(|e| panic!("{e}: {status}"))
}

#[test]
fn live_a_run_gets_no_ambient_authority_from_the_bridges_environment() {
    let oc = require_opencode!();
    let dumped = env_of_a_run(&oc, "");
    for (k, v) in AMBIENT {
        assert!(!dumped.contains(v), "{k} reached the run:\n{dumped}");
    }
    assert!(
        dumped.contains("FK_API_KEY=fk-key-4471"),
        "the model's provider key reaches the run:\n{dumped}"
    );
    assert!(!dumped.contains("mine-4471"), "{dumped}");
    assert!(
        !dumped.contains("OPENCODE_BRIDGE_"),
        "the bridge's own settings stay with it:\n{dumped}"
    );
    // The run's opencode state is its world's.
    let data = dumped
        .lines()
        .find_map(|l| l.strip_prefix("XDG_DATA_HOME="))
        .unwrap_or_default();
    assert!(data.contains("/worlds/"), "{data}");
}

/// The control: the same run, told to pass them, shows them, so their absence above is the
/// bridge's doing.
#[test]
fn live_what_pass_env_names_reaches_the_run() {
    let oc = require_opencode!();
    let dumped = env_of_a_run(&oc, "MY_TOOL_SETTING,SSH_*");
    assert!(dumped.contains("MY_TOOL_SETTING=mine-4471"), "{dumped}");
    assert!(
        dumped.contains("SSH_AUTH_SOCK=/tmp/agent-sock-4471"),
        "{dumped}"
    );
    assert!(!dumped.contains("aws-secret-4471"), "{dumped}");
}
