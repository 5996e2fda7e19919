//! 6. MCP call latency: how long one `opencode_status` call takes from request to answer, on an
//!    idle server and while six fake opencode runs each stream a flood of events through it
//!    (issue 14: p99 ≤ 5 ms and max ≤ 50 ms in both). The floods are what makes a server slow
//!    to answer: every event is read, parsed and folded into its task, and each task's record
//!    and output are written to the registry while it runs.

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Bridge, Row, pct};

/// Latencies (ms) of `calls` sequential `opencode_status` calls for `id`.
fn sample(b: &mut Bridge, id: &str, calls: usize) -> Result<Vec<f64>, String> {
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        b.call("opencode_status", json!({"id": id}))?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        // Between calls a short pause, as a client polling would leave.
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(times)
}

fn rows(label: &str, times: &[f64]) -> Vec<Row> {
    let max = times.iter().copied().fold(0.0, f64::max);
    println!(
        "{label}: {} calls, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        times.len(),
        pct(times, 50),
        pct(times, 99),
        max
    );
    vec![
        Row::info(
            &format!("{label}: p50"),
            format!("{:.2} ms", pct(times, 50)),
        ),
        Row::le(&format!("{label}: p99"), 5.0, pct(times, 99), "ms"),
        Row::le(&format!("{label}: max"), 50.0, max, "ms"),
    ]
}

pub(crate) fn latency(
    bin: &Path,
    floods: usize,
    mb: usize,
    calls: usize,
) -> Result<Vec<Row>, String> {
    let mut b = crate::flood::flood_bridge(bin, mb, floods + 1)?;
    // A finished task to ask about (a small flood).
    let first = start(&mut b, "the task asked about")?;
    wait_all(&mut b)?;
    let mut out = rows(
        "MCP call latency, idle server",
        &sample(&mut b, &first, calls)?,
    );

    let t = Instant::now();
    for i in 0..floods {
        start(&mut b, &format!("flood {i}"))?;
    }
    let done = |b: &mut Bridge| {
        b.call("opencode_list", json!({}))
            .map(|l| l.contains("; 0 unfinished"))
            .unwrap_or(true)
    };
    // Sample while the floods run; stop when they are over.
    let mut busy = Vec::new();
    while t.elapsed() < Duration::from_secs(900) {
        busy.extend(sample(&mut b, &first, 50)?);
        if done(&mut b) {
            break;
        }
    }
    println!(
        "{floods} floods of {mb} MB took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    out.extend(rows(
        &format!("MCP call latency, {floods} floods of {mb} MB running"),
        &busy,
    ));
    Ok(out)
}

fn start(b: &mut Bridge, what: &str) -> Result<String, String> {
    let text = b.call(
        "opencode_start",
        json!({"tier": "easy", "prompt": format!("Summarise the notes: {what}"), "cwd": "proj"}),
    )?;
    text.strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .map(str::to_owned)
        .ok_or_else(|| format!("unexpected start answer: {text}"))
}

fn wait_all(b: &mut Bridge) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        if b.call("opencode_list", json!({}))?
            .contains("; 0 unfinished")
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("tasks not finished after 600 s".into())
}
