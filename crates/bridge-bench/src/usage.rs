//! `--only usage`: `opencode_usage` over a ledger of 10,000 rows (a year of a busy bridge:
//! about 27 finished attempts a day, 6 agents, 5 models, 8 lanes), as a `tools/call` on a warm
//! server (read the ledger, sum it by day, agent, model, lane and engine, render the table and
//! the structured result) and in-process (read + summarize alone); and `opencode-bridge
//! statusline` over the same ledger, a process per call as Claude Code runs it. Figures only.

use std::path::Path;
use std::time::Instant;

use run_supervisor::TokenUsage;
use run_supervisor::usage::ledger::{self, Row};
use run_supervisor::usage::{CostBasis, Usage};
use serde_json::json;

use crate::client::{Bridge, time_calls};
use crate::table::{Row as BenchRow, median, pct};

/// Rows of the benchmark's ledger.
pub const ROWS: usize = 10_000;

/// A year of about 27 finished attempts a day (the usage bench's and the lived-in cold start's).
pub(crate) fn ledger_rows(now_ms: u64) -> Vec<Row> {
    let agents = [
        "explore",
        "worker",
        "fixer",
        "librarian",
        "oracle",
        "designer",
    ];
    let models = [
        "fk/cheap",
        "openai/gpt-5-mini",
        "deepseek/deepseek-chat",
        "google/gemini-2.5-flash",
        "sonnet",
    ];
    let span = 365 * 86_400_000u64;
    (0..ROWS)
        .map(|i| {
            let n = i as u64;
            let tokens = TokenUsage {
                input: 5_000 + n % 40_000,
                output: 300 + n % 3_000,
                reasoning: n % 500,
                cache_read: n % 20_000,
                cache_write: 0,
            };
            Row {
                v: ledger::LEDGER_VERSION,
                at_ms: now_ms - span + n * (span / ROWS as u64),
                task: n / 2 + 1,
                attempt: (n % 2) as u32 + 1,
                agent: agents[i % agents.len()].into(),
                model: Some(models[i % models.len()].into()),
                runner: if i % 5 == 4 { "claude" } else { "opencode" }.into(),
                engine: None,
                lane: format!("LANE{}", i % 8),
                project: format!("/home/u/projects/p{}", i % 4).into(),
                usage: Usage {
                    tokens,
                    cost: tokens.input as f64 * 0.4e-6,
                    basis: if i % 7 == 0 {
                        CostBasis::Estimated
                    } else {
                        CostBasis::Reported
                    },
                    claude_equivalent: Some(tokens.input as f64 * 3e-6),
                },
            }
        })
        .collect()
}

/// Times `opencode_usage` over [`ROWS`] ledger rows; `reps` calls.
pub fn usage(bin: &Path, reps: usize) -> Result<Vec<BenchRow>, String> {
    let state = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let now = run_supervisor::registry::now_ms();
    ledger::append(state.path(), &ledger_rows(now)).map_err(|e| format!("ledger: {e}"))?;
    let bytes = std::fs::metadata(ledger::path(state.path())).map_or(0, |m| m.len());

    let mut inproc = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let text = ledger::read_text(state.path()).map_err(|e| e.to_string())?;
        let (rows, bad) = ledger::parse_text(&text);
        let s = ledger::summarize_rows(
            rows.iter().map(ledger::TextRow::view),
            bad,
            None,
            run_supervisor::usage::Pricing::default().compare_price(),
        );
        inproc.push(t.elapsed().as_secs_f64() * 1000.0);
        if s.totals.attempts != ROWS {
            return Err(format!("read {} rows of {ROWS}", s.totals.attempts));
        }
    }

    // `opencode-bridge statusline` over the same ledger: a whole process, as Claude Code runs it.
    let mut status = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let out = std::process::Command::new(bin)
            .arg("statusline")
            .env("OPENCODE_BRIDGE_STATE_DIR", state.path())
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("statusline: {e}"))?;
        status.push(t.elapsed().as_secs_f64() * 1000.0);
        let line = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !line.starts_with("opencode: today $") {
            return Err(format!("statusline answered {line:?}"));
        }
    }

    let mut b = Bridge::start(
        bin,
        &[(
            "OPENCODE_BRIDGE_STATE_DIR",
            state.path().display().to_string(),
        )],
    )?;
    let (calls, text) = time_calls(&mut b, reps, "opencode_usage", &json!({"since_days": 400}))?;
    drop(b);
    if !text.contains(&format!("({ROWS} attempts)")) {
        return Err(format!(
            "unexpected reply: {}",
            text.lines().next().unwrap_or("")
        ));
    }
    println!(
        "opencode_usage over {ROWS} ledger rows ({:.1} MB): median {:.2} ms, p90 {:.2} ms ({} calls); read + summarize in-process: median {:.2} ms",
        bytes as f64 / 1e6,
        median(&calls),
        pct(&calls, 90),
        calls.len(),
        median(&inproc)
    );
    Ok(vec![
        BenchRow::le(
            "opencode_usage, 10,000 ledger rows (tools/call)",
            20.0,
            median(&calls),
            "ms",
        ),
        BenchRow::le(
            "statusline, 10,000 ledger rows (the whole process)",
            20.0,
            median(&status),
            "ms",
        ),
        BenchRow::info(
            "ledger read + summarize, 10,000 rows (in-process)",
            format!("{:.2} ms", median(&inproc)),
        ),
    ])
}
