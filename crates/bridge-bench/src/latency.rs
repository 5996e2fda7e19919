//! 6. MCP call latency: how long one `opencode_status` call takes from request to answer, on an
//!    idle server and while six fake opencode runs each stream a flood of events through it
//!    (issue 14: p99 ≤ 5 ms and max ≤ 50 ms in both). The floods are what makes a server slow
//!    to answer: every event is read, parsed and folded into its task, and each task's record
//!    and output are written to the registry while it runs.

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::client::Bridge;
use crate::table::{Row, pct};

/// One call: when it was sent (s since the start of its series), how long it took (ms), and
/// how long of that the bridge's answering thread spent runnable but waiting for a CPU, and
/// the bench's own calling thread likewise (ms). The rest is time the answering thread slept
/// inside the bridge (a lock, a blocking read) or ran.
#[derive(Debug, Clone, Copy)]
struct Call {
    at: f64,
    ms: f64,
    queued_ms: f64,
    client_queued_ms: f64,
    /// Time the answering thread ran (on any work: this call, folding, ticks).
    ran_ms: f64,
}

/// [`run_delay_ns`] of the calling thread.
fn own_run_delay_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Nanoseconds the thread `tid` of `pid` has run and has spent waiting on a run queue
/// (`/proc/<pid>/task/<tid>/schedstat`, first and second fields); 0 when the kernel does not
/// say.
fn sched_ns(pid: i32, tid: i32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"));
    let mut fields = text.as_deref().unwrap_or("").split_whitespace();
    let mut next = || fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
    (next(), next())
}

/// `calls` sequential `opencode_status` calls for `id`. The bridge answers on its main
/// thread (a current-thread runtime), whose thread id is the process id.
fn sample(b: &mut Bridge, id: &str, calls: usize, origin: Instant) -> Result<Vec<Call>, String> {
    let pid = b.pid();
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let ((ran, queued), client_queued) = (sched_ns(pid, pid), own_run_delay_ns());
        let t = Instant::now();
        b.call("opencode_status", json!({"id": id}))?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        times.push(Call {
            at: t.duration_since(origin).as_secs_f64(),
            ms,
            client_queued_ms: own_run_delay_ns().saturating_sub(client_queued) as f64 / 1e6,
            queued_ms: sched_ns(pid, pid).1.saturating_sub(queued) as f64 / 1e6,
            ran_ms: sched_ns(pid, pid).0.saturating_sub(ran) as f64 / 1e6,
        });
        // Between calls a short pause, as a client polling would leave.
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(times)
}

/// The slowest calls, each with when it was sent, its waits for a CPU (bridge + bench) and
/// how long the bridge's answering thread ran meanwhile: whether they cluster
/// (at the runs' ends, say), and whether the thread that answers was waiting for a core or for
/// something inside the bridge, tells what made them slow.
fn slowest(samples: &[Call]) -> String {
    let mut v = samples.to_vec();
    v.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    v.iter()
        .take(8)
        .map(|c| {
            format!(
                "{:.1} ms (queued {:.1} + {:.1}, ran {:.1}) at {:.2} s",
                c.ms, c.queued_ms, c.client_queued_ms, c.ran_ms, c.at
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn rows(label: &str, samples: &[Call]) -> Vec<Row> {
    let times: Vec<f64> = samples.iter().map(|c| c.ms).collect();
    let times = times.as_slice();
    println!("  slowest: {}", slowest(samples));
    // The slowest 1 %: how much of their time the answering thread sat on a run queue.
    let mut worst = samples.to_vec();
    worst.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    worst.truncate(samples.len().div_ceil(100));
    let (total, queued, client) = worst.iter().fold((0.0, 0.0, 0.0), |(t, q, c), call| {
        (t + call.ms, q + call.queued_ms, c + call.client_queued_ms)
    });
    let share = |x: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
    let queued_share = share(queued + client);
    println!(
        "  slowest 1 % ({} calls): {:.0} % of their time the bridge's answering thread and {:.0} % the bench's own thread were runnable, waiting for a CPU",
        worst.len(),
        share(queued),
        share(client)
    );
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
        Row::info(
            &format!("{label}: slowest 1 %, share spent waiting for a CPU (bridge + bench)"),
            format!("{queued_share:.0} %"),
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
    // The calls are timed on this thread. It asks for the short scheduler slice the bridge's
    // answering thread has, so that its own waits for a core (not the bridge's, and counted
    // apart below) weigh less in the figures; set OPENCODE_BRIDGE_BENCH_CLIENT_SLICE=default
    // to time with the default slice.
    if std::env::var("OPENCODE_BRIDGE_BENCH_CLIENT_SLICE").as_deref() != Ok("default") {
        match bridge_proc::sched::short_slice_for_this_thread() {
            Ok(()) => println!("  the bench's calling thread has a short scheduler slice too"),
            Err(e) => println!("  the bench's calling thread keeps the default slice ({e})"),
        }
    }
    let mut b = crate::flood::flood_bridge(bin, mb, floods + 1)?;
    // A finished task to ask about (a small flood).
    let first = start(&mut b, "the task asked about")?;
    wait_all(&mut b)?;
    let t = Instant::now();
    let mut out = rows(
        "MCP call latency, idle server",
        &sample(&mut b, &first, calls, t)?,
    );

    let t = Instant::now();
    for i in 0..floods {
        start(&mut b, &format!("flood {i}"))?;
    }
    // Sample while the floods run; stop when they are over. The list between batches also
    // tells when each run ended (to a batch).
    let mut busy = Vec::new();
    let mut finished = 0;
    let mut ends = Vec::new();
    while t.elapsed() < Duration::from_secs(900) {
        busy.extend(sample(&mut b, &first, 50, t)?);
        let list = b.call("opencode_list", json!({})).unwrap_or_default();
        let unfinished = list
            .split_once(" unfinished")
            .and_then(|(before, _)| before.rsplit("; ").next()?.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if floods.saturating_sub(unfinished) > finished {
            finished = floods - unfinished;
            ends.push(format!("{finished} by {:.2} s", t.elapsed().as_secs_f64()));
        }
        if unfinished == 0 {
            break;
        }
    }
    println!("  runs ended: {}", ends.join(", "));
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
