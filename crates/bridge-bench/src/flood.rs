//! 3. Floods: six fake opencode runs streaming events through the bridge at once; then one
//!    real opencode run answering a long text from the fake LLM.
//!
//! The floods are issue 7's measure: the bridge's CPU against the runs' own CPU. The fake
//! opencode does almost nothing per byte (it serialises one 64 KiB string per event and writes
//! it), so that ratio compares the bridge's reading and parsing with a loop of `write`s. The
//! real-opencode run shows the same ratio for a run whose CPU is spent the way a real run
//! spends it: receiving a streamed answer (the fake LLM's `long` model: 1 MiB in 64-byte
//! deltas, so about 16 tokens a delta, more than real providers send), building its parts and
//! storing them, then printing its events.

use bridge_testkit::fake_llm::{LONG_BYTES, LONG_DELTA};
use bridge_testkit::{FakeLlm, OpencodeSandbox};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::client::Bridge;
use crate::table::Row;

/// CPU seconds of a process (`/proc/<pid>/stat`): its own user and system time, and the user
/// and system time of its reaped children.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cpu {
    user: f64,
    sys: f64,
    child_user: f64,
    child_sys: f64,
}

impl Cpu {
    pub(crate) fn of(pid: i32) -> Result<Cpu, String> {
        let st = procfs::process::Process::new(pid)
            .and_then(|p| p.stat())
            .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
        let tick = procfs::ticks_per_second() as f64;
        Ok(Cpu {
            user: st.utime as f64 / tick,
            sys: st.stime as f64 / tick,
            child_user: st.cutime as f64 / tick,
            child_sys: st.cstime as f64 / tick,
        })
    }

    pub(crate) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            user: self.user - before.user,
            sys: self.sys - before.sys,
            child_user: self.child_user - before.child_user,
            child_sys: self.child_sys - before.child_sys,
        }
    }

    pub(crate) fn own(self) -> f64 {
        self.user + self.sys
    }

    fn children(self) -> f64 {
        self.child_user + self.child_sys
    }
}

fn vm_rss_kb(pid: i32) -> Option<u64> {
    procfs::process::Process::new(pid)
        .and_then(|p| p.status())
        .ok()?
        .vmrss
}

/// Waits until the bridge has no unfinished task.
fn wait_idle(b: &mut Bridge) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        if b.call("opencode_list", json!({}))?
            .contains("; 0 unfinished")
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("the first run did not finish in 600 s".into())
}

fn vm_hwm_kb(pid: i32) -> Option<u64> {
    procfs::process::Process::new(pid)
        .and_then(|p| p.status())
        .ok()?
        .vmhwm
}

/// A bridge whose runs are the fake opencode's floods of `mb` MB each, `parallel` at once, with
/// the task directory `proj` under its root.
pub(crate) fn flood_bridge(bin: &Path, mb: usize, parallel: usize) -> Result<Bridge, String> {
    let fake = bridge_testkit::bins::fake_opencode();
    let mut env = vec![
        ("OPENCODE_BIN", fake.display().to_string()),
        ("FAKE_OPENCODE_SCENARIO", "flood".into()),
        ("FAKE_OPENCODE_FLOOD_MB", mb.to_string()),
        // The fake floods as an `opencode run` process; it cannot serve.
        ("OPENCODE_BRIDGE_ENGINE", "run".into()),
        ("OPENCODE_BRIDGE_MAX_PARALLEL", parallel.to_string()),
    ];
    // The bridge starts with a cleared environment; a run priority set for the bench (e.g.
    // `OPENCODE_BRIDGE_RUN_NICE=0`, to time runs at the bridge's priority) is passed on.
    let nice = bridge_env::RUN_NICE.name;
    if let Ok(v) = std::env::var(nice) {
        println!("  {nice}={v}");
        env.push((nice, v));
    }
    let b = Bridge::start(bin, &env)?;
    std::fs::create_dir_all(b.root().join("proj")).map_err(|e| format!("{e}"))?;
    Ok(b)
}

