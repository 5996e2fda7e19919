//! Faults through the real binary: an opencode service that hangs, is stopped, answers 401 or
//! 500, sends a 50 MB reply or malformed JSON; a store that is missing, truncated, or locked by
//! another process for 10 s. Each session call answers a one-line error well within its
//! deadline, and the server goes on answering.

use crate::common;

use bridge_testkit::http;
use common::{Server, World, hung_http_server};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one call to the service may take before the bridge gives up.
const API_TIMEOUT_MS: u64 = 2000;
/// A generous bound for "answered within the deadline" (not a speed target: a hang check).
const NO_HANG: Duration = Duration::from_secs(20);

#[derive(Clone, Copy)]
enum Reply {
    Status(u16, &'static str),
    Huge(usize),
}

/// A loopback HTTP server answering every request the same way.
fn serve(reply: Reply) -> http::Server {
    http::Server::start("faults", move |s, _stop| {
        // Read the request (these are GETs).
        let _ = http::read_request(&mut BufReader::new(&s));
        let _ = match reply {
            Reply::Status(code, body) => http::respond(
                &s,
                code,
                http::reason_phrase(code),
                "application/json",
                &[("connection", "close")],
                body.as_bytes(),
            ),
            Reply::Huge(bytes) => {
                let mut out = &s;
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n["
                );
                let chunk = vec![b' '; 64 * 1024];
                let mut sent = 1;
                while sent < bytes {
                    if out.write_all(&chunk).is_err() {
                        break;
                    }
                    sent += chunk.len();
                }
                Ok(())
            }
        };
        let mut rest = Vec::new();
        let _ = (&s).read_to_end(&mut rest);
    })
    .unwrap()
}

fn check_one_line_error(
    server: &mut Server,
    id: i64,
    tool: &str,
    args: serde_json::Value,
    case: &str,
) -> String {
    let t = Instant::now();
    let (text, is_error) = server.call_text(id, tool, args);
    let took = t.elapsed();
    assert!(is_error, "{case}: {tool} did not fail: {text}");
    assert_eq!(text.trim_end().lines().count(), 1, "{case}: {text}");
    assert!(text.len() < 2000, "{case}: {} bytes", text.len());
    assert!(took < NO_HANG, "{case}: {tool} took {took:?}");
    let pong = server.request(id + 1, "ping", json!({}));
    assert_eq!(pong["result"], json!({}), "{case}: {pong}");
    text
}

fn service_env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("OPENCODE_BRIDGE_BACKEND", "server".into()),
        (
            "OPENCODE_BRIDGE_SERVER_URL",
            format!("http://127.0.0.1:{port}"),
        ),
        ("OPENCODE_BRIDGE_API_TIMEOUT_MS", API_TIMEOUT_MS.to_string()),
    ]
}

#[test]
fn service_faults_are_one_line_errors_within_the_deadline() {
    let (hung, _h) = hung_http_server();
    let unauthorized = serve(Reply::Status(401, "{\"error\":\"unauthorized\"}"));
    let failing = serve(Reply::Status(
        500,
        "{\"name\":\"UnknownError\",\"data\":{\"message\":\"boom\\nsecond line\"}}",
    ));
    let huge = serve(Reply::Huge(50 << 20));
    let malformed = serve(Reply::Status(200, "[{\"id\": \"ses_1\", "));
    let cases: Vec<(&str, u16, &str)> = vec![
        ("hung", hung, "2000"),
        ("stopped", http::closed_port(), "refused"),
        ("401", unauthorized.port(), "401"),
        ("500", failing.port(), "500"),
        ("50 MB reply", huge.port(), "bytes"),
        ("malformed JSON", malformed.port(), ""),
    ];
    let world = World::new();
    for (i, (case, port, mention)) in cases.iter().enumerate() {
        let mut server = Server::start(&world, &service_env(*port));
        server.initialize();
        let base = 10 * i as i64 + 10;
        let text = check_one_line_error(
            &mut server,
            base,
            "opencode_sessions",
            json!({"limit": 5}),
            case,
        );
        assert!(text.contains(mention), "{case}: {text}");
        check_one_line_error(
            &mut server,
            base + 2,
            "opencode_session_output",
            json!({"id": "ses_0123456789abcdefghijkl"}),
            case,
        );
        println!("{case}: {text}");
    }
}

