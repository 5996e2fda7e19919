//! The real binaries in tests, and an isolated world for the real opencode.
//!
//! - [`real_opencode`] / [`real_claude`] find the binaries through `OPENCODE_BRIDGE_TEST_OPENCODE`
//!   / `OPENCODE_BRIDGE_TEST_CLAUDE`. Missing: under CI (`CI` set to anything but empty, `0`,
//!   `false`, `no`, `off`) they panic (a live test must not
//!   silently skip in CI); otherwise they return `None` and [`require_opencode!`] /
//!   [`require_claude!`] print a note and return from the test.
//! - [`real_verdaccio`]: the same for `verdaccio` (`OPENCODE_BRIDGE_TEST_VERDACCIO`), a local npm
//!   registry the npm packages are published to in a test.
//! - [`OpencodeSandbox`]: a temp dir with its own `XDG_DATA_HOME`, `XDG_CONFIG_HOME`,
//!   `XDG_STATE_HOME` and `HOME`, a project dir, and a global opencode config whose provider `fk`
//!   (`@ai-sdk/openai-compatible`) points at a fake LLM and declares every scenario model.
//!   `XDG_CACHE_HOME` is shared (`$OPENCODE_BRIDGE_TEST_CACHE/xdg-cache`) so opencode downloads the
//!   provider package from npm once; without that variable the cache is private to the sandbox.

use crate::fake_llm::SCENARIOS;
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Env var naming the real opencode 1.18.33 binary.
pub const OPENCODE_ENV: &str = "OPENCODE_BRIDGE_TEST_OPENCODE";
/// Env var naming the real OpenCode 2.0 preview binary (`lildax` from npm
/// `@opencode-ai/cli-linux-x64@1.18.18`, installed by scripts/test.sh).
pub const OPENCODE2_ENV: &str = "OPENCODE_BRIDGE_TEST_OPENCODE2";
/// Env var naming the real Claude Code binary.
pub const CLAUDE_ENV: &str = "OPENCODE_BRIDGE_TEST_CLAUDE";
/// Env var naming the `verdaccio` 6.8.0 launcher (a throwaway npm registry for the packaging test).
pub const VERDACCIO_ENV: &str = "OPENCODE_BRIDGE_TEST_VERDACCIO";
/// Env var naming the shared test cache dir (its `xdg-cache` is every sandbox's XDG_CACHE_HOME).
pub const CACHE_ENV: &str = "OPENCODE_BRIDGE_TEST_CACHE";

/// Whether we run under CI: `CI` set to anything but empty, `0`, `false`, `no` or `off`
/// (any case), so `CI=true`, `CI=1`, `CI=TRUE` or `CI=yes` all count.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        !["", "0", "false", "no", "off"].contains(&v.as_str())
    })
}

fn real_binary(var: &str, what: &str) -> Option<PathBuf> {
    let found = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    match found {
        Some(p) if p.is_file() => Some(p),
        other => {
            let why = match other {
                Some(p) => format!("{var}={} does not exist", p.display()),
                None => format!("{var} is not set"),
            };
            if in_ci() {
                panic!(
                    "{why}: live tests need the real {what} under CI; run scripts/test.sh, which installs it and exports {var}"
                );
            }
            None
        }
    }
}

/// The real opencode binary (`OPENCODE_BRIDGE_TEST_OPENCODE`), or `None` outside CI when unset.
///
/// # Panics
/// Under `CI=true` when the variable is unset or names no file.
pub fn real_opencode() -> Option<PathBuf> {
    real_binary(OPENCODE_ENV, "opencode")
}

/// The real OpenCode 2.0 preview binary (`OPENCODE_BRIDGE_TEST_OPENCODE2`), or `None` outside CI
/// when unset.
///
/// # Panics
/// Under `CI=true` when the variable is unset or names no file.
pub fn real_opencode2() -> Option<PathBuf> {
    real_binary(OPENCODE2_ENV, "OpenCode 2.0 preview")
}

/// The real Claude Code binary (`OPENCODE_BRIDGE_TEST_CLAUDE`), or `None` outside CI when unset.
///
/// # Panics
/// Under `CI=true` when the variable is unset or names no file.
pub fn real_claude() -> Option<PathBuf> {
    real_binary(CLAUDE_ENV, "Claude Code")
}

