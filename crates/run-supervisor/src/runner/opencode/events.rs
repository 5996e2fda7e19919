//! Parsing of `opencode run --format json` event lines.
//!
//! opencode 1.18.33 prints one JSON object per line with a `type` of `step_start`, `text`,
//! `reasoning`, `tool_use`, `step_finish` or `error`. Parsing is tolerant: unknown types are
//! kept (counted and remembered by name), malformed lines are counted, nothing is fatal.
//! [`RunSummary`] folds the lines of one run into what a caller needs: the session id, the
//! text the agent wrote, its tool calls, tokens, cost and error events.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::classify::ErrorEvent;
use bridge_proc::stream::HeadTail;

pub use bridge_ledger::TokenUsage;

pub use bridge_isolation::ToolCall;

/// Lines in a text as an editor counts them: `a\nb` and `a\nb\n` are two, the empty text none.
fn text_lines(s: &str) -> u64 {
    if s.is_empty() {
        0
    } else {
        s.lines().count() as u64
    }
}

/// The lines a file-writing tool call adds and removes, from its input as opencode prints it:
/// `write` `{filePath, content}` adds the content's lines (what it replaced is not in the input:
/// removed unknown); `edit` `{oldString, newString, replaceAll}` removes the old text's lines
/// and adds the new's (unknown with `replaceAll`, which may match many times); `multiedit`
/// `{edits: [...]}` sums its edits; `patch`/`apply_patch` `{patchText}` counts its hunks' `+`
/// and `-` lines. Anything else, or an input of another shape: `(None, None)`, never a made-up 0.
pub fn line_counts(tool: &str, input: &Value) -> (Option<u64>, Option<u64>) {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(text_lines);
    let edit = |v: &Value| -> (Option<u64>, Option<u64>) {
        if v.get("replaceAll").and_then(Value::as_bool) == Some(true) {
            return (None, None);
        }
        match (text(v, "newString"), text(v, "oldString")) {
            (Some(a), Some(r)) => (Some(a), Some(r)),
            _ => (None, None),
        }
    };
    match tool {
        "write" => (text(input, "content"), None),
        "edit" => edit(input),
        "multiedit" => {
            let Some(edits) = input.get("edits").and_then(Value::as_array) else {
                return (None, None);
            };
            edits
                .iter()
                .map(edit)
                .fold((Some(0), Some(0)), |(a, r), (ea, er)| {
                    (
                        a.zip(ea).map(|(x, y)| x.saturating_add(y)),
                        r.zip(er).map(|(x, y)| x.saturating_add(y)),
                    )
                })
        }
        "patch" | "apply_patch" => {
            let Some(patch) = input
                .get("patchText")
                .or_else(|| input.get("patch"))
                .and_then(Value::as_str)
            else {
                return (None, None);
            };
            let (mut a, mut r) = (0u64, 0u64);
            for l in patch.lines() {
                if l.starts_with("+++") || l.starts_with("---") || l.starts_with("***") {
                    continue;
                }
                if l.starts_with('+') {
                    a = a.saturating_add(1);
                } else if l.starts_with('-') {
                    r = r.saturating_add(1);
                }
            }
            (Some(a), Some(r))
        }
        _ => (None, None),
    }
}

/// One parsed line. Strings borrow from the line when they needed no unescaping (see
/// [`parse_line_bytes`]); [`Event::into_owned`] detaches them.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// `step_start`: a model call began (repeated with one messageID when opencode retries).
    StepStart {
        /// The assistant message id.
        message_id: Option<Cow<'a, str>>,
    },
    /// `text`: a complete text part.
    Text {
        /// The assistant message id.
        message_id: Option<Cow<'a, str>>,
        /// The text.
        text: Cow<'a, str>,
        /// opencode-generated text (e.g. the compaction continuation), not the model's words.
        synthetic: bool,
    },
    /// `reasoning`: a complete reasoning part (only printed with `--thinking`).
    Reasoning {
        /// The reasoning text.
        text: Cow<'a, str>,
    },
    /// `tool_use`: a completed or failed tool call.
    ToolUse(ToolCall),
    /// `step_finish`: a model call ended.
    StepFinish {
        /// The assistant message id.
        message_id: Option<Cow<'a, str>>,
        /// AI-SDK finish reason: `stop`, `tool-calls`, `length`, ...
        reason: Option<Cow<'a, str>>,
        /// Tokens of this step.
        tokens: TokenUsage,
        /// Cost of this step.
        cost: f64,
    },
    /// `error`: a session error.
    Error(ErrorEvent),
    /// A JSON object with a type this parser does not know.
    Unknown {
        /// The `type` field, or empty when missing.
        kind: Cow<'a, str>,
    },
}

fn owned(s: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(s.into_owned())
}

impl Event<'_> {
    /// The same event with every string owned.
    pub fn into_owned(self) -> Event<'static> {
        match self {
            Event::StepStart { message_id } => Event::StepStart {
                message_id: message_id.map(owned),
            },
            Event::Text {
                message_id,
                text,
                synthetic,
            } => Event::Text {
                message_id: message_id.map(owned),
                text: owned(text),
                synthetic,
            },
            Event::Reasoning { text } => Event::Reasoning { text: owned(text) },
            Event::ToolUse(call) => Event::ToolUse(call),
            Event::StepFinish {
                message_id,
                reason,
                tokens,
                cost,
            } => Event::StepFinish {
                message_id: message_id.map(owned),
                reason: reason.map(owned),
                tokens,
                cost,
            },
            Event::Error(e) => Event::Error(e),
            Event::Unknown { kind } => Event::Unknown { kind: owned(kind) },
        }
    }
}

/// A line together with the session id found in its envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedLine<'a> {
    /// `sessionID` of the envelope.
    pub session_id: Option<Cow<'a, str>>,
    /// The event.
    pub event: Event<'a>,
}

