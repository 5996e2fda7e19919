//! A raw JSON-RPC client for the built `opencode-bridge` binary: newline-delimited JSON over
//! its stdin/stdout, no MCP library involved.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// An isolated world for one server: HOME, XDG dirs and the delegation root in a temp dir.
pub struct World {
    pub dir: tempfile::TempDir,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        for sub in [
            "home",
            "root/demo",
            "xdg/data",
            "xdg/config",
            "xdg/state",
            "xdg/cache",
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        World { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> PathBuf {
        self.path("root")
    }

    /// The environment of a server in this world (the caller's environment is not inherited,
    /// except PATH).
    pub fn env(&self) -> Vec<(String, String)> {
        let p = |s: &str| self.path(s).to_string_lossy().into_owned();
        vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".into(), p("home")),
            ("XDG_DATA_HOME".into(), p("xdg/data")),
            ("XDG_CONFIG_HOME".into(), p("xdg/config")),
            ("XDG_STATE_HOME".into(), p("xdg/state")),
            ("XDG_CACHE_HOME".into(), p("xdg/cache")),
            ("OPENCODE_BRIDGE_ROOT".into(), p("root")),
            ("RUST_LOG".into(), "opencode_bridge=debug,info".into()),
            // The fakes' own settings reach their runs (a run gets only what it needs else).
            ("OPENCODE_BRIDGE_PASS_ENV".into(), "FAKE_*".into()),
        ]
    }
}

/// Whether a server with `extra_env` runs a fake opencode or Claude Code (one of ours, not the
/// real binaries of `OPENCODE_BRIDGE_TEST_*`): fakes write their pids and markers beside the
/// task's tree, so their runs go without the kernel fence unless the test says otherwise. The
/// fence itself is proven on real runs (run-supervisor's live_fence, this crate's live tests).
fn runs_a_fake(extra_env: &[(&str, String)]) -> bool {
    let real = [
        std::env::var(bridge_testkit::sandbox::OPENCODE_ENV).unwrap_or_default(),
        std::env::var(bridge_testkit::sandbox::OPENCODE2_ENV).unwrap_or_default(),
        std::env::var(bridge_testkit::sandbox::CLAUDE_ENV).unwrap_or_default(),
    ];
    extra_env
        .iter()
        .any(|(k, v)| matches!(*k, "OPENCODE_BIN" | "CLAUDE_BIN") && !real.contains(v))
        && !extra_env
            .iter()
            .any(|(k, _)| *k == "OPENCODE_BRIDGE_SANDBOX")
}

/// Whether `extra_env` names an opencode binary that is not the real one of
/// `OPENCODE_BRIDGE_TEST_OPENCODE` (or the preview of `OPENCODE_BRIDGE_TEST_OPENCODE2`): ours stand for `opencode run` processes (trees, hangs,
/// floods) and cannot serve, so such a bridge runs the `run` engine unless the test says
/// otherwise. The serve engine is tested against the real `opencode serve`.
fn fake_opencode_named(extra_env: &[(&str, String)]) -> bool {
    let real = [
        std::env::var(bridge_testkit::sandbox::OPENCODE_ENV).unwrap_or_default(),
        std::env::var(bridge_testkit::sandbox::OPENCODE2_ENV).unwrap_or_default(),
    ];
    extra_env
        .iter()
        .any(|(k, v)| *k == "OPENCODE_BIN" && !real.contains(v))
}

/// A running server and its stdout lines.
pub struct Server {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub stderr_path: PathBuf,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_opencode-bridge")
}

impl Server {
    pub fn start(world: &World, extra_env: &[(&str, String)]) -> Server {
        Server::start_in(world, extra_env, &world.root())
    }

    /// A server in `world` whose opencode is the testkit's fake (`FAKE_OPENCODE_SCENARIO`
    /// or a `scenario:` line in the prompt says what it does).
    pub fn with_fake_opencode(world: &World) -> Server {
        let fake = bridge_testkit::bins::fake_opencode();
        Server::start(
            world,
            &[("OPENCODE_BIN", fake.to_string_lossy().into_owned())],
        )
    }

    pub fn start_in(world: &World, extra_env: &[(&str, String)], cwd: &Path) -> Server {
        Server::start_via(world, extra_env, cwd, Command::new(binary()))
    }

