//! Anthropic Messages API pieces shared by [`crate::fake_anthropic`] and
//! [`crate::fake_claude_api`]: the responder that adds the API's fixed headers, the one-block
//! message (as JSON or as server-sent events) and the offline Claude Code environment.

use crate::http;
use serde_json::{Value, json};
use std::io;
use std::net::TcpStream;

/// Answers with the headers every Anthropic response of the fakes carries (`request-id`,
/// `connection: close`), followed by `extra`.
pub(crate) fn respond(
    stream: &TcpStream,
    status: u16,
    reason: &str,
    content_type: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let mut headers = vec![("request-id", "req_fake"), ("connection", "close")];
    headers.extend_from_slice(extra);
    http::respond(stream, status, reason, content_type, &headers, body)
}

/// `200 OK` JSON with the fixed headers.
pub(crate) fn respond_json(stream: &TcpStream, body: &[u8]) -> io::Result<()> {
    respond(stream, 200, "OK", "application/json", &[], body)
}

/// The environment that points Claude Code at `base_url` with a fake key and turns off its
/// telemetry, updates, error reports and other non-essential traffic.
pub(crate) fn offline_claude_env(base_url: String) -> Vec<(String, String)> {
    [
        ("ANTHROPIC_BASE_URL", base_url),
        ("ANTHROPIC_API_KEY", "sk-ant-fake-key".to_string()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A complete (non-streamed) assistant message with one content block.
pub(crate) fn message(model: &str, content: &Value, stop: &str) -> Value {
    json!({
        "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
        "content": [content], "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5}
    })
}

/// The server-sent events of a one-block message, split after the block started (where a slow
/// scenario pauses): `(message_start + content_block_start, the rest)`.
pub(crate) fn sse(model: &str, content: &Value, stop: &str) -> (String, String) {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut pre = ev(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        }}),
    );
    let delta = if content["type"] == "tool_use" {
        let mut start = content.clone();
        start["input"] = json!({});
        pre.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ));
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": content["input"].to_string()}})
    } else {
        pre.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": content["text"]}})
    };
    let mut post = ev("content_block_delta", delta);
    post.push_str(&ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    post.push_str(&ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
    ));
    post.push_str(&ev("message_stop", json!({"type": "message_stop"})));
    (pre, post)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_use_stream_starts_with_empty_input_and_sends_it_as_a_delta() {
        let (pre, post) = sse(
            "m",
            &json!({"type": "tool_use", "id": "t", "name": "n", "input": {"a": 1}}),
            "tool_use",
        );
        assert!(pre.starts_with("event: message_start\n"));
        assert!(
            pre.contains(r#""content_block":{"id":"t","input":{},"name":"n","type":"tool_use"}"#)
        );
        assert!(post.starts_with("event: content_block_delta\n"));
        assert!(post.contains(r#""partial_json":"{\"a\":1}""#));
        assert!(post.contains(r#""stop_reason":"tool_use""#));
        assert!(post.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    }
}