impl ParsedLine<'_> {
    /// The same line with every string owned.
    pub fn into_owned(self) -> ParsedLine<'static> {
        ParsedLine {
            session_id: self.session_id.map(owned),
            event: self.event.into_owned(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fast path: typed structs borrowing from the line, holding only the fields that are read.
// Anything of an unexpected shape makes the typed parse fail, and the line then takes the
// generic path below, which is the reference for what a line means.

/// A JSON string, borrowed from the line unless it had escapes.
#[derive(Deserialize)]
#[serde(transparent)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

fn cow(s: Option<Str<'_>>) -> Option<Cow<'_, str>> {
    s.map(|s| s.0)
}

/// A JSON object read into `T`. A derived struct would also accept an array (its fields by
/// position), which the generic reading never does.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

fn obj<T: Default>(o: Option<Obj<T>>) -> T {
    o.map(|o| o.0).unwrap_or_default()
}

#[derive(Deserialize)]
struct WireLine<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Str<'a>>,
    #[serde(rename = "sessionID", default, borrow)]
    session_id: Option<Str<'a>>,
    #[serde(default, borrow)]
    part: Option<Obj<WirePart<'a>>>,
    /// Kept as a value: [`parse_error`] accepts several shapes.
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WirePart<'a> {
    #[serde(rename = "messageID", default, borrow)]
    message_id: Option<Str<'a>>,
    #[serde(default, borrow)]
    text: Option<Str<'a>>,
    #[serde(default)]
    synthetic: Option<bool>,
    #[serde(default, borrow)]
    tool: Option<Str<'a>>,
    #[serde(default, borrow)]
    state: Option<Obj<WireState<'a>>>,
    #[serde(default, borrow)]
    reason: Option<Str<'a>>,
    #[serde(default)]
    tokens: Option<Obj<WireTokens>>,
    #[serde(default)]
    cost: Option<f64>,
}

#[derive(Deserialize, Default)]
struct WireState<'a> {
    #[serde(default, borrow)]
    status: Option<Str<'a>>,
    #[serde(default, borrow)]
    title: Option<Str<'a>>,
    #[serde(default, borrow)]
    error: Option<Str<'a>>,
    /// Read for the line counts of file-writing calls.
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WireTokens {
    #[serde(default)]
    input: Count,
    #[serde(default)]
    output: Count,
    #[serde(default)]
    reasoning: Count,
    #[serde(default)]
    cache: Option<Obj<WireCache>>,
}

#[derive(Deserialize, Default)]
struct WireCache {
    #[serde(default)]
    read: Count,
    #[serde(default)]
    write: Count,
}

/// A token count read the way the generic path reads one: a non-negative integer as is, a
/// float clamped at 0 and truncated, a negative number, a string, a boolean or null as 0.
/// Objects and arrays fail the typed parse (the generic path reads them as 0 too).
#[derive(Default)]
struct Count(u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a token count")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Count, E> {
                Ok(Count(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).unwrap_or(0)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Count, E> {
                Ok(Count(v.max(0.0) as u64))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_str<E>(self, _: &str) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_unit<E>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'a> WireLine<'a> {
    fn into_parsed(self) -> ParsedLine<'a> {
        let part = obj(self.part);
        let message_id = cow(part.message_id);
        let kind = cow(self.kind).unwrap_or(Cow::Borrowed(""));
        let event = match kind.as_ref() {
            "step_start" => Event::StepStart { message_id },
            "text" => Event::Text {
                message_id,
                text: cow(part.text).unwrap_or_default(),
                synthetic: part.synthetic == Some(true),
            },
            "reasoning" => Event::Reasoning {
                text: cow(part.text).unwrap_or_default(),
            },
            "tool_use" => {
                let state = obj(part.state);
                let tool = cow(part.tool).map_or_else(|| "?".to_owned(), Cow::into_owned);
                let (added, removed) = state
                    .input
                    .as_ref()
                    .map_or((None, None), |i| line_counts(&tool, i));
                Event::ToolUse(ToolCall {
                    tool,
                    status: cow(state.status).map_or_else(|| "?".to_owned(), Cow::into_owned),
                    title: cow(state.title).map(Cow::into_owned),
                    error: cow(state.error).map(Cow::into_owned),
                    added,
                    removed,
                })
            }
            "step_finish" => {
                let tokens = obj(part.tokens);
                let cache = obj(tokens.cache);
                Event::StepFinish {
                    message_id,
                    reason: cow(part.reason),
                    tokens: TokenUsage {
                        input: tokens.input.0,
                        output: tokens.output.0,
                        reasoning: tokens.reasoning.0,
                        cache_read: cache.read.0,
                        cache_write: cache.write.0,
                    },
                    cost: part.cost.unwrap_or(0.0),
                }
            }
            "error" => Event::Error(parse_error(self.error.as_ref().unwrap_or(&Value::Null))),
            _ => Event::Unknown { kind },
        };
        ParsedLine {
            session_id: cow(self.session_id),
            event,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The generic path: the whole line as a `serde_json::Value`.

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for key in path {
        cur = cur.get(key)?;
    }
    cur.as_str()
}

fn string_at(v: &Value, path: &[&str]) -> Option<Cow<'static, str>> {
    str_at(v, path).map(|s| Cow::Owned(s.to_owned()))
}

fn u64_at(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for key in path {
        match cur.get(key) {
            Some(next) => cur = next,
            None => return 0,
        }
    }
    cur.as_u64()
        .or_else(|| cur.as_f64().map(|f| f.max(0.0) as u64))
        .unwrap_or(0)
}

/// Parses a trimmed, non-blank line as a generic JSON value. `None` when it is not an object.
fn parse_generic(trimmed: &str) -> Option<ParsedLine<'static>> {
    let v: Value = serde_json::from_str(trimmed).ok()?;
    let obj = v.as_object()?;
    let session_id = obj
        .get("sessionID")
        .and_then(Value::as_str)
        .map(|s| Cow::Owned(s.to_owned()));
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("");
    let part = obj.get("part").unwrap_or(&Value::Null);
    let message_id = string_at(part, &["messageID"]);
    let event = match kind {
        "step_start" => Event::StepStart { message_id },
        "text" => Event::Text {
            message_id,
            text: string_at(part, &["text"]).unwrap_or_default(),
            synthetic: part.get("synthetic").and_then(Value::as_bool) == Some(true),
        },
        "reasoning" => Event::Reasoning {
            text: string_at(part, &["text"]).unwrap_or_default(),
        },
        "tool_use" => {
            let tool = str_at(part, &["tool"]).unwrap_or("?").to_owned();
            let (added, removed) = part
                .get("state")
                .and_then(|s| s.get("input"))
                .map_or((None, None), |i| line_counts(&tool, i));
            Event::ToolUse(ToolCall {
                tool,
                status: str_at(part, &["state", "status"]).unwrap_or("?").to_owned(),
                title: str_at(part, &["state", "title"]).map(str::to_owned),
                error: str_at(part, &["state", "error"]).map(str::to_owned),
                added,
                removed,
            })
        }
        "step_finish" => Event::StepFinish {
            message_id,
            reason: string_at(part, &["reason"]),
            tokens: TokenUsage {
                input: u64_at(part, &["tokens", "input"]),
                output: u64_at(part, &["tokens", "output"]),
                reasoning: u64_at(part, &["tokens", "reasoning"]),
                cache_read: u64_at(part, &["tokens", "cache", "read"]),
                cache_write: u64_at(part, &["tokens", "cache", "write"]),
            },
            cost: part.get("cost").and_then(Value::as_f64).unwrap_or(0.0),
        },
        "error" => Event::Error(parse_error(obj.get("error").unwrap_or(&Value::Null))),
        other => Event::Unknown {
            kind: Cow::Owned(other.to_owned()),
        },
    };
    Some(ParsedLine { session_id, event })
}

/// One output line, parsed but not yet folded into a summary. Parsing is the costly part of
/// reading a run's output; a caller can do it without holding whatever guards the summary,
/// then fold with [`RunSummary::push_read`]. Its strings borrow from the line's bytes (an
/// event's text is copied once, into the summary, not once more on the way);
/// [`ReadLine::into_owned`] detaches them.
#[derive(Debug)]
pub struct ReadLine<'a> {
    line: Line<'a>,
    /// Its text is in the summary's text buffer already ([`ReadLine::push_text_into`]).
    text_appended: bool,
}

impl ReadLine<'_> {
    /// Reads a raw output line (without its `\n`), as [`RunSummary::push_line_bytes`] does.
    pub fn read(line: &[u8]) -> ReadLine<'_> {
        ReadLine {
            line: classify_line(line),
            text_appended: false,
        }
    }

    /// The same line with every string owned.
    pub fn into_owned(self) -> ReadLine<'static> {
        ReadLine {
            line: match self.line {
                Line::Blank => Line::Blank,
                Line::Malformed => Line::Malformed,
                Line::Event(p) => Line::Event(p.into_owned()),
            },
            text_appended: self.text_appended,
        }
    }

    /// Appends the text of a (non-synthetic) text event to `text`, the buffer of
    /// [`RunSummary::text_buffer`] the line will be folded into, as folding it would; folding
    /// it with [`RunSummary::push_read`] then does the rest. The lines of one summary must be
    /// handled in order, each appended before it is folded. Appending is the costly part of
    /// folding a flood of text (a copy of every byte): a reader does it holding only the
    /// buffer's lock.
    pub fn push_text_into(&mut self, text: &mut HeadTail) {
        if let Line::Event(ParsedLine {
            event:
                Event::Text {
                    text: t,
                    synthetic: false,
                    ..
                },
            ..
        }) = &self.line
            && !self.text_appended
        {
            append_text(text, t);
            self.text_appended = true;
        }
    }
}

