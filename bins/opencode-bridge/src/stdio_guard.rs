//! A line-level guard between the real stdin/stdout and rmcp.
//!
//! rmcp's stdio transport drops lines that are not JSON, echoes unknown method names at any
//! length and answers shape errors without an `id`. The guard reads every stdin line itself
//! (at most [`MAX_LINE`] bytes, never buffering more), checks it, and either forwards it to rmcp
//! through an in-memory pipe or answers it with one short JSON-RPC error:
//!
//! - not JSON (syntax, invalid UTF-8, a lone surrogate, nesting too deep): `-32700`, id null;
//! - a batch (a JSON array; MCP 2025-11-25 removed batching), a non-object, a bad `id`, a wrong
//!   `jsonrpc`, a missing or non-string `method`, a line over [`MAX_LINE`]: `-32600`, with the
//!   request's id when it can be read, else id null;
//! - a known MCP method whose params do not fit (e.g. `tools/call` without a string `name`):
//!   `-32602` with the id;
//! - an unknown method: `-32601` with the id and the name clipped to [`NAME_CLIP`] characters.
//!
//! Notifications and responses from the client that do not parse are dropped without an answer
//! (JSON-RPC never answers a notification). Everything rmcp writes and every guard answer go to
//! stdout through one writer task that only starts a guard answer between two whole lines, so
//! no line is ever interleaved. Stdin EOF closes rmcp's input, so the server stops as before.
//!
//! When stdin and stdout are pipes or sockets, the guard reads and writes them on the runtime's
//! own thread ([`own_stdio`]), so a call never waits for a second thread to be scheduled.

use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use serde_json::Value;
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream,
};
use tokio::sync::mpsc;

/// The longest stdin line accepted, newline included (rmcp's own limit, so a forwarded line is
/// never dropped by rmcp).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// How many characters of an unknown method or tool name an error message repeats.
pub const NAME_CLIP: usize = 64;

/// Capacity of each in-memory pipe to and from rmcp.
const PIPE: usize = 16 * 1024;

/// Request methods a client may send under MCP (rmcp parses each into its own type; one that
/// reaches rmcp as a custom request had params that did not fit).
const CLIENT_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// rmcp's ends of the two pipes: read requests from the first, write messages to the second.
pub type RmcpPipes = (DuplexStream, DuplexStream);

/// Starts the guard over the real stdin/stdout. Returns rmcp's transport and the writer task,
/// which ends once rmcp has closed its output and everything is written.
pub fn start() -> (RmcpPipes, tokio::task::JoinHandle<()>) {
    match own_stdio() {
        Some((input, output)) => start_on(input, output),
        None => {
            let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
            start_on(stdin, stdout)
        }
    }
}

type BoxedReader = Box<dyn AsyncRead + Unpin + Send>;
type BoxedWriter = Box<dyn AsyncWrite + Unpin + Send>;

/// Stdin and stdout read and written by the runtime's own thread, when both are pipes or
/// sockets (a client spawning the bridge gives it one or the other: Node's `spawn` socket
/// pairs, most others pipes); `None` otherwise (a terminal, a file), and then tokio's stdin and
/// stdout are used, which hand every read and write to a thread of the blocking pool.
///
/// That hand-off is what this avoids: with it, a call waits for a core three times (the
/// reading thread, the runtime thread, the writing thread), and while runs flood the cores
/// each wait can be a scheduler slice. Our duplicates of the two descriptors are made
/// non-blocking and registered with the runtime; fds 0 and 1 themselves then point at
/// `/dev/null`, so a child that inherits them, or a stray write to stdout, can neither read
/// the client's requests nor break its stream, and nothing but this process shares the
/// non-blocking descriptions.
fn own_stdio() -> Option<(BoxedReader, BoxedWriter)> {
    use nix::sys::stat::{SFlag, fstat};
    use std::os::fd::AsFd as _;
    let kind = |fd: std::os::fd::BorrowedFd<'_>| {
        let mode = SFlag::from_bits_truncate(fstat(fd).ok()?.st_mode) & SFlag::S_IFMT;
        match mode {
            SFlag::S_IFIFO => Some(true),
            SFlag::S_IFSOCK => Some(false),
            _ => None,
        }
    };
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    let in_is_pipe = kind(stdin.as_fd())?;
    let out_is_pipe = kind(stdout.as_fd())?;
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .ok()?;
    let input = stdin.as_fd().try_clone_to_owned().ok()?;
    let output = stdout.as_fd().try_clone_to_owned().ok()?;
    let streams = (|| {
        let reader: BoxedReader = if in_is_pipe {
            Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(input).ok()?)
        } else {
            Box::new(socket(input)?)
        };
        let writer: BoxedWriter = if out_is_pipe {
            Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(output).ok()?)
        } else {
            Box::new(socket(output)?)
        };
        Some((reader, writer))
    })();
    let Some((reader, writer)) = streams else {
        // tokio's stdio then reads and writes fds 0 and 1 blocking: undo what was set.
        for fd in [stdin.as_fd(), stdout.as_fd()] {
            use nix::fcntl::{FcntlArg, OFlag, fcntl};
            if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) {
                let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
                let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
            }
        }
        return None;
    };
    // From here on only our duplicates reach the client.
    let moved = nix::unistd::dup2_stdin(&devnull).and(nix::unistd::dup2_stdout(&devnull));
    if let Err(e) = moved {
        tracing::debug!("stdin/stdout not pointed at /dev/null: {e}");
    }
    Some((reader, writer))
}