/// The `verdaccio` launcher (`OPENCODE_BRIDGE_TEST_VERDACCIO`), or `None` outside CI when unset.
///
/// # Panics
/// Under `CI=true` when the variable is unset or names no file.
pub fn real_verdaccio() -> Option<PathBuf> {
    real_binary(VERDACCIO_ENV, "verdaccio (npm registry)")
}

/// The shared test cache dir (`OPENCODE_BRIDGE_TEST_CACHE`), when set.
pub fn test_cache_dir() -> Option<PathBuf> {
    std::env::var_os(CACHE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `let oc = require_opencode!();` — the real opencode path, or (outside CI) print a note and
/// `return` from the calling test.
#[macro_export]
macro_rules! require_opencode {
    () => {
        match $crate::sandbox::real_opencode() {
            Some(p) => p,
            None => {
                eprintln!(
                    "note: skipping {}: set {} to the real opencode binary to run it",
                    module_path!(),
                    $crate::sandbox::OPENCODE_ENV
                );
                return;
            }
        }
    };
}

/// `let oc2 = require_opencode2!();` — like [`require_opencode!`] for the OpenCode 2.0 preview
/// (fails under CI when it is missing).
#[macro_export]
macro_rules! require_opencode2 {
    () => {
        match $crate::sandbox::real_opencode2() {
            Some(p) => p,
            None => {
                eprintln!(
                    "note: skipping {}: set {} to the real OpenCode 2.0 preview binary to run it",
                    module_path!(),
                    $crate::sandbox::OPENCODE2_ENV
                );
                return;
            }
        }
    };
}

/// `let claude = require_claude!();` — like [`require_opencode!`] for Claude Code.
#[macro_export]
macro_rules! require_claude {
    () => {
        match $crate::sandbox::real_claude() {
            Some(p) => p,
            None => {
                eprintln!(
                    "note: skipping {}: set {} to the real Claude Code binary to run it",
                    module_path!(),
                    $crate::sandbox::CLAUDE_ENV
                );
                return;
            }
        }
    };
}

/// Inherited variables a sandboxed process keeps (everything else is dropped, in particular
/// every `OPENCODE_*`).
const PASS_THROUGH: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "NPM_CONFIG_REGISTRY",
    "npm_config_registry",
];

/// An isolated world for the real opencode; removed on drop.
#[derive(Debug)]
pub struct OpencodeSandbox {
    root: tempfile::TempDir,
    project: PathBuf,
    cache: PathBuf,
    base_url: String,
}

/// The outcome of [`OpencodeSandbox::run_json`].
#[derive(Debug)]
pub struct RunOutput {
    /// `None` when the run was killed at the timeout.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    /// The stdout lines that parse as JSON.
    pub events: Vec<Value>,
}

impl RunOutput {
    /// The `sessionID` of the first event.
    pub fn session_id(&self) -> Option<String> {
        self.events
            .iter()
            .find_map(|e| e.get("sessionID").and_then(Value::as_str))
            .map(str::to_string)
    }

    /// The texts of the `text` events, in order.
    pub fn texts(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|e| e.pointer("/part/text").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }
}

impl OpencodeSandbox {
    /// A sandbox whose provider `fk` points at `base_url` (`FakeLlm::base_url()`), declaring every
    /// model in [`SCENARIOS`].
    pub fn new(base_url: &str) -> io::Result<OpencodeSandbox> {
        Self::with_config(base_url, json!({}))
    }

    /// Like [`new`](Self::new), with extra top-level config keys merged in (e.g. `agent`).
    pub fn with_config(base_url: &str, extra: Value) -> io::Result<OpencodeSandbox> {
        let root = tempfile::Builder::new().prefix("ocsandbox-").tempdir()?;
        let r = root.path();
        for d in ["data", "config/opencode", "state", "home", "proj"] {
            std::fs::create_dir_all(r.join(d))?;
        }
        let cache = match test_cache_dir() {
            Some(c) => c.join("xdg-cache"),
            None => r.join("cache"),
        };
        std::fs::create_dir_all(&cache)?;
        let models: serde_json::Map<String, Value> = SCENARIOS
            .iter()
            .map(|m| (m.to_string(), json!({"name": m})))
            .collect();
        let mut config = json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "provider": {
                "fk": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Fake LLM",
                    "options": {"baseURL": base_url, "apiKey": "sk-test"},
                    "models": models
                }
            }
        });
        if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                c.insert(k.clone(), v.clone());
            }
        }
        std::fs::write(
            r.join("config/opencode/opencode.json"),
            serde_json::to_string_pretty(&config).map_err(io::Error::other)?,
        )?;
        // Canonical path: opencode records directories as given by PWD.
        let project = r.join("proj").canonicalize()?;
        Ok(OpencodeSandbox {
            project,
            cache,
            base_url: base_url.to_string(),
            root,
        })
    }

    /// Gives models of the fake provider a price in opencode's config (`cost`: USD per million
    /// tokens, `{"input": 1000, "output": 2000, "cache_read": 100}`), so opencode records a
    /// cost for their runs; the other models stay unpriced (opencode records 0).
    pub fn price_models(&self, costs: &[(&str, Value)]) -> io::Result<()> {
        let path = self.config_home().join("opencode/opencode.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&path)?).map_err(io::Error::other)?;
        for (model, cost) in costs {
            config["provider"]["fk"]["models"][*model]["cost"] = cost.clone();
        }
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&config).map_err(io::Error::other)?,
        )
    }

    /// The sandbox root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The project dir opencode works in (`PWD`).
    pub fn project_dir(&self) -> &Path {
        &self.project
    }

    /// `XDG_DATA_HOME`.
    pub fn data_home(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// `XDG_CONFIG_HOME`.
    pub fn config_home(&self) -> PathBuf {
        self.root.path().join("config")
    }

    /// The provider base URL in the config.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Where opencode 1.18 keeps its store in this sandbox.
    pub fn db_path(&self) -> PathBuf {
        self.data_home().join("opencode").join("opencode.db")
    }

    /// The environment a sandboxed opencode gets (besides the pass-through `PATH`, locale, proxy).
    pub fn env(&self) -> Vec<(String, String)> {
        let r = self.root.path();
        let s = |p: PathBuf| p.to_string_lossy().into_owned();
        vec![
            ("HOME".into(), s(r.join("home"))),
            ("PWD".into(), s(self.project.clone())),
            ("XDG_DATA_HOME".into(), s(r.join("data"))),
            ("XDG_CONFIG_HOME".into(), s(r.join("config"))),
            ("XDG_STATE_HOME".into(), s(r.join("state"))),
            ("XDG_CACHE_HOME".into(), s(self.cache.clone())),
            ("OPENCODE_DISABLE_AUTOUPDATE".into(), "1".into()),
            ("OPENCODE_DISABLE_MODELS_FETCH".into(), "1".into()),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD".into(), "1".into()),
            ("OPENCODE_DISABLE_DEFAULT_PLUGINS".into(), "1".into()),
            ("OPENCODE_DISABLE_CLAUDE_CODE".into(), "1".into()),
        ]
    }

    /// A command for `program` (normally the real opencode) with a clean environment (only
    /// [`env`](Self::env) plus pass-through variables), in the project dir.
    pub fn command<I, S>(&self, program: &Path, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(program);
        cmd.args(args).env_clear().current_dir(&self.project);
        for key in PASS_THROUGH {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(self.env());
        cmd
    }

    /// Like [`command`](Self::command), working in `dir`: sets the process cwd **and** `PWD`,
    /// because opencode 1.18 takes its working directory from `PWD`.
    pub fn command_in<I, S>(&self, dir: &Path, program: &Path, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.command(program, args);
        cmd.current_dir(dir).env("PWD", dir);
        cmd
    }

    /// `opencode run --format json -m fk/<model>` with `prompt` on stdin; killed after `timeout`.
    pub fn run_json(
        &self,
        opencode: &Path,
        model: &str,
        prompt: &str,
        extra_args: &[&str],
        timeout: Duration,
    ) -> io::Result<RunOutput> {
        let model = format!("fk/{model}");
        let mut args = vec!["run", "--format", "json", "-m", model.as_str()];
        args.extend_from_slice(extra_args);
        let mut child = self
            .command(opencode, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(prompt.as_bytes())?;
        }
        let mut out = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        let out_t = thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err_t = thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let end = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break Some(st);
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            thread::sleep(Duration::from_millis(50));
        };
        let stdout = out_t.join().unwrap_or_default();
        let stderr = err_t.join().unwrap_or_default();
        let events = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        Ok(RunOutput {
            status,
            stdout,
            stderr,
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_llm::{FakeLlm, OK_TEXT};

    #[test]
    fn sandbox_layout_and_env() {
        let sb = OpencodeSandbox::new("http://127.0.0.1:9/v1").unwrap();
        let cfg: Value = serde_json::from_str(
            &std::fs::read_to_string(sb.config_home().join("opencode/opencode.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            cfg.pointer("/provider/fk/options/baseURL").unwrap(),
            "http://127.0.0.1:9/v1"
        );
        assert!(cfg.pointer("/provider/fk/models/toolwrite").is_some());
        let env = sb.env();
        let get = |k: &str| env.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        assert_eq!(
            get("PWD").unwrap(),
            sb.project_dir().to_string_lossy().as_ref()
        );
        assert!(
            get("XDG_DATA_HOME")
                .unwrap()
                .starts_with(&*sb.root().to_string_lossy())
        );
        assert!(sb.db_path().ends_with("data/opencode/opencode.db"));
        let other = sb.root().join("elsewhere");
        let cmd = sb.command_in(&other, Path::new("/bin/true"), ["x"]);
        assert_eq!(cmd.get_current_dir(), Some(other.as_path()));
        assert!(
            cmd.get_envs()
                .any(|(k, v)| k == "PWD" && v == Some(other.as_os_str()))
        );
        // No inherited OPENCODE_* variable reaches the child.
        let cmd = sb.command(Path::new("/bin/true"), ["x"]);
        for (k, _) in cmd.get_envs() {
            let k = k.to_string_lossy();
            assert!(
                !k.starts_with("OPENCODE_") || k.starts_with("OPENCODE_DISABLE_"),
                "{k}"
            );
        }
    }

    #[test]
    fn live_opencode_answers_through_the_fake() {
        let oc = crate::require_opencode!();
        let llm = FakeLlm::start().unwrap();
        let sb = OpencodeSandbox::new(&llm.base_url()).unwrap();
        let out = sb
            .run_json(&oc, "ok", "say hi", &[], Duration::from_secs(180))
            .unwrap();
        assert_eq!(
            out.status.map(|s| s.code()),
            Some(Some(0)),
            "stdout: {}\nstderr: {}",
            out.stdout,
            out.stderr
        );
        assert_eq!(out.texts(), vec![OK_TEXT.to_string()]);
        assert!(out.session_id().unwrap().starts_with("ses_"));
        assert!(sb.db_path().is_file());
        assert!(!llm.chat_requests("ok").is_empty());
    }
}

/// A real `opencode serve` of a sandbox on 127.0.0.1 (a random port) with a password: what a
/// remote host's server stands for in tests. Killed (its process group) when dropped.
#[derive(Debug)]
pub struct SandboxServe {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
}

impl SandboxServe {
    /// Starts `program serve` in the sandbox's project directory with `password`; waits (at
    /// most 60 s) until it listens.
    pub fn start(sb: &OpencodeSandbox, program: &Path, password: &str) -> io::Result<SandboxServe> {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let mut cmd = sb.command(program, ["serve", "--hostname", "127.0.0.1", "--port", "0"]);
        cmd.env("OPENCODE_SERVER_PASSWORD", password)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0);
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("http://") {
                    let _ = tx.send(line[at..].trim().to_owned());
                }
            }
        });
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(url) => Ok(SandboxServe { child, url }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(io::Error::other(
                    "opencode serve did not listen within 60 s",
                ))
            }
        }
    }

    /// Its pid (the leader of its process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it and everything it started, now.
    pub fn kill(&mut self) {
        // A negative pid names the process group the child leads.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SandboxServe {
    fn drop(&mut self) {
        self.kill();
    }
}
