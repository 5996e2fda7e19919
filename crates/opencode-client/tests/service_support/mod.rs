//! A scripted loopback HTTP server for the service-backend tests: each request is answered by a
//! closure, or not at all (to play a hung server). One thread per connection; every reply
//! closes its connection.

#![allow(dead_code)]

use bridge_testkit::http;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the scripted server does with one request.
pub enum Reply {
    /// Status, extra headers, body.
    Full(u16, Vec<(String, String)>, Vec<u8>),
    /// Accept, read the request, and never answer (the connection stays open for a minute, or
    /// until the server is dropped).
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

/// A running scripted server (the testkit's loopback [`http::Server`]); it stops when dropped.
pub struct Scripted {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    _server: http::Server,
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
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let server = http::Server::start("scripted", move |stream, stop| {
        handle(stream, &f, &seen2, stop)
    })
    .unwrap();
    Scripted {
        port: server.port(),
        seen,
        _server: server,
    }
}

/// A port on which nothing listens (bound, then released).
pub fn closed_port() -> u16 {
    http::closed_port()
}

fn handle(
    stream: TcpStream,
    f: &dyn Fn(&Seen) -> Reply,
    seen: &Mutex<Vec<Seen>>,
    stop: &AtomicBool,
) {
    let Ok(Some(request)) = http::read_request(&mut BufReader::new(&stream)) else {
        return;
    };
    let req = Seen {
        authorization: request.header("authorization").map(str::to_string),
        body: String::from_utf8_lossy(&request.body).into_owned(),
        method: request.method,
        path: request.path,
    };
    seen.lock().unwrap().push(req.clone());
    let mut out = &stream;
    match f(&req) {
        Reply::Hang => {
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Reply::Full(status, headers, body) => {
            let mut all: Vec<(&str, &str)> = vec![("connection", "close")];
            all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            let _ =
                http::respond_untyped(&stream, status, http::reason_phrase(status), &all, &body);
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
