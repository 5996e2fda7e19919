//! Bad input through the real binary: hundreds of malformed tool arguments, generated from the
//! published schemas (wrong types, missing required fields, out-of-range numbers, bad enum
//! values, huge strings, NUL bytes, unknown fields, a wrong `arguments` type), and garbage
//! JSON-RPC lines: lines that are not JSON (-32700, id null), invalid requests (-32600 with an
//! `id` member), batches, unknown methods and tools with huge names (echoed clipped), a line over
//! 16 MiB. Each gets exactly one answer whose error text is one line, and after each the server
//! still answers a ping.

use crate::common;

use common::{World, binary};
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// A server we can write raw bytes to (the shared harness only writes JSON values).
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

impl Raw {
    fn start(world: &World) -> Raw {
        let mut child = Command::new(binary())
            .env_clear()
            .envs(world.env())
            // Nothing here may start a real run: a missing binary makes any start fail.
            .env("OPENCODE_BIN", world.path("no-such-opencode"))
            .env("OPENCODE_DB", world.path("no-such-store.db"))
            .env("RUST_LOG", "warn")
            .current_dir(world.root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start opencode-bridge");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let stdin = child.stdin.take();
        Raw {
            child,
            stdin,
            lines: rx,
            next_id: 1000,
        }
    }

    fn write_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// Every stdout line (parsed) until the response to `id`; panics after 60 s.
    fn until(&mut self, id: i64, case: &str) -> (Vec<Value>, Value) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(l) => l,
                Err(RecvTimeoutError::Timeout) => panic!("{case}: no answer to id {id} in 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{case}: the server closed stdout (exit {:?})",
                    self.child.try_wait()
                ),
            };
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{case}: stdout carried a non-JSON line ({e})"));
            if v.get("id") == Some(&json!(id)) {
                return (before, v);
            }
            before.push(v);
        }
    }

    fn ping(&mut self, case: &str) {
        let id = self.id();
        self.write_raw(
            json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
                .to_string()
                .as_bytes(),
        );
        let (before, pong) = self.until(id, case);
        assert_eq!(pong["result"], json!({}), "{case}: ping after it: {pong}");
        assert!(
            before.iter().all(|v| v.get("id").is_none()),
            "{case}: stray responses before the ping's: {before:?}"
        );
    }
}

impl Raw {
    /// Writes `bytes` as one line, then a ping; the one answer that came before the ping's.
    fn answer_before_ping(&mut self, bytes: &[u8], case: &str) -> Value {
        self.write_raw(bytes);
        let ping = self.id();
        self.write_raw(
            json!({"jsonrpc": "2.0", "id": ping, "method": "ping"})
                .to_string()
                .as_bytes(),
        );
        let (before, pong) = self.until(ping, case);
        assert_eq!(pong["result"], json!({}), "{case}: {pong}");
        assert_eq!(before.len(), 1, "{case}: not one answer: {before:?}");
        before.into_iter().next().unwrap()
    }
}

/// JSON-RPC wants `"id": null` when the request's id could not be read.
fn assert_null_id(case: &str, answer: &Value) {
    assert_eq!(
        answer.as_object().and_then(|o| o.get("id")),
        Some(&Value::Null),
        "{case}: {answer}"
    );
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one-line error text of a response (a JSON-RPC error or an `isError` result).
fn error_text(case: &str, r: &Value) -> String {
    if let Some(e) = r.get("error") {
        let m = e["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{case}: {r}"));
        assert!(e["code"].is_i64(), "{case}: error without a code: {r}");
        return m.to_string();
    }
    let result = &r["result"];
    assert_eq!(result["isError"], true, "{case}: accepted: {r}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{case}: isError without text: {r}"))
        .to_string()
}

fn assert_one_line(case: &str, text: &str) {
    assert!(!text.trim().is_empty(), "{case}: empty error text");
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "{case}: error text is not one line: {text}"
    );
    // Long inputs must not come back whole.
    assert!(
        text.len() <= 100_000,
        "{case}: error text of {} bytes",
        text.len()
    );
}

