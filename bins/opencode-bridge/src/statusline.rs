//! `opencode-bridge statusline`: one short line for Claude Code's `statusLine` setting (a
//! command whose first line of stdout Claude Code shows under the prompt; it passes the
//! session's JSON on stdin, which this ignores). It says today's (UTC) delegated spend and
//! saving and how many tasks run:
//!
//! `opencode: today $0.4200 spent, $1.90 saved · 2 running`
//!
//! It must be fast and never break Claude Code's UI: it reads only the end of the usage ledger
//! (backwards, until a row older than today) and the registry's task files, builds no App, and
//! on any error prints a short neutral line and exits 0. The saving is each row's
//! Claude-equivalent as written (the full report recomputes it at today's prices).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use run_supervisor::usage::CostBasis;
use run_supervisor::usage::ledger::{self, Row};

/// What Claude Code shows when the figures cannot be read.
pub const NEUTRAL: &str = "opencode: -";

/// Prints the line; always exit code 0.
pub fn run() -> i32 {
    let dir = bridge_env::state_dir(|k| std::env::var(k).ok());
    let line = dir
        .and_then(|d| line(&d, run_supervisor::registry::now_ms()))
        .unwrap_or_else(|| NEUTRAL.to_owned());
    println!("{line}");
    0
}

/// The line for the state directory `dir` at `now_ms` (`None`: something could not be read).
pub fn line(dir: &Path, now_ms: u64) -> Option<String> {
    let day_start = now_ms - now_ms % 86_400_000;
    let (spent, saved) = today(dir, day_start)?;
    let running = running(dir);
    Some(format!(
        "opencode: today {} spent, {} saved · {running} running",
        bridge_render::usage::usd(spent),
        bridge_render::usage::usd(saved)
    ))
}

/// Today's spend and saving: the ledger read backwards in blocks until a row an hour before
/// `day_start` (rows are appended as tasks finish, so older ones come first).
fn today(dir: &Path, day_start: u64) -> Option<(f64, f64)> {
    let mut f = match std::fs::File::open(ledger::path(dir)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some((0.0, 0.0)),
        Err(_) => return None,
    };
    let mut end = f.seek(SeekFrom::End(0)).ok()?;
    let (mut spent, mut saved) = (0.0, 0.0);
    // Bytes of a line cut by the block boundary, carried to the next (earlier) block.
    let mut carry: Vec<u8> = Vec::new();
    const BLOCK: u64 = 64 * 1024;
    loop {
        let start = end.saturating_sub(BLOCK);
        let mut buf = vec![0u8; (end - start) as usize];
        f.seek(SeekFrom::Start(start)).ok()?;
        f.read_exact(&mut buf).ok()?;
        buf.extend_from_slice(&carry);
        let mut lines: Vec<&[u8]> = buf.split(|b| *b == b'\n').collect();
        // The first piece may be cut unless this block starts the file.
        let first = if start > 0 {
            Some(lines.remove(0))
        } else {
            None
        };
        for l in lines.iter().rev() {
            if l.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Ok(r) = serde_json::from_slice::<Row>(l) else {
                continue;
            };
            // Bridges sharing the ledger append in nearly the order tasks finish: an hour's
            // slack before stopping.
            if r.at_ms < day_start.saturating_sub(3_600_000) {
                return Some((spent, saved));
            }
            if r.at_ms < day_start {
                continue;
            }
            spent += r.usage.budget_cost();
            if let Some(eq) = r.usage.claude_equivalent
                && r.usage.basis != CostBasis::Unknown
            {
                saved += eq - r.usage.cost;
            }
        }
        match first {
            Some(cut) => carry = cut.to_vec(),
            None => return Some((spent, saved)),
        }
        end = start;
    }
}

/// Tasks whose record says running and whose bridge is alive.
fn running(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir.join("tasks")) else {
        return 0;
    };
    rd.flatten()
        .filter_map(|e| std::fs::read(e.path().join("task.json")).ok())
        .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .filter(|t| t["state"] == "running")
        .filter(|t| {
            let (Some(pid), Some(start_time)) = (
                t["owner"]["pid"].as_i64(),
                t["owner"]["start_time"].as_u64(),
            ) else {
                return false;
            };
            bridge_proc::ProcId {
                pid: pid as i32,
                start_time,
            }
            .is_alive()
        })
        .count()
}