/// Appends one text part to the bounded text: parts are separated by blank lines.
fn append_text(buf: &mut HeadTail, text: &str) {
    if !buf.is_empty() {
        buf.push(b"\n\n");
    }
    buf.push(text.as_bytes());
}

/// What one line is.
#[derive(Debug)]
enum Line<'a> {
    /// Empty or whitespace only: not counted at all.
    Blank,
    /// Not a JSON object.
    Malformed,
    /// An event.
    Event(ParsedLine<'a>),
}

/// The generic reading of a line: trimmed (Unicode whitespace), parsed as a value.
fn classify_generic(text: &str) -> Line<'static> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Line::Blank;
    }
    match parse_generic(trimmed) {
        Some(p) => Line::Event(p),
        None => Line::Malformed,
    }
}

/// The typed reading of an ASCII-trimmed line. Only an object may take it (serde would also
/// read a struct from an array).
fn parse_typed(trimmed: &[u8]) -> Option<ParsedLine<'_>> {
    if trimmed.first() != Some(&b'{') {
        return None;
    }
    serde_json::from_slice::<WireLine<'_>>(trimmed)
        .ok()
        .map(WireLine::into_parsed)
}

/// Reads a line: typed from its bytes; failing that, decoded lossily as UTF-8 and read again,
/// typed then generic. A typed reading that succeeds means what the generic one would: the
/// ASCII trim leaves no other whitespace around a valid object, and the fields it skips are
/// never read. So the raw bytes and their lossy decoding always read the same.
fn classify_line(line: &[u8]) -> Line<'_> {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Line::Blank;
    }
    if let Some(p) = parse_typed(trimmed) {
        return Line::Event(p);
    }
    match std::str::from_utf8(line) {
        // The typed reading already failed on these very bytes.
        Ok(text) => classify_generic(text),
        Err(_) => {
            let text = String::from_utf8_lossy(line);
            if let Some(p) = parse_typed(text.as_bytes().trim_ascii()) {
                return Line::Event(p.into_owned());
            }
            classify_generic(&text)
        }
    }
}

/// Parses one line of `--format json` output. Returns `None` for a blank line or a line that
/// is not a JSON object (the caller counts it as malformed).
pub fn parse_line(line: &str) -> Option<ParsedLine<'_>> {
    parse_line_bytes(line.as_bytes())
}

/// Parses one raw line (without its `\n`) of `--format json` output, as the supervisor reads
/// it. Strings without escapes borrow from `line`.
///
/// The line is parsed straight from its bytes into structs that keep only the fields the
/// summary uses. When that fails (a field of an unexpected JSON type, duplicate keys, invalid
/// UTF-8 in a string or key, whitespace JSON does not allow), the line is decoded lossily as
/// UTF-8 (invalid bytes become U+FFFD), read that way again, and failing that parsed as a
/// generic JSON value; so a line reads the same as its lossy decoding. Fields that are skipped
/// are only checked for JSON syntax, so a line whose unused fields hold a lone surrogate
/// escape, a number beyond `f64` or nesting deeper than 128 is still an event. Returns `None`
/// for a blank line or a line that is not a JSON object.
pub fn parse_line_bytes(line: &[u8]) -> Option<ParsedLine<'_>> {
    match classify_line(line) {
        Line::Event(p) => Some(p),
        Line::Blank | Line::Malformed => None,
    }
}

/// Flattens an opencode error object. Accepts the NamedError shape `{name, data:{...}}`, a
/// plain `{message}` / `{type, message}` (later opencode versions), or a bare string.
pub fn parse_error(err: &Value) -> ErrorEvent {
    let data = err.get("data").filter(|d| d.is_object()).unwrap_or(err);
    let name = err
        .get("name")
        .and_then(Value::as_str)
        .or_else(|| err.get("type").and_then(Value::as_str))
        .unwrap_or("Error")
        .to_owned();
    let message = data
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| err.as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            if err.is_null() {
                String::new()
            } else {
                err.to_string()
            }
        });
    ErrorEvent {
        name,
        message,
        status_code: data
            .get("statusCode")
            .or_else(|| data.get("status"))
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok()),
        is_retryable: data.get("isRetryable").and_then(Value::as_bool),
        response_body: data
            .get("responseBody")
            .and_then(Value::as_str)
            .map(str::to_owned),
        raw: err.clone(),
    }
}

/// Bytes of [`RunSummary::final_text`] kept at most.
pub const FINAL_CAP: usize = 400_000;