/// A socket descriptor, non-blocking, registered with the runtime.
fn socket(fd: std::os::fd::OwnedFd) -> Option<tokio::net::UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(s).ok()
}

/// [`start`] over any reader and writer (tests use in-memory pipes).
pub fn start_on<R, W>(input: R, output: W) -> (RmcpPipes, tokio::task::JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (to_rmcp, rmcp_in) = tokio::io::duplex(PIPE);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE);
    let (answers_tx, answers_rx) = mpsc::channel::<String>(64);
    tokio::spawn(read_input(input, to_rmcp, answers_tx));
    let writer = tokio::spawn(write_output(from_rmcp, answers_rx, output));
    ((rmcp_in, rmcp_out), writer)
}

/// Reads stdin line by line until EOF, forwarding good lines to rmcp and queueing answers for
/// bad ones; dropping `to_rmcp` at the end is rmcp's EOF.
async fn read_input<R: AsyncRead + Unpin>(
    input: R,
    mut to_rmcp: DuplexStream,
    answers: mpsc::Sender<String>,
) {
    let mut reader = tokio::io::BufReader::with_capacity(PIPE, input);
    let mut line = Vec::new();
    loop {
        let verdict = match read_line(&mut reader, &mut line).await {
            Ok(Some(true)) => judge(trim(&line)),
            Ok(Some(false)) => Verdict::Answer(error_line(
                &Value::Null,
                -32600,
                &format!(
                    "Invalid Request: a line longer than {} MiB was skipped; send smaller messages",
                    MAX_LINE >> 20
                ),
            )),
            Ok(None) => break,
            Err(e) => {
                tracing::error!("reading stdin failed: {e}");
                break;
            }
        };
        match verdict {
            Verdict::Forward => {
                let body = trim(&line);
                if to_rmcp.write_all(body).await.is_err() || to_rmcp.write_all(b"\n").await.is_err()
                {
                    break;
                }
            }
            Verdict::Answer(answer) => {
                if answers.send(answer).await.is_err() {
                    break;
                }
            }
            Verdict::Drop(why) => tracing::debug!("ignored an incoming line: {why}"),
        }
        line.clear();
    }
    let _ = to_rmcp.shutdown().await;
}

/// Reads one line into `line` without letting it grow past [`MAX_LINE`]: `Some(true)` a whole
/// line (or a last line without newline), `Some(false)` an over-long line (skipped to its
/// end), `None` EOF.
async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut tokio::io::BufReader<R>,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    let mut oversized = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            // EOF: a trailing line without a newline still counts.
            return Ok(if oversized {
                Some(false)
            } else if line.is_empty() {
                None
            } else {
                Some(true)
            });
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        if !oversized && line.len() + take > MAX_LINE {
            oversized = true;
            line.clear();
        }
        if !oversized {
            line.extend_from_slice(&available[..take]);
        }
        reader.consume(take);
        if newline.is_some() {
            return Ok(Some(!oversized));
        }
    }
}

/// The line without its newline, a carriage return before it, or a UTF-8 byte-order mark.
fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

/// What to do with one incoming line.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// A message rmcp handles: pass it on unchanged.
    Forward,
    /// Not for rmcp: write this JSON-RPC error line instead.
    Answer(String),
    /// Not answerable (an empty line, a bad notification or response): log and skip.
    Drop(&'static str),
}

