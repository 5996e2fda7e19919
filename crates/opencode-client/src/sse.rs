//! A reader of `opencode serve`'s server-sent events (`GET /event`, `GET /global/event`): one
//! JSON value per `data:` frame.
//!
//! Written on a plain [`TcpStream`] rather than the request client because an event stream
//! has no end: what matters is an *idle* limit (the server sends a heartbeat every 10 s, so a
//! stream silent for longer than the limit means the server or the path to it is gone), and a
//! way to close it from another thread ([`EventCloser`]). Like [`crate::http`], plain `http://`
//! only, no proxies, the password only in the `Authorization` header.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::Value;

use crate::error::ClientError;
use crate::http::HttpClient;

/// One frame's `data:` larger than this is skipped (a frame carries one event; tool outputs
/// can be large, but not this large).
const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// An open event stream.
#[derive(Debug)]
pub struct EventStream {
    reader: BufReader<Body>,
    stream: TcpStream,
    url: String,
    idle: Duration,
}

/// Closes an [`EventStream`] from another thread: its blocked read returns at once.
#[derive(Debug)]
pub struct EventCloser(TcpStream);

impl EventCloser {
    /// Closes the stream.
    pub fn close(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

impl EventStream {
    /// Opens `path` (with its query) on the client's server. `idle` bounds every wait for the
    /// next bytes; the connection is bounded by the client's call timeout.
    pub fn open(http: &HttpClient, path: &str, idle: Duration) -> Result<EventStream, ClientError> {
        let base = http.base();
        let down = |detail: String| ClientError::ServiceDown {
            url: base.to_owned(),
            detail,
        };
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| down("only http:// servers can be followed".into()))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let hostport = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let addrs: Vec<_> = hostport
            .to_socket_addrs()
            .map_err(|e| down(format!("cannot resolve {authority}: {e}")))?
            .collect();
        let connect_timeout = http.timeout().min(Duration::from_secs(10));
        let mut last = None;
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| {
            down(
                last.map(|e| e.to_string())
                    .unwrap_or_else(|| "no address".into()),
            )
        })?;
        stream
            .set_read_timeout(Some(http.timeout().max(idle)))
            .and_then(|_| stream.set_write_timeout(Some(http.timeout())))
            .map_err(|e| down(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let mut req = format!(
            "GET {prefix}{path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\nUser-Agent: opencode-bridge\r\n"
        );
        if let Some(auth) = http.auth_header() {
            req.push_str(&format!("Authorization: {auth}\r\n"));
        }
        req.push_str("\r\n");
        (&stream)
            .write_all(req.as_bytes())
            .map_err(|e| down(e.to_string()))?;
        let mut reader = BufReader::new(stream.try_clone().map_err(|e| down(e.to_string()))?);
        let mut status_line = String::new();
        read_line_limited(&mut reader, &mut status_line, 8192)
            .map_err(|e| io_error(base, http.timeout(), e))?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ClientError::MalformedReply {
                url: base.to_owned(),
                detail: format!("not an HTTP reply: {:?}", status_line.trim()),
            })?;
        let mut chunked = false;
        let mut length: Option<u64> = None;
        for _ in 0..200 {
            let mut line = String::new();
            read_line_limited(&mut reader, &mut line, 16 * 1024)
                .map_err(|e| io_error(base, http.timeout(), e))?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                let v = v.trim();
                if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                    chunked = true;
                } else if k == "content-length" {
                    length = v.parse().ok();
                }
            }
        }
        let mode = if chunked {
            Mode::Chunked {
                left: 0,
                done: false,
            }
        } else {
            Mode::Plain { left: length }
        };
        let mut reader = BufReader::new(Body {
            inner: reader,
            mode,
        });
        if !(200..300).contains(&status) {
            let mut bytes = Vec::new();
            let _ = (&mut reader).take(64 * 1024).read_to_end(&mut bytes);
            return Err(crate::http::status_error(base, status, &bytes, path));
        }
        stream
            .set_read_timeout(Some(idle))
            .map_err(|e| down(e.to_string()))?;
        Ok(EventStream {
            reader,
            stream,
            url: base.to_owned(),
            idle,
        })
    }

    /// A handle that closes this stream from another thread.
    pub fn closer(&self) -> Result<EventCloser, ClientError> {
        self.stream
            .try_clone()
            .map(EventCloser)
            .map_err(|e| ClientError::ServiceDown {
                url: self.url.clone(),
                detail: e.to_string(),
            })
    }

    /// The next event: `Ok(None)` when the server ended the stream, a
    /// [`ClientError::ServiceTimeout`] after `idle` without a byte, [`ClientError::ServiceDown`]
    /// when the connection broke. Frames that are not JSON are skipped.
    pub fn next_event(&mut self) -> Result<Option<Value>, ClientError> {
        let mut data = String::new();
        loop {
            let mut line = String::new();
            let n = read_line_limited(&mut self.reader, &mut line, MAX_FRAME_BYTES)
                .map_err(|e| io_error(&self.url, self.idle, e))?;
            if n == 0 {
                return Ok(None);
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if data.is_empty() {
                    continue;
                }
                match serde_json::from_str::<Value>(&data) {
                    Ok(v) => return Ok(Some(v)),
                    Err(_) => {
                        data.clear();
                        continue;
                    }
                }
            }
            if let Some(rest) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            }
            // `event:`, `id:`, `retry:` and `:` comments carry nothing we use.
        }
    }
}

