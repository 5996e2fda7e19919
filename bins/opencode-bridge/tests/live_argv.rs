//! No caller string is ever an option, through both runners against the real binaries: every
//! string argument of `opencode_start` that reaches a run carries a value that would be an
//! option if it stood alone on the command line (`--dir=…`, `--file=…`, `--add-dir=…`,
//! `--agent=build`, `--auto`, `-m`, `-f`, `--`), and the disk, the model's requests, the
//! permission answers and the session record show that none took effect. On the command line
//! of before (`--title <value>`), the write went to the `--dir` target, the `--file` target
//! reached the model and a read-only run titled `--auto` had its ask approved. The arguments that refuse such values (model,
//! agent, session) need no run: `tools::tests::option_like_values_are_refused_where_they_can_only_be_mistakes`
//! pins which argument is which, so a new string argument is placed before it ships.

use crate::common;

use bridge_testkit::fake_claude_api::FakeClaudeApi;
use bridge_testkit::{FakeLlm, OpencodeSandbox, require_claude, require_opencode};
use common::{Server, World};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The task id of a `started task N: …` reply.
fn task_id(text: &str) -> String {
    text.strip_prefix("started task ")
        .and_then(|t| t.split(':').next())
        .unwrap_or_else(|| panic!("not started: {text}"))
        .to_owned()
}

/// The `session: <id>` line of a status.
fn session_of(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .filter(|s| !s.starts_with('('))
        .unwrap_or_else(|| panic!("no session id: {status}"))
        .trim()
        .to_owned()
}

/// A directory inside `root` whose path, relative to the root, is `rel` (created).
fn dir_named(root: &Path, rel: &str) -> PathBuf {
    let d = root.join(rel);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap()
}