    /// A server started by `program` (the bridge itself, or a launcher that runs it), with the
    /// world's environment plus `extra_env`, in `cwd`.
    pub fn start_via(
        world: &World,
        extra_env: &[(&str, String)],
        cwd: &Path,
        mut cmd: Command,
    ) -> Server {
        let stderr_path = world.path(&format!(
            "stderr-{}.log",
            Instant::now().elapsed().as_nanos()
        ));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        cmd.env_clear().envs(world.env());
        // A test's bridge cancels its tasks when it stops (the default leaves them running for
        // the next bridge), so a test leaves no run or turn behind; the durability tests ask
        // for `leave` in `extra_env`.
        cmd.env("OPENCODE_BRIDGE_ON_EXIT", "cancel");
        if runs_a_fake(extra_env) {
            cmd.env("OPENCODE_BRIDGE_SANDBOX", "off");
        }
        if fake_opencode_named(extra_env) {
            cmd.env("OPENCODE_BRIDGE_ENGINE", "run");
        }
        cmd.envs(extra_env.iter().map(|(k, v)| (k.to_string(), v.clone())))
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = cmd.spawn().expect("start opencode-bridge");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Server {
            child,
            stdin,
            lines: rx,
            stderr_path,
        }
    }

    pub fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next stdout line as JSON, or `None` after `timeout`.
    pub fn recv_within(&mut self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}")),
            ),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// The response with this id (notifications before it are skipped).
    pub fn response(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self
                .recv_within(left)
                .unwrap_or_else(|| panic!("no response to id {id}; stderr:\n{}", self.stderr()));
            if msg.get("id") == Some(id) {
                return msg;
            }
        }
    }

    pub fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(&json!(id))
    }

    /// `initialize` (2025-11-25) + `notifications/initialized`; returns the initialize result.
    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            0,
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"}
            }),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r["result"].clone()
    }

    /// A tools/call; returns the whole response.
    pub fn call(&mut self, id: i64, tool: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({"name": tool, "arguments": args}))
    }

    /// A tools/call that must succeed at the protocol level; returns (text, isError).
    pub fn call_text(&mut self, id: i64, tool: &str, args: Value) -> (String, bool) {
        let r = self.call(id, tool, args);
        let result = r
            .get("result")
            .unwrap_or_else(|| panic!("tools/call {tool} failed: {r}"));
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string();
        (text, result["isError"].as_bool().unwrap_or(false))
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Server {
    /// Ends the bridge the way a client does (stdin EOF), so it stops the tasks it started (in
    /// the cancel mode, which [`Server::start_via`] sets unless the test asks for `leave`);
    /// SIGKILL only if it does not exit in time. Killing it outright would orphan its runs.
    fn drop(&mut self) {
        self.close_stdin();
        if self.wait_exit(Duration::from_secs(20)).is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A loopback HTTP server that accepts connections and never answers (a hung service): the
/// testkit's [`bridge_testkit::http::hung_server`], with its port. It stops when the server
/// value is dropped.
pub fn hung_http_server() -> (u16, bridge_testkit::http::Server) {
    let server = bridge_testkit::http::hung_server().unwrap();
    (server.port(), server)
}

/// Replaces run-dependent values (ids, times, paths, durations) so snapshots are stable.
pub fn redact(text: &str, world: &World) -> String {
    let mut out = text.replace(&world.dir.path().to_string_lossy().to_string(), "[TMP]");
    let rules: &[(&str, &str)] = &[
        (r"ses_[0-9A-Za-z]{20,}", "[SESSION]"),
        (r"\b\d{2}:\d{2}:\d{2}\b", "[HH:MM:SS]"),
        (r"\b\d+m\d{2}s\b|\b\d+h\d{2}m\b|\b\d+s\b", "[DUR]"),
        (r"<1m ago|\b\d+[mhd] ago", "[AGE]"),
        (r"\bpid \d+", "pid [PID]"),
    ];
    for (pattern, with) in rules {
        out = regex_replace(&out, pattern, with);
    }
    out
}

fn regex_replace(text: &str, pattern: &str, with: &str) -> String {
    regex::Regex::new(pattern)
        .unwrap()
        .replace_all(text, with)
        .into_owned()
}

/// A stand-in `opencode`: answers `--version` and `run --help`; `run` records its pid and
/// its child's pid, prints one event, then sleeps (a long-running agent).
pub fn fake_opencode(world: &World) -> PathBuf {
    let path = world.path("bin/opencode");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let pids = world.path("pids");
    let script = format!(
        r#"#!/bin/sh
case "$1" in
  --version) echo "1.18.33"; exit 0 ;;
  models) echo "fake/model-a"; echo "fake/model-b"; exit 0 ;;
esac
if [ "$1" = run ] && [ "$2" = --help ]; then
  echo "  --format --title --agent --model --auto --variant"; exit 0
fi
if [ "$1" = run ]; then
  echo $$ > "{pids}.group"
  sleep 600 &
  echo $! > "{pids}.child"
  echo '{{"type":"step_start","timestamp":1,"sessionID":"ses_fakefakefakefakefake0001","part":{{"type":"step-start"}}}}'
  wait
fi
"#,
        pids = pids.display()
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A stand-in `claude`: `--version` says `version`, `--help` lists every long flag of
/// `help_flags`, and a `-p` run prints `stderr` on stderr and `stdout` on stdout, then exits
/// with `code` (Claude Code 2.1.197 on Node 20 rejects `--permission-prompts` this way).
pub fn fake_claude(
    world: &World,
    version: &str,
    help_flags: &[&str],
    stdout: &str,
    stderr: &str,
    code: i32,
) -> PathBuf {
    let path = world.path("bin/claude");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let out = world.path("claude.stdout");
    let err = world.path("claude.stderr");
    std::fs::write(&out, stdout).unwrap();
    std::fs::write(&err, stderr).unwrap();
    let script = format!(
        r#"#!/bin/sh
case "$1" in
  --version) echo "{version}"; exit 0 ;;
  --help) printf '%s\n' {help}; exit 0 ;;
esac
cat "{out}"
cat "{err}" >&2
exit {code}
"#,
        help = help_flags
            .iter()
            .map(|f| format!("'  {f} <x>'"))
            .collect::<Vec<_>>()
            .join(" "),
        out = out.display(),
        err = err.display(),
    );
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Runs the binary with a subcommand in `world` (its environment plus `env`, cwd the root).
pub fn run_cli(world: &World, env: &[(&str, String)], args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(binary());
    cmd.env_clear().envs(world.env());
    if fake_opencode_named(env) {
        cmd.env("OPENCODE_BRIDGE_ENGINE", "run");
    }
    cmd.envs(env.iter().map(|(k, v)| (k.to_string(), v.clone())))
        .current_dir(world.root())
        .args(args)
        .output()
        .unwrap()
}

/// A copy of the real opencode 1.18.33 store fixture in `world`, and its map of session ids.
pub fn fixture_store(world: &World) -> (PathBuf, Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/opencode-store");
    let db = world.path("opencode.db");
    std::fs::copy(dir.join("opencode.db"), &db).unwrap();
    let map: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sessions.json")).unwrap()).unwrap();
    (db, map)
}

/// The part of a real-opencode sandbox's environment a bridge under test gets: its XDG dirs
/// (not HOME or PWD, which the test world sets) and the variables that keep opencode offline.
pub fn sandbox_env_for_bridge(sb: &bridge_testkit::OpencodeSandbox) -> Vec<(&'static str, String)> {
    const PASSED: [&str; 8] = [
        "XDG_DATA_HOME",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS",
        "OPENCODE_DISABLE_CLAUDE_CODE",
    ];
    sb.env()
        .into_iter()
        .filter_map(|(k, v)| PASSED.iter().find(|p| **p == k).map(|p| (*p, v)))
        .collect()
}

/// Polls opencode_status until the task ended; returns the last status text.
pub fn until_ended(server: &mut Server, id: &str, next: &mut i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        *next += 1;
        let (s, _) = server.call_text(*next, "opencode_status", json!({"id": id}));
        let first = s.lines().next().unwrap_or("").to_owned();
        if ["succeeded", "failed", "cancelled", "timed_out"]
            .iter()
            .any(|w| first.contains(w))
        {
            return s;
        }
        assert!(Instant::now() < deadline, "task {id} did not end: {s}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Copies a file or a directory tree (symbolic links as links); a missing `from` copies nothing.
pub fn copy_tree(from: &Path, to: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(from) else {
        return;
    };
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(from).unwrap();
        let _ = std::os::unix::fs::symlink(target, to);
    } else if meta.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// Every file below `dir`, leaving out `node_modules` and `.git`.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.file_name()
            .is_some_and(|n| n == "node_modules" || n == ".git")
        {
            continue;
        }
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The pid a fake wrote to `path`, once it is there.
pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Waits (up to 20 s) for a fake to write its pid to `path`.
pub fn wait_for_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = read_pid(path) {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether any process of group `pgid` is alive.
pub fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
}

/// After `why` (stdin closed, a signal): `server` exits cleanly within 20 s, and the run it had
/// started (process group `pgid`) and `others` (pids) are gone.
pub fn assert_stopped_with_its_run(server: &mut Server, why: &str, pgid: i32, others: &[i32]) {
    let status = server
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the server did not exit after {why}"));
    assert!(status.success(), "{status:?}\n{}", server.stderr());
    assert!(!group_alive(pgid), "process group {pgid} survived {why}");
    for &pid in others {
        assert!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err(),
            "pid {pid} survived {why}"
        );
    }
}

/// Starts a task whose fake opencode ([`fake_opencode`]) sleeps, and returns its run's process
/// group once the fake wrote it.
pub fn start_sleeping_task(server: &mut Server, world: &World, tier: &str, prompt: &str) -> i32 {
    let (text, is_error) =
        server.call_text(2, "opencode_start", json!({"tier": tier, "prompt": prompt}));
    assert!(!is_error, "{text}");
    wait_for_pid(&world.path("pids.group"))
}

/// A command's status and output, for an assertion's message.
pub fn show(out: &std::process::Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
