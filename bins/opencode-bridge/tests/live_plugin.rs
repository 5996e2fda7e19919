//! The way a user without Rust installs the bridge, end to end: the npm packages packed by
//! `scripts/package-npm.sh` (with this build's binary) are published to a throwaway local npm
//! registry (verdaccio 6.8.0 on loopback, no uplinks); then, in a clean HOME whose PATH has Node
//! and no Rust, `npx -y opencode-bridge --version` runs it, the real Claude Code adds this
//! checkout as a marketplace and installs the plugin, `claude mcp list` shows the plugin's server
//! connected, and `claude -p` turns against the fake Anthropic endpoint delegate through it to
//! the real opencode (fake LLM). The plugin's Stop hook runs where it lives, at each turn's end:
//! silent when the session's task was read, and telling the model (the next request carries its
//! reason) when a task still runs, once.

use crate::plugin::{node_or_skip, repo};

use crate::common::show;
use bridge_testkit::fake_anthropic::{FakeAnthropic, Step, call, status_until_finished, text};
use bridge_testkit::fake_llm::OK_TEXT;
use bridge_testkit::sandbox::real_verdaccio;
use bridge_testkit::{FakeLlm, OpencodeSandbox, real_claude, real_opencode};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How Claude Code names the plugin's server in tool names (`mcp__<this>__opencode_start`).
const PLUGIN_SERVER: &str = "plugin_opencode-bridge_opencode-bridge";

