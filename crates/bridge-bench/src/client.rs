//! The bridge under measure: its release binary, a fresh world for it, and a raw JSON-RPC
//! client that talks MCP to it over stdio.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The target dir this binary was built into (`<target>/<profile>/bridge-bench`).
pub(crate) fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("own path");
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

pub(crate) fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

pub(crate) fn bridge_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("OPENCODE_BRIDGE_BENCH_BIN") {
        return PathBuf::from(p);
    }
    let target = target_dir();
    let status = Command::new(cargo())
        .current_dir(workspace_dir())
        .args(["build", "--quiet", "--release", "-p", "opencode-bridge"])
        .arg("--target-dir")
        .arg(&target)
        .status();
    let path = target.join("release/opencode-bridge");
    if !matches!(status, Ok(s) if s.success()) && !path.is_file() {
        eprintln!(
            "bridge-bench: `cargo build --release -p opencode-bridge` failed ({status:?}); set OPENCODE_BRIDGE_BENCH_BIN to a built binary"
        );
        std::process::exit(1);
    }
    path
}

pub(crate) struct Bridge {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: BufReader<ChildStdout>,
    pub(crate) next_id: i64,
    pub(crate) _world: tempfile::TempDir,
}

/// The environment of a bridge in a fresh temp world (nothing inherited but PATH).
pub(crate) fn world_env(world: &Path) -> Vec<(String, String)> {
    let p = |s: &str| {
        let d = world.join(s);
        std::fs::create_dir_all(&d).expect("create world dir");
        d.display().to_string()
    };
    vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), p("home")),
        ("XDG_DATA_HOME".into(), p("xdg/data")),
        ("XDG_CONFIG_HOME".into(), p("xdg/config")),
        ("XDG_STATE_HOME".into(), p("xdg/state")),
        ("XDG_CACHE_HOME".into(), p("xdg/cache")),
        ("OPENCODE_BRIDGE_ROOT".into(), p("root")),
    ]
}

impl Bridge {
    pub(crate) fn start(bin: &Path, extra: &[(&str, String)]) -> Result<Bridge, String> {
        let world = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let mut child = Command::new(bin)
            .env_clear()
            .envs(world_env(world.path()))
            .envs(extra.iter().map(|(k, v)| (k.to_string(), v.clone())))
            .current_dir(world.path().join("root"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut b = Bridge {
            child,
            stdin,
            stdout,
            next_id: 1,
            _world: world,
        };
        b.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bridge-bench", "version": "0"}}),
        )?;
        b.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(b)
    }

    pub(crate) fn root(&self) -> PathBuf {
        self._world.path().join("root")
    }

    pub(crate) fn send(&mut self, v: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{v}").map_err(|e| format!("write: {e}"))?;
        stdin.flush().map_err(|e| format!("flush: {e}"))
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err(format!(
                    "the bridge closed stdout before answering {method}"
                ));
            }
            let v: Value =
                serde_json::from_str(&line).map_err(|e| format!("non-JSON line: {e}"))?;
            if v.get("id") == Some(&json!(id)) {
                return Ok(v);
            }
        }
    }

    /// A tools/call whose result must not be an error; returns its text.
    pub(crate) fn call(&mut self, tool: &str, args: Value) -> Result<String, String> {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
        let result = r.get("result").ok_or_else(|| format!("{tool}: {r}"))?;
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if result["isError"].as_bool().unwrap_or(false) {
            return Err(format!("{tool} answered an error: {text}"));
        }
        Ok(text)
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn time_calls(
    b: &mut Bridge,
    reps: usize,
    tool: &str,
    args: &Value,
) -> Result<(Vec<f64>, String), String> {
    let first = b.call(tool, args.clone())?; // warm-up
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        b.call(tool, args.clone())?;
        v.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok((v, first))
}