/// Appends the longest prefix of `add` that keeps `s` within `cap` bytes and ends on a
/// character boundary. Never grows `s` past `cap` (see [`bridge_proc::stream::grown_capacity`]).
fn push_capped(s: &mut String, add: &str, cap: usize) {
    let room = cap.saturating_sub(s.len());
    let mut n = add.len().min(room);
    while !add.is_char_boundary(n) {
        n -= 1;
    }
    if n == 0 {
        return;
    }
    let need = s.len() + n;
    if need > s.capacity() {
        let target = bridge_proc::stream::grown_capacity(s.capacity(), need, cap);
        s.reserve_exact(target - s.len());
    }
    s.push_str(&add[..n]);
}

/// The bounded text of a [`RunSummary`], behind a lock of its own; clones share it.
#[derive(Debug, Clone)]
pub struct TextBuffer(Arc<Mutex<HeadTail>>);

impl TextBuffer {
    /// The buffer, locked.
    pub fn lock(&self) -> MutexGuard<'_, HeadTail> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// [`HeadTail::to_string_lossy`] of the buffer.
    pub fn to_string_lossy(&self) -> String {
        self.lock().to_string_lossy()
    }
    /// [`HeadTail::total_bytes`] of the buffer.
    pub fn total_bytes(&self) -> u64 {
        self.lock().total_bytes()
    }
}

/// Everything learnt from the event lines of one run (one attempt).
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The root session id.
    session_id: Option<String>,
    /// Every event line count by kind.
    events: usize,
    /// Lines that were not JSON objects.
    malformed: usize,
    /// Lines with a type this parser does not know, by type name (first 20 distinct names).
    unknown_types: Vec<String>,
    /// Count of lines with unknown types.
    unknown: usize,
    /// `step_start` count.
    steps: usize,
    /// Tool calls in order.
    tool_calls: Vec<ToolCall>,
    /// Error events in order.
    errors: Vec<ErrorEvent>,
    /// `ContextOverflowError` events seen.
    overflows: usize,
    /// Token totals.
    tokens: TokenUsage,
    /// Cost total.
    cost: f64,
    /// Finish reason of the last `step_finish`.
    last_finish_reason: Option<String>,
    /// True when a `step_finish` came after the last error event (the run recovered).
    finished_after_error: bool,
    /// Text the model wrote (non-synthetic text parts, separated by blank lines), bounded.
    /// Behind a lock of its own, so a reader of a run's output can append an event's text
    /// without holding whatever guards the rest of the summary ([`ReadLine::push_text_into`]).
    text: TextBuffer,
    /// The text parts of the last assistant message that had text.
    final_text: String,
    final_message: Option<String>,
    /// True when any non-synthetic text or any tool call was seen (drives the retry rule).
    produced_output: bool,
    /// The output ended in the middle of a line that is not a whole event: opencode exited
    /// before everything it printed was read, and the end of its events is lost.
    ended_mid_line: bool,
}

impl RunSummary {
    /// An empty summary whose text buffer keeps at most `text_cap` bytes.
    pub fn new(text_cap: usize) -> Self {
        RunSummary {
            session_id: None,
            events: 0,
            malformed: 0,
            unknown_types: Vec::new(),
            unknown: 0,
            steps: 0,
            tool_calls: Vec::new(),
            errors: Vec::new(),
            overflows: 0,
            tokens: TokenUsage::default(),
            cost: 0.0,
            last_finish_reason: None,
            finished_after_error: false,
            text: TextBuffer(Arc::new(Mutex::new(HeadTail::new(text_cap)))),
            final_text: String::new(),
            final_message: None,
            produced_output: false,
            ended_mid_line: false,
        }
    }

