//! Everyday use through the built binary over raw JSON-RPC: an old Claude Code and a Claude
//! Code without a login fail with kinds that say what to do, a server started in `/` or the
//! home directory refuses editing agents and every start names the root, the process table
//! finds our run whatever the opencode binary is called, misspelled arguments get a guess.

use crate::common;

use common::{Server, World, fake_claude, fake_opencode};
use serde_json::json;
use std::time::{Duration, Instant};

/// Polls `opencode_status` until the task is no longer running.
fn finished_status(server: &mut Server, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, _) = server.call_text(50, "opencode_status", json!({"id": id}));
        if !s.contains("still working") || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_claude_code_that_rejects_a_flag_is_an_outdated_runner() {
    let world = World::new();
    let claude = fake_claude(
        &world,
        "2.1.197 (Claude Code)",
        &[],
        "",
        "error: unknown option '--permission-prompts'\n",
        1,
    );
    let env = [("CLAUDE_BIN", claude.to_string_lossy().into_owned())];
    let mut server = Server::start(&world, &env);
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hi", "cwd": "demo", "model": "haiku"}),
    );
    assert!(!is_error, "{text}");
    let status = finished_status(&mut server, "1");
    assert!(status.contains("failure: outdated_runner:"), "{status}");
    assert!(status.contains("--permission-prompts"), "{status}");
    assert!(
        status.contains("npm i -g @anthropic-ai/claude-code@2.1.328"),
        "{status}"
    );
}

#[test]
fn live_claude_code_without_a_login_is_an_auth_failure() {
    let claude = bridge_testkit::require_claude!();
    let world = World::new();
    // An empty HOME and no API key: Claude Code answers "Not logged in · Please run /login"
    // without any network call.
    let env = [
        ("CLAUDE_BIN", claude.to_string_lossy().into_owned()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
    ];
    let mut server = Server::start(&world, &env);
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Say hi", "cwd": "demo", "model": "haiku", "agent": "worker"}),
    );
    assert!(!is_error, "{text}");
    let status = finished_status(&mut server, "1");
    assert!(status.contains("failure: auth:"), "{status}");
    assert!(status.contains("Not logged in"), "{status}");
    assert!(status.contains("log in"), "{status}");
}

/// A server whose root is not set, started in `cwd`.
fn unrooted_server(world: &World, cwd: &std::path::Path, explicit: bool) -> Server {
    let mut env: Vec<(&str, String)> = vec![(
        "OPENCODE_BIN",
        fake_opencode(world).to_string_lossy().into_owned(),
    )];
    // World::env sets OPENCODE_BRIDGE_ROOT; an empty value counts as unset.
    env.push((
        "OPENCODE_BRIDGE_ROOT",
        if explicit {
            cwd.to_string_lossy().into_owned()
        } else {
            String::new()
        },
    ));
    let mut s = Server::start_in(world, &env, cwd);
    s.initialize();
    s
}

#[test]
fn a_root_that_is_home_or_slash_refuses_editing_agents_unless_set() {
    let world = World::new();
    let home = world.path("home");
    for cwd in [home.as_path(), std::path::Path::new("/")] {
        let mut server = unrooted_server(&world, cwd, false);
        let (text, is_error) = server.call_text(
            2,
            "opencode_start",
            json!({"tier": "easy", "prompt": "Tidy the files", "agent": "worker"}),
        );
        assert!(is_error, "{}: {text}", cwd.display());
        assert!(text.contains("OPENCODE_BRIDGE_ROOT is not set"), "{text}");
        assert!(text.contains("read-only agent"), "{text}");
    }
    // Set explicitly, the same directory is accepted, and the reply names the root.
    let mut server = unrooted_server(&world, &home, true);
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "Tidy the files", "agent": "worker"}),
    );
    assert!(!is_error, "{text}");
    let root = std::fs::canonicalize(&home).unwrap();
    assert!(
        text.contains(&format!("(root {})", root.display())),
        "{text}"
    );
    let info = {
        let mut s = unrooted_server(&world, &home, false);
        s.initialize()
    };
    let instructions = info["instructions"].as_str().unwrap_or("");
    assert!(
        instructions.contains(&format!("Delegation root: {}", root.display()))
            && instructions.contains("editing agents are refused"),
        "{instructions}"
    );
}

#[test]
fn processes_show_our_run_whatever_the_binary_is_called() {
    let world = World::new();
    let fake = fake_opencode(&world);
    let renamed = world.path("bin/oc-1.18");
    std::fs::copy(&fake, &renamed).unwrap();
    let env = [("OPENCODE_BIN", renamed.to_string_lossy().into_owned())];
    let mut server = Server::start(&world, &env);
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "prompt": "List the files", "cwd": "demo"}),
    );
    assert!(!is_error, "{text}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let procs = loop {
        let (p, _) = server.call_text(3, "opencode_processes", json!({}));
        if p.contains("[task 1]") || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(procs.contains("[task 1]"), "{procs}");
    assert!(
        procs.lines().nth(1).is_some_and(|h| h.starts_with("PID")),
        "{procs}"
    );
    let row = procs.lines().find(|l| l.contains("[task 1]")).unwrap();
    assert!(row.contains(" run "), "{row}");
}

#[test]
fn misspelled_arguments_get_a_guess_and_tiers_ignore_case() {
    let world = World::new();
    let env = [(
        "OPENCODE_BIN",
        fake_opencode(&world).to_string_lossy().into_owned(),
    )];
    let mut server = Server::start(&world, &env);
    server.initialize();
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "promt": "List the files"}),
    );
    assert!(is_error);
    assert!(text.contains("did you mean `prompt`?"), "{text}");
    let (text, is_error) = server.call_text(
        3,
        "opencode_start",
        json!({"tier": "EASY", "prompt": "List the files", "cwd": "demo", "mode": "Blueprint"}),
    );
    assert!(!is_error, "{text}");
    assert!(text.contains("tier easy, mode blueprint"), "{text}");
}
