//! A stand-in for the opencode v2 CLI's `opencode api` command, for tests.
//!
//! `fake-opencode-v2 api <METHOD> <path> [-d|--data JSON]` behaves like the real v2 CLI: the
//! reply body goes to stdout (with a trailing newline), and a non-2xx reply also prints
//! `HTTP <status> <reason>` on stderr and exits 1. Where the answer comes from:
//!
//! - `FAKE_OPENCODE_V2_FIXTURES=<dir>`: canned files. The request `GET /api/session/ses_1/message`
//!   maps to the name `get_api_session_ses_1_message` (method lower-cased, path without query,
//!   every `/` → `_`). With a `cursor=C` query, `<name>.cursor-C.json` is tried first. Then
//!   `<name>.json` is printed with exit 0, or `<name>.err` (first line: status code, rest: body)
//!   is printed as an HTTP error. No file → `HTTP 404 Not Found`. `<name>.hang` → sleeps for
//!   an hour (to test timeouts); `<name>.big` (first line: a byte count) → prints that many
//!   bytes of `x`.
//! - `FAKE_OPENCODE_V2_URL=http://127.0.0.1:PORT`: forwards the request to that server (a real
//!   `opencode serve` in tests) with Basic auth from `FAKE_OPENCODE_V2_PASSWORD` (user
//!   `FAKE_OPENCODE_V2_USERNAME`, default `opencode`), so the caller never sees the password.
//!   A connection failure prints `Error: …` on stderr and exits 1.
//!
//! `FAKE_OPENCODE_V2_LOG=<file>` appends one line per call (`METHOD path [body]`).
//! `fake-opencode-v2 --help` lists the commands, including `api`, as the v2 CLI does.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

const HELP: &str = "opencode (fake v2 CLI for tests)

Commands:
  opencode api <method> <path>   send a request to the opencode service
  opencode run [message..]       (not implemented by this fake)
  opencode service status        (not implemented by this fake)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None | Some("--help") | Some("-h") | Some("help") => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Some("api") => api(&args[1..]),
        Some(other) => {
            eprintln!("Error: unknown command {other:?} (this fake only knows `api`)");
            ExitCode::from(1)
        }
    }
}

fn api(args: &[String]) -> ExitCode {
    let mut positional = Vec::new();
    let mut data: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-d" | "--data" => {
                data = args.get(i + 1).cloned();
                i += 2;
            }
            a => {
                positional.push(a.to_string());
                i += 1;
            }
        }
    }
    if positional.len() != 2 || !positional[1].starts_with('/') {
        eprintln!("Error: Expected an operation name or an HTTP method and path");
        return ExitCode::from(1);
    }
    let method = positional[0].to_ascii_uppercase();
    let path = positional[1].clone();
    if let Ok(log) = std::env::var("FAKE_OPENCODE_V2_LOG") {
        let line = match &data {
            Some(d) => format!("{method} {path} {d}\n"),
            None => format!("{method} {path}\n"),
        };
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
    if let Ok(dir) = std::env::var("FAKE_OPENCODE_V2_FIXTURES") {
        return from_fixtures(Path::new(&dir), &method, &path);
    }
    match std::env::var("FAKE_OPENCODE_V2_URL") {
        Ok(url) => forward(&url, &method, &path, data.as_deref()),
        Err(_) => {
            eprintln!("Error: set FAKE_OPENCODE_V2_URL or FAKE_OPENCODE_V2_FIXTURES");
            ExitCode::from(1)
        }
    }
}

fn fixture_name(method: &str, path: &str) -> String {
    let bare = path.split('?').next().unwrap_or("");
    format!("{}{}", method.to_ascii_lowercase(), bare.replace('/', "_"))
}

fn query_value(path: &str, key: &str) -> Option<String> {
    let q = path.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

fn from_fixtures(dir: &Path, method: &str, path: &str) -> ExitCode {
    let name = fixture_name(method, path);
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(c) = query_value(path, "cursor") {
        candidates.push(dir.join(format!("{name}.cursor-{c}.json")));
    }
    candidates.push(dir.join(format!("{name}.json")));
    for c in &candidates {
        if let Ok(body) = std::fs::read_to_string(c) {
            return print_reply(200, body.as_bytes());
        }
    }
    if let Ok(text) = std::fs::read_to_string(dir.join(format!("{name}.err"))) {
        let (status, body) = text.split_once('\n').unwrap_or((text.as_str(), ""));
        let status = status.trim().parse::<u16>().unwrap_or(500);
        return print_reply(status, body.as_bytes());
    }
    if dir.join(format!("{name}.hang")).exists() {
        std::thread::sleep(Duration::from_secs(3600));
        return ExitCode::from(1);
    }
    if let Ok(text) = std::fs::read_to_string(dir.join(format!("{name}.big"))) {
        let n: usize = text.trim().parse().unwrap_or(0);
        let chunk = vec![b'x'; 64 * 1024];
        let mut out = std::io::stdout().lock();
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            if out.write_all(&chunk[..k]).is_err() {
                return ExitCode::from(1);
            }
            left -= k;
        }
        return ExitCode::SUCCESS;
    }
    print_reply(
        404,
        br#"{"name":"NotFoundError","data":{"message":"no fixture for this request"}}"#,
    )
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

fn print_reply(status: u16, body: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    if !body.is_empty() {
        let _ = out.write_all(body);
        if !body.ends_with(b"\n") {
            let _ = out.write_all(b"\n");
        }
    }
    let _ = out.flush();
    if (200..300).contains(&status) {
        ExitCode::SUCCESS
    } else {
        eprintln!("HTTP {status} {}", reason(status));
        ExitCode::from(1)
    }
}

fn forward(url: &str, method: &str, path: &str, data: Option<&str>) -> ExitCode {
    let Some(host_port) = url.trim_end_matches('/').strip_prefix("http://") else {
        eprintln!("Error: FAKE_OPENCODE_V2_URL must be http://host:port");
        return ExitCode::from(1);
    };
    let mut stream = match TcpStream::connect(host_port) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("Error: Unable to connect to {url}: {e}");
            return ExitCode::from(1);
        }
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host_port}\r\nConnection: close\r\nAccept: application/json\r\n"
    );
    if let Ok(pw) = std::env::var("FAKE_OPENCODE_V2_PASSWORD") {
        let user = std::env::var("FAKE_OPENCODE_V2_USERNAME").unwrap_or_else(|_| "opencode".into());
        req.push_str(&format!(
            "Authorization: Basic {}\r\n",
            base64(format!("{user}:{pw}").as_bytes())
        ));
    }
    let body = data.unwrap_or("");
    if data.is_some() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    req.push_str(body);
    if let Err(e) = stream.write_all(req.as_bytes()) {
        eprintln!("Error: sending to {url}: {e}");
        return ExitCode::from(1);
    }
    let mut raw = Vec::new();
    if let Err(e) = stream.read_to_end(&mut raw) {
        eprintln!("Error: reading from {url}: {e}");
        return ExitCode::from(1);
    }
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        eprintln!("Error: malformed HTTP reply from {url}");
        return ExitCode::from(1);
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    print_reply(status, &body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..eol]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        data = &data[eol + 2..];
        if size == 0 || data.len() < size {
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[(size + 2).min(data.len())..];
    }
    out
}

fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in input.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}
