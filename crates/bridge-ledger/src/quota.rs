//! Quota windows: after a run is refused for quota or a usage limit with a known reset time,
//! later starts that would use the same account are refused at once until that time.
//!
//! The window is kept per *account key*, which each runner names (`Backend::account_key`):
//! `claude` for Claude Code runs, the provider (the part of the model before `/`) for opencode
//! runs. The reset time comes from Claude Code's usage
//! limit report (the Claude runner's classification) or, for opencode runs, from the response
//! headers of the provider's error (`retry-after`, `retry-after-ms`,
//! `anthropic-ratelimit-unified-reset`, `anthropic-ratelimit-*-reset`, `x-ratelimit-reset-*`).
//!
//! Every value here comes from outside (a provider's header, Claude Code's `resetsAt`, an error
//! body): nothing in this module can panic on it. Durations are built with the checked
//! constructors, instants with `checked_add`, and every reset is held to [`HORIZON`] from now
//! ([`Reset::clamped`] says when it was, so the advice can say so). The fuzz target
//! `quota_parse` (`fuzz/fuzz_targets/quota_parse.rs`) feeds it arbitrary headers and numbers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// A refusal whose reset is closer than this opens no window: it is a retry hint.
pub const MIN_WINDOW: Duration = Duration::from_secs(60);

/// The furthest a reset time is believed: a provider (or a bug) naming a later one is held to
/// this, and the task's advice says so. A week covers every subscription window and daily quota
/// seen so far.
pub const HORIZON: Duration = Duration::from_secs(7 * 24 * 3600);

/// A reset time read from a provider, at most [`HORIZON`] after the moment it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reset {
    /// When the window resets.
    pub at: SystemTime,
    /// True when the provider named a later time (or one too large to represent) and
    /// [`at`](Self::at) is the horizon instead.
    pub clamped: bool,
}

impl Reset {
    /// `t`, held to [`HORIZON`] after `now`.
    pub fn within_horizon(t: SystemTime, now: SystemTime) -> Reset {
        let limit = later(now, HORIZON);
        if t > limit {
            Reset {
                at: limit,
                clamped: true,
            }
        } else {
            Reset {
                at: t,
                clamped: false,
            }
        }
    }

    /// `d` after `now`, held to the horizon.
    pub fn after(now: SystemTime, d: Duration) -> Reset {
        match now.checked_add(d) {
            Some(t) => Reset::within_horizon(t, now),
            None => Reset {
                at: later(now, HORIZON),
                clamped: true,
            },
        }
    }

    /// An instant given in seconds since the epoch (any `u64`), held to the horizon.
    pub fn at_epoch_secs(secs: u64, now: SystemTime) -> Reset {
        match UNIX_EPOCH.checked_add(Duration::from_secs(secs)) {
            Some(t) => Reset::within_horizon(t, now),
            None => Reset {
                at: later(now, HORIZON),
                clamped: true,
            },
        }
    }

    /// An instant given as a JSON number of seconds since the epoch (Claude Code's `resetsAt`):
    /// `None` for NaN, a negative number or zero; a number too large is the horizon.
    pub fn at_epoch_secs_f64(secs: f64, now: SystemTime) -> Option<Reset> {
        if !secs.is_finite() {
            // +inf is "later than anything"; NaN and -inf are no time at all.
            return (secs == f64::INFINITY).then(|| Reset::at_epoch_secs(u64::MAX, now));
        }
        if secs <= 0.0 {
            return None;
        }
        // `as` saturates: 1e308 becomes u64::MAX, which the horizon holds.
        Some(Reset::at_epoch_secs(secs as u64, now))
    }

    /// The words a failure message and its advice use: `resets at <UTC>`, and when the time
    /// was held to the horizon, that the provider named a later one.
    pub fn describe(&self) -> String {
        let at = crate::utc::format(self.at);
        if self.clamped {
            format!(
                "resets at {at} at the latest (the provider named a time more than {} days ahead; the bridge holds it to that)",
                HORIZON.as_secs() / 86_400
            )
        } else {
            format!("resets at {at}")
        }
    }
}

/// The longest a task waits on a provider's limit while opencode retries: a retry planned
/// further out than this (or past the task's time left) ends the task at once with kind
/// `rate_limit` or `quota`, the reset time and advice, instead of a task that runs and does
/// nothing until its timeout. A provider's ordinary back-off (seconds, a minute or two) stays
/// under it.
pub const LONGEST_WAIT: Duration = Duration::from_secs(5 * 60);

/// opencode retrying a request a provider refused: its `session.status` of type `retry`
/// (`{"type":"retry","attempt":1,"message":"Rate limit reached for requests","next":<epoch ms>}`,
/// seen on `opencode serve`'s event stream, 1.18.33).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderWait {
    /// opencode's retry number (1 for the first retry).
    pub attempt: u64,
    /// The provider's message, one line, at most 300 characters.
    pub message: String,
    /// When opencode sends the request again, held to [`HORIZON`] from when it was read.
    pub next: Reset,
}

