//! Harness of the `event_lines` target: the opencode event-line parser, the run summary and the
//! failure classifier, fed exactly as the supervisor feeds them.
//!
//! One input is the stdout of an `opencode run --format json` process, optionally followed by
//! a NUL byte and the process's stderr. The stdout is folded twice: as the supervisor reads it
//! (raw bytes fed to a `LineSplitter` in chunks whose size the input's third byte picks, each
//! line to `push_line_bytes`), and line by line split on `\n` and decoded lossily as UTF-8 (to
//! `parse_line` / `push_line`). The summary is classified under four exits (code 0, code 1,
//! killed by signal 9, unknown).
//!
//! Checked besides "no panic": every non-blank line is counted once as an event or as
//! malformed; `push_line` agrees with `parse_line`; both foldings give the same summary; the
//! text buffer stays within its cap; every failure message is one line; `cut_text` stays
//! within its documented bound.
//!
//! This file is compiled both by the fuzz crate and by
//! `crates/run-supervisor/tests/fuzz_corpus.rs` (plain `cargo test` replays the corpus).

use run_supervisor::capture::{LineSplitter, Piece, REPLY_CHARS, cut_text};
use run_supervisor::classify::{self, ExitInfo, Failure};
use run_supervisor::events::{Event, RunSummary, parse_line};

/// Text cap of the summary: small, so the head/tail cut is exercised.
const TEXT_CAP: usize = 256;

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let (stdout, stderr) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let stderr = String::from_utf8_lossy(stderr);

    let mut summary = RunSummary::new(TEXT_CAP);
    let mut lines = 0usize;
    for raw in stdout.split(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(raw);
        if line.trim().is_empty() {
            assert!(
                !summary.push_line(&line),
                "a blank line counted as an event"
            );
            continue;
        }
        lines += 1;
        let parsed = parse_line(&line);
        if let Some(p) = &parsed {
            match &p.event {
                Event::Error(e) => check_failure(&classify::classify_error(e)),
                Event::ToolUse(call) => {
                    let _ = call.permission_rejected();
                }
                _ => {}
            }
        }
        assert_eq!(
            summary.push_line(&line),
            parsed.is_some(),
            "push_line and parse_line disagree"
        );
    }
    assert_eq!(
        summary.events() + summary.malformed(),
        lines,
        "a line was lost or counted twice"
    );

    // The supervisor's way: raw bytes in chunks, lines straight from the buffer.
    let mut raw = RunSummary::new(TEXT_CAP);
    let mut splitter = LineSplitter::new(usize::MAX);
    let mut fold = |p: Piece<'_>| match p {
        Piece::Line(line) => {
            raw.push_line_bytes(line);
        }
        Piece::TooLong => unreachable!("no line is over usize::MAX bytes"),
    };
    let chunk = data.get(2).map_or(64, |b| usize::from(*b) + 1);
    for part in stdout.chunks(chunk) {
        splitter.feed(part, &mut fold);
    }
    splitter.finish(&mut fold);
    assert_eq!(
        (
            raw.events(),
            raw.malformed(),
            raw.unknown(),
            &raw.unknown_types(),
            raw.steps(),
            &raw.session_id()
        ),
        (
            summary.events(),
            summary.malformed(),
            summary.unknown(),
            &summary.unknown_types(),
            summary.steps(),
            &summary.session_id()
        ),
        "raw and lossy foldings count differently"
    );
    assert_eq!(raw.tool_calls(), summary.tool_calls());
    assert_eq!(raw.errors(), summary.errors());
    assert_eq!(raw.cost().to_bits(), summary.cost().to_bits());
    assert_eq!(raw.tokens(), summary.tokens());
    assert_eq!(raw.final_text(), summary.final_text());
    assert_eq!(
        raw.text().to_string_lossy(),
        summary.text().to_string_lossy()
    );
    assert!(summary.unknown_types().len() <= 20);
    assert!(summary.text().kept_bytes() <= TEXT_CAP);
    let _ = summary.text().to_string_lossy();
    let _ = summary.text().tail_string(100);

    for exit in [
        ExitInfo {
            code: Some(0),
            signal: None,
        },
        ExitInfo {
            code: Some(1),
            signal: None,
        },
        ExitInfo {
            code: None,
            signal: Some(9),
        },
        ExitInfo::default(),
    ] {
        if let Some(f) = run_supervisor::classify_run(&summary, &stderr, exit) {
            check_failure(&f);
        }
    }
    let _ = classify::agent_fallback_line(&stderr);
    let _ = classify::rejected_permission_lines(&stderr);
    let _ = classify::strip_ansi(&stderr);

    // Result cutting, with budgets taken from the input itself.
    let head = data.first().map(|b| usize::from(*b) * 3);
    let tail = data.get(1).map(|b| usize::from(*b) * 5);
    let all = String::from_utf8_lossy(stdout);
    for text in [summary.final_text(), all.as_ref()] {
        for (h, t) in [(None, None), (head, None), (None, tail), (head, tail)] {
            let cut = cut_text(text, h, t);
            assert_eq!(cut.total_chars, text.chars().count());
            assert!(
                cut.text.chars().count() <= REPLY_CHARS + 80,
                "cut_text exceeded its bound"
            );
        }
    }
}

fn check_failure(f: &Failure) {
    assert!(
        !f.message.contains('\n') && !f.message.contains('\r'),
        "failure message is not one line: {:?}",
        f.message
    );
    assert!(!f.advice.is_empty());
    let _ = (f.kind.as_str(), f.kind.is_transient(), f.kind.advice());
}