    /// The root session id.
    pub fn session_id(&self) -> &Option<String> {
        &self.session_id
    }
    /// Every event line count by kind.
    pub fn events(&self) -> usize {
        self.events
    }
    /// Lines that were not JSON objects (or were too long to read).
    pub fn malformed(&self) -> usize {
        self.malformed
    }
    /// Lines with a type the parser does not know, by type name (first 20 distinct names).
    pub fn unknown_types(&self) -> &[String] {
        &self.unknown_types
    }
    /// Count of lines with unknown types.
    pub fn unknown(&self) -> usize {
        self.unknown
    }
    /// Steps (opencode `step_start`, Claude Code assistant messages).
    pub fn steps(&self) -> usize {
        self.steps
    }
    /// Tool calls in order.
    pub fn tool_calls(&self) -> &Vec<ToolCall> {
        &self.tool_calls
    }
    /// Error events in order.
    pub fn errors(&self) -> &[ErrorEvent] {
        &self.errors
    }
    /// `ContextOverflowError` events seen.
    pub fn overflows(&self) -> usize {
        self.overflows
    }
    /// Token totals.
    pub fn tokens(&self) -> TokenUsage {
        self.tokens
    }
    /// Cost total.
    pub fn cost(&self) -> f64 {
        self.cost
    }
    /// Finish reason of the last step.
    pub fn last_finish_reason(&self) -> &Option<String> {
        &self.last_finish_reason
    }
    /// True when a step finished after the last error event (the run recovered).
    pub fn finished_after_error(&self) -> bool {
        self.finished_after_error
    }
    /// Text the model wrote (non-synthetic text parts, separated by blank lines), bounded.
    /// The buffer is locked while the guard lives (the lock is not reentrant: one guard at a
    /// time).
    pub fn text(&self) -> MutexGuard<'_, HeadTail> {
        self.text.lock()
    }
    /// The text buffer itself, for [`ReadLine::push_text_into`].
    pub fn text_buffer(&self) -> TextBuffer {
        self.text.clone()
    }
    /// The text parts of the last assistant message that had text, at most [`FINAL_CAP`]
    /// bytes.
    pub fn final_text(&self) -> &str {
        &self.final_text
    }
    /// True when any non-synthetic text or any tool call was seen (drives the retry rule).
    pub fn produced_output(&self) -> bool {
        self.produced_output
    }
    /// The output ended in the middle of a line that is not a whole event.
    pub fn ended_mid_line(&self) -> bool {
        self.ended_mid_line
    }

    /// Counts one event line; the first session id seen is kept.
    pub fn note_event(&mut self, session_id: Option<&str>) {
        self.events += 1;
        if self.session_id.is_none() {
            self.session_id = session_id.map(str::to_owned);
        }
    }
    /// Counts a line that is not an event (or too long to read).
    pub fn note_malformed(&mut self) {
        self.malformed += 1;
    }
    /// Counts a line of an unknown type (its name kept among the first 20).
    pub fn note_unknown(&mut self, kind: &str) {
        self.unknown += 1;
        if self.unknown_types.len() < 20 && !self.unknown_types.iter().any(|k| k == kind) {
            self.unknown_types.push(kind.to_owned());
        }
    }
    /// Counts a step.
    pub fn note_step(&mut self) {
        self.steps += 1;
    }
    /// Sets the session id learnt elsewhere (opencode's store) when none is known yet. True
    /// when it was taken.
    pub fn learn_session_id(&mut self, id: &str) -> bool {
        if self.session_id.is_some() {
            return false;
        }
        self.session_id = Some(id.to_owned());
        true
    }
    /// Notes that the output ended mid-line.
    pub fn note_ended_mid_line(&mut self) {
        self.ended_mid_line = true;
    }
    /// Adds a text part the model wrote in message `message_id`: to the bounded text, and to
    /// the final text (parts of one message joined by blank lines; a new message starts it
    /// anew), capped at [`FINAL_CAP`] bytes.
    pub fn push_text(&mut self, message_id: Option<&str>, text: &str) {
        append_text(&mut self.text(), text);
        self.note_text(message_id, text);
    }

    /// [`push_text`](Self::push_text) of a text already appended to the text buffer.
    fn note_text(&mut self, message_id: Option<&str>, text: &str) {
        self.produced_output = true;
        if message_id.is_some() && message_id == self.final_message.as_deref() {
            if !self.final_text.is_empty() {
                push_capped(&mut self.final_text, "\n\n", FINAL_CAP);
            }
            push_capped(&mut self.final_text, text, FINAL_CAP);
        } else {
            self.final_message = message_id.map(str::to_owned);
            self.final_text.clear();
            push_capped(&mut self.final_text, text, FINAL_CAP);
        }
    }
    /// Replaces the final text (a runner's own final answer), capped at [`FINAL_CAP`] bytes.
    pub fn set_final_text(&mut self, text: &str) {
        self.final_text.clear();
        push_capped(&mut self.final_text, text, FINAL_CAP);
    }
    /// Adds a tool call.
    pub fn push_tool_call(&mut self, call: ToolCall) {
        self.produced_output = true;
        self.tool_calls.push(call);
    }
    /// Adds a tool call that is not the model's output (a result whose call was not seen).
    pub fn push_tool_result(&mut self, call: ToolCall) {
        self.tool_calls.push(call);
    }
    /// Notes that the model produced output without text or a finished tool call (a tool
    /// call started).
    pub fn note_output(&mut self) {
        self.produced_output = true;
    }
    /// Sets the run's totals (a runner that reports them once, at the end).
    pub fn set_totals(&mut self, tokens: TokenUsage, cost: f64, finish_reason: Option<String>) {
        self.tokens = tokens;
        self.cost = cost;
        self.last_finish_reason = finish_reason;
    }

    /// Folds one output line into the summary. Returns true if it was a valid event.
    pub fn push_line(&mut self, line: &str) -> bool {
        self.push_line_bytes(line.as_bytes())
    }

    /// Folds a line read with [`ReadLine::read`]: the same as [`push_line_bytes`] on its
    /// bytes.
    ///
    /// [`push_line_bytes`]: RunSummary::push_line_bytes
    pub fn push_read(&mut self, line: ReadLine<'_>) -> bool {
        self.push_classified(line.line, line.text_appended)
    }

    fn push_classified(&mut self, line: Line<'_>, text_appended: bool) -> bool {
        match line {
            Line::Blank => false,
            Line::Malformed => {
                self.malformed += 1;
                false
            }
            Line::Event(parsed) => {
                self.push_event(parsed, text_appended);
                true
            }
        }
    }

    /// Folds one raw output line (without its `\n`) into the summary, parsed as
    /// [`parse_line_bytes`] does. Returns true if it was a valid event; blank lines are not
    /// counted, other lines that are not events count as malformed.
    pub fn push_line_bytes(&mut self, line: &[u8]) -> bool {
        self.push_classified(classify_line(line), false)
    }

    /// Folds one parsed event into the summary.
    pub fn push(&mut self, parsed: ParsedLine<'_>) {
        self.push_event(parsed, false);
    }

    /// [`push`](Self::push); `text_appended` when a text event's text is in the text buffer
    /// already.
    fn push_event(&mut self, parsed: ParsedLine<'_>, text_appended: bool) {
        self.note_event(parsed.session_id.as_deref());
        match parsed.event {
            Event::StepStart { .. } => self.steps += 1,
            Event::Text {
                message_id,
                text,
                synthetic,
            } => {
                if synthetic {
                    return;
                }
                if text_appended {
                    self.note_text(message_id.as_deref(), &text);
                } else {
                    self.push_text(message_id.as_deref(), &text);
                }
            }
            Event::Reasoning { .. } => {}
            Event::ToolUse(call) => self.push_tool_call(call),
            Event::StepFinish {
                reason,
                tokens,
                cost,
                ..
            } => {
                self.tokens.input = self.tokens.input.saturating_add(tokens.input);
                self.tokens.output = self.tokens.output.saturating_add(tokens.output);
                self.tokens.reasoning = self.tokens.reasoning.saturating_add(tokens.reasoning);
                self.tokens.cache_read = self.tokens.cache_read.saturating_add(tokens.cache_read);
                self.tokens.cache_write =
                    self.tokens.cache_write.saturating_add(tokens.cache_write);
                self.cost += cost;
                self.last_finish_reason = reason.map(Cow::into_owned);
                if !self.errors.is_empty() {
                    self.finished_after_error = true;
                }
            }
            Event::Error(err) => {
                if err.name == "ContextOverflowError" {
                    self.overflows += 1;
                }
                self.finished_after_error = false;
                self.errors.push(err);
            }
            Event::Unknown { kind } => self.note_unknown(&kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_writing_inputs_give_line_counts_and_other_inputs_none() {
        use serde_json::json;
        assert_eq!(
            line_counts(
                "write",
                &json!({"filePath": "/p/a", "content": "a\nb\nc\n"})
            ),
            (Some(3), None)
        );
        assert_eq!(
            line_counts("write", &json!({"filePath": "/p/a", "content": ""})),
            (Some(0), None)
        );
        assert_eq!(
            line_counts(
                "edit",
                &json!({"filePath": "/p/a", "oldString": "x", "newString": "y\nz"})
            ),
            (Some(2), Some(1))
        );
        assert_eq!(
            line_counts(
                "edit",
                &json!({"oldString": "x", "newString": "y", "replaceAll": true})
            ),
            (None, None)
        );
        assert_eq!(
            line_counts(
                "multiedit",
                &json!({"edits": [{"oldString": "a", "newString": "b\nc"},
                                  {"oldString": "d\ne\nf", "newString": ""}]})
            ),
            (Some(2), Some(4))
        );
        assert_eq!(
            line_counts(
                "multiedit",
                &json!({"edits": [{"oldString": "a", "newString": "b"}, {"oldString": 3}]})
            ),
            (None, None)
        );
        let patch =
            "*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n+more\n ctx\n*** End Patch";
        assert_eq!(
            line_counts("apply_patch", &json!({"patchText": patch})),
            (Some(2), Some(1))
        );
        let diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(
            line_counts("patch", &json!({"patchText": diff})),
            (Some(1), Some(1))
        );
        assert_eq!(
            line_counts("edit", &json!({"filePath": "/p/a"})),
            (None, None)
        );
        assert_eq!(line_counts("bash", &json!({"command": "ls"})), (None, None));
        assert_eq!(line_counts("write", &json!("not an object")), (None, None));
    }

    /// Both readings of a `tool_use` line (the typed fast path, and the generic one a field of
    /// an odd shape sends it to) read the same counts from `state.input`.
    #[test]
    fn a_tool_use_line_carries_its_line_counts_on_both_paths() {
        let line = r#"{"type":"tool_use","sessionID":"ses_x","part":{"type":"tool","tool":"edit","callID":"c1","state":{"status":"completed","title":"tmp/p/a.txt","input":{"filePath":"/tmp/p/a.txt","oldString":"one","newString":"two\nthree"},"output":""}}}"#;
        let calls: Vec<ToolCall> = [
            line.to_owned(),
            line.replace(r#""callID""#, r#""cost":"odd","callID""#),
        ]
        .iter()
        .filter_map(|l| match parse_line(l)?.event {
            Event::ToolUse(c) => Some(c),
            _ => None,
        })
        .collect();
        assert_eq!(calls.len(), 2, "{calls:?}");
        for c in calls {
            assert_eq!(
                (c.tool.as_str(), c.added, c.removed),
                ("edit", Some(2), Some(1))
            );
        }
    }

    const OK: &str = r#"{"type":"step_start","timestamp":1795987894648,"sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","part":{"id":"prt_229387128001ee7XDgttLwT9qO","messageID":"msg_229386e810015j1NoE4gjBjvD6","sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","type":"step-start"}}
{"type":"text","timestamp":1795987894648,"sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","part":{"id":"prt_22938712d0013t39dQOusCuf5Q","messageID":"msg_229386e810015j1NoE4gjBjvD6","sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","type":"text","text":"Hello from the fake. DONE","time":{"start":1795987894573,"end":1795987894581}}}
{"type":"step_finish","timestamp":1795987894648,"sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","part":{"id":"prt_22938713e001AlUlRVB5wMKRUd","reason":"stop","messageID":"msg_229386e810015j1NoE4gjBjvD6","sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","type":"step-finish","tokens":{"total":13,"input":8,"output":3,"reasoning":0,"cache":{"write":0,"read":2}},"cost":0}}"#;

    fn fold(lines: &str) -> RunSummary {
        let mut s = RunSummary::new(1 << 20);
        for l in lines.lines() {
            s.push_line(l);
        }
        s
    }

    #[test]
    fn token_totals_saturate_instead_of_overflowing() {
        // Found by the event_lines fuzz target: two steps with huge token counts overflowed
        // the sums (a panic in debug builds, a wrapped total in release).
        let huge = r#"{"type":"step_finish","sessionID":"ses_x","part":{"type":"step-finish","reason":"stop","tokens":{"input":18446744073709551615,"output":18446744073709551615,"reasoning":18446744073709551615,"cache":{"write":18446744073709551615,"read":18446744073709551615}},"cost":0}}"#;
        let s = fold(&format!("{huge}\n{huge}"));
        assert_eq!(s.tokens.input, u64::MAX);
        assert_eq!(s.tokens.output, u64::MAX);
        assert_eq!(s.tokens.cache_read, u64::MAX);
    }

    #[test]
    fn ok_run_gives_session_text_and_tokens() {
        let s = fold(OK);
        assert_eq!(
            s.session_id.as_deref(),
            Some("ses_dd6c79b73ffeIE4YH7L0iDzO0Q")
        );
        assert_eq!(s.final_text, "Hello from the fake. DONE");
        assert_eq!(s.steps, 1);
        assert_eq!(
            s.tokens,
            TokenUsage {
                input: 8,
                output: 3,
                reasoning: 0,
                cache_read: 2,
                cache_write: 0
            }
        );
        assert_eq!(s.last_finish_reason.as_deref(), Some("stop"));
        assert!(s.errors.is_empty());
        assert!(s.produced_output);
        assert_eq!(s.malformed, 0);
    }

    #[test]
    fn tool_call_and_rejected_permission_are_recognised() {
        let line = r#"{"type":"tool_use","timestamp":1795987936729,"sessionID":"ses_x","part":{"type":"tool","tool":"read","callID":"call_abc123","state":{"status":"error","input":{"filePath":"/nonexistent/file.txt"},"error":"The user rejected permission to use this specific tool call.","time":{"start":1,"end":2}},"id":"prt_1","sessionID":"ses_x","messageID":"msg_1"}}"#;
        let s = fold(line);
        assert_eq!(s.tool_calls.len(), 1);
        assert_eq!(s.tool_calls[0].tool, "read");
        assert!(s.tool_calls[0].permission_rejected());
        let bash = r#"{"type":"tool_use","timestamp":1,"sessionID":"ses_x","part":{"type":"tool","tool":"bash","callID":"c","state":{"status":"completed","input":{"command":"echo hi"},"output":"hi\n","title":"echo hi","time":{"start":1,"end":2}},"id":"p","sessionID":"ses_x","messageID":"m"}}"#;
        let s = fold(bash);
        assert_eq!(s.tool_calls[0].title.as_deref(), Some("echo hi"));
        assert!(!s.tool_calls[0].permission_rejected());
    }

    #[test]
    fn api_error_fields_are_flattened() {
        let line = r#"{"type":"error","timestamp":1795988217684,"sessionID":"ses_dd6c2b6d0ffeSk14Avuy6dSi6X","error":{"name":"APIError","data":{"message":"Rate limit reached for requests","statusCode":429,"isRetryable":true,"responseHeaders":{"retry-after-ms":"50"},"responseBody":"{\"error\": {\"message\": \"Rate limit reached for requests\", \"type\": \"requests\", \"code\": \"rate_limit_exceeded\"}}","metadata":{"url":"http://127.0.0.1:18556/v1/chat/completions"}}}}"#;
        let s = fold(line);
        let e = &s.errors[0];
        assert_eq!(e.name, "APIError");
        assert_eq!(e.status_code, Some(429));
        assert_eq!(e.is_retryable, Some(true));
        assert!(
            e.response_body
                .as_deref()
                .unwrap()
                .contains("rate_limit_exceeded")
        );
        assert!(!s.produced_output);
    }

    #[test]
    fn recovery_after_overflow_is_noticed() {
        let lines = r#"{"type":"error","timestamp":1,"sessionID":"ses_a","error":{"name":"ContextOverflowError","data":{"message":"This model's maximum context length is 128000 tokens."}}}
{"type":"step_start","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_c","type":"step-start"}}
{"type":"text","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_c","type":"text","text":"Fake title"}}
{"type":"step_finish","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_c","reason":"stop","type":"step-finish","tokens":{"input":5,"output":2},"cost":0}}
{"type":"text","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_d","type":"text","synthetic":true,"metadata":{"compaction_continue":true},"text":"The previous request exceeded"}}
{"type":"step_start","timestamp":3,"sessionID":"ses_a","part":{"messageID":"msg_e","type":"step-start"}}
{"type":"text","timestamp":3,"sessionID":"ses_a","part":{"messageID":"msg_e","type":"text","text":"Hello from the fake. DONE"}}
{"type":"step_finish","timestamp":3,"sessionID":"ses_a","part":{"messageID":"msg_e","reason":"stop","type":"step-finish","tokens":{"input":8,"output":3,"cache":{"read":2}},"cost":0.5}}"#;
        let s = fold(lines);
        assert_eq!(s.overflows, 1);
        assert!(s.finished_after_error);
        assert_eq!(s.final_text, "Hello from the fake. DONE");
        assert!(
            !s.text
                .to_string_lossy()
                .contains("previous request exceeded")
        );
        assert_eq!(s.tokens.input, 13);
        assert!((s.cost - 0.5).abs() < 1e-9);
    }

    #[test]
    fn unknown_and_malformed_lines_are_counted_not_fatal() {
        let lines = "not json\n{\"type\":\"done\",\"sessionID\":\"ses_q\"}\n[1,2]\n\n{\"type\":\"text\",\"part\":{\"text\":\"x\",\"messageID\":\"m\"}}";
        let s = fold(lines);
        assert_eq!(s.malformed, 2);
        assert_eq!(s.unknown, 1);
        assert_eq!(s.unknown_types, vec!["done".to_owned()]);
        assert_eq!(s.session_id.as_deref(), Some("ses_q"));
        assert_eq!(s.final_text, "x");
    }

    #[test]
    fn several_text_parts_of_the_last_message_make_the_final_text() {
        let lines = r#"{"type":"text","sessionID":"s","part":{"messageID":"m1","text":"first"}}
{"type":"text","sessionID":"s","part":{"messageID":"m2","text":"second"}}
{"type":"text","sessionID":"s","part":{"messageID":"m2","text":"third"}}"#;
        let s = fold(lines);
        assert_eq!(s.final_text, "second\n\nthird");
        assert_eq!(s.text.to_string_lossy(), "first\n\nsecond\n\nthird");
    }

    fn text_of<'a>(p: &ParsedLine<'a>) -> Cow<'a, str> {
        match &p.event {
            Event::Text { text, .. } => text.clone(),
            other => panic!("not a text event: {other:?}"),
        }
    }

    #[test]
    fn plain_text_is_borrowed_and_escaped_text_is_decoded() {
        let plain =
            br#"{"type":"text","sessionID":"ses_b","part":{"messageID":"m","text":"just words"}}"#;
        let p = parse_line_bytes(plain).unwrap();
        assert!(matches!(text_of(&p), Cow::Borrowed("just words")), "{p:?}");
        assert!(matches!(p.session_id, Some(Cow::Borrowed("ses_b"))));

        let escaped = br#"{"type":"text","sessionID":"ses_b","part":{"messageID":"m","text":"say \"hi\"\n\u00e9\ud83d\ude00"}}"#;
        let p = parse_line_bytes(escaped).unwrap();
        let text = text_of(&p);
        assert!(matches!(text, Cow::Owned(_)));
        assert_eq!(text, "say \"hi\"\né😀");
    }

    #[test]
    fn invalid_utf8_in_the_text_is_replaced_as_before() {
        let mut line =
            br#"{"type":"text","sessionID":"ses_u","part":{"messageID":"m","text":"ab"#.to_vec();
        line.push(0xff);
        line.extend_from_slice(br#"cd"}}"#);
        let mut s = RunSummary::new(1 << 20);
        assert!(s.push_line_bytes(&line));
        assert_eq!(s.final_text, "ab\u{fffd}cd");
        assert_eq!(s.malformed, 0);
        assert_eq!(s.session_id.as_deref(), Some("ses_u"));
        // The same as folding the lossily decoded line.
        let mut lossy = RunSummary::new(1 << 20);
        assert!(lossy.push_line(&String::from_utf8_lossy(&line)));
        assert_eq!(lossy.final_text, s.final_text);
    }

    #[test]
    fn invalid_utf8_in_an_unused_field_keeps_the_event_and_its_borrowed_text() {
        let mut line = br#"{"type":"text","timestamp":"t"#.to_vec();
        line.push(0xfe);
        line.extend_from_slice(br#"","sessionID":"ses_v","part":{"id":"prt_"#);
        line.push(0xc3);
        line.extend_from_slice(br#"","messageID":"m","text":"kept"}}"#);
        let p = parse_line_bytes(&line).expect("an event");
        assert!(matches!(text_of(&p), Cow::Borrowed("kept")));
        let mut s = RunSummary::new(1 << 20);
        assert!(s.push_line_bytes(&line));
        assert_eq!(s.final_text, "kept");
        assert_eq!(s.malformed, 0);
    }

    #[test]
    fn crlf_blank_and_odd_whitespace_lines() {
        let mut s = RunSummary::new(1 << 20);
        let crlf = b"{\"type\":\"text\",\"sessionID\":\"s\",\"part\":{\"messageID\":\"m\",\"text\":\"one\"}}\r";
        assert!(s.push_line_bytes(crlf));
        for blank in [
            &b""[..],
            b" \t ",
            b"\r",
            b"\x0b\x0c",
            "\u{a0}\u{2028}".as_bytes(),
        ] {
            assert!(!s.push_line_bytes(blank), "{blank:?}");
        }
        assert_eq!(s.malformed, 0);
        // Unicode whitespace around an object is trimmed, as the generic reading always did.
        let nbsp =
            "\u{a0}{\"type\":\"text\",\"part\":{\"messageID\":\"m\",\"text\":\"two\"}}\u{a0}";
        assert!(s.push_line_bytes(nbsp.as_bytes()));
        assert!(!s.push_line_bytes(b"{\"type\":\"text\"} trailing"));
        assert_eq!(s.events, 2);
        assert_eq!(s.malformed, 1);
        assert_eq!(s.final_text, "one\n\ntwo");
    }

    #[test]
    fn typed_and_generic_readings_agree() {
        let lines: Vec<&str> = OK
            .lines()
            .chain([
                r#"{"type":5,"sessionID":"s"}"#,
                r#"{"type":null,"sessionID":7}"#,
                r#"{"type":"text","part":"not an object"}"#,
                r#"{"type":"text","part":null,"sessionID":null}"#,
                r#"{"type":"text","part":{"messageID":"m","text":null}}"#,
                r#"{"type":"text","part":{"messageID":"m","text":5,"synthetic":"yes"}}"#,
                r#"{"type":"text","part":{"messageID":"m","text":"x","synthetic":true}}"#,
                r#"{"type":"text","part":{"messageID":"m","text":"x","synthetic":false}}"#,
                r#"{"type":"text","part":{"messageID":7,"text":"x","synthetic":null}}"#,
                r#"{"type":"step_start","part":{"messageID":"m","text":5}}"#,
                r#"{"type":"text","type":"reasoning","part":{"text":"dup"}}"#,
                r#"{"type":"text","part":{"text":"a"},"part":{"text":"b"}}"#,
                r#"{"typ\u0065":"text","part":{"t\u0065xt":"escaped keys","messageID":"m\"q"}}"#,
                r#"{"type":"reasoning","part":{"text":"hmm"}}"#,
                r#"{"type":"step_finish","part":{"reason":"stop","tokens":{"input":3.7,"output":-5,"reasoning":"12","cache":{"read":null,"write":true}},"cost":2}}"#,
                r#"{"type":"step_finish","part":{"tokens":{"input":1e300,"output":-1.5,"cache":null},"cost":null}}"#,
                r#"{"type":"step_finish","part":{"tokens":{"input":{"n":1},"output":[1]},"cost":"free"}}"#,
                r#"{"type":"step_finish","part":{"tokens":null,"reason":null}}"#,
                r#"{"type":"step_finish","part":{"tokens":"many"}}"#,
                r#"{"type":"tool_use","part":{"tool":"bash","state":{"status":"completed","title":"ls","output":"big","input":{"command":"ls"}}}}"#,
                r#"{"type":"tool_use","part":{"tool":null,"state":null}}"#,
                r#"{"type":"tool_use","part":{"tool":"read","state":{"status":"error","error":{"nested":true}}}}"#,
                r#"{"type":"error","error":"plain string"}"#,
                r#"{"type":"error","error":null}"#,
                r#"{"type":"error"}"#,
                r#"{"type":"error","error":{"name":"APIError","data":{"message":"m","statusCode":429,"isRetryable":true}}}"#,
                r#"{"type":"text","error":{"name":"x"},"part":{"messageID":"m","text":"not an error event"}}"#,
                r#"{"type":"brand_new","sessionID":"s","part":{"anything":[1,{"a":null}]}}"#,
                r#"{"type":"text","part":["m","hello"]}"#,
                r#"{"type":"text","part":[]}"#,
                r#"{"type":"tool_use","part":{"tool":"bash","state":["completed","t"]}}"#,
                r#"{"type":"step_finish","part":{"tokens":[1,2,3,[4,5]]}}"#,
                r#"{"type":"step_finish","part":{"tokens":{"input":1,"cache":[7,8]}}}"#,
                r#"{}"#,
                r#"[]"#,
                r#"[{"type":"text"}]"#,
                r#""text""#,
                r#"{"type":"text""#,
                r#"{"type":"text"}}"#,
                "\u{a0}{\"type\":\"text\",\"part\":{\"text\":\"nbsp\"}}",
            ])
            .collect();
        for line in lines {
            let typed = parse_line_bytes(line.as_bytes()).map(ParsedLine::into_owned);
            let generic = match classify_generic(line) {
                Line::Event(p) => Some(p),
                Line::Blank | Line::Malformed => None,
            };
            assert_eq!(typed, generic, "readings differ for {line}");
        }
    }

    #[test]
    fn token_counts_follow_the_generic_rules() {
        let line = br#"{"type":"step_finish","part":{"tokens":{"input":3.7,"output":-5,"reasoning":"12","cache":{"read":9,"write":null}},"cost":2}}"#;
        let Some(ParsedLine {
            event: Event::StepFinish { tokens, cost, .. },
            ..
        }) = parse_line_bytes(line)
        else {
            panic!("not a step_finish");
        };
        assert_eq!(
            tokens,
            TokenUsage {
                input: 3,
                output: 0,
                reasoning: 0,
                cache_read: 9,
                cache_write: 0
            }
        );
        assert!((cost - 2.0).abs() < 1e-12);
    }

    #[test]
    fn final_text_is_capped_on_a_character_boundary() {
        let big = format!("a{}", "é".repeat(250_000)); // 500,001 bytes
        let line = |msg: &str, text: &str| {
            serde_json::json!({"type":"text","part":{"messageID":msg,"text":text}}).to_string()
        };
        let mut s = RunSummary::new(1 << 20);
        assert!(s.push_line(&line("m1", &big)));
        // Byte 400,000 falls inside an 'é' (they start at odd offsets): cut before it.
        assert_eq!(s.final_text.len(), 399_999);
        assert!(s.final_text.capacity() <= FINAL_CAP);
        // More parts of the same message add only what fits: the separator's first byte.
        assert!(s.push_line(&line("m1", "more")));
        assert_eq!(s.final_text.len(), 400_000);
        assert!(s.final_text.ends_with("é\n"));
        // A new message starts over.
        assert!(s.push_line(&line("m2", "fresh")));
        assert_eq!(s.final_text, "fresh");
        assert_eq!(s.text.total_bytes(), 500_001 + 2 + 4 + 2 + 5);
    }

    #[test]
    fn raw_bytes_and_their_lossy_decoding_read_the_same() {
        // Found by the event_lines fuzz target: an invalid key made the raw typed reading
        // fail, and the generic one refused the out-of-range number the typed reading of the
        // lossy text skips.
        let mut lines: Vec<Vec<u8>> = vec![
            b"{\"type\xff\xffns\":-1e3008}".to_vec(),
            b"{\"type\":\"text\",\"x\xfe\":\"\\ud800\",\"part\":{\"text\":\"t\"}}".to_vec(),
            b"{\"type\":\"text\",\"part\":{\"text\":\"a\xffb\"},\"n\":1e999}".to_vec(),
            b"\xff{\"type\":\"text\"}".to_vec(),
        ];
        lines.push("\u{a0}{\"type\":\"text\",\"n\":1e999}".as_bytes().to_vec());
        for line in &lines {
            let lossy = String::from_utf8_lossy(line);
            let raw = parse_line_bytes(line).map(ParsedLine::into_owned);
            assert_eq!(
                raw,
                parse_line(&lossy).map(ParsedLine::into_owned),
                "{lossy}"
            );
        }
        assert!(
            parse_line_bytes(&lines[0]).is_some(),
            "the typed reading skips the number"
        );
    }
}
