//! Quota windows: after a run is refused for quota or a usage limit with a known reset time,
//! later starts that would use the same account are refused at once until that time.
//!
//! The window is kept per *account key*, which each runner names (`Backend::account_key`):
//! `claude` for Claude Code runs, the provider (the part of the model before `/`) for opencode
//! runs. The reset time comes from Claude Code's usage
//! limit report (the Claude runner's classification) or, for opencode runs, from the response
//! headers of the provider's error (`retry-after`, `retry-after-ms`,
//! `anthropic-ratelimit-unified-reset`, `anthropic-ratelimit-*-reset`, `x-ratelimit-reset-*`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// A refusal whose reset is closer than this opens no window: it is a retry hint.
pub const MIN_WINDOW: Duration = Duration::from_secs(60);

/// Durations like `6m0s`, `1.5s`, `20ms`, `2h` (OpenAI's `x-ratelimit-reset-*`).
fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut num = String::new();
    let mut chars = s.trim().chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let v: f64 = num.parse().ok()?;
        num.clear();
        let unit = match c {
            'h' => 3600.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                0.001
            }
            'm' => 60.0,
            's' => 1.0,
            _ => return None,
        };
        total += v * unit;
        any = true;
    }
    if !num.is_empty() {
        total += num.parse::<f64>().ok()?;
        any = true;
    }
    any.then(|| Duration::from_secs_f64(total))
}

/// The reset time announced by response headers (names compared case-insensitively), relative
/// to `now` for relative forms. The latest of all announced times wins.
pub fn reset_from_headers(headers: &Value, now: SystemTime) -> Option<SystemTime> {
    let map = headers.as_object()?;
    let mut best: Option<SystemTime> = None;
    let mut take = |t: SystemTime| {
        if best.is_none_or(|b| t > b) {
            best = Some(t);
        }
    };
    for (k, v) in map {
        let k = k.to_ascii_lowercase();
        let Some(v) = v
            .as_str()
            .map(str::to_owned)
            .or_else(|| v.as_u64().map(|n| n.to_string()))
        else {
            continue;
        };
        let v = v.trim();
        if k == "retry-after-ms" {
            if let Ok(ms) = v.parse::<u64>() {
                take(now + Duration::from_millis(ms));
            }
        } else if k == "retry-after" {
            if let Ok(s) = v.parse::<u64>() {
                take(now + Duration::from_secs(s));
            }
        } else if k == "anthropic-ratelimit-unified-reset" {
            if let Ok(s) = v.parse::<u64>() {
                take(UNIX_EPOCH + Duration::from_secs(s));
            }
        } else if k.starts_with("anthropic-ratelimit-") && k.ends_with("-reset") {
            if let Some(t) = crate::utc::parse(v) {
                take(t);
            }
        } else if k.starts_with("x-ratelimit-reset")
            && let Some(d) = parse_go_duration(v)
        {
            take(now + d);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reset_headers_are_read() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            reset_from_headers(&json!({"retry-after": "30"}), now),
            Some(now + Duration::from_secs(30))
        );
        assert_eq!(
            reset_from_headers(&json!({"Retry-After-Ms": "1500"}), now),
            Some(now + Duration::from_millis(1500))
        );
        assert_eq!(
            reset_from_headers(
                &json!({"anthropic-ratelimit-unified-reset": "1893456000"}),
                now
            ),
            Some(UNIX_EPOCH + Duration::from_secs(1_893_456_000))
        );
        assert_eq!(
            reset_from_headers(
                &json!({"anthropic-ratelimit-tokens-reset": "2030-01-01T00:00:00Z", "retry-after": "5"}),
                now
            ),
            Some(UNIX_EPOCH + Duration::from_secs(1_893_456_000))
        );
        assert_eq!(
            reset_from_headers(&json!({"x-ratelimit-reset-requests": "6m0s"}), now),
            Some(now + Duration::from_secs(360))
        );
        assert_eq!(reset_from_headers(&json!({"content-type": "x"}), now), None);
    }
}
