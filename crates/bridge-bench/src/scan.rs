//! 4. Process scan: `proctable::scan()` with the machine topped up to about 300 processes.
//!
//! Each scan is timed twice: wall time, and the CPU time of the thread that scans
//! (`CLOCK_THREAD_CPUTIME_ID`). On a loaded machine the wall time includes the time the thread
//! waited for a core; the CPU time is the scan's own cost. When `OPENCODE_BRIDGE_TEST_OPENCODE`
//! names a real opencode, the scan is timed again with three idle `opencode serve` processes
//! alive (each in its own sandbox), since their command lines are read too.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;

use crate::table::{Row, median, pct};

/// Real opencode processes started for the second round.
const SERVES: usize = 3;

fn process_count() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count()
        })
        .unwrap_or(0)
}

/// CPU time of the calling thread, in ms.
pub(crate) fn thread_cpu_ms() -> f64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 * 1000.0 + t.tv_nsec() as f64 / 1e6)
        .unwrap_or(0.0)
}

/// Processes this bench started, each the leader of its own process group; dropping it kills
/// those groups (and nothing else) and reaps the leaders.
struct Started(Vec<Child>);

impl Started {
    /// Stops the last one started.
    fn stop_last(&mut self) {
        if let Some(c) = self.0.pop() {
            drop(Started(vec![c]));
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = killpg(Pid::from_raw(c.id() as i32), Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

/// Idle `opencode serve` processes and their sandboxes (dropped after them).
struct Serves {
    _started: Started,
    _sandboxes: Vec<bridge_testkit::OpencodeSandbox>,
}

/// Figures of one round of scans.
struct Round {
    wall: Vec<f64>,
    cpu: Vec<f64>,
    found: usize,
}

fn round(reps: usize) -> Round {
    let _ = run_supervisor::proctable::scan(); // warm-up
    let mut r = Round {
        wall: Vec::with_capacity(reps),
        cpu: Vec::with_capacity(reps),
        found: 0,
    };
    for _ in 0..reps {
        let c = thread_cpu_ms();
        let t = Instant::now();
        r.found = run_supervisor::proctable::scan().len();
        r.wall.push(t.elapsed().as_secs_f64() * 1000.0);
        r.cpu.push(thread_cpu_ms() - c);
    }
    r
}

fn report(label: &str, procs: usize, r: &Round) {
    println!(
        "{label} over {procs} processes: wall median {:.2} ms, p90 {:.2} ms; scan CPU median {:.2} ms, p90 {:.2} ms ({} runs; {} opencode processes)",
        median(&r.wall),
        pct(&r.wall, 90),
        median(&r.cpu),
        pct(&r.cpu, 90),
        r.wall.len(),
        r.found
    );
}

pub(crate) fn process_scan(reps: usize) -> Result<Vec<Row>, String> {
    // Asked first: under CI a missing opencode panics, and nothing should be running then.
    let oc = bridge_testkit::real_opencode();
    let mut sleepers = Started(Vec::new());
    let want = 300usize;
    for _ in process_count()..want {
        let c = Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start sleep: {e}"))?;
        sleepers.0.push(c);
    }
    let procs = process_count();
    let r = round(reps);
    report("process scan", procs, &r);
    let mut rows = vec![
        Row::le(
            &format!("process scan, {procs} processes (median wall)"),
            5.0,
            median(&r.wall),
            "ms",
        ),
        Row::info(
            "process scan: p90 wall; scan CPU median (p90)",
            format!(
                "{:.2} ms; {:.2} ms ({:.2})",
                pct(&r.wall, 90),
                median(&r.cpu),
                pct(&r.cpu, 90)
            ),
        ),
    ];

    match oc {
        Some(oc) => match start_serves(&oc) {
            Ok(serves) => {
                // Keep the total near 300: the serves replace as many sleeps.
                for _ in 0..SERVES {
                    sleepers.stop_last();
                }
                let procs = process_count();
                let r = round(reps);
                drop(serves);
                report(
                    &format!("process scan with {SERVES} opencode serve alive"),
                    procs,
                    &r,
                );
                rows.push(Row::le(
                    &format!(
                        "process scan, {procs} processes, {SERVES} opencode serve alive (median wall)"
                    ),
                    5.0,
                    median(&r.wall),
                    "ms",
                ));
                rows.push(Row::info(
                    &format!(
                        "process scan with {SERVES} opencode serve: p90 wall; scan CPU median (p90)"
                    ),
                    format!(
                        "{:.2} ms; {:.2} ms ({:.2}); {} found",
                        pct(&r.wall, 90),
                        median(&r.cpu),
                        pct(&r.cpu, 90),
                        r.found
                    ),
                ));
            }
            Err(e) => rows.push(Row::failed("process scan with opencode serve alive", &e)),
        },
        None => println!(
            "process scan with opencode serve alive: skipped (set OPENCODE_BRIDGE_TEST_OPENCODE)"
        ),
    }
    Ok(rows)
}

/// Starts [`SERVES`] idle `opencode serve --port 0` processes, each in its own sandbox and
/// process group, and waits until each says it is listening.
fn start_serves(oc: &std::path::Path) -> Result<Serves, String> {
    let t = Instant::now();
    let (tx, rx) = mpsc::channel();
    let mut started = Started(Vec::new());
    let mut sandboxes = Vec::new();
    for i in 0..SERVES {
        let sb = bridge_testkit::OpencodeSandbox::new("http://127.0.0.1:9/v1")
            .map_err(|e| format!("sandbox: {e}"))?;
        let mut child = sb
            .command(oc, ["serve", "--port", "0", "--hostname", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", oc.display()))?;
        let out = child.stdout.take().expect("piped stdout");
        started.0.push(child);
        sandboxes.push(sb);
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(out).lines();
            let listening = lines
                .by_ref()
                .map_while(Result::ok)
                .any(|l| l.contains("listening"));
            let _ = tx.send((i, listening));
            // Keep reading so the serve never blocks on a full pipe.
            for _ in lines {}
        });
    }
    drop(tx);
    let deadline = t + Duration::from_secs(60);
    for _ in 0..SERVES {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((_, true)) => {}
            Ok((i, false)) => return Err(format!("opencode serve {i} exited before listening")),
            Err(_) => return Err("opencode serve did not listen within 60 s".into()),
        }
    }
    println!(
        "process scan: {SERVES} opencode serve listening after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // Let them settle: the round is meant with idle servers.
    std::thread::sleep(Duration::from_secs(1));
    Ok(Serves {
        _started: started,
        _sandboxes: sandboxes,
    })
}
