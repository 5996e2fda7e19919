//! Harness of the `quota_parse` target: everything that reads a provider's or Claude Code's
//! word on when a limit resets (`run_supervisor::quota`, `run_supervisor::utc`, the Claude
//! runner's `rate_limit_event` / `resetsAt` and usage-limit text), fed values from outside.
//!
//! One input is read four ways:
//! - as `name: value` lines, the response headers of a provider's error, given to
//!   `quota::reset_from_headers` as strings, and each value that is a JSON number also as that
//!   number;
//! - as one JSON value given to `reset_from_headers` as it is (the `responseHeaders` object of
//!   an error event, or anything else);
//! - as Claude Code `stream-json` lines (each line, and a `rate_limit_event` whose `resetsAt` is
//!   the input read as a JSON number, with a failed `result` whose text is the input) folded by
//!   `claude::ClaudeStream` and classified;
//! - as text for `utc::parse`, `utc::parse_http_date` and `claude::reset_in_text`, and its first
//!   eight bytes as a `u64` of epoch ms for `utc::day` and `utc::day_and_month_bounds`, and as
//!   an `f64` for `quota::Reset::at_epoch_secs_f64`.
//!
//! Checked besides "no panic": every reset is at most `quota::HORIZON` after now, a held one is
//! exactly there, its description and every failure message are one line.
//!
//! This file is compiled both by the fuzz crate and by
//! `crates/run-supervisor/tests/fuzz_corpus.rs` (plain `cargo test` replays the corpus).

use run_supervisor::classify::ExitInfo;
use run_supervisor::quota::{self, HORIZON, Reset};
use run_supervisor::{RunSummary, claude, utc};
use serde_json::{Map, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    // A fixed "now" (2030-01-01) for the pure parts, so a failure replays.
    let now = UNIX_EPOCH + Duration::from_secs(1_893_456_000);

    let mut headers = Map::new();
    let mut numbers = Map::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_owned(), Value::String(v.trim().to_owned()));
            if let Ok(n) = serde_json::from_str::<serde_json::Number>(v.trim()) {
                numbers.insert(k.trim().to_owned(), Value::Number(n));
            }
        }
    }
    for h in [Value::Object(headers), Value::Object(numbers)] {
        check(quota::reset_from_headers(&h, now), now);
    }
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        check(quota::reset_from_headers(&v, now), now);
        if let Some(f) = v.as_f64() {
            check(Reset::at_epoch_secs_f64(f, now), now);
        }
    }

    let mut eight = [0u8; 8];
    for (d, s) in eight.iter_mut().zip(data) {
        *d = *s;
    }
    let ms = u64::from_le_bytes(eight);
    let _ = utc::day(ms);
    let [(d0, d1), (m0, m1)] = utc::day_and_month_bounds(ms);
    assert!(d0 <= d1 && m0 <= m1, "bounds out of order for {ms}");
    check(Some(Reset::at_epoch_secs(ms, now)), now);
    check(
        Reset::at_epoch_secs_f64(f64::from_le_bytes(eight), now),
        now,
    );
    let _ = utc::parse(&text).map(utc::format);
    let _ = utc::parse_http_date(&text).map(utc::format);
    let _ = claude::reset_in_text(&text);

    // Claude Code's stream: the input's own lines, then a rejected limit whose `resetsAt` is
    // the input as a number (when it is one) and a failed result carrying the input as text.
    let mut summary = RunSummary::new(256);
    let mut stream = claude::ClaudeStream::default();
    for line in text.lines() {
        stream.push_line(&mut summary, line);
    }
    let resets = serde_json::from_str::<serde_json::Number>(text.trim())
        .map(Value::Number)
        .unwrap_or(Value::Null);
    let event = serde_json::json!({"type":"rate_limit_event","session_id":"s",
        "rate_limit_info":{"status":"rejected","resetsAt":resets}});
    stream.push_line(&mut summary, &event.to_string());
    let result = serde_json::json!({"type":"result","subtype":"success","is_error":true,
        "api_error_status":429,"result":text,"session_id":"s"});
    stream.push_line(&mut summary, &result.to_string());
    let real_now = SystemTime::now();
    if let Some(r) = stream.limit_reset {
        check_at(r, real_now);
    }
    let exit = ExitInfo {
        code: Some(1),
        signal: None,
    };
    if let Some(c) = claude::classify(&summary, &stream, "", exit) {
        assert!(
            !c.failure.message.contains('\n'),
            "a failure message of more than one line: {:?}",
            c.failure.message
        );
        if let Some(r) = c.reset {
            check_at(r, real_now);
        }
    }
}

fn check(reset: Option<Reset>, now: SystemTime) {
    if let Some(r) = reset {
        check_at(r, now);
    }
}

/// A reset is within the horizon of `now` (or of a moment a little after it, for resets read
/// at the real clock), exactly at it when held, and described in one line.
fn check_at(r: Reset, now: SystemTime) {
    let limit = now + HORIZON + Duration::from_secs(60);
    assert!(r.at <= limit, "a reset past the horizon: {r:?}");
    if r.clamped {
        assert!(
            r.at + Duration::from_secs(60) >= now + HORIZON,
            "held short: {r:?}"
        );
    }
    assert!(!r.describe().contains('\n'));
}
