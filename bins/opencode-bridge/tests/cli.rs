//! The subcommands for a person at a terminal: they print exactly what the tools return.

use crate::common;

use common::{Server, World, fake_opencode, fixture_store, redact};
use serde_json::{Value, json};
use std::process::{Command, Output};

fn run(world: &World, env: &[(&str, String)], args: &[&str]) -> Output {
    common::run_cli(world, env, args)
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fixture_redact(text: &str, world: &World, map: &Value) -> String {
    // The killed session has no outcome: `running` while recent, `stale?` after 45 minutes.
    let mut t = redact(&text.replace("stale? ", "running"), world);
    for key in ["project_dir", "other_dir"] {
        if let Some(dir) = map[key].as_str() {
            t = t.replace(dir, &format!("[{}]", key.to_uppercase()));
        }
    }
    regex::Regex::new(r"ocsandbox-[A-Za-z0-9]+")
        .unwrap()
        .replace_all(&t, "ocsandbox-[X]")
        .into_owned()
}

#[test]
fn help_everywhere() {
    let world = World::new();
    for sub in [
        "",
        "serve",
        "sessions",
        "output",
        "policy",
        "processes",
        "doctor",
        "check-secrets",
    ] {
        let mut args: Vec<&str> = sub.split_whitespace().collect();
        args.push("--help");
        let out = stdout(&run(&world, &[], &args));
        assert!(out.contains("Usage: opencode-bridge"), "{sub}: {out}");
    }
    let top = stdout(&run(&world, &[], &["--help"]));
    for var in [
        "OPENCODE_BRIDGE_ROOT",
        "OPENCODE_BRIDGE_MAX_PARALLEL",
        "OPENCODE_DB",
    ] {
        assert!(top.contains(var), "--help lists {var}");
    }
}

#[test]
fn sessions_and_output_print_what_the_tools_return() {
    let world = World::new();
    let (db, map) = fixture_store(&world);
    let env = [("OPENCODE_DB", db.to_string_lossy().into_owned())];
    let listing = stdout(&run(&world, &env, &["sessions", "--limit", "20"]));
    let failed = stdout(&run(&world, &env, &["sessions", "--state", "failed"]));
    let e401 = map["sessions"]["e401"]["id"].as_str().unwrap();
    assert!(failed.starts_with("1 session(s) (state=failed"), "{failed}");
    assert!(failed.contains(e401), "{failed}");
    let toolbash = map["sessions"]["toolbash"]["id"].as_str().unwrap();
    let output = stdout(&run(&world, &env, &["output", toolbash]));
    let last = stdout(&run(&world, &env, &["output", toolbash, "--mode", "last"]));
    assert!(output.contains("-> bash("), "{output}");

    // The MCP tools return the same text.
    let mut server = Server::start(&world, &env);
    server.initialize();
    let (tool_listing, is_error) = server.call_text(2, "opencode_sessions", json!({"limit": 20}));
    assert!(!is_error, "{tool_listing}");
    let (tool_output, _) = server.call_text(3, "opencode_session_output", json!({"id": toolbash}));
    let strip_ages = |t: &str| redact(t, &world);
    assert_eq!(strip_ages(&tool_listing), strip_ages(&listing));
    assert_eq!(strip_ages(&tool_output), strip_ages(&output));

    insta::assert_snapshot!("cli_sessions", fixture_redact(&listing, &world, &map));
    insta::assert_snapshot!("cli_output_tail", fixture_redact(&output, &world, &map));
    insta::assert_snapshot!("cli_output_last", fixture_redact(&last, &world, &map));
}

#[test]
fn errors_go_to_stderr_with_exit_code_1() {
    let world = World::new();
    let out = run(&world, &[], &["sessions", "--limit", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "opencode-bridge: bad option `--limit`: 0 is not accepted; use a whole number from 1 to 500"
    );
    // A store asked for explicitly (OPENCODE_BRIDGE_BACKEND=store) that is missing is an error.
    let env = [
        ("OPENCODE_BRIDGE_BACKEND", "store".to_string()),
        (
            "OPENCODE_DB",
            world.path("nowhere.db").to_string_lossy().into_owned(),
        ),
    ];
    let missing = run(&world, &env, &["sessions"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("opencode store not found at"), "{err}");
}

#[test]
fn policy_matches_the_tool() {
    let world = World::new();
    let cli = stdout(&run(&world, &[], &["policy", "--mode", "sensitive"]));
    let mut server = Server::start(&world, &[]);
    server.initialize();
    let (tool, _) = server.call_text(2, "opencode_policy", json!({"mode": "sensitive"}));
    assert_eq!(cli, tool);
    assert!(
        cli.starts_with("mode: sensitive (from the mode argument)"),
        "{cli}"
    );
    insta::assert_snapshot!("cli_policy_sensitive", redact(&cli, &world));
}

#[test]
fn processes_runs() {
    let world = World::new();
    let out = stdout(&run(&world, &[], &["processes"]));
    assert!(out.contains("opencode process(es)"), "{out}");
}

#[test]
fn doctor_reports_every_check() {
    let world = World::new();
    let (db, _) = fixture_store(&world);
    let env = [
        ("OPENCODE_DB", db.to_string_lossy().into_owned()),
        (
            "OPENCODE_BIN",
            fake_opencode(&world).to_string_lossy().into_owned(),
        ),
    ];
    let out = stdout(&run(&world, &env, &["doctor"]));
    for check in [
        "bridge", "root", "sandbox", "opencode", "store", "server", "backend", "sessions",
        "roster", "mode",
    ] {
        assert!(
            out.lines()
                .any(|l| l.get(6..).is_some_and(|rest| rest.starts_with(check))),
            "no {check} line:\n{out}"
        );
    }
    assert!(out.contains("1.18.33"), "{out}");
    assert!(out.contains("store: "), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    let timing = regex::Regex::new(r"took \d+ ms").unwrap();
    let abi = regex::Regex::new(r"Landlock \(ABI \d+\)").unwrap();
    let out = timing
        .replace_all(&redact(&out, &world), "took [N] ms")
        .into_owned();
    // What holds besides Landlock depends on the kernel and on whether the test runs as root
    // (cli.rs's unit tests check its wording).
    let layers = regex::Regex::new(r"(?m)^(ok  |warn)  layers .*$").unwrap();
    assert!(layers.is_match(&out), "no layers line:\n{out}");
    let out = layers.replace_all(&out, "[ok]  layers     [what this kernel offers]");
    insta::assert_snapshot!("doctor", abi.replace_all(&out, "Landlock (ABI [N])"));

    let broken = run(
        &world,
        &[("OPENCODE_BIN", "/nonexistent/opencode".into())],
        &["doctor"],
    );
    assert_eq!(broken.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&broken.stdout).contains("FAIL  opencode"));
}

#[test]
fn check_secrets_reports_kind_and_line_never_the_value() {
    let world = World::new();
    let token = "ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi";
    let key = "AKIAZ7Q4M2KD8XW3PL6T";
    let file = world.path("prompt.txt");
    std::fs::write(
        &file,
        format!("fine\nGITHUB_TOKEN={token}\nok\naws {key}\n"),
    )
    .unwrap();
    let file = file.to_string_lossy().into_owned();

    let out = run(&world, &[], &["check-secrets", &file]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        format!("{file}:2: GitHub token\n{file}:4: AWS access key ID\n")
    );
    assert!(!text.contains(token) && !String::from_utf8_lossy(&out.stderr).contains(token));

    // stdin, clean
    let mut child = Command::new(common::binary())
        .env_clear()
        .envs(world.env())
        .current_dir(world.root())
        .args(["check-secrets", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"password = os.environ['DB_PASSWORD']\n")
        .unwrap();
    let clean = child.wait_with_output().unwrap();
    assert_eq!(clean.status.code(), Some(0));
    assert!(clean.stdout.is_empty());

    // the project allowlist of the current directory lets one value through, not the other
    std::fs::create_dir_all(world.root().join(".git")).unwrap();
    std::fs::create_dir_all(world.root().join(".claude")).unwrap();
    std::fs::write(
        world.root().join(".claude/opencode-bridge-secrets.allow"),
        format!("# fixture\n{key}\n"),
    )
    .unwrap();
    let out = run(&world, &[], &["check-secrets", &file]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{file}:2: GitHub token\n")
    );

    // unreadable file: exit 2
    let missing = world.path("missing.txt").to_string_lossy().into_owned();
    let out = run(&world, &[], &["check-secrets", &missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

/// With the serve engine (the default: the variable is empty), doctor starts an opencode serve to
/// see that it can: a binary that cannot serve gets a warning that tasks run as `opencode run`
/// instead.
#[test]
fn doctor_warns_when_the_serve_engine_cannot_start_here() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new();
    let broken = world.path("no-serve");
    std::fs::write(
        &broken,
        "#!/bin/sh\necho 'this opencode cannot serve' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = common::run_cli(
        &world,
        &[
            ("OPENCODE_BIN", broken.to_string_lossy().into_owned()),
            ("OPENCODE_BRIDGE_ENGINE", String::new()),
            ("OPENCODE_BRIDGE_SANDBOX", "off".into()),
        ],
        &["doctor"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("engine"))
        .unwrap_or_else(|| panic!("no engine line: {text}"));
    assert!(line.starts_with("warn"), "{line}");
    assert!(line.contains("run as `opencode run` instead"), "{line}");
}

/// A value of OPENCODE_BRIDGE_ENGINE that is not accepted is named by doctor (the default,
/// serve, is used).
#[test]
fn doctor_names_an_engine_it_does_not_know() {
    let world = World::new();
    let out = common::run_cli(
        &world,
        &[("OPENCODE_BRIDGE_ENGINE", "serv".into())],
        &["doctor"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("warn") && l.contains("OPENCODE_BRIDGE_ENGINE=\"serv\" is not accepted; use run or serve (serve is used)")),
        "{text}"
    );
}
