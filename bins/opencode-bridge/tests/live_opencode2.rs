//! The bridge binary with the real OpenCode 2.0 preview (`lildax`, npm
//! `@opencode-ai/cli-linux-x64@1.18.18`, `OPENCODE_BRIDGE_TEST_OPENCODE2`) as `OPENCODE_BIN`:
//! `doctor` says which contract it speaks, and reading sessions through its `api` command (which
//! starts a detached background server when none runs) leaves no process behind.

use crate::common;

use bridge_testkit::{FakeLlm, OpencodeSandbox, require_opencode2};
use std::path::Path;
use std::process::Command;

/// The `lildax` processes alive now whose environment names the sandbox (zombies left out).
fn preview_processes(oc: &Path, sb: &OpencodeSandbox) -> Vec<i32> {
    let exe = oc.canonicalize().unwrap();
    let root = sb.root().to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| String::from_utf8_lossy(&env).contains(&root))
        })
        .collect()
}

fn bridge(oc: &Path, sb: &OpencodeSandbox, args: &[&str], extra: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(common::binary());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(sb.env())
        .env("OPENCODE_BIN", oc)
        .env("OPENCODE_BRIDGE_ROOT", sb.root())
        .current_dir(sb.project_dir());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn live_opencode2_doctor_names_the_contract_and_api_reads_leave_no_server() {
    let oc = require_opencode2!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();

    let doctor = bridge(&oc, &sb, &["doctor"], &[]);
    let line = doctor
        .lines()
        .find(|l| l.contains(" opencode ") && l.contains("lildax"))
        .unwrap_or_else(|| panic!("no opencode line:\n{doctor}"));
    assert!(line.starts_with("ok"), "{line}");
    assert!(
        line.contains("OpenCode 2.0 preview") && line.contains("v2 contract"),
        "{line}"
    );
    assert!(!doctor.contains("does not look like opencode"), "{doctor}");
    let roster = doctor
        .lines()
        .find(|l| l.contains("roster") && l.contains("opencode itself"))
        .unwrap_or_else(|| panic!("the roster was not asked of opencode:\n{doctor}"));
    assert!(roster.starts_with("ok"), "{roster}");

    // `lildax api` starts `serve --register` when no server is registered; the bridge stops
    // the one its call started.
    let listed = bridge(
        &oc,
        &sb,
        &["sessions"],
        &[("OPENCODE_BRIDGE_BACKEND", "api")],
    );
    assert!(listed.contains("backend api"), "{listed}");
    let left = preview_processes(&oc, &sb);
    assert!(left.is_empty(), "left running: {left:?}\n{listed}");
    assert!(
        !sb.root().join("state/opencode/server.json").exists(),
        "a registered server is left"
    );
}

/// Through MCP, as Claude Code delegates: `opencode_start` on the preview answers (on a warm
/// server of it), its result reads back, and `opencode_sessions` / `opencode_session_output`
/// read the session from the run's world.
#[test]
fn live_opencode2_a_delegated_task_answers_and_its_session_reads_back() {
    let oc = require_opencode2!();
    let llm = FakeLlm::start().unwrap();
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let world = common::World::new();
    let proj = sb.project_dir().to_path_buf();
    bridge_testkit::git_repo(&proj, &[("README.md", "# demo\n")]);
    let mut env = common::sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_ROOT", proj.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_MODEL", "fk/ok".into()));
    let mut server = common::Server::start_in(&world, &env, &proj);
    server.initialize();
    let (t, is_error) = server.call_text(
        2,
        "opencode_start",
        serde_json::json!({"tier": "easy", "agent": "build", "prompt": "Say hello, then stop."}),
    );
    assert!(!is_error, "{t}");
    let id = t
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("{t}"))
        .to_owned();
    let mut next = 100;
    let status = common::until_ended(&mut server, &id, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    let (result, _) = server.call_text(3, "opencode_result", serde_json::json!({"id": id}));
    assert!(
        result.contains(bridge_testkit::fake_llm::OK_TEXT),
        "{result}"
    );
    let (sessions, is_error) = server.call_text(4, "opencode_sessions", serde_json::json!({}));
    assert!(!is_error, "{sessions}");
    let sid = sessions
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|w| w.starts_with("ses_"))
        .unwrap_or_else(|| panic!("no session listed:\n{sessions}"))
        .to_owned();
    let (output, is_error) =
        server.call_text(5, "opencode_session_output", serde_json::json!({"id": sid}));
    assert!(!is_error, "{output}");
    assert!(output.contains("Say hello, then stop."), "{output}");
    assert!(
        output.contains(bridge_testkit::fake_llm::OK_TEXT),
        "{output}"
    );
    // Search reads the messages of an opencode 2 session too (they are in `session_message`,
    // not in `part`): the prompt's words find the session, other words do not.
    let (found, is_error) = server.call_text(
        9,
        "opencode_sessions",
        serde_json::json!({"search": "HELLO, then"}),
    );
    assert!(!is_error && found.contains(&sid), "{found}");
    let (none, is_error) = server.call_text(
        10,
        "opencode_sessions",
        serde_json::json!({"search": "zebra-kumquat"}),
    );
    assert!(!is_error && !none.contains(&sid), "{none}");

    // The bridge's default agent (`worker`, defined by the bridge with no rules of its own)
    // edits on opencode 2 as on 1: its model's `write` (taking `path`) lands in the project.
    let (t, is_error) = server.call_text(
        6,
        "opencode_start",
        serde_json::json!({"tier": "easy", "model": "fk/toolwrite", "prompt": "Write the file."}),
    );
    assert!(!is_error, "{t}");
    assert!(t.contains("agent worker"), "{t}");
    let id = t
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("{t}"))
        .to_owned();
    let status = common::until_ended(&mut server, &id, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    assert_eq!(
        std::fs::read_to_string(proj.join("hello.txt")).unwrap_or_else(|e| panic!("{e}: {status}")),
        "hi from fake\n"
    );

    // A read-only agent of the roster (the preview's `explore`) whose model tries the write
    // tool and the shell writes nothing.
    let write = serde_json::json!({"filePath": proj.join("ro-write.txt"), "content": "x"});
    let shell = serde_json::json!({"command": format!("echo x > {}", proj.join("ro-shell.txt").display()), "description": "w"});
    let (t, is_error) = server.call_text(
        7,
        "opencode_start",
        serde_json::json!({"tier": "easy", "agent": "explore", "model": "fk/script",
            "prompt": format!("Look around.\nCALL write {write}\nCALL bash {shell}\n")}),
    );
    assert!(!is_error, "{t}");
    let id = t
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("{t}"))
        .to_owned();
    let status = common::until_ended(&mut server, &id, &mut next);
    for f in ["ro-write.txt", "ro-shell.txt"] {
        assert!(
            !proj.join(f).exists(),
            "the read-only agent wrote {f}: {status}"
        );
    }
    let (result, _) = server.call_text(8, "opencode_result", serde_json::json!({"id": id}));
    assert!(result.contains("-> write"), "the model did try: {result}");
    server.close_stdin();
    server.wait_exit(std::time::Duration::from_secs(30));
}