impl ProviderWait {
    /// Reads a `session.status` `status` object of type `retry` at `now`; `None` for another
    /// type or a `next` that is no time (missing, negative, NaN).
    pub fn from_status(status: &Value, now: SystemTime) -> Option<ProviderWait> {
        if status.get("type").and_then(Value::as_str) != Some("retry") {
            return None;
        }
        let next_ms = status.get("next").and_then(Value::as_f64)?;
        let next = Reset::at_epoch_secs_f64(next_ms / 1000.0, now)?;
        let attempt = status.get("attempt").and_then(Value::as_u64).unwrap_or(1);
        let message: String = status
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(300)
            .collect();
        Some(ProviderWait {
            attempt,
            message,
            next,
        })
    }

    /// How long until the retry, from `now` (zero when it is due).
    pub fn wait_from(&self, now: SystemTime) -> Duration {
        self.next.at.duration_since(now).unwrap_or(Duration::ZERO)
    }

    /// Whether the provider's message speaks of quota or credit rather than a rate (the same
    /// words the failure classifier uses).
    pub fn is_quota(&self) -> bool {
        speaks_of_quota(&self.message)
    }
}

/// opencode retrying a request a provider refused, where it does not say when it retries: an
/// `opencode run` prints no event while it waits, and its log (`opencode.log` in the run's
/// data directory) says only that the provider refused, with the provider's message, at each
/// try (`message="stream error" ... error.error="AI_APICallError: Rate limit reached ..."`,
/// 1.18.33).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderStall {
    /// When the first refusal of this wait was logged (read by the bridge).
    pub since: SystemTime,
    /// How many refusals were logged since (opencode tries again after each wait).
    pub refusals: u32,
    /// The provider's last message, one line, at most 300 characters.
    pub message: String,
}

impl ProviderStall {
    /// Whether the provider's message speaks of quota or credit rather than a rate.
    pub fn is_quota(&self) -> bool {
        speaks_of_quota(&self.message)
    }

    /// How long opencode has been held, at `now` (zero for a clock that went back).
    pub fn held_for(&self, now: SystemTime) -> Duration {
        now.duration_since(self.since).unwrap_or(Duration::ZERO)
    }
}

/// Words of a provider's message that speak of quota or credit (not of a rate); the failure
/// classifier reads the same list.
pub const QUOTA_WORDS: &[&str] = &[
    "insufficient_quota",
    "exceeded your current quota",
    "quota exceeded",
    "billing",
    "credit balance",
    "out of credits",
    "payment required",
];

/// Whether a provider's message speaks of quota or credit (not of a rate).
pub fn speaks_of_quota(message: &str) -> bool {
    let lower = message.to_lowercase();
    QUOTA_WORDS.iter().any(|w| lower.contains(w))
}

/// `t + d`, or `t` plus [`HORIZON`] when that cannot be represented (never panics for any `t`
/// the system clock gives).
pub fn later(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d)
        .or_else(|| t.checked_add(HORIZON))
        .unwrap_or(t)
}

/// Durations like `6m0s`, `1.5s`, `20ms`, `2h` (OpenAI's `x-ratelimit-reset-*`). A duration
/// too long for a `Duration` is `Duration::MAX` (the horizon then holds it).
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
    if !any || total.is_nan() || total < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(total).unwrap_or(Duration::MAX))
}

/// The reset time announced by response headers (names compared case-insensitively), relative
/// to `now` for relative forms. The latest of all announced times wins, held to [`HORIZON`].
pub fn reset_from_headers(headers: &Value, now: SystemTime) -> Option<Reset> {
    let map = headers.as_object()?;
    let mut best: Option<Reset> = None;
    let mut take = |t: Reset| {
        if best.is_none_or(|b| t.at > b.at || (t.at == b.at && t.clamped)) {
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
            if let Some(ms) = whole_number(v) {
                take(Reset::after(now, Duration::from_millis(ms)));
            }
        } else if k == "retry-after" {
            if let Some(s) = whole_number(v) {
                take(Reset::after(now, Duration::from_secs(s)));
            } else if let Some(t) = crate::utc::parse_http_date(v) {
                take(Reset::within_horizon(t, now));
            }
        } else if k == "anthropic-ratelimit-unified-reset" {
            if let Some(s) = whole_number(v) {
                take(Reset::at_epoch_secs(s, now));
            }
        } else if k.starts_with("anthropic-ratelimit-") && k.ends_with("-reset") {
            if let Some(t) = crate::utc::parse(v) {
                take(Reset::within_horizon(t, now));
            }
        } else if k.starts_with("x-ratelimit-reset")
            && let Some(d) = parse_go_duration(v)
        {
            take(Reset::after(now, d));
        }
    }
    best
}

