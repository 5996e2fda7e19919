//! Regenerates `fixtures/opencode-store/opencode.db`: a small real store written by the real
//! opencode (1.18.33) running scenarios against the fake LLM. Run by hand:
//!
//! ```sh
//! OPENCODE_BRIDGE_TEST_OPENCODE=/path/to/opencode OPENCODE_BRIDGE_TEST_CACHE=~/.cache/opencode-bridge-test \
//!   cargo run -p opencode-client --example gen_store_fixture -- fixtures/opencode-store
//! ```
//!
//! It writes `<out>/opencode.db` (WAL checkpointed, journal mode switched to DELETE so the file
//! is self-contained) and `<out>/sessions.json` (scenario name → session id, with the run's exit
//! code), which the fixture tests read.

use bridge_testkit::{FakeLlm, OpencodeSandbox, real_opencode};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const RUN_TIMEOUT: Duration = Duration::from_secs(240);

fn main() {
    let out_dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fixtures/opencode-store".into()),
    );
    let oc = real_opencode().expect("set OPENCODE_BRIDGE_TEST_OPENCODE to the real opencode");
    let llm = FakeLlm::start().expect("fake llm");
    llm.set_slow_secs(120);
    let sb = OpencodeSandbox::new(&llm.base_url()).expect("sandbox");
    let other = sb.root().join("other-proj");
    std::fs::create_dir_all(&other).unwrap();
    let other = other.canonicalize().unwrap();

    let mut sessions = serde_json::Map::new();
    let mut record = |name: &str, id: Option<String>, rc: Option<i32>| {
        let id = id.unwrap_or_else(|| panic!("scenario {name}: no session id"));
        eprintln!("{name}: {id} rc={rc:?}");
        sessions.insert(name.into(), json!({"id": id, "rc": rc}));
    };

    // FIXTURE_ONLY=<scenario> runs one scenario (for debugging this generator).
    let only = std::env::var("FIXTURE_ONLY").ok();
    let want = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == name))
    };

    // Plain runs in the project dir.
    for (name, model, prompt) in [
        ("ok", "ok", "fixture plain answer please"),
        ("toolbash", "toolbash", "fixture run a bash command"),
        ("toolwrite", "toolwrite", "fixture write a file"),
        ("e401", "e401", "fixture provider error"),
        (
            "permission_rejected",
            "toolread-denied",
            "fixture read outside",
        ),
        ("tooltask", "tooltask", "fixture delegate a sub job"),
    ] {
        if !want(name) {
            continue;
        }
        let out = sb
            .run_json(&oc, model, prompt, &[], RUN_TIMEOUT)
            .expect("run");
        record(name, out.session_id(), out.status.and_then(|s| s.code()));
    }

    // A run in a second directory (for the directory filter), with reasoning and a custom title.
    if want("other_dir") {
        let cmd = sb.command_in(
            &other,
            &oc,
            [
                "run",
                "--format",
                "json",
                "-m",
                "fk/reasoning",
                "--title",
                "DOCS/build: reasoning in other dir",
            ],
        );
        let out = run_with_stdin(cmd, "fixture other directory");
        record("other_dir", session_of(&out), None);
    }

    // Killed mid-run: SIGKILL while fk/slow streams → a dangling assistant message.
    if want("killed") {
        let mut cmd = sb.command(&oc, ["run", "--format", "json", "-m", "fk/slow"]);
        let mut child = spawn_with_stdin(&mut cmd, "fixture killed mid run");
        assert!(
            llm.wait_for(Duration::from_secs(60), |r| r
                .iter()
                .any(|r| r.model() == Some("slow") && r.has_tools())),
            "slow request never came"
        );
        std::thread::sleep(Duration::from_secs(2));
        child.kill().unwrap();
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        child.wait().unwrap();
        // json mode prints nothing before the step ends; find the session in the store instead.
        record(
            "killed",
            newest_session(&sb.db_path(), "fixture killed mid run"),
            None,
        );
    }

    // Aborted through `opencode serve`: POST /session/{id}/abort while fk/slow streams, and
    // while opencode waits to retry a 429 (fresh, and after a tool step).
    let aborts: Vec<(&str, &str, usize)> = [
        ("aborted", "slow", 1),
        ("aborted_in_retry", "e429wait", 1),
        ("aborted_in_retry_after_tool", "tool429wait", 2),
    ]
    .into_iter()
    .filter(|(name, _, _)| want(name))
    .collect();
    if !aborts.is_empty() {
        let port = free_port();
        let mut cmd = sb.command(
            &oc,
            [
                "serve",
                "--port",
                &port.to_string(),
                "--hostname",
                "127.0.0.1",
            ],
        );
        let log = std::fs::File::create(sb.root().join("serve.log")).unwrap();
        let mut server = cmd
            .args(["--print-logs", "--log-level", "INFO"])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(server.stdout.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                stop(&mut server);
                panic!("serve exited early; it said: {said}");
            }
            said.push_str(&line);
            if line.contains("listening") {
                break;
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let dir = sb.project_dir().to_string_lossy().into_owned();
        let q = format!("?directory={}", encode(&dir));
        for (name, model, requests) in aborts {
            let created = http(port, "POST", &format!("/session{q}"), &json!({}));
            let id = created["id"].as_str().unwrap().to_string();
            let tool_requests = |r: &[bridge_testkit::RecordedRequest]| {
                r.iter()
                    .filter(|r| r.model() == Some(model) && r.has_tools())
                    .count()
            };
            let before = tool_requests(&llm.requests());
            http(
                port,
                "POST",
                &format!("/session/{id}/prompt_async{q}"),
                &json!({"model": {"providerID": "fk", "modelID": model},
                        "parts": [{"type": "text", "text": format!("fixture {name} by the user")}]}),
            );
            if !llm.wait_for(Duration::from_secs(60), |r| {
                tool_requests(r) >= before + requests
            }) {
                let msgs = http(
                    port,
                    "GET",
                    &format!("/session/{id}/message{q}"),
                    &Value::Null,
                );
                let log = std::fs::read_to_string(sb.root().join("serve.log")).unwrap_or_default();
                stop(&mut server);
                panic!(
                    "{name}: the request never came; messages: {msgs}\nserve log tail: {}",
                    &log[log.len().saturating_sub(4000)..]
                );
            }
            std::thread::sleep(Duration::from_secs(2));
            http(port, "POST", &format!("/session/{id}/abort{q}"), &json!({}));
            std::thread::sleep(Duration::from_secs(2));
            record(name, Some(id), None);
        }
        stop(&mut server);
    }

    // Copy out, checkpoint the WAL, make the file self-contained.
    std::fs::create_dir_all(&out_dir).unwrap();
    let target = out_dir.join("opencode.db");
    let _ = std::fs::remove_file(&target);
    {
        let src = rusqlite::Connection::open(sb.db_path()).unwrap();
        src.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        src.execute("VACUUM INTO ?1", [target.to_string_lossy().as_ref()])
            .unwrap();
    }
    {
        let dst = rusqlite::Connection::open(&target).unwrap();
        dst.execute_batch("PRAGMA journal_mode=DELETE;").unwrap();
    }
    // The subagent session of `tooltask`.
    if let Some(parent) = sessions
        .get("tooltask")
        .and_then(|v| v["id"].as_str())
        .map(str::to_string)
    {
        let conn = rusqlite::Connection::open(&target).unwrap();
        let child: Option<String> = conn
            .query_row(
                "SELECT id FROM session WHERE parent_id = ?1",
                [&parent],
                |r| r.get(0),
            )
            .ok();
        if let Some(child) = child {
            sessions.insert("tooltask_child".into(), json!({"id": child, "rc": null}));
        }
    }
    let meta = json!({
        "opencode": std::process::Command::new(&oc).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default(),
        "project_dir": sb.project_dir(),
        "other_dir": other,
        "sessions": sessions,
    });
    std::fs::write(
        out_dir.join("sessions.json"),
        serde_json::to_string_pretty(&meta).unwrap() + "\n",
    )
    .unwrap();
    eprintln!("wrote {}", target.display());
}

fn spawn_with_stdin(cmd: &mut std::process::Command, prompt: &str) -> Child {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(prompt.as_bytes())
        .unwrap();
    child
}

fn run_with_stdin(mut cmd: std::process::Command, prompt: &str) -> String {
    let child = spawn_with_stdin(&mut cmd, prompt);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn session_of(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|e| e["sessionID"].as_str().map(str::to_string))
}

fn newest_session(db: &Path, prompt: &str) -> Option<String> {
    let conn = rusqlite::Connection::open(db).ok()?;
    conn.query_row(
        "SELECT session_id FROM part WHERE data LIKE ?1 ORDER BY id DESC LIMIT 1",
        [format!("%{prompt}%")],
        |r| r.get(0),
    )
    .ok()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A minimal HTTP/1.1 JSON request against the local `opencode serve`.
fn http(port: u16, method: &str, path: &str, body: &Value) -> Value {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let b = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
        b.len()
    )
    .unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let resp = String::from_utf8_lossy(&resp);
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    assert!(
        head.starts_with("HTTP/1.1 2"),
        "{method} {path}: {head}\n{body}"
    );
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

fn dechunk(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

fn stop(child: &mut Child) {
    let start = Instant::now();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}
