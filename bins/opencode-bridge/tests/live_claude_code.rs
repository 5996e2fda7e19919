//! The real client: Claude Code (pinned, from npm) registers the built server with
//! `claude mcp add`, connects to it, and runs whole turns with `claude -p` against our fake
//! Anthropic endpoint, which scripts the tool calls and records the results Claude Code sends
//! back. Assertions are on what the fake endpoint received.

use bridge_testkit::fake_anthropic::{FakeAnthropic, Step, call, text};
use bridge_testkit::real_claude;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SERVER: &str = "opencode-bridge";

struct ClaudeWorld {
    claude: PathBuf,
    home: tempfile::TempDir,
    root: PathBuf,
    extra_env: Vec<(String, String)>,
}

impl ClaudeWorld {
    fn new(claude: PathBuf) -> ClaudeWorld {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("projects");
        std::fs::create_dir_all(root.join("demo")).unwrap();
        ClaudeWorld {
            claude,
            home,
            root,
            extra_env: Vec::new(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.claude);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .current_dir(self.root.join("demo"));
        cmd
    }

    /// `claude mcp add --scope user opencode-bridge -e ... -- <binary>`.
    fn register(&self, env: &[(&str, String)]) {
        let mut cmd = self.command();
        cmd.args(["mcp", "add", "--scope", "user", SERVER]);
        for (k, v) in env {
            cmd.arg("-e").arg(format!("{k}={v}"));
        }
        cmd.arg("--").arg(env!("CARGO_BIN_EXE_opencode-bridge"));
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "mcp add failed: {}", show(&out));
    }

    fn run_prompt(&self, fake: &FakeAnthropic, allowed: &[&str]) -> Output {
        let mut cmd = self.command();
        for (k, v) in fake.claude_env().into_iter().chain(self.extra_env.clone()) {
            cmd.env(k, v);
        }
        let tools: Vec<String> = allowed
            .iter()
            .map(|t| format!("mcp__{SERVER}__{t}"))
            .collect();
        cmd.args(["-p", "Use the opencode bridge tools as scripted."])
            .arg("--allowedTools")
            .arg(tools.join(","))
            .args(["--output-format", "json", "--max-turns", "40"]);
        cmd.output().unwrap()
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn claude_or_skip() -> Option<PathBuf> {
    let found = real_claude();
    if found.is_none() {
        eprintln!("skipping: OPENCODE_BRIDGE_TEST_CLAUDE is not set (scripts/test.sh sets it)");
    }
    found
}

fn root_env(world: &ClaudeWorld) -> Vec<(&'static str, String)> {
    vec![(
        "OPENCODE_BRIDGE_ROOT",
        world.root.to_string_lossy().into_owned(),
    )]
}

#[test]
fn live_claude_mcp_get_reports_connected() {
    let Some(claude) = claude_or_skip() else {
        return;
    };
    let world = ClaudeWorld::new(claude);
    world.register(&root_env(&world));
    let out = world
        .command()
        .args(["mcp", "get", SERVER])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout.contains("Connected"), "{}", show(&out));
}

fn assert_path_exists(p: &Path) {
    assert!(p.exists(), "{} should exist", p.display());
}

#[test]
fn live_claude_drives_policy_and_validation_errors() {
    let Some(claude) = claude_or_skip() else {
        return;
    };
    let world = ClaudeWorld::new(claude);
    assert_path_exists(&world.root);
    world.register(&root_env(&world));
    let script: Vec<Step> = vec![
        call("opencode_policy", json!({})),
        call(
            "opencode_start",
            json!({"tier": "hard", "prompt": "design the experiment"}),
        ),
        call("opencode_sessions", json!({"limit": 0})),
        text("finished"),
    ];
    let fake = FakeAnthropic::start(SERVER, script).unwrap();
    let out = world.run_prompt(
        &fake,
        &["opencode_policy", "opencode_start", "opencode_sessions"],
    );
    assert!(
        out.status.success(),
        "{}\nunknown: {:?}",
        show(&out),
        fake.unknown()
    );
    let results = fake.tool_results();
    assert_eq!(results.len(), 3, "{results:#?}");
    let policy = &results[0];
    assert!(!policy.is_error, "{policy:?}");
    assert!(policy.text.contains("blueprint"), "{}", policy.text);
    let refused = &results[1];
    assert!(refused.is_error, "{refused:?}");
    assert!(refused.text.contains("hard"), "{}", refused.text);
    let invalid = &results[2];
    assert!(invalid.is_error, "{invalid:?}");
    assert!(invalid.text.contains("`limit`"), "{}", invalid.text);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("finished"), "{stdout}");
}
