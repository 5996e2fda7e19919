//! The first ten minutes on a fresh machine, through the built binary: `doctor` checks Claude
//! Code and the configured model, a machine where opencode never ran is not a failure, CLI
//! errors name CLI commands, session ids may be shortened, `policy` shows a project's own tier
//! lists, a bare `opencode-bridge` at a terminal says what it is doing, and the fuzz script
//! installs its tool into the test cache.

use crate::common;

use common::{World, fake_claude, fake_opencode, fixture_store};
use run_supervisor::claude::RUNNER_FLAGS;
use std::path::PathBuf;
use std::process::{Command, Output};

fn run(world: &World, env: &[(&str, String)], args: &[&str]) -> Output {
    common::run_cli(world, env, args)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn line<'a>(out: &'a str, check: &str) -> &'a str {
    out.lines()
        .find(|l| l.get(6..).is_some_and(|r| r.starts_with(check)))
        .unwrap_or_else(|| panic!("no {check} line:\n{out}"))
}

#[test]
fn doctor_warns_about_an_old_claude_code_and_a_model_opencode_does_not_list() {
    let world = World::new();
    let old_flags: Vec<&str> = RUNNER_FLAGS
        .iter()
        .copied()
        .filter(|f| *f != "--permission-prompts")
        .collect();
    let claude = fake_claude(&world, "2.1.197 (Claude Code)", &old_flags, "", "", 1);
    let env = [
        (
            "OPENCODE_BIN",
            fake_opencode(&world).to_string_lossy().into_owned(),
        ),
        ("CLAUDE_BIN", claude.to_string_lossy().into_owned()),
        (
            "OPENCODE_BRIDGE_MODEL",
            "provider/model#variant".to_string(),
        ),
    ];
    let out = run(&world, &env, &["doctor"]);
    let (stdout, _) = text(&out);
    let c = line(&stdout, "claude");
    assert!(c.starts_with("warn"), "{c}");
    assert!(
        c.contains("2.1.197") && c.contains("lacks --permission-prompts"),
        "{c}"
    );
    assert!(c.contains("@anthropic-ai/claude-code@2.1.328"), "{c}");
    let m = line(&stdout, "model");
    assert!(m.starts_with("warn"), "{m}");
    assert!(
        m.contains("`opencode models` does not list provider/model"),
        "{m}"
    );
    assert!(m.contains("opencode auth login"), "{m}");

    // A model opencode lists, and a Claude Code that knows every flag.
    let claude = fake_claude(&world, "2.1.328 (Claude Code)", RUNNER_FLAGS, "", "", 1);
    let env = [
        (
            "OPENCODE_BIN",
            fake_opencode(&world).to_string_lossy().into_owned(),
        ),
        ("CLAUDE_BIN", claude.to_string_lossy().into_owned()),
        ("OPENCODE_BRIDGE_MODEL", "fake/model-b#high".to_string()),
    ];
    let (stdout, _) = text(&run(&world, &env, &["doctor"]));
    assert!(line(&stdout, "claude").starts_with("ok"), "{stdout}");
    assert!(line(&stdout, "model").starts_with("ok"), "{stdout}");
}

#[test]
fn live_doctor_accepts_the_pinned_claude_code() {
    let claude = bridge_testkit::require_claude!();
    let world = World::new();
    let env = [
        (
            "OPENCODE_BIN",
            fake_opencode(&world).to_string_lossy().into_owned(),
        ),
        ("CLAUDE_BIN", claude.to_string_lossy().into_owned()),
    ];
    let (stdout, _) = text(&run(&world, &env, &["doctor"]));
    let c = line(&stdout, "claude");
    assert!(c.starts_with("ok") && c.contains("knows every flag"), "{c}");
}