fn judge(line: &[u8]) -> Verdict {
    if line.is_empty() {
        return Verdict::Drop("empty line");
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(ClientJsonRpcMessage::Request(request)) => match &request.request {
            ClientRequest::CustomRequest(custom) => {
                let id = serde_json::to_value(&request.id).unwrap_or(Value::Null);
                Verdict::Answer(wrong_method_or_params(
                    &id,
                    &custom.method,
                    custom.params.as_ref(),
                ))
            }
            _ => Verdict::Forward,
        },
        Ok(_) => Verdict::Forward,
        Err(_) => diagnose(line),
    }
}

/// Why a line that rmcp could not take is wrong, as the answer to send (or a reason to drop it).
fn diagnose(line: &[u8]) -> Verdict {
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            return Verdict::Answer(error_line(
                &Value::Null,
                -32700,
                &format!("Parse error: {e}; send one JSON-RPC message per line"),
            ));
        }
    };
    let object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Verdict::Answer(error_line(
                &Value::Null,
                -32600,
                "Invalid Request: batches (JSON arrays) are not supported since MCP 2025-11-25; send one message per line",
            ));
        }
        _ => {
            return Verdict::Answer(error_line(
                &Value::Null,
                -32600,
                "Invalid Request: a message must be a JSON object",
            ));
        }
    };
    let invalid = |id: &Value, what: &str| {
        Verdict::Answer(error_line(id, -32600, &format!("Invalid Request: {what}")))
    };
    let id = match object.get("id") {
        None => None,
        Some(id @ Value::String(s)) if s.len() <= 1024 => Some(id.clone()),
        Some(id @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(id.clone()),
        Some(_) => {
            return invalid(
                &Value::Null,
                "`id` must be a string or an integer (and not null)",
            );
        }
    };
    let answer_id = id.clone().unwrap_or(Value::Null);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(&answer_id, "`jsonrpc` must be \"2.0\"");
    }
    let method = match object.get("method") {
        Some(Value::String(method)) => method,
        Some(_) => return invalid(&answer_id, "`method` must be a string"),
        None if object.contains_key("result") || object.contains_key("error") => {
            return Verdict::Drop("a malformed response");
        }
        None => {
            return invalid(
                &answer_id,
                "a message needs `method` (a request or notification) or `result`/`error` (a response)",
            );
        }
    };
    let Some(id) = id else {
        return Verdict::Drop("a malformed notification");
    };
    Verdict::Answer(wrong_method_or_params(&id, method, object.get("params")))
}

/// The answer to a request rmcp would not route: its params do not fit a known method, or the
/// method is unknown.
fn wrong_method_or_params(id: &Value, method: &str, params: Option<&Value>) -> String {
    if !CLIENT_METHODS.contains(&method) {
        return error_line(id, -32601, &format!("Method not found: `{}`", clip(method)));
    }
    let message = match params {
        Some(p) if !p.is_object() => {
            format!("Invalid params: `params` of `{method}` must be an object")
        }
        Some(p)
            if method == "tools/call"
                && p.get("name").is_some_and(Value::is_string)
                && p.get("arguments").is_some_and(|a| !a.is_object() && !a.is_null()) =>
        {
            "Invalid params: tools/call `arguments` must be an object of the tool's arguments by name (e.g. {\"id\": \"1\"})".to_owned()
        }
        _ if method == "tools/call" => format!(
            "Invalid params: tools/call needs `name`, a string naming one of the tools ({})",
            crate::tools::TOOL_NAMES.join(", ")
        ),
        _ => format!("Invalid params: the params of `{method}` do not match the MCP schema"),
    };
    error_line(id, -32602, &message)
}

/// At most [`NAME_CLIP`] characters of `name`, with `…` when it was longer.
pub fn clip(name: &str) -> String {
    match name.char_indices().nth(NAME_CLIP) {
        Some((end, _)) => format!("{}…", &name[..end]),
        None => name.to_string(),
    }
}

/// One JSON-RPC error response, members in the usual order.
fn error_line(id: &Value, code: i64, message: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{}}}}}"#,
        Value::from(message)
    )
}