/// `target/<profile>/` of this test binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().unwrap().to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// The `hold-store-lock` helper of the bridge-bench crate, built on demand.
fn hold_store_lock() -> PathBuf {
    let dir = profile_dir();
    let path = dir.join("hold-store-lock");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/bridge-bench/src/bin/hold-store-lock.rs");
    let fresh = match (std::fs::metadata(&path), std::fs::metadata(&src)) {
        (Ok(b), Ok(s)) => b.modified().unwrap() >= s.modified().unwrap(),
        _ => false,
    };
    if !fresh {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args([
            "build",
            "--quiet",
            "-p",
            "bridge-bench",
            "--bin",
            "hold-store-lock",
        ]);
        if let Some(target) = dir.parent() {
            cmd.arg("--target-dir").arg(target);
        }
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("release") => {
                cmd.arg("--release");
            }
            Some("debug") | None => {}
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        let status = cmd.status();
        assert!(path.is_file(), "cannot build hold-store-lock ({status:?})");
    }
    path
}

fn fixture_store() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/opencode-store/opencode.db")
}

fn store_env(db: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("OPENCODE_BRIDGE_BACKEND", "store".into()),
        ("OPENCODE_DB", db.to_string_lossy().into_owned()),
    ]
}

#[test]
fn a_missing_or_truncated_store_is_a_one_line_error() {
    let world = World::new();
    let missing = world.path("nowhere/opencode.db");
    let full = std::fs::read(fixture_store()).unwrap();
    let header_only = world.path("header-only.db");
    std::fs::write(&header_only, &full[..100]).unwrap();
    let half = world.path("half.db");
    std::fs::write(&half, &full[..full.len() / 2]).unwrap();
    let garbage = world.path("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 64 * 1024]).unwrap();
    for (case, db) in [
        ("missing", &missing),
        ("truncated to its header", &header_only),
        ("truncated to half", &half),
        ("not a database", &garbage),
    ] {
        let mut server = Server::start(&world, &store_env(db));
        server.initialize();
        let text = check_one_line_error(&mut server, 10, "opencode_sessions", json!({}), case);
        println!("{case}: {text}");
        check_one_line_error(
            &mut server,
            20,
            "opencode_session_output",
            json!({"id": "ses_0123456789abcdefghijkl"}),
            case,
        );
    }
    assert!(!missing.exists(), "the bridge created the missing store");
}

#[test]
fn a_store_locked_for_ten_seconds_is_a_one_line_error_then_reads_again() {
    let world = World::new();
    let db = world.path("locked.db");
    std::fs::copy(fixture_store(), &db).unwrap();
    let mut server = Server::start(&world, &store_env(&db));
    server.initialize();
    let (before, is_error) = server.call_text(5, "opencode_sessions", json!({}));
    assert!(!is_error, "{before}");

    let mut holder = Command::new(hold_store_lock())
        .arg(&db)
        .arg("10")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let locked_at = Instant::now();
    let text = check_one_line_error(&mut server, 10, "opencode_sessions", json!({}), "locked");
    println!("locked: {text}");
    assert!(text.contains("lock"), "{text}");
    assert!(
        locked_at.elapsed() < Duration::from_secs(9),
        "the call waited for the lock to go away"
    );
    holder.wait().unwrap();
    let (after, is_error) = server.call_text(30, "opencode_sessions", json!({}));
    assert!(!is_error, "{after}");
    assert_eq!(
        after.matches("ses_").count(),
        before.matches("ses_").count(),
        "the listing after the lock differs:\n{before}\n---\n{after}"
    );
}