#[test]
fn a_fresh_machine_is_not_a_failure() {
    let world = World::new();
    let env = [(
        "OPENCODE_BIN",
        fake_opencode(&world).to_string_lossy().into_owned(),
    )];
    // No store: opencode has not run yet.
    let out = run(&world, &env, &["sessions"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("0 sessions (opencode has not run yet"),
        "{stdout}"
    );
    let out = run(&world, &env, &["doctor"]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(line(&stdout, "backend").starts_with("warn"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");

    // An empty store file (created, never written) is the same first state.
    let db = world.path("xdg/data/opencode/opencode.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    std::fs::write(&db, "").unwrap();
    let out = run(&world, &env, &["sessions"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("0 sessions (opencode has not run yet"),
        "{stdout}"
    );
    let (doctor, _) = text(&run(&world, &env, &["doctor"]));
    assert!(!doctor.contains("upgrade opencode-bridge"), "{doctor}");
    assert!(line(&doctor, "store").contains("is empty"), "{doctor}");
}

#[test]
fn cli_errors_name_commands_and_session_ids_may_be_shortened() {
    let world = World::new();
    let (db, map) = fixture_store(&world);
    let env = [("OPENCODE_DB", db.to_string_lossy().into_owned())];
    let out = run(&world, &env, &["output", "ses_doesnotexist0000000000"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("`opencode-bridge sessions`"), "{stderr}");
    assert!(!stderr.contains("opencode_sessions"), "{stderr}");

    let id = map["sessions"]["toolbash"]["id"].as_str().unwrap();
    let (whole, _) = text(&run(&world, &env, &["output", id, "--mode", "last"]));
    // the shortest prefix no other session shares
    let ids: Vec<&str> = map["sessions"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|s| s["id"].as_str())
        .collect();
    let n = (5..id.len())
        .find(|&n| ids.iter().filter(|o| o.starts_with(&id[..n])).count() == 1)
        .unwrap();
    let out = run(&world, &env, &["output", &id[..n], "--mode", "last"]);
    let (short, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(short, whole);
    // a prefix of several sessions names them
    let out = run(&world, &env, &["output", "ses_"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("matches") && stderr.contains("give more of the id"),
        "{stderr}"
    );
}

#[test]
fn policy_shows_the_project_tier_lists_and_warns_about_a_missing_directory() {
    let world = World::new();
    let proj = world.root().join("demo");
    std::fs::create_dir_all(proj.join(".claude")).unwrap();
    std::fs::write(
        proj.join(".claude/opencode-bridge-tiers.json"),
        r#"{"delegate": ["changelog entries"], "keep": ["database migrations"]}"#,
    )
    .unwrap();
    let (out, _) = text(&run(&world, &[], &["policy", "--cwd", "demo"]));
    assert!(out.contains("  - changelog entries\n"), "{out}");
    assert!(out.contains("  - database migrations\n"), "{out}");
    assert!(!out.contains("DOI and reference lookups"), "{out}");
    assert!(out.contains("the project's, from"), "{out}");

    let (out, _) = text(&run(&world, &[], &["policy", "--cwd", "no-such-dir"]));
    assert!(
        out.starts_with("warning: ") && out.contains("no-such-dir is not an existing directory"),
        "{out}"
    );
    let (out, _) = text(&run(&world, &[], &["policy", "--cwd", "demo"]));
    assert!(!out.starts_with("warning"), "{out}");
}

#[test]
fn a_bare_binary_at_a_terminal_says_it_serves_mcp() {
    let world = World::new();
    // python3's pty module gives the binary a terminal on stdin; closing it ends the input.
    let driver = r#"
import os, subprocess, sys, time
master, slave = os.openpty()
p = subprocess.Popen([sys.argv[1]], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
os.close(slave)
time.sleep(1)
os.close(master)
out, err = p.communicate(timeout=20)
sys.stdout.write(err.decode())
"#;
    let out = Command::new("python3")
        .args(["-c", driver, common::binary()])
        .env_clear()
        .envs(world.env())
        .current_dir(world.root())
        .output()
        .expect("python3 runs");
    let (stderr, _) = text(&out);
    assert!(stderr.contains("serving MCP on stdin/stdout"), "{stderr}");
    assert!(stderr.contains("opencode-bridge doctor"), "{stderr}");
    // Not at a terminal (how Claude Code runs it), nothing is said.
    let piped = Command::new(common::binary())
        .env_clear()
        .envs(world.env())
        .current_dir(world.root())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!text(&piped).1.contains("serving MCP"));
}

#[test]
fn the_fuzz_script_installs_cargo_fuzz_into_the_test_cache() {
    let world = World::new();
    let bin = world.path("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = world.path("cargo-calls");
    // A stand-in cargo: has no `fuzz` subcommand until installed, records every call.
    std::fs::write(
        bin.join("cargo"),
        format!(
            "#!/bin/sh\necho \"$*\" >> {calls}\n[ \"$1 $2\" = \"fuzz --version\" ] && exit 1\nexit 0\n",
            calls = calls.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = world.path("cache");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fuzz.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["1", "tool_args"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", world.path("home"))
        .env("OPENCODE_BRIDGE_TEST_CACHE", &cache)
        .output()
        .unwrap();
    let recorded = std::fs::read_to_string(&calls).unwrap_or_default();
    let install = recorded
        .lines()
        .find(|l| l.starts_with("install cargo-fuzz"))
        .unwrap_or_else(|| panic!("no install call: {recorded}\n{:?}", out));
    assert!(
        install.contains(&format!("--root {}/cargo-tools", cache.display())),
        "{install}"
    );
}
