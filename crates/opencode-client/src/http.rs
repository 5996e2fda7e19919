//! A small blocking HTTP client for `opencode serve`: Basic auth, a per-call timeout, a cap on
//! the reply size, and every failure turned into a one-line [`ClientError`].
//!
//! Plain `http://` only (ureq without TLS): `opencode serve` speaks plain HTTP, and a server on
//! another host is reached through a tunnel or a TLS-terminating proxy the user sets up.
//! Environment proxies (`HTTP_PROXY`, ...) are ignored on purpose: the bridge talks to the URL it
//! was given, nothing else.
//!
//! The password is held only inside [`BasicAuth`], whose `Debug` prints `<redacted>`; no error
//! message or log line contains it.

use crate::error::ClientError;
use serde_json::Value;
use std::fmt;
use std::time::Duration;

/// Replies larger than this are refused by default (32 MiB).
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 32 * 1024 * 1024;

/// Basic-auth credentials for `opencode serve`. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// `OPENCODE_SERVER_USERNAME`, default `opencode`.
    pub username: String,
    password: String,
}

impl BasicAuth {
    /// Credentials from a username and password.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> BasicAuth {
        BasicAuth {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The `Authorization` header value (`Basic base64(user:pass)`).
    pub(crate) fn header_value(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!("Basic {}", base64(raw.as_bytes()))
    }
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// One HTTP reply that was read completely and is valid JSON.
#[derive(Debug, Clone)]
pub struct JsonReply {
    pub status: u16,
    pub body: Value,
    /// The `X-Next-Cursor` header, when present (paged routes).
    pub next_cursor: Option<String>,
}

/// A client for one `opencode serve` base URL.
#[derive(Clone)]
pub struct HttpClient {
    base: String,
    auth: Option<BasicAuth>,
    timeout: Duration,
    max_reply_bytes: u64,
    agent: ureq::Agent,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("base", &self.base)
            .field("auth", &self.auth)
            .field("timeout", &self.timeout)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .finish()
    }
}

impl HttpClient {
    /// A client for `base` (`http://host:port`, optionally with a path prefix). Every call is
    /// bounded by `timeout` (connect, send and read together); replies over `max_reply_bytes`
    /// are refused.
    pub fn new(
        base: &str,
        auth: Option<BasicAuth>,
        timeout: Duration,
        max_reply_bytes: u64,
    ) -> Result<HttpClient, ClientError> {
        let base = base.trim().trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            let hint = if base.starts_with("https://") {
                "https is not supported: use plain http (for a remote server, through an SSH tunnel)"
            } else {
                "expected http://host:port"
            };
            return Err(ClientError::InvalidArgument {
                field: bridge_env::SERVER_URL.name,
                detail: format!("{base:?}: {hint}"),
            });
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .user_agent("opencode-bridge")
            .build()
            .into();
        Ok(HttpClient {
            base,
            auth,
            timeout,
            max_reply_bytes,
            agent,
        })
    }

