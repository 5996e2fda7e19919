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

use std::path::Path;

use run_supervisor::usage::CostBasis;
use run_supervisor::usage::ledger;

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

/// Today's spend and saving: the ledger's end from the first row an hour before `day_start`
/// ([`ledger::read_text_since`]; rows are appended as tasks finish, so older ones come first).
fn today(dir: &Path, day_start: u64) -> Option<(f64, f64)> {
    let text = ledger::read_text_since(dir, day_start).ok()?;
    let (rows, _) = ledger::parse_text(&text);
    let (mut spent, mut saved) = (0.0, 0.0);
    for r in rows.iter().map(ledger::TextRow::view) {
        if r.at_ms < day_start {
            continue;
        }
        let usage = r.usage;
        spent += usage.budget_cost();
        if let Some(eq) = usage.claude_equivalent
            && usage.basis != CostBasis::Unknown
        {
            saved += eq - usage.cost;
        }
    }
    Some((spent, saved))
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
