//! The minimal HTTP/1.1 plumbing shared by the in-process fakes and by every test that needs a
//! loopback HTTP server: one request reader ([`read_request`]: `Content-Length` or chunked
//! bodies), one responder ([`respond`] / [`respond_untyped`]: status line, headers, body, then
//! the write side is closed), the head of a server-sent event stream, and a loopback listener
//! ([`Server`]) that hands each connection to a handler until it is dropped.
//!
//! For fault tests: [`hung_server`] accepts connections and never answers; [`closed_port`] is a
//! port nothing listens on.
//!
//! A test server is written as a [`Server::start`] handler, e.g. one that answers every request
//! with `401`:
//!
//! ```
//! use bridge_testkit::http::{self, Server};
//! use std::io::BufReader;
//!
//! let server = Server::start("auth", |stream, _stop| {
//!     let _ = http::read_request(&mut BufReader::new(&stream));
//!     let _ = http::respond(&stream, 401, http::reason_phrase(401), "application/json", &[], b"{}");
//! })
//! .unwrap();
//! let answer = http::exchange(server.port(), "GET / HTTP/1.1\r\nhost: x\r\n\r\n");
//! assert!(answer.starts_with("HTTP/1.1 401 Unauthorized"));
//! ```

use std::io::{self, BufRead, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// One parsed request.
#[derive(Debug, Default, Clone)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The request target as sent, query included.
    pub path: String,
    /// Header names lower-cased, values trimmed, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body (chunked bodies joined).
    pub body: Vec<u8>,
}

impl Request {
    /// The path without its query string.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or("")
    }

    /// The value of the first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one request; `None` when the peer closed before sending a request line.
pub fn read_request(reader: &mut impl BufRead) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut it = line.split_whitespace();
    let mut req = Request {
        method: it.next().unwrap_or("").to_string(),
        path: it.next().unwrap_or("").to_string(),
        ..Request::default()
    };
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            req.headers
                .push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    if req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        req.body = read_chunked(reader)?;
    } else if let Some(len) = req
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        req.body = vec![0; len];
        reader.read_exact(&mut req.body)?;
    }
    Ok(Some(req))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        if reader.read_line(&mut size_line)? == 0 {
            break;
        }
        let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
            .unwrap_or(0);
        if size == 0 {
            let mut end = String::new();
            let _ = reader.read_line(&mut end);
            break;
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
    Ok(body)
}

/// The usual reason phrase of a status code.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Site is overloaded",
        _ => "Status",
    }
}

/// Writes a whole response: `HTTP/1.1 <status> <reason>`, `content-type`, `content-length`,
/// then `headers` in order, then `body`; flushes and closes the write side.
pub fn respond(
    out: &TcpStream,
    status: u16,
    reason: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    write_response(out, status, reason, Some(content_type), headers, body)
}

/// [`respond`] without a `content-type` (the headers given are all there is besides
/// `content-length`), for tests of what a client does with an untyped answer.
pub fn respond_untyped(
    out: &TcpStream,
    status: u16,
    reason: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    write_response(out, status, reason, None, headers, body)
}

fn write_response(
    mut out: &TcpStream,
    status: u16,
    reason: &str,
    content_type: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {reason}\r\n");
    if let Some(t) = content_type {
        head.push_str(&format!("content-type: {t}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n", body.len()));
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    out.flush()?;
    let _ = out.shutdown(Shutdown::Write);
    Ok(())
}

/// Writes the head of a `200` server-sent event stream (no length; the connection closes at
/// its end). Not flushed.
pub fn write_event_stream_head(mut out: &TcpStream) -> io::Result<()> {
    out.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    )
}

/// A listener on a free `127.0.0.1` port that hands every connection, in blocking mode, to
/// `handler` on its own thread. Dropping it stops accepting (in-flight handlers see the stop
/// flag they were given) and waits for the accept thread.
#[derive(Debug)]
pub struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds and starts accepting; `label` prefixes the accept-error messages.
    pub fn start(
        label: &'static str,
        handler: impl Fn(TcpStream, &AtomicBool) + Send + Sync + 'static,
    ) -> io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let handler = Arc::new(handler);
        let st = stop.clone();
        let thread = thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (handler, st) = (handler.clone(), st.clone());
                        thread::spawn(move || handler(stream, &st));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        eprintln!("{label}: accept failed: {e}");
                        thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        });
        Ok(Server {
            port,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A loopback server that accepts every connection, reads nothing and never answers (a hung
/// service); each connection is held open until the server is dropped.
pub fn hung_server() -> io::Result<Server> {
    Server::start("hung server", |stream, stop| {
        while !stop.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(20));
        }
        drop(stream);
    })
}

/// A `127.0.0.1` port nothing listens on (bound, then released): connecting is refused.
pub fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("a bound address").port()
}

/// Test client: sends `request` as is to `127.0.0.1:port` and returns the whole answer.
///
/// # Panics
/// When the connection or the exchange fails.
pub fn exchange(port: u16, request: &str) -> String {
    use std::io::Read;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Test client: `POST path` with a JSON body; returns the whole answer.
///
/// # Panics
/// As [`exchange`].
pub fn post_json(port: u16, path: &str, body: &serde_json::Value) -> String {
    let b = body.to_string();
    exchange(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
            b.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Read};

    fn parse(raw: &str) -> Option<Request> {
        read_request(&mut BufReader::new(raw.as_bytes())).unwrap()
    }

    #[test]
    fn content_length_body_and_lowercased_headers() {
        let r =
            parse("POST /v1/x?beta=true HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcdef")
                .unwrap();
        assert_eq!((r.method.as_str(), r.route()), ("POST", "/v1/x"));
        assert_eq!(r.path, "/v1/x?beta=true");
        assert_eq!(r.headers[0], ("host".to_string(), "h".to_string()));
        assert_eq!(r.body, b"abc");
    }

    #[test]
    fn chunked_body_is_joined() {
        let r = parse(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\na;x=y\r\n0123456789\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, b"abc0123456789");
    }

    #[test]
    fn closed_before_request_line_is_none() {
        assert!(parse("").is_none());
    }

    #[test]
    fn respond_writes_status_headers_and_body() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        respond(
            &server,
            429,
            reason_phrase(429),
            "application/json",
            &[("connection", "close"), ("retry-after-ms", "10")],
            b"{}",
        )
        .unwrap();
        let mut out = String::new();
        client.read_to_string(&mut out).unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\nretry-after-ms: 10\r\n\r\n{}"
        );
    }
}