pub(crate) fn flood(bin: &Path, tasks: usize, mb: usize) -> Result<Vec<Row>, String> {
    let mut b = flood_bridge(bin, mb, tasks.max(6))?;
    let pid = b.pid();
    // One run first, alone. The first start does one-off work that is no part of what a flood
    // costs (the secret guard builds its rules, the roster is read); its CPU and the memory
    // the bridge holds after that run are shown apart, and the floods are measured after it.
    let cold = Cpu::of(pid)?;
    b.call(
        "opencode_start",
        json!({"tier": "easy", "prompt": "Summarise the notes, a first run", "cwd": "proj"}),
    )?;
    let first_start = Cpu::of(pid)?.since(cold).own();
    wait_idle(&mut b)?;
    let rss_before = vm_rss_kb(pid).unwrap_or(0);
    println!(
        "first opencode_start: bridge CPU {:.0} ms; after that first run the bridge holds {:.1} MB",
        first_start * 1000.0,
        rss_before as f64 / 1024.0
    );
    let before = Cpu::of(pid)?;
    let t = Instant::now();
    let mut ids = Vec::new();
    for i in 0..tasks {
        let text = b.call(
            "opencode_start",
            json!({"tier": "easy", "prompt": format!("Summarise the notes, part {i}"), "cwd": "proj"}),
        )?;
        ids.push(task_id_of(&text)?);
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let list = b.call("opencode_list", json!({}))?;
        if list.contains("; 0 unfinished") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("floods not finished after 600 s: {list}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let wall = t.elapsed().as_secs_f64();
    let mut ok = 0;
    for id in &ids {
        let s = b.call("opencode_status", json!({"id": id}))?;
        if s.lines().next().unwrap_or("").contains("succeeded") {
            ok += 1;
        } else {
            println!("  task {id}: {}", s.lines().next().unwrap_or(""));
        }
    }
    let cpu = Cpu::of(pid)?.since(before);
    let hwm = vm_hwm_kb(pid).unwrap_or(0);
    drop(b);
    let own = cpu.own();
    let kids = cpu.children();
    let share = 100.0 * own / kids.max(0.001);
    let total_mb = (tasks * mb) as f64;
    println!(
        "{tasks} floods of {mb} MB: {ok}/{tasks} succeeded in {wall:.1} s ({:.0} MB/s); bridge CPU {own:.2} s, runs' CPU {kids:.2} s ({share:.1} %); bridge peak RSS {:.1} MB",
        total_mb / wall,
        hwm as f64 / 1024.0
    );
    let per_mb = 1000.0 * own / total_mb;
    println!(
        "  bridge: user {:.2} s + system {:.2} s = {per_mb:.2} ms of CPU per MB of events; runs: user {:.2} s + system {:.2} s = {:.2} ms per MB",
        cpu.user,
        cpu.sys,
        cpu.child_user,
        cpu.child_sys,
        1000.0 * kids / total_mb
    );
    let label = format!("{tasks} floods of {mb} MB");
    let mut rows = vec![
        Row::info(
            "first opencode_start: bridge CPU (one-off: secret-guard rules, roster)",
            format!("{:.0} ms", first_start * 1000.0),
        ),
        Row::info(
            "bridge RSS after one run, before the floods",
            format!("{:.1} MB", rss_before as f64 / 1024.0),
        ),
        Row::le(&format!("{label}: bridge CPU / runs' CPU"), 5.0, share, "%"),
        Row::info(
            &format!("{label}: bridge CPU per MB (user + system)"),
            format!(
                "{per_mb:.2} ms ({:.2} + {:.2} ms)",
                1000.0 * cpu.user / total_mb,
                1000.0 * cpu.sys / total_mb
            ),
        ),
        Row::le(
            &format!("{label}: bridge peak RSS"),
            40.0,
            hwm as f64 / 1024.0,
            "MB",
        ),
    ];
    if ok != tasks {
        rows.push(Row::failed(
            &label,
            &format!("only {ok} of {tasks} runs succeeded"),
        ));
    }
    match real_opencode_share(bin) {
        Ok(row) => rows.push(row),
        Err(e) => rows.push(Row::failed(&real_label(), &e)),
    }
    Ok(rows)
}

fn real_label() -> String {
    format!(
        "real opencode, {} KiB answer in {LONG_DELTA}-byte deltas: bridge CPU / run's CPU",
        LONG_BYTES >> 10
    )
}

/// One task run by the real opencode through the bridge, the fake LLM's `long` model answering
/// it: the bridge's CPU as a share of the run's (opencode and whatever it reaped).
fn real_opencode_share(bin: &Path) -> Result<Row, String> {
    let label = real_label();
    let Some(oc) = bridge_testkit::real_opencode() else {
        println!("real opencode run: skipped (set OPENCODE_BRIDGE_TEST_OPENCODE to compare)");
        return Ok(Row::info(
            &label,
            "skipped: OPENCODE_BRIDGE_TEST_OPENCODE not set".into(),
        ));
    };
    let llm = FakeLlm::start().map_err(|e| format!("fake LLM: {e}"))?;
    let sb = OpencodeSandbox::new(&llm.base_url()).map_err(|e| format!("sandbox: {e}"))?;
    // The run engine: the share is of an `opencode run` process tree the bridge follows.
    let mut b = real_opencode_bridge(bin, &sb, &oc, &[("OPENCODE_BRIDGE_ENGINE", "run".into())])?;
    let pid = b.pid();
    let before = Cpu::of(pid)?;
    let t = Instant::now();
    let text = b.call(
        "opencode_start",
        json!({"tier": "easy", "prompt": "Write the long answer.", "model": "fk/long",
               "cwd": sb.project_dir().display().to_string()}),
    )?;
    let id = task_id_of(&text)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        b.call("opencode_wait", json!({"ids": [id], "timeout_s": 55}))?;
        if b.call("opencode_list", json!({}))?
            .contains("; 0 unfinished")
        {
            break;
        }
        if Instant::now() > deadline {
            return Err("the real opencode run did not finish in 120 s".into());
        }
    }
    let wall = t.elapsed().as_secs_f64();
    let cpu = Cpu::of(pid)?.since(before);
    let status = b.call("opencode_status", json!({"id": id}))?;
    let first = status.lines().next().unwrap_or("").to_string();
    if !first.contains("succeeded") {
        return Err(format!("the real opencode run did not succeed: {first}"));
    }
    let result = b.call("opencode_result", json!({"id": id}))?;
    if !result.contains("DONE") {
        let tail: Vec<&str> = result.lines().rev().take(2).collect();
        return Err(format!(
            "the real opencode run's result lacks the end of the answer (it ends: {})",
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    drop(b);
    let (own, kids) = (cpu.own(), cpu.children());
    let share = 100.0 * own / kids.max(0.001);
    println!(
        "real opencode run, {} KiB answer in {LONG_DELTA}-byte deltas: {wall:.1} s; bridge CPU {own:.2} s (user {:.2} + system {:.2}), opencode's CPU {kids:.2} s (user {:.2} + system {:.2}): {share:.2} %",
        LONG_BYTES >> 10,
        cpu.user,
        cpu.sys,
        cpu.child_user,
        cpu.child_sys,
    );
    Ok(Row::info(
        &label,
        format!("{share:.2} % ({own:.2} s vs {kids:.2} s)"),
    ))
}

/// The task id in an `opencode_start` answer (`started task <id>: ...`).
fn task_id_of(answer: &str) -> Result<String, String> {
    answer
        .strip_prefix("started task ")
        .and_then(|r| r.split(':').next())
        .map(str::to_owned)
        .ok_or_else(|| format!("unexpected start answer: {answer}"))
}

/// A bridge whose runs are the real opencode `oc` in sandbox `sb` (its data, config and cache
/// dirs and opencode switches; the bridge keeps its own HOME and state dir), rooted at the
/// sandbox's project, with `extra` variables.
pub(crate) fn real_opencode_bridge(
    bin: &Path,
    sb: &OpencodeSandbox,
    oc: &Path,
    extra: &[(&str, String)],
) -> Result<Bridge, String> {
    let mut env: Vec<(String, String)> = sb
        .env()
        .into_iter()
        .filter(|(k, _)| !matches!(k.as_str(), "HOME" | "PWD" | "XDG_STATE_HOME"))
        .collect();
    env.push(("OPENCODE_BIN".into(), oc.display().to_string()));
    env.push((
        "OPENCODE_BRIDGE_ROOT".into(),
        sb.project_dir().display().to_string(),
    ));
    let mut env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    env.extend(extra.iter().cloned());
    Bridge::start(bin, &env)
}
