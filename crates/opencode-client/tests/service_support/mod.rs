//! A scripted loopback HTTP server for the service-backend tests: each request is answered by a
//! closure, or not at all (to play a hung server). One thread per connection; every reply
//! closes its connection.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the scripted server does with one request.
pub enum Reply {
    /// Status, extra headers, body.
    Full(u16, Vec<(String, String)>, Vec<u8>),
    /// Accept, read the request, and never answer (the connection stays open for a minute).
    Hang,
    /// Announce a body of this many bytes and stream it (chunked when `chunked`).
    Huge { bytes: usize, chunked: bool },
}

impl Reply {
    pub fn json(status: u16, body: &str) -> Reply {
        Reply::Full(status, vec![], body.as_bytes().to_vec())
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: String,
}

pub struct Scripted {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Starts a server answering every request with `f(&Seen)`.
pub fn serve<F>(f: F) -> Scripted
where
    F: Fn(&Seen) -> Reply + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let f = Arc::new(f);
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(stream) = conn else { break };
            let f = f.clone();
            let seen = seen2.clone();
            std::thread::spawn(move || handle(stream, &*f, &seen));
        }
    });
    Scripted { port, seen }
}

/// A port on which nothing listens (bound, then released).
pub fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn handle(stream: TcpStream, f: &dyn Fn(&Seen) -> Reply, seen: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut len = 0usize;
    let mut authorization = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            authorization = Some(h[14..].trim().to_string());
        }
    }
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    let req = Seen {
        method,
        path,
        authorization,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    seen.lock().unwrap().push(req.clone());
    let mut out = stream;
    match f(&req) {
        Reply::Hang => std::thread::sleep(Duration::from_secs(60)),
        Reply::Full(status, headers, body) => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(&body);
        }
        Reply::Huge { bytes, chunked } => {
            let head = if chunked {
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    .to_string()
            } else {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n")
            };
            if out.write_all(head.as_bytes()).is_err() {
                return;
            }
            let chunk = vec![b'['; 64 * 1024];
            let mut left = bytes;
            while left > 0 {
                let k = left.min(chunk.len());
                let ok = if chunked {
                    out.write_all(format!("{k:x}\r\n").as_bytes()).is_ok()
                        && out.write_all(&chunk[..k]).is_ok()
                        && out.write_all(b"\r\n").is_ok()
                } else {
                    out.write_all(&chunk[..k]).is_ok()
                };
                if !ok {
                    return;
                }
                left -= k;
            }
            if chunked {
                let _ = out.write_all(b"0\r\n\r\n");
            }
        }
    }
}