/// A value of the right type for a property (used to build valid base arguments).
fn valid_value(schema: &Value) -> Value {
    if let Some(e) = schema["enum"].as_array() {
        return e[0].clone();
    }
    match schema["type"].as_str() {
        Some("integer") | Some("number") => json!(schema["minimum"].as_i64().unwrap_or(1)),
        Some("boolean") => json!(true),
        Some("array") => json!(["1"]),
        _ => json!("x"),
    }
}

/// Values of the wrong type, out of range or outside the enum for a property.
fn bad_values(schema: &Value) -> Vec<(&'static str, Value)> {
    let mut v = vec![("object", json!({"a": 1})), ("array", json!([1, 2]))];
    match schema["type"].as_str() {
        Some("integer") | Some("number") => {
            v.push(("string", json!("5")));
            v.push(("bool", json!(true)));
            v.push(("fraction", json!(1.5)));
            if let Some(min) = schema["minimum"].as_i64() {
                v.push(("below minimum", json!(min - 1)));
            }
            if let Some(max) = schema["maximum"].as_i64() {
                v.push(("above maximum", json!(max + 1)));
            }
            v.push(("huge number", json!(1e300)));
        }
        Some("boolean") => {
            v.push(("string", json!("yes")));
            v.push(("number", json!(1)));
        }
        Some("array") => {
            v.push(("string", json!("1")));
            v.push(("number", json!(1)));
        }
        _ => {
            v.push(("number", json!(42)));
            v.push(("bool", json!(false)));
            if schema["enum"].is_array() {
                v.push(("not in enum", json!("nope")));
                v.push(("NUL in enum value", json!("a\u{0}b")));
                v.push(("1 MB enum value", json!("z".repeat(1 << 20))));
            }
        }
    }
    v
}