/// Copies rmcp's output to stdout and writes the guard's answers between whole lines; ends when
/// rmcp closes its output (answers still queued then are written too).
async fn write_output<W: AsyncWrite + Unpin>(
    mut from_rmcp: DuplexStream,
    mut answers: mpsc::Receiver<String>,
    mut out: W,
) {
    let mut chunk = vec![0u8; PIPE];
    // True while the last byte written to stdout was not a newline (rmcp is mid-line).
    let mut mid_line = false;
    loop {
        tokio::select! {
            biased;
            Some(answer) = answers.recv(), if !mid_line => {
                if write_line(&mut out, &answer).await.is_err() {
                    return;
                }
            }
            read = from_rmcp.read(&mut chunk) => {
                let n = match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                mid_line = chunk[n - 1] != b'\n';
                if out.write_all(&chunk[..n]).await.is_err() || out.flush().await.is_err() {
                    return;
                }
            }
        }
    }
    if mid_line {
        // rmcp stopped in the middle of a line: end it so the answers stay parseable.
        let _ = out.write_all(b"\n").await;
    }
    while let Ok(answer) = answers.try_recv() {
        if write_line(&mut out, &answer).await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
}

async fn write_line<W: AsyncWrite + Unpin>(out: &mut W, line: &str) -> std::io::Result<()> {
    out.write_all(line.as_bytes()).await?;
    out.write_all(b"\n").await?;
    out.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(line: &str) -> Value {
        match judge(line.as_bytes()) {
            Verdict::Answer(a) => serde_json::from_str(&a).unwrap(),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn good_messages_are_forwarded() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ] {
            assert_eq!(judge(line.as_bytes()), Verdict::Forward, "{line}");
        }
    }

    #[test]
    fn unparsable_lines_are_parse_errors_with_null_id() {
        for line in [
            "hello",
            r#"{"jsonrpc":"2.0","id":7,"#,
            "{\"a\":\"\\ud800\"}",
        ] {
            let a = answer(line);
            assert_eq!(a["id"], Value::Null, "{a}");
            assert_eq!(a["error"]["code"], -32700, "{a}");
        }
        let bytes = b"{\"a\":\"\xff\"}";
        assert!(matches!(judge(bytes), Verdict::Answer(a) if a.contains("-32700")));
    }

    #[test]
    fn invalid_requests_carry_an_id() {
        let a = answer(r#"{"id":79,"method":"ping"}"#);
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (json!(79), json!(-32600))
        );
        for line in [
            "[]",
            "5",
            "{}",
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
        ] {
            let a = answer(line);
            assert!(a.as_object().unwrap().contains_key("id"), "{a}");
            assert_eq!(a["id"], Value::Null, "{a}");
            assert_eq!(a["error"]["code"], -32600, "{a}");
        }
    }

    #[test]
    fn unknown_methods_and_bad_tool_calls() {
        let long = "m".repeat(10_000);
        let a = answer(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{long}"}}"#));
        assert_eq!(a["error"]["code"], -32601);
        assert!(a["error"]["message"].as_str().unwrap().len() < 100, "{a}");
        for params in [r#"{}"#, r#"{"name":5}"#] {
            let a = answer(&format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{params}}}"#
            ));
            assert_eq!(a["id"], 2);
            assert_eq!(a["error"]["code"], -32602, "{a}");
            assert!(
                a["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("needs `name`")
            );
        }
        let a = answer(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":5}"#);
        assert_eq!(a["error"]["code"], -32602, "{a}");
        assert_eq!(
            clip("é".repeat(100).as_str()).chars().count(),
            NAME_CLIP + 1
        );
    }

    #[test]
    fn bad_notifications_are_not_answered() {
        assert!(matches!(
            judge(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#),
            Verdict::Drop(_) | Verdict::Forward
        ));
    }

    #[tokio::test]
    async fn answers_never_split_a_line_and_eof_reaches_rmcp() {
        let (mut client, server_in) = tokio::io::duplex(1 << 20);
        let (server_out, mut client_out) = tokio::io::duplex(1 << 20);
        let ((mut rmcp_in, mut rmcp_out), writer) = start_on(server_in, server_out);
        client
            .write_all(b"hello\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        drop(client);
        let mut forwarded = String::new();
        rmcp_in.read_to_string(&mut forwarded).await.unwrap();
        assert_eq!(
            forwarded,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
        );
        rmcp_out.write_all(b"{\"a\":").await.unwrap();
        tokio::task::yield_now().await;
        rmcp_out.write_all(b"1}\n").await.unwrap();
        drop(rmcp_out);
        writer.await.unwrap();
        let mut out = String::new();
        client_out.read_to_string(&mut out).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines.contains(&"{\"a\":1}"), "{out}");
        assert!(lines.iter().any(|l| l.contains("-32700")), "{out}");
    }
}