#[test]
fn live_opencode_runs_take_option_like_values_as_values() {
    let oc = require_opencode!();
    let llm = FakeLlm::start().unwrap();
    // `reader`: a read-only agent (edit and bash denied), which runs without `--auto`.
    let sb = OpencodeSandbox::with_config(
        &llm.base_url(),
        json!({"agent": {"reader": {"mode": "primary", "description": "reads only",
                                    "permission": {"edit": "deny", "bash": "deny"}}}}),
    )
    .unwrap();
    let world = World::new();
    let proj = sb.project_dir().canonicalize().unwrap();
    // Outside the root: where `--dir` would send the run, and a file `--file` would attach.
    // A path without digits: the bridge redacts random-looking tokens in titles (a temporary
    // directory's name can look like one), and the title must reach opencode as given.
    let letters: String = std::process::id()
        .to_string()
        .chars()
        .map(|d| (b'a' + d.to_digit(10).unwrap_or(0) as u8) as char)
        .collect();
    let outside = TempTree(std::env::temp_dir().join(format!("obridge-argv-{letters}")));
    let elsewhere = outside.0.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let marker = "ARGV-SECRET-MARKER-5d0c1e";
    let secret = outside.0.join("outside-secret.txt");
    std::fs::write(&secret, format!("{marker}\n")).unwrap();
    let dir_flag = format!("--dir={}", elsewhere.display());
    let file_flag = format!("--file={}", secret.display());

    let mut env = common::sandbox_env_for_bridge(&sb);
    env.push(("OPENCODE_BIN", oc.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_ROOT", proj.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_RETRIES", "0".into()));
    let mut server = Server::start_in(&world, &env, &proj);
    server.initialize();
    let mut next = 10;

    // 1. An editing run that writes: title `--dir=<elsewhere>`, a cwd whose relative path is
    //    the same string (a directory inside the root), label `--auto`, a prompt opening with
    //    `--agent=build`.
    let cwd1 = dir_named(&proj, &dir_flag);
    // 2. title `--file=<secret>`, cwd `-f`, label `-m`, prompt `--`.
    let cwd2 = dir_named(&proj, "-f");
    // 3. No title: lane `--agent=build` (the title is made from it), cwd `--`, label
    //    `--session=x`, prompt `--auto`.
    let cwd3 = dir_named(&proj, "--");
    let runs = [
        json!({"tier": "easy", "model": "fk/toolwrite", "title": dir_flag, "cwd": dir_flag,
               "label": "--auto", "prompt": "--agent=build\nWrite the greeting file."}),
        json!({"tier": "easy", "model": "fk/ok", "title": file_flag, "cwd": "-f",
               "label": "-m", "prompt": "--\nSay hello."}),
        json!({"tier": "easy", "model": "fk/ok", "lane": "--agent=build", "cwd": "--",
               "label": "--session=x", "prompt": "--auto\nSay hello, then stop."}),
        // 4. A read-only run titled `--auto`, whose model reads outside its directory (an ask).
        json!({"tier": "easy", "agent": "reader", "model": "fk/toolread-denied", "title": "--auto",
               "prompt": "Read the file."}),
    ];
    let mut ids = Vec::new();
    let mut titles = Vec::new();
    for args in &runs {
        next += 1;
        let (text, is_error) = server.call_text(next, "opencode_start", args.clone());
        assert!(!is_error, "{args}: {text}");
        ids.push(task_id(&text));
        titles.push(
            text.lines()
                .find_map(|l| l.strip_prefix("title: "))
                .unwrap_or_else(|| panic!("{text}"))
                .to_owned(),
        );
    }
    assert_eq!(titles[0], dir_flag);
    assert_eq!(titles[1], file_flag);
    assert_eq!(titles[3], "--auto");
    assert!(
        titles[2].starts_with("AGENT-BUILD/worker: "),
        "{}",
        titles[2]
    );
    let mut statuses = Vec::new();
    for id in &ids[..3] {
        let status = common::until_ended(&mut server, id, &mut next);
        // Succeeded also means the post-run audit found the agent and model that were asked
        // (`worker`, not `build`) in the session's record.
        assert!(status.contains("succeeded"), "task {id}: {status}");
        statuses.push(status);
    }
    // The read-only run's read outside its directory was not approved: `--auto` stayed its
    // title (and a read-only run's config denies whatever is not a read of its own tree, so
    // the call is refused with or without an ask to approve).
    let status = common::until_ended(&mut server, &ids[3], &mut next);
    next += 1;
    let (result, _) = server.call_text(next, "opencode_result", json!({"id": ids[3]}));
    let read = result
        .lines()
        .find(|l| l.trim_start().starts_with("-> read"))
        .unwrap_or_else(|| panic!("no read call: {result}"));
    assert!(
        read.ends_with("[error]") || read.contains("[error] =>"),
        "{result}"
    );
    statuses.push(status);

    // The write landed in the directory asked for, not where `--dir` points.
    let written: Vec<_> = std::fs::read_dir(&elsewhere)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        written.is_empty(),
        "the run wrote outside the root: {written:?}"
    );
    assert_eq!(
        std::fs::read_to_string(cwd1.join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hi from fake\n"),
        "nothing written in the cwd asked for"
    );
    assert!(!proj.join("hello.txt").exists());
    // The secret file never reached the model.
    for r in llm.requests() {
        assert!(
            !r.body.contains(marker),
            "the file named by the title reached the model: {}",
            r.body
        );
    }

    // Each session has the title it was given and the directory asked for.
    next += 1;
    let sessions = server.call(next, "opencode_sessions", json!({"limit": 50}));
    let listed = sessions["result"]["structuredContent"]["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{sessions}"))
        .clone();
    let dirs = [&cwd1, &cwd2, &cwd3, &proj];
    let agents = ["worker", "worker", "worker", "reader"];
    for (((title, dir), agent), status) in titles.iter().zip(dirs).zip(agents).zip(&statuses) {
        let id = session_of(status);
        let s = listed
            .iter()
            .find(|s| s["id"] == id.as_str())
            .unwrap_or_else(|| panic!("session {id} not listed: {sessions}"));
        assert_eq!(s["title"], title.as_str(), "{s}");
        assert_eq!(s["directory"], dir.to_string_lossy().as_ref(), "{s}");
        assert_eq!(s["agent"], agent, "{s}");
    }
}