/// A header's whole number of seconds or milliseconds: digits only, and a number too large
/// for a `u64` is read as `u64::MAX` (the horizon then holds it), not as no number at all.
fn whole_number(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.parse::<u64>().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(now: SystemTime, headers: Value) -> Option<(SystemTime, bool)> {
        reset_from_headers(&headers, now).map(|r| (r.at, r.clamped))
    }

    #[test]
    fn reset_headers_are_read() {
        let now = UNIX_EPOCH + Duration::from_secs(1_893_456_000);
        let s = Duration::from_secs;
        assert_eq!(
            at(now, json!({"retry-after": "30"})),
            Some((now + s(30), false))
        );
        assert_eq!(
            at(now, json!({"Retry-After-Ms": "1500"})),
            Some((now + Duration::from_millis(1500), false))
        );
        assert_eq!(
            at(
                now,
                json!({"anthropic-ratelimit-unified-reset": "1893459600"})
            ),
            Some((now + s(3600), false))
        );
        assert_eq!(
            at(
                now,
                json!({"anthropic-ratelimit-tokens-reset": "2030-01-01T02:00:00Z", "retry-after": "5"})
            ),
            Some((now + s(7200), false))
        );
        assert_eq!(
            at(now, json!({"x-ratelimit-reset-requests": "6m0s"})),
            Some((now + s(360), false))
        );
        assert_eq!(
            at(now, json!({"retry-after": "Tue, 01 Jan 2030 00:10:00 GMT"})),
            Some((now + s(600), false))
        );
        assert_eq!(at(now, json!({"content-type": "x"})), None);
    }

    #[test]
    fn extreme_values_are_held_to_the_horizon() {
        let now = UNIX_EPOCH + Duration::from_secs(1_893_456_000);
        let horizon = Some((now + HORIZON, true));
        for headers in [
            json!({"retry-after": "18446744073709551615"}),
            json!({"retry-after": "99999999999999999999999999999"}),
            json!({"retry-after": 18446744073709551615u64}),
            json!({"retry-after-ms": "18446744073709551615"}),
            json!({"anthropic-ratelimit-unified-reset": "18446744073709551615"}),
            json!({"anthropic-ratelimit-unified-reset": "4102444800"}),
            json!({"anthropic-ratelimit-tokens-reset": "9999-12-31T23:59:59Z"}),
            json!({"x-ratelimit-reset-tokens": "99999999999999999999999h"}),
            json!({"x-ratelimit-reset-tokens": format!("{}s", "9".repeat(400))}),
            json!({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}),
        ] {
            assert_eq!(at(now, headers.clone()), horizon, "{headers}");
        }
        // Not a time at all: ignored, never a panic.
        for headers in [
            json!({"retry-after": "1e308"}),
            json!({"retry-after": "-5"}),
            json!({"retry-after": "NaN"}),
            json!({"retry-after": "inf"}),
            json!({"retry-after": -5}),
            json!({"retry-after": 1e308}),
            json!({"retry-after-ms": ""}),
            json!({"x-ratelimit-reset-tokens": "NaNs"}),
            json!({"x-ratelimit-reset-tokens": "-1s"}),
            json!({"x-ratelimit-reset-tokens": "1e308s"}),
            json!({"anthropic-ratelimit-unified-reset": "-1"}),
            json!({"anthropic-ratelimit-tokens-reset": "2030-99-99T99:99:99Z"}),
        ] {
            assert_eq!(at(now, headers.clone()), None, "{headers}");
        }
        // The latest wins; a past time is kept (it opens no window).
        assert_eq!(
            at(
                now,
                json!({"retry-after": "60", "anthropic-ratelimit-unified-reset": "1000"})
            ),
            Some((now + Duration::from_secs(60), false))
        );
        // At the largest instant the clock can hold, nothing overflows either.
        let end = UNIX_EPOCH + Duration::from_secs(i64::MAX as u64);
        assert!(reset_from_headers(&json!({"retry-after": "18446744073709551615"}), end).is_some());
        assert_eq!(later(end, Duration::MAX), end);
    }

    #[test]
    fn epoch_numbers_from_json() {
        let now = UNIX_EPOCH + Duration::from_secs(1_893_456_000);
        let r = |f: f64| Reset::at_epoch_secs_f64(f, now);
        assert_eq!(r(f64::NAN), None);
        assert_eq!(r(-1.0), None);
        assert_eq!(r(f64::NEG_INFINITY), None);
        assert_eq!(r(0.0), None);
        for far in [1e308, f64::MAX, f64::INFINITY, 18446744073709551615.0] {
            assert_eq!(
                r(far).map(|x| (x.at, x.clamped)),
                Some((now + HORIZON, true))
            );
        }
        assert_eq!(
            r(1_893_459_600.9).map(|x| (x.at, x.clamped)),
            Some((now + Duration::from_secs(3600), false))
        );
        assert!(r(1e308).unwrap().describe().contains("at the latest"));
    }
}