fn io_error(url: &str, timeout: Duration, e: std::io::Error) -> ClientError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            ClientError::ServiceTimeout {
                url: url.to_owned(),
                timeout_ms: timeout.as_millis() as u64,
            }
        }
        _ => ClientError::ServiceDown {
            url: url.to_owned(),
            detail: e.to_string(),
        },
    }
}

/// `read_line` that refuses lines longer than `limit` (their bytes are consumed and dropped,
/// and an empty line is returned in their place so the frame is skipped).
fn read_line_limited(
    r: &mut impl BufRead,
    out: &mut String,
    limit: usize,
) -> std::io::Result<usize> {
    let mut bytes = Vec::new();
    let mut total = 0;
    let mut too_long = false;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let (take, end) = match memchr_nl(buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if !too_long {
            if bytes.len() + take > limit {
                too_long = true;
                bytes.clear();
            } else {
                bytes.extend_from_slice(&buf[..take]);
            }
        }
        total += take;
        r.consume(take);
        if end {
            break;
        }
    }
    if too_long {
        out.push('\n');
    } else {
        out.push_str(&String::from_utf8_lossy(&bytes));
    }
    Ok(total)
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// How the reply's body is framed: plain (to a length, or to the end) or chunked.
#[derive(Debug)]
enum Mode {
    Plain { left: Option<u64> },
    Chunked { left: u64, done: bool },
}

/// The reply's body, unframed.
#[derive(Debug)]
struct Body {
    inner: BufReader<TcpStream>,
    mode: Mode,
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let inner = &mut self.inner;
        match &mut self.mode {
            Mode::Plain { left: None } => inner.read(buf),
            Mode::Plain { left: Some(0) } => Ok(0),
            Mode::Plain { left: Some(n) } => {
                let max = (*n).min(buf.len() as u64) as usize;
                let got = inner.read(&mut buf[..max])?;
                *n -= got as u64;
                Ok(got)
            }
            Mode::Chunked { done: true, .. } => Ok(0),
            Mode::Chunked { left, done } => {
                if *left == 0 {
                    let mut size = String::new();
                    read_line_limited(inner, &mut size, 1024)?;
                    let hex = size.trim().split(';').next().unwrap_or("").trim();
                    let n = u64::from_str_radix(hex, 16).map_err(|_| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("bad chunk size {hex:?}"),
                        )
                    })?;
                    if n == 0 {
                        *done = true;
                        return Ok(0);
                    }
                    *left = n;
                }
                let max = (*left).min(buf.len() as u64) as usize;
                let got = inner.read(&mut buf[..max])?;
                if got == 0 {
                    return Ok(0);
                }
                *left -= got as u64;
                if *left == 0 {
                    let mut crlf = String::new();
                    read_line_limited(inner, &mut crlf, 16)?;
                }
                Ok(got)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn serve_once(reply: &'static [u8]) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(reply);
            // Held open a while: the reader sees silence, not an end.
            std::thread::sleep(Duration::from_secs(2));
        });
        format!("http://{addr}")
    }

    fn client(url: &str) -> HttpClient {
        HttpClient::new(url, None, Duration::from_secs(5), 1 << 20).unwrap()
    }

    #[test]
    fn chunked_frames_are_read_one_json_value_each() {
        let url = serve_once(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
              14\r\ndata: {\"type\":\"a\"}\n\n\r\n\
              5\r\ndata:\r\n\
              14\r\n {\"type\":\"b\",\"x\":1}\r\n\
              2\r\n\n\n\r\n\
              0\r\n\r\n",
        );
        let mut s = EventStream::open(&client(&url), "/event", Duration::from_secs(5)).unwrap();
        assert_eq!(s.next_event().unwrap().unwrap()["type"], "a");
        let b = s.next_event().unwrap().unwrap();
        assert_eq!(b["type"], "b");
        assert_eq!(b["x"], 1);
        assert!(s.next_event().unwrap().is_none());
    }

    #[test]
    fn a_refusal_is_the_client_error_and_silence_is_a_timeout() {
        let url = serve_once(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
        let err = EventStream::open(&client(&url), "/event", Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, ClientError::Unauthorized { .. }), "{err:?}");
        let url = serve_once(b"HTTP/1.1 200 OK\r\n\r\n: hello\n\n");
        let mut s = EventStream::open(&client(&url), "/event", Duration::from_millis(300)).unwrap();
        let err = s.next_event().unwrap_err();
        assert!(matches!(err, ClientError::ServiceTimeout { .. }), "{err:?}");
    }
}