/// A verdaccio registry on loopback, stopped on drop.
struct LocalRegistry {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_status(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.lines().next().map(str::to_owned)
}

impl LocalRegistry {
    fn start(verdaccio: &Path, path_env: &str) -> LocalRegistry {
        let dir = tempfile::tempdir().unwrap();
        let port = bridge_testkit::http::closed_port();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "storage: {storage}\nauth:\n  htpasswd:\n    file: {htpasswd}\nuplinks: {{}}\npackages:\n  '**':\n    access: $all\n    publish: $all\nmax_body_size: 500mb\nlog: {{ type: stdout, format: pretty, level: warn }}\n",
                storage = dir.path().join("storage").display(),
                htpasswd = dir.path().join("htpasswd").display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("verdaccio.log")).unwrap();
        let child = Command::new(verdaccio)
            .arg("--config")
            .arg(&config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env_clear()
            .env("PATH", path_env)
            .env("HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start verdaccio");
        let registry = LocalRegistry {
            child,
            url: format!("http://127.0.0.1:{port}/"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http_status(port, "/-/ping").is_some_and(|l| l.contains(" 200")) {
            assert!(
                Instant::now() < deadline,
                "verdaccio did not answer on port {port}: {}",
                std::fs::read_to_string(registry.dir.path().join("verdaccio.log"))
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        registry
    }

    /// `npm publish` of one tarball (verdaccio takes any token for `publish: $all`).
    fn publish(&self, tarball: &Path, path_env: &str) {
        let npmrc = self.dir.path().join("npmrc");
        let host = self.url.trim_start_matches("http:");
        std::fs::write(&npmrc, format!("{host}:_authToken=test\n")).unwrap();
        let out = Command::new("npm")
            .args(["publish", "--registry", &self.url])
            .arg(tarball)
            .env_clear()
            .env("PATH", path_env)
            .env("HOME", self.dir.path())
            .env("NPM_CONFIG_USERCONFIG", &npmrc)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "publish {}: {}",
            tarball.display(),
            show(&out)
        );
    }
}

/// Node's directory and the system's, and nothing of Rust: checked, not assumed.
fn path_without_rust(node: &Path) -> String {
    let dirs = [
        node.parent().unwrap(),
        Path::new("/usr/bin"),
        Path::new("/bin"),
    ];
    for d in dirs {
        for tool in ["cargo", "rustc", "rustup"] {
            assert!(
                !d.join(tool).exists(),
                "{} is on the clean PATH: this test needs a PATH with Node and no Rust",
                d.join(tool).display()
            );
        }
    }
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// A user's world: a clean HOME, PATH with Node and no Rust, npm pointed at the local registry,
/// and (for the sessions) what the bridge it starts needs to reach the sandboxed real opencode.
struct User {
    home: tempfile::TempDir,
    claude: PathBuf,
    env: Vec<(String, String)>,
    cwd: PathBuf,
}

impl User {
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd);
        cmd
    }

    fn claude(&self, args: &[&str]) -> Output {
        let out = self.command(&self.claude).args(args).output().unwrap();
        assert!(out.status.success(), "claude {args:?}: {}", show(&out));
        out
    }

    /// One `claude -p` turn against `fake`; returns the stream's events.
    fn turn(&self, fake: &FakeAnthropic) -> Vec<Value> {
        let tools = [
            "opencode_start",
            "opencode_status",
            "opencode_result",
            "opencode_wait",
        ]
        .map(|t| format!("mcp__{PLUGIN_SERVER}__{t}"))
        .join(",");
        let out = self
            .command(&self.claude)
            .envs(fake.claude_env())
            .args(["-p", "Use the opencode bridge tools as scripted."])
            .args(["--allowedTools", &tools])
            .args(["--output-format", "stream-json", "--verbose"])
            .args(["--include-hook-events", "--max-turns", "100"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}\nunknown: {:?}",
            show(&out),
            fake.unknown()
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// The Stop hooks' answers in a turn's event stream, in order.
fn stop_hook_outputs(events: &[Value]) -> Vec<(i64, String)> {
    events
        .iter()
        .filter(|e| e["subtype"] == "hook_response" && e["hook_event"] == "Stop")
        .map(|e| {
            (
                e["exit_code"].as_i64().unwrap_or(-1),
                e["stdout"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The task's state in the registry, as the bridge wrote it.
fn stored_state(state_dir: &Path, id: u64) -> String {
    let path = state_dir.join(format!("tasks/{id}/task.json"));
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["state"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[test]
fn live_npm_packages_and_the_plugin_install_and_delegate_without_rust() {
    let (Some(node), Some(claude), Some(oc), Some(verdaccio)) = (
        node_or_skip(),
        real_claude(),
        real_opencode(),
        real_verdaccio(),
    ) else {
        eprintln!(
            "skipping: needs node, OPENCODE_BRIDGE_TEST_CLAUDE, OPENCODE_BRIDGE_TEST_OPENCODE and OPENCODE_BRIDGE_TEST_VERDACCIO (scripts/test.sh sets them)"
        );
        return;
    };
    let clean_path = path_without_rust(&node);
    let registry = LocalRegistry::start(&verdaccio, &clean_path);

    // Pack this build's binary the way the release packs its own, and publish every package.
    // (A copy without debug info when `strip` is there: a quarter of the size to pack and unpack.)
    let packed = tempfile::tempdir().unwrap();
    let binary = packed.path().join("bin/opencode-bridge");
    std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
    std::fs::copy(crate::common::binary(), &binary).unwrap();
    let _ = Command::new("strip")
        .arg("--strip-debug")
        .arg(&binary)
        .status();
    let tarballs_dir = packed.path().join("out");
    let out = Command::new("bash")
        .arg(repo().join("scripts/package-npm.sh"))
        .arg(&tarballs_dir)
        .arg(format!("linux-x64={}", binary.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "package-npm.sh: {}", show(&out));
    let mut tarballs: Vec<PathBuf> = std::fs::read_dir(&tarballs_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    tarballs.sort();
    let version = env!("CARGO_PKG_VERSION");
    let names: Vec<String> = tarballs
        .iter()
        .map(|t| t.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            format!("opencode-bridge-{version}.tgz"),
            format!("opencode-bridge-linux-x64-{version}.tgz")
        ]
    );
    // The platform package first, as the release workflow does.
    for t in tarballs.iter().rev() {
        registry.publish(t, &clean_path);
    }

    let llm = FakeLlm::start().unwrap();
    llm.set_slow_secs(120);
    let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let state_dir = home.path().join("bridge-state");
    let mut env: Vec<(String, String)> = vec![
        ("HOME".into(), home.path().display().to_string()),
        ("PATH".into(), clean_path.clone()),
        ("npm_config_registry".into(), registry.url.clone()),
        ("DISABLE_TELEMETRY".into(), "1".into()),
        ("DISABLE_AUTOUPDATER".into(), "1".into()),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
        // What the bridge that Claude Code starts (it inherits this environment) needs here:
        // the real opencode in its sandbox, the project as its root, a fake model.
        ("OPENCODE_BIN".into(), oc.display().to_string()),
        (
            "OPENCODE_BRIDGE_ROOT".into(),
            sb.project_dir().display().to_string(),
        ),
        ("OPENCODE_BRIDGE_MODEL".into(), "fk/ok".into()),
        ("OPENCODE_BRIDGE_KILL_GRACE_MS".into(), "1000".into()),
        // A session's end cancels its running tasks only in this mode (by default they are
        // left running for the next bridge: tests/durable.rs); here no process outlives the test.
        ("OPENCODE_BRIDGE_ON_EXIT".into(), "cancel".into()),
        (
            "OPENCODE_BRIDGE_STATE_DIR".into(),
            state_dir.display().to_string(),
        ),
    ];
    for (k, v) in crate::common::sandbox_env_for_bridge(&sb) {
        env.push((k.to_string(), v));
    }
    let user = User {
        home,
        claude,
        env,
        cwd: sb.project_dir().to_path_buf(),
    };

    // npx, as `claude mcp add opencode-bridge -- npx -y opencode-bridge` runs it.
    let out = user
        .command(Path::new("npx"))
        .args(["-y", "opencode-bridge", "--version"])
        .current_dir(user.home.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "npx: {}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("opencode-bridge {version}\n")
    );

    // The README's line for the server alone, then the plugin from this checkout, with the
    // real Claude Code; both servers connect. (The server alone goes again before the turns.)
    user.claude(&[
        "mcp",
        "add",
        "--scope",
        "user",
        "opencode-bridge",
        "--",
        "npx",
        "-y",
        "opencode-bridge",
    ]);
    let checkout = repo().canonicalize().unwrap();
    let checkout = checkout.to_str().unwrap();
    // Claude Code's own check of the marketplace and the plugin, warnings as errors.
    user.claude(&["plugin", "validate", "--strict", checkout]);
    user.claude(&[
        "plugin",
        "validate",
        "--strict",
        &format!("{checkout}/plugin"),
    ]);
    user.claude(&["plugin", "marketplace", "add", checkout]);
    user.claude(&["plugin", "install", "opencode-bridge@opencode-bridge"]);
    let listed = user.claude(&["mcp", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    let line = |name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} is not listed:\n{listed}"))
            .to_owned()
    };
    let plugin = line("plugin:opencode-bridge:opencode-bridge:");
    assert!(
        plugin.contains(&format!("npx -y opencode-bridge@{version}"))
            && plugin.contains("Connected"),
        "{plugin}"
    );
    let alone = line("opencode-bridge:");
    assert!(alone.contains("Connected"), "{alone}");
    user.claude(&["mcp", "remove", "--scope", "user", "opencode-bridge"]);

    // A turn that delegates, follows the task and reads its result: the real opencode's answer
    // comes back, and the Stop hook, run at the turn's end, has nothing to say.
    let script: Vec<Step> = vec![
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Say hello to the reviewers"}),
        ),
        status_until_finished("1"),
        call("opencode_result", json!({"id": "1"})),
        text("finished"),
    ];
    let fake = FakeAnthropic::start(PLUGIN_SERVER, script).unwrap();
    let events = user.turn(&fake);
    let result = fake.results_of("opencode_result");
    assert_eq!(result.len(), 1, "{:#?}", fake.tool_results());
    assert!(!result[0].is_error, "{result:?}");
    assert!(result[0].text.contains(OK_TEXT), "{}", result[0].text);
    assert_eq!(
        stop_hook_outputs(&events),
        [(0, String::new())],
        "{events:#?}"
    );
    assert!(
        !serde_json::to_string(&fake.requests())
            .unwrap()
            .contains("Before you stop"),
        "the hook spoke with nothing unsettled"
    );

    // A turn that starts a long task and ends at once: the hook blocks the stop once, naming the
    // task, and the model's next request carries that reason; the second stop goes through.
    let script: Vec<Step> = vec![
        call(
            "opencode_start",
            json!({"tier": "easy", "prompt": "Stream a long answer slowly", "model": "fk/slow"}),
        ),
        text("started it"),
        text("it keeps running; I will read it later"),
    ];
    let fake = FakeAnthropic::start(PLUGIN_SERVER, script).unwrap();
    let events = user.turn(&fake);
    let hooks = stop_hook_outputs(&events);
    assert_eq!(hooks.len(), 2, "{hooks:?}");
    assert!(hooks[0].1.contains("\"decision\":\"block\""), "{hooks:?}");
    assert_eq!(hooks[1], (0, String::new()));
    let told: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r.to_string())
        .filter(|r| r.contains("Before you stop"))
        .collect();
    assert!(!told.is_empty(), "no request carried the hook's reason");
    assert!(
        told[0].contains("task 2 (") && told[0].contains("still runs"),
        "{}",
        told[0]
    );
    assert!(
        !told[0].contains("task 1 ("),
        "a read task was named: {}",
        told[0]
    );
    // The session is over: Claude Code stopped its server (through npx and the launcher), and
    // the bridge (OPENCODE_BRIDGE_ON_EXIT=cancel) stopped the run it had started.
    let deadline = Instant::now() + Duration::from_secs(30);
    while stored_state(&state_dir, 2) != "cancelled" {
        assert!(
            Instant::now() < deadline,
            "task 2 is {:?} after the session ended",
            stored_state(&state_dir, 2)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