#[test]
fn hundreds_of_malformed_inputs_each_get_one_line_and_the_server_keeps_answering() {
    let world = World::new();
    let mut s = Raw::start(&world);
    let init = s.id();
    s.write_raw(
        json!({"jsonrpc": "2.0", "id": init, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bad-input", "version": "0"}}})
        .to_string()
        .as_bytes(),
    );
    s.until(init, "initialize");
    s.write_raw(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let id = s.id();
    s.write_raw(
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
            .to_string()
            .as_bytes(),
    );
    let (_, list) = s.until(id, "tools/list");
    let tools = list["result"]["tools"].as_array().unwrap().clone();
    assert!(tools.len() >= 10, "{list}");

    // (case name, tools/call arguments as raw JSON text or a value)
    let mut calls: Vec<(String, String, Value)> = Vec::new();
    for t in &tools {
        let name = t["name"].as_str().unwrap().to_string();
        let schema = &t["inputSchema"];
        let props = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let required: Vec<String> = schema["required"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let mut base = Map::new();
        for r in &required {
            base.insert(r.clone(), valid_value(&props[r]));
        }
        for (prop, ps) in &props {
            for (what, bad) in bad_values(ps) {
                let mut a = base.clone();
                a.insert(prop.clone(), bad);
                calls.push((name.clone(), format!("{prop}: {what}"), Value::Object(a)));
            }
        }
        for r in &required {
            let mut a = base.clone();
            a.remove(r);
            calls.push((
                name.clone(),
                format!("missing required {r}"),
                Value::Object(a),
            ));
        }
        let mut a = base.clone();
        a.insert("zz_unknown".into(), json!(1));
        calls.push((name.clone(), "unknown field".into(), Value::Object(a)));
        let mut a = base.clone();
        a.insert("nul\u{0}field".into(), json!("x\u{0}y"));
        calls.push((
            name.clone(),
            "NUL in an unknown field".into(),
            Value::Object(a),
        ));
        let mut a = base.clone();
        a.insert("zz_huge".into(), json!("h".repeat(2 << 20)));
        calls.push((name.clone(), "2 MB unknown field".into(), Value::Object(a)));
        for (what, args) in [
            ("arguments is an array", json!([1])),
            ("arguments is a string", json!("limit=5")),
            ("arguments is a number", json!(7)),
        ] {
            calls.push((name.clone(), what.into(), args));
        }
    }
    // Huge strings in fields with limits: 1 MB, 4 MB, 10 MB.
    for mb in [1usize, 4, 10] {
        calls.push((
            "opencode_start".into(),
            format!("{mb} MB label"),
            json!({"tier": "easy", "prompt": "x", "label": "l".repeat(mb << 20)}),
        ));
    }
    calls.push((
        "opencode_start".into(),
        "10 MB prompt without a tier".into(),
        json!({"prompt": "p".repeat(10 << 20)}),
    ));
    calls.push((
        "opencode_sessions".into(),
        "4 MB state".into(),
        json!({"state": "s".repeat(4 << 20)}),
    ));

    // Every string argument with a limit, 1 MB long (opencode_policy's cwd 5 MB, which was
    // echoed twice): refused naming the field and the limit, and the whole answer is short.
    let mut long_calls = Vec::new();
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        let schema = &t["inputSchema"];
        for (prop, ps) in schema["properties"].as_object().unwrap() {
            let (item, array) = match ps["type"].as_str() {
                Some("array") => (&ps["items"], true),
                _ => (ps, false),
            };
            let Some(max) = item["maxLength"].as_u64() else {
                continue;
            };
            let mb = if name == "opencode_policy" { 5 } else { 1 };
            let long = "-".repeat(mb << 20);
            let mut a = Map::new();
            for r in schema["required"].as_array().into_iter().flatten() {
                let r = r.as_str().unwrap();
                a.insert(r.into(), valid_value(&schema["properties"][r]));
            }
            a.insert(
                prop.clone(),
                if array { json!([long]) } else { json!(long) },
            );
            long_calls.push((name.to_owned(), prop.clone(), max, Value::Object(a)));
        }
    }
    assert!(long_calls.len() >= 20, "{}", long_calls.len());
    for (tool, prop, max, args) in &long_calls {
        let case = format!("{tool} long {prop}");
        let id = s.id();
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}});
        s.write_raw(line.to_string().as_bytes());
        let (_, r) = s.until(id, &case);
        let text = error_text(&case, &r);
        assert_eq!(
            text.trim_end(),
            format!("bad argument `{prop}`: longer than {max} characters"),
            "{case}"
        );
        assert!(
            r.to_string().len() < 1024,
            "{case}: {} bytes",
            r.to_string().len()
        );
    }

    let mut cases = long_calls.len();
    for (tool, what, args) in &calls {
        let case = format!("{tool} {what}");
        let id = s.id();
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}});
        s.write_raw(line.to_string().as_bytes());
        let (_, r) = s.until(id, &case);
        let text = error_text(&case, &r);
        assert_one_line(&case, &text);
        s.ping(&case);
        cases += 1;
    }

    // Raw lines: the name of the tool and the arguments as text.
    let raw_calls: Vec<(&str, String)> = vec![
        (
            "unknown tool",
            r#"{"name":"opencode_nope","arguments":{}}"#.into(),
        ),
        (
            "tool name is a number",
            r#"{"name":5,"arguments":{}}"#.into(),
        ),
        ("no tool name", r#"{"arguments":{}}"#.into()),
        ("params is an array", r#"[1,2]"#.into()),
        ("params is a string", r#""opencode_list""#.into()),
        (
            "NUL in the tool name",
            "{\"name\":\"opencode_list\\u0000\",\"arguments\":{}}".into(),
        ),
    ];
    for (what, params) in &raw_calls {
        let case = format!("tools/call {what}");
        let id = s.id();
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
        s.write_raw(line.as_bytes());
        // A line that is not valid JSON-RPC at all may be answered with a null id.
        let ping = s.id();
        s.write_raw(
            json!({"jsonrpc": "2.0", "id": ping, "method": "ping"})
                .to_string()
                .as_bytes(),
        );
        let (before, pong) = s.until(ping, &case);
        assert_eq!(pong["result"], json!({}), "{case}: {pong}");
        let answers: Vec<&Value> = before
            .iter()
            .filter(|v| v.get("error").is_some() || v.get("result").is_some())
            .collect();
        assert_eq!(
            answers.len(),
            1,
            "{case}: answers {answers:?}; before {before:?}"
        );
        let text = error_text(&case, answers[0]);
        assert_one_line(&case, &text);
        cases += 1;
    }

    // Garbage JSON-RPC lines that parse as JSON: one error answer each, with an `id` member
    // (null when none could be read).
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("a bare number", b"12345".to_vec()),
        ("a bare string", br#""ping""#.to_vec()),
        ("null", b"null".to_vec()),
        ("empty object", b"{}".to_vec()),
        ("empty batch", b"[]".to_vec()),
        (
            "a batch of one ping",
            br#"[{"jsonrpc":"2.0","id":78,"method":"ping"}]"#.to_vec(),
        ),
        ("missing jsonrpc", br#"{"id":79,"method":"ping"}"#.to_vec()),
        (
            "jsonrpc 1.0",
            br#"{"jsonrpc":"1.0","id":80,"method":"ping"}"#.to_vec(),
        ),
        (
            "id is an object",
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#.to_vec(),
        ),
        (
            "id is an array",
            br#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#.to_vec(),
        ),
        (
            "id is a fraction",
            br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#.to_vec(),
        ),
        (
            "id is true",
            br#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#.to_vec(),
        ),
        (
            "unknown method",
            br#"{"jsonrpc":"2.0","id":81,"method":"no/such/method"}"#.to_vec(),
        ),
        (
            "method is a number",
            br#"{"jsonrpc":"2.0","id":82,"method":5}"#.to_vec(),
        ),
        (
            "tools/list with params 5",
            br#"{"jsonrpc":"2.0","id":86,"method":"tools/list","params":5}"#.to_vec(),
        ),
    ];
    for (what, bytes) in &garbage {
        let case = format!("garbage: {what}");
        s.write_raw(bytes);
        let ping = s.id();
        s.write_raw(
            json!({"jsonrpc": "2.0", "id": ping, "method": "ping"})
                .to_string()
                .as_bytes(),
        );
        let (before, pong) = s.until(ping, &case);
        assert_eq!(pong["result"], json!({}), "{case}: {pong}");
        let answers: Vec<&Value> = before
            .iter()
            .filter(|v| v.get("error").is_some() || v.get("result").is_some())
            .collect();
        assert_eq!(
            answers.len(),
            1,
            "{case}: answers {answers:?}; before {before:?}"
        );
        assert!(
            answers[0].get("id").is_some(),
            "{case}: an answer without an id member: {}",
            answers[0]
        );
        let text = error_text(&case, answers[0]);
        assert_one_line(&case, &text);
        cases += 1;
    }

    // Lines that are not JSON at all: a -32700 parse error with id null each.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let unparsable: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"hello there".to_vec()),
        ("truncated JSON", br#"{"jsonrpc":"2.0","id":77,"method":"pi"#.to_vec()),
        ("invalid UTF-8 bytes", b"{\"jsonrpc\":\"2.0\",\"id\":83,\"method\":\"pi\xff\xfeng\"}".to_vec()),
        ("NUL byte in the line", b"{\"jsonrpc\":\"2.0\",\0\"id\":84}".to_vec()),
        ("10,000-deep nesting", deep.clone().into_bytes()),
        (
            "lone surrogate escape in an argument",
            br#"{"jsonrpc":"2.0","id":87,"method":"tools/call","params":{"name":"opencode_sessions","arguments":{"state":"\ud800"}}}"#.to_vec(),
        ),
        (
            "lone low surrogate in an unknown field",
            br#"{"jsonrpc":"2.0","id":88,"method":"tools/call","params":{"name":"opencode_policy","arguments":{"x":"\udc00abc"}}}"#.to_vec(),
        ),
        (
            "10,000-deep nested arrays as arguments",
            format!(r#"{{"jsonrpc":"2.0","id":89,"method":"tools/call","params":{{"name":"opencode_list","arguments":{deep}}}}}"#).into_bytes(),
        ),
    ];
    for (what, bytes) in &unparsable {
        let case = format!("unparsable: {what}");
        let answer = s.answer_before_ping(bytes, &case);
        assert_eq!(answer["error"]["code"], -32700, "{case}: {answer}");
        assert_null_id(&case, &answer);
        assert_one_line(&case, &error_text(&case, &answer));
        assert!(
            answer.to_string().len() < 1_000,
            "{case}: a long answer: {answer}"
        );
        cases += 1;
    }

    // Requests that are not valid: the answer carries an `id` member, null when the request's
    // own id could not be read.
    let null_id: Vec<(&str, &[u8], i64)> = vec![
        ("empty object", b"{}", -32600),
        ("empty batch", b"[]", -32600),
        (
            "a batch of one ping",
            br#"[{"jsonrpc":"2.0","id":78,"method":"ping"}]"#,
            -32600,
        ),
        ("a bare number", b"12345", -32600),
        (
            "id is an object",
            br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            -32600,
        ),
        (
            "id is null",
            br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            -32600,
        ),
    ];
    for (what, bytes, code) in &null_id {
        let case = format!("invalid request: {what}");
        let answer = s.answer_before_ping(bytes, &case);
        assert_eq!(answer["error"]["code"], *code, "{case}: {answer}");
        assert_null_id(&case, &answer);
        cases += 1;
    }
    let with_id: Vec<(&str, &[u8], i64, i64)> = vec![
        (
            "missing jsonrpc",
            br#"{"id":91,"method":"ping"}"#,
            91,
            -32600,
        ),
        (
            "method is a number",
            br#"{"jsonrpc":"2.0","id":92,"method":5}"#,
            92,
            -32600,
        ),
        (
            "ping with params 5",
            br#"{"jsonrpc":"2.0","id":93,"method":"ping","params":5}"#,
            93,
            -32602,
        ),
    ];
    for (what, bytes, id, code) in &with_id {
        let case = format!("invalid request: {what}");
        let answer = s.answer_before_ping(bytes, &case);
        assert_eq!(answer["error"]["code"], *code, "{case}: {answer}");
        assert_eq!(answer["id"], *id, "{case}: {answer}");
        cases += 1;
    }

    // tools/call without a string name: -32602 saying what is missing.
    for (what, params) in [
        ("no name", r#"{"arguments":{}}"#),
        ("numeric name", r#"{"name":5,"arguments":{}}"#),
        ("null name", r#"{"name":null}"#),
    ] {
        let case = format!("tools/call {what}");
        let id = s.id();
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
        s.write_raw(line.as_bytes());
        let (_, r) = s.until(id, &case);
        assert_eq!(r["error"]["code"], -32602, "{case}: {r}");
        let text = error_text(&case, &r);
        assert!(
            text.starts_with("Invalid params: tools/call needs `name`")
                && text.contains("opencode_start"),
            "{case}: {text}"
        );
        cases += 1;
    }

    // Huge names are not echoed whole: an 8 MB unknown method, a 1 MB unknown tool.
    let id = s.id();
    let method = "m".repeat(8 << 20);
    s.write_raw(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"}}"#).as_bytes());
    let (_, r) = s.until(id, "8 MB unknown method");
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert!(
        r.to_string().len() < 300,
        "8 MB unknown method: {} bytes",
        r.to_string().len()
    );
    let id = s.id();
    s.write_raw(
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "t".repeat(1 << 20), "arguments": {}}})
        .to_string()
        .as_bytes(),
    );
    let (_, r) = s.until(id, "1 MB unknown tool");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let text = error_text("1 MB unknown tool", &r);
    assert!(text.starts_with("unknown tool `tttt"), "{text}");
    assert!(text.len() < 400, "1 MB unknown tool: {} bytes", text.len());
    s.ping("huge names");
    cases += 2;

    // A line longer than the 16 MiB limit is skipped and answered; the next line is read.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":95,"method":"ping","params":{{"x":"{}"}}}}"#,
        "x".repeat(17 << 20)
    );
    let answer = s.answer_before_ping(huge.as_bytes(), "17 MB line");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_null_id("17 MB line", &answer);
    cases += 1;

    println!(
        "{cases} malformed inputs, each answered with one one-line error; the server kept answering"
    );
    assert!(cases >= 200, "only {cases} cases");
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
}
