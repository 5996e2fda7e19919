//! 4. Process scan: `proctable::scan()` with the machine topped up to about 300 processes.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::{Row, median, pct};

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

pub(crate) fn process_scan(reps: usize) -> Result<Row, String> {
    let mut sleepers: Vec<Child> = Vec::new();
    let want = 300usize;
    let have = process_count();
    for _ in have..want {
        match Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .spawn()
        {
            Ok(c) => sleepers.push(c),
            Err(e) => {
                for mut c in sleepers {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(format!("cannot start sleep: {e}"));
            }
        }
    }
    let procs = process_count();
    let _ = run_supervisor::proctable::scan(); // warm-up
    let mut v = Vec::with_capacity(reps);
    let mut found = 0;
    for _ in 0..reps {
        let t = Instant::now();
        found = run_supervisor::proctable::scan().len();
        v.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    for mut c in sleepers {
        let _ = c.kill();
        let _ = c.wait();
    }
    println!(
        "process scan over {procs} processes: median {:.2} ms, p90 {:.2} ms ({reps} runs; {found} opencode processes)",
        median(&v),
        pct(&v, 90)
    );
    Ok(Row::le(
        &format!("process scan, {procs} processes"),
        5.0,
        median(&v),
        "ms",
    ))
}