    /// The `Authorization` header value, when the server needs one.
    pub(crate) fn auth_header(&self) -> Option<String> {
        self.auth.as_ref().map(BasicAuth::header_value)
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The base URL (no trailing slash). Never contains credentials.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path` (path includes the query string), expecting a 2xx JSON reply.
    pub fn get_json(&self, path: &str) -> Result<JsonReply, ClientError> {
        self.call("GET", path, None)
    }

    /// `PATCH path` with a JSON body, expecting a 2xx JSON reply.
    pub fn patch_json(&self, path: &str, body: &Value) -> Result<JsonReply, ClientError> {
        self.call("PATCH", path, Some(body))
    }

    /// `POST path` with a JSON body, expecting a 2xx JSON reply.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<JsonReply, ClientError> {
        self.call("POST", path, Some(body))
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<JsonReply, ClientError> {
        let url = format!("{}{}", self.base, path);
        let auth = self.auth.as_ref().map(BasicAuth::header_value);
        let result = match body {
            None => {
                let mut req = self.agent.get(&url);
                if let Some(a) = &auth {
                    req = req.header("Authorization", a);
                }
                req.header("Accept", "application/json").call()
            }
            Some(b) => {
                let mut req = match method {
                    "PATCH" => self.agent.patch(&url),
                    "PUT" => self.agent.put(&url),
                    _ => self.agent.post(&url),
                };
                if let Some(a) = &auth {
                    req = req.header("Authorization", a);
                }
                req.header("Accept", "application/json")
                    .header("Content-Type", "application/json")
                    .send(b.to_string().as_bytes())
            }
        };
        let mut resp = result.map_err(|e| self.transport_error(e))?;
        let status = resp.status().as_u16();
        let next_cursor = resp
            .headers()
            .get("x-next-cursor")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(self.max_reply_bytes)
            .read_to_vec()
            .map_err(|e| self.transport_error(e))?;
        if !(200..300).contains(&status) {
            return Err(status_error(&self.base, status, &bytes, path));
        }
        // `204 No Content` (e.g. `prompt_async`) has no body to parse.
        let body = if status == 204 || (bytes.is_empty() && method != "GET") {
            Value::Null
        } else {
            parse_json(&bytes).map_err(|detail| ClientError::MalformedReply {
                url: self.base.clone(),
                detail,
            })?
        };
        Ok(JsonReply {
            status,
            body,
            next_cursor,
        })
    }

    fn transport_error(&self, e: ureq::Error) -> ClientError {
        let url = self.base.clone();
        match e {
            ureq::Error::Timeout(_) => ClientError::ServiceTimeout {
                url,
                timeout_ms: self.timeout.as_millis() as u64,
            },
            ureq::Error::BodyExceedsLimit(limit) => ClientError::ReplyTooLarge {
                url,
                limit_bytes: limit,
            },
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                ClientError::ServiceTimeout {
                    url,
                    timeout_ms: self.timeout.as_millis() as u64,
                }
            }
            ureq::Error::Io(io) => ClientError::ServiceDown {
                url,
                detail: one_line(&io.to_string()),
            },
            ureq::Error::ConnectionFailed => ClientError::ServiceDown {
                url,
                detail: "connection failed".into(),
            },
            ureq::Error::HostNotFound => ClientError::ServiceDown {
                url,
                detail: "host not found".into(),
            },
            ureq::Error::LargeResponseHeader(_, limit) => ClientError::ReplyTooLarge {
                url,
                limit_bytes: limit as u64,
            },
            other => ClientError::ServiceDown {
                url,
                detail: one_line(&other.to_string()),
            },
        }
    }
}

/// Maps a non-2xx reply to an error. `path` is used to name the session of a 404.
pub(crate) fn status_error(base: &str, status: u16, body: &[u8], path: &str) -> ClientError {
    match status {
        401 => ClientError::Unauthorized {
            url: base.to_string(),
        },
        404 if session_id_in_path(path).is_some() && looks_like_not_found(body) => {
            ClientError::NotFound {
                id: session_id_in_path(path).unwrap_or_default(),
            }
        }
        _ => ClientError::ServiceError {
            url: base.to_string(),
            status,
            detail: error_detail(body),
        },
    }
}

/// The session id in `/session/<id>…` or `/api/session/<id>…`, if any.
pub(crate) fn session_id_in_path(path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or("");
    let rest = path
        .strip_prefix("/api/session/")
        .or_else(|| path.strip_prefix("/session/"))?;
    let id = rest.split('/').next().unwrap_or("");
    id.starts_with("ses").then(|| percent_decode(id))
}

fn looks_like_not_found(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    text.contains("NotFound") || text.contains("not found")
}

/// A short, one-line description of an error body: opencode's `message` field when the body is
/// its JSON error shape, else the first 200 characters of the text.
pub(crate) fn error_detail(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        let msg = v
            .pointer("/data/message")
            .or_else(|| v.get("message"))
            .and_then(Value::as_str);
        if let Some(m) = msg {
            let name = v
                .get("name")
                .or_else(|| v.get("_tag"))
                .and_then(Value::as_str);
            return one_line(&match name {
                Some(n) => format!("{n}: {m}"),
                None => m.to_string(),
            });
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = one_line(text.trim());
    if text.is_empty() {
        "empty reply".into()
    } else {
        clip(&text, 200)
    }
}

/// Parses a JSON reply; the error says where it broke.
pub(crate) fn parse_json(bytes: &[u8]) -> Result<Value, String> {
    serde_json::from_slice::<Value>(bytes).map_err(|e| {
        let start = String::from_utf8_lossy(&bytes[..bytes.len().min(40)]).to_string();
        one_line(&format!("{e}; reply starts with {:?}", start))
    })
}

/// Collapses whitespace runs (including newlines) to single spaces.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// Percent-encodes a query or path component (RFC 3986 unreserved characters stay as they are).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(h, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Builds `?k=v&…` from pairs, skipping `None` values.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode_component(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Standard base64 with padding.
pub(crate) fn base64(input: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(TABLE[(n >> 18) as usize & 63] as char);
        out.push(TABLE[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            TABLE[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            TABLE[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"opencode:secret"), "b3BlbmNvZGU6c2VjcmV0");
    }

    #[test]
    fn debug_of_auth_and_client_hides_the_password() {
        let auth = BasicAuth::new("opencode", "hunter2-very-secret");
        let client = HttpClient::new(
            "http://127.0.0.1:9/",
            Some(auth.clone()),
            Duration::from_secs(1),
            10,
        )
        .unwrap();
        for text in [format!("{auth:?}"), format!("{client:?}")] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
        assert_eq!(client.base(), "http://127.0.0.1:9");
    }

    #[test]
    fn https_and_garbage_urls_are_refused_with_a_hint() {
        let e = HttpClient::new("https://x", None, Duration::from_secs(1), 10).unwrap_err();
        assert!(e.to_string().contains("https is not supported"), "{e}");
        let e = HttpClient::new("localhost:4096", None, Duration::from_secs(1), 10).unwrap_err();
        assert!(e.to_string().contains("expected http://host:port"), "{e}");
    }

    #[test]
    fn query_encodes_values_and_skips_missing_ones() {
        assert_eq!(
            query(&[
                ("directory", Some("/a b/ä".into())),
                ("cursor", None),
                ("limit", Some("5".into()))
            ]),
            "?directory=%2Fa%20b%2F%C3%A4&limit=5"
        );
        assert_eq!(query(&[("x", None)]), "");
    }

    #[test]
    fn session_ids_are_found_in_paths() {
        assert_eq!(
            session_id_in_path("/session/ses_abc/message?limit=1").as_deref(),
            Some("ses_abc")
        );
        assert_eq!(
            session_id_in_path("/api/session/ses_x").as_deref(),
            Some("ses_x")
        );
        assert_eq!(session_id_in_path("/session/status"), None);
        assert_eq!(session_id_in_path("/experimental/session"), None);
    }

    #[test]
    fn error_details_are_one_line() {
        let d = error_detail(
            br#"{"name":"NotFoundError","data":{"message":"Session not found: ses_x"}}"#,
        );
        assert_eq!(d, "NotFoundError: Session not found: ses_x");
        let d = error_detail(b"boom\n  at line 2\n");
        assert_eq!(d, "boom at line 2");
        assert_eq!(error_detail(b""), "empty reply");
    }
}
