//! 3. Floods: six fake opencode runs streaming events through the bridge at once.

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Bridge, Row};

/// The bridge's own CPU time (utime + stime) and its reaped children's (cutime + cstime), in
/// seconds.
fn cpu_times(pid: i32) -> Result<(f64, f64), String> {
    let st = procfs::process::Process::new(pid)
        .and_then(|p| p.stat())
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    let tick = procfs::ticks_per_second() as f64;
    Ok((
        (st.utime + st.stime) as f64 / tick,
        (st.cutime + st.cstime) as f64 / tick,
    ))
}

fn vm_hwm_kb(pid: i32) -> Option<u64> {
    procfs::process::Process::new(pid)
        .and_then(|p| p.status())
        .ok()?
        .vmhwm
}

pub(crate) fn flood(bin: &Path, tasks: usize, mb: usize) -> Result<Vec<Row>, String> {
    let fake = bridge_testkit::bins::fake_opencode();
    let mut b = Bridge::start(
        bin,
        &[
            ("OPENCODE_BIN", fake.display().to_string()),
            ("FAKE_OPENCODE_SCENARIO", "flood".into()),
            ("FAKE_OPENCODE_FLOOD_MB", mb.to_string()),
            ("OPENCODE_BRIDGE_MAX_PARALLEL", tasks.max(6).to_string()),
        ],
    )?;
    std::fs::create_dir_all(b.root().join("proj")).map_err(|e| format!("{e}"))?;
    let pid = b.pid();
    let before = cpu_times(pid)?;
    let t = Instant::now();
    let mut ids = Vec::new();
    for i in 0..tasks {
        let text = b.call(
            "opencode_start",
            json!({"tier": "easy", "prompt": format!("Summarise the notes, part {i}"), "cwd": "proj"}),
        )?;
        let id = text
            .strip_prefix("started task ")
            .and_then(|r| r.split(':').next())
            .ok_or_else(|| format!("unexpected start answer: {text}"))?
            .to_string();
        ids.push(id);
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
    let after = cpu_times(pid)?;
    let hwm = vm_hwm_kb(pid).unwrap_or(0);
    drop(b);
    let own = after.0 - before.0;
    let kids = after.1 - before.1;
    let share = 100.0 * own / kids.max(0.001);
    println!(
        "{tasks} floods of {mb} MB: {ok}/{tasks} succeeded in {wall:.1} s ({:.0} MB/s); bridge CPU {own:.2} s, runs' CPU {kids:.2} s ({share:.1} %); bridge peak RSS {:.1} MB",
        (tasks * mb) as f64 / wall,
        hwm as f64 / 1024.0
    );
    let label = format!("{tasks} floods of {mb} MB");
    let mut rows = vec![
        Row::le(&format!("{label}: bridge CPU / runs' CPU"), 5.0, share, "%"),
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
    Ok(rows)
}