/// The transcript Claude Code wrote for `session` under `home`: in the config directory of the
/// run's world (`$XDG_STATE_HOME/opencode-bridge/worlds/*/claude`), never the user's
/// `~/.claude`.
fn claude_transcript(world: &World, home: &Path, session: &str) -> String {
    let worlds = world.path("xdg/state/opencode-bridge/worlds");
    let mut looked = Vec::new();
    for world in std::fs::read_dir(&worlds).into_iter().flatten().flatten() {
        let projects = world.path().join("claude/projects");
        for dir in std::fs::read_dir(&projects).into_iter().flatten().flatten() {
            let f = dir.path().join(format!("{session}.jsonl"));
            if f.is_file() {
                return std::fs::read_to_string(f).unwrap();
            }
        }
        looked.push(projects);
    }
    assert!(
        !home.join(".claude/projects").exists(),
        "the run wrote the user's own ~/.claude"
    );
    panic!("no transcript of {session} in {looked:?}")
}

#[test]
fn live_claude_runs_take_option_like_values_as_values() {
    let claude = require_claude!();
    let world = World::new();
    let fake = FakeClaudeApi::start().unwrap();
    let home = world.path("home");
    let mut env: Vec<(String, String)> = fake.claude_env(&home);
    env.push(("CLAUDE_BIN".into(), claude.to_string_lossy().into_owned()));
    env.push(("OPENCODE_BRIDGE_RETRIES".into(), "0".into()));
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut server = Server::start(&world, &env);
    server.initialize();

    // `--add-dir=<elsewhere>` would let an editing run write there; the model tries to.
    let elsewhere = world.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let add_dir = format!("--add-dir={}", elsewhere.display());
    let target = elsewhere.join("claude-escape.txt");
    let cwd = dir_named(&world.root(), &add_dir);
    let (text, is_error) = server.call_text(
        2,
        "opencode_start",
        json!({"tier": "easy", "model": "claude-fake-write", "title": add_dir, "cwd": add_dir,
               "label": "--permission-mode=bypassPermissions",
               "prompt": format!("WRITE_PATH={}\n--dangerously-skip-permissions", target.display())}),
    );
    assert!(!is_error, "{text}");
    let id = task_id(&text);
    let mut next = 10;
    let status = common::until_ended(&mut server, &id, &mut next);
    assert!(status.contains("succeeded"), "{status}");
    assert!(
        !target.exists(),
        "the run wrote outside its directory: {status}"
    );
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
    next += 1;
    let (result, _) = server.call_text(next, "opencode_result", json!({"id": id}));
    assert!(
        result.contains("tool result (error: true)"),
        "the model did try the write: {result}"
    );

    // Claude Code named the session with the title as given, in the directory asked for, and
    // offered the model only the editing tool set.
    let transcript = claude_transcript(&world, &home, &session_of(&status));
    let lines: Vec<Value> = transcript
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "custom-title" && l["customTitle"] == add_dir.as_str()),
        "{transcript}"
    );
    assert!(
        lines
            .iter()
            .filter_map(|l| l["cwd"].as_str())
            .all(|c| Path::new(c) == cwd),
        "{transcript}"
    );
    let requests = fake.requests();
    assert!(!requests.is_empty());
    for r in requests.iter().filter(|r| !r.tools.is_empty()) {
        // Claude Code 2.1.328 adds a placeholder for deferred (MCP) tools; the run has none.
        let mut tools: Vec<&str> = r
            .tools
            .iter()
            .map(String::as_str)
            .filter(|t| *t != "DeferredToolPlaceholder")
            .collect();
        tools.sort();
        assert_eq!(
            tools,
            ["Bash", "Edit", "Glob", "Grep", "Read", "Write"],
            "{:?}",
            r.tools
        );
    }
}

/// A directory removed with everything in it when dropped.
struct TempTree(std::path::PathBuf);

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