/// A remote server that speaks opencode 2 (a preview `serve` on loopback with its own dirs and
/// password, standing for another machine): doctor names its contract and counts its agents
/// (from `/api/agent`), and a task placed on it runs there, in its tree.
#[test]
fn live_opencode2_a_remote_server_of_it_is_checked_and_runs_a_task() {
    let oc = require_opencode2!();
    let llm = FakeLlm::start().unwrap();
    let local = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let host = OpencodeSandbox::new(&llm.base_url()).unwrap();
    std::fs::create_dir_all(host.root().join("work/app")).unwrap();
    // The preview reads its password from its state directory, set by `service password`
    // (it ignores OPENCODE_SERVER_PASSWORD).
    let set = host
        .command(&oc, ["service", "password", "pw-v2"])
        .output()
        .unwrap();
    assert!(set.status.success(), "{set:?}");
    let remote = bridge_testkit::SandboxServe::start(&host, &oc, "pw-v2").unwrap();
    let world = common::World::new();
    let app = world.root().join("app");
    std::fs::create_dir_all(&app).unwrap();
    let config = world.path("bridge.toml");
    std::fs::write(
        &config,
        format!(
            "[[server]]\nname = \"two\"\nurl = \"{}\"\npassword_env = \"TWO_PW\"\nroot = \"{}\"\n",
            remote.url,
            host.root().join("work").display()
        ),
    )
    .unwrap();
    let mut env = common::sandbox_env_for_bridge(&local);
    env.push((
        "OPENCODE_BRIDGE_CONFIG",
        config.to_string_lossy().into_owned(),
    ));
    env.push(("OPENCODE_BRIDGE_MODEL", "fk/toolwrite".into()));
    env.push(("TWO_PW", "pw-v2".into()));

    let out = common::run_cli(&world, &env, &["doctor"]);
    let doctor = String::from_utf8_lossy(&out.stdout);
    let line = doctor
        .lines()
        .find(|l| l.contains("server") && l.contains(" two http"))
        .unwrap_or_else(|| panic!("no line for the server: {doctor}"));
    assert!(line.starts_with("ok"), "{doctor}");
    assert!(line.contains("opencode 2"), "{doctor}");
    let agents: usize = line
        .split(", ")
        .find_map(|p| p.strip_suffix(" agents")?.parse().ok())
        .unwrap_or_else(|| panic!("no agent count: {line}"));
    assert!(
        agents >= 3,
        "the preview's built-in agents are listed: {line}"
    );

    let mut bridge = common::Server::start(&world, &env);
    bridge.initialize();
    let (t, err) = bridge.call_text(
        2,
        "opencode_start",
        serde_json::json!({"tier": "easy", "prompt": "Write the greeting file", "cwd": app,
            "agent": "build", "server": "two"}),
    );
    assert!(!err, "{t}");
    let id = t
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("{t}"))
        .to_owned();
    let mut next = 100;
    let status = common::until_ended(&mut bridge, &id, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    assert!(status.contains("engine: server two"), "{status}");
    assert_eq!(
        std::fs::read_to_string(host.root().join("work/app/hello.txt"))
            .unwrap_or_else(|e| panic!("{e}: {status}")),
        "hi from fake\n"
    );
    assert!(!app.join("hello.txt").exists());
    // Its sessions are read through it.
    let sid = status
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap_or_else(|| panic!("no session: {status}"))
        .trim()
        .to_owned();
    let (list, err) =
        bridge.call_text(3, "opencode_sessions", serde_json::json!({"server": "two"}));
    assert!(!err && list.contains(&sid), "{list}");
    let (out, err) = bridge.call_text(
        4,
        "opencode_session_output",
        serde_json::json!({"id": sid, "server": "two"}),
    );
    assert!(!err && out.contains("Write the greeting file"), "{out}");
    bridge.close_stdin();
    bridge.wait_exit(std::time::Duration::from_secs(30));
}
