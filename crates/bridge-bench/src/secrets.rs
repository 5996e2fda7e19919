//! `--only secrets`: the secret guard on the evaluation sets `fixtures/secrets/round3/` and
//! `fixtures/secrets/eval/` (and the older corpus beside them): recall, false positives and
//! scan throughput per format family, the time to scan one 100 KB prompt, and the time to scan
//! each slow input the fuzzer found, grown to 100 KB the way the fuzz harness grows it (wall time, and the scanning thread's CPU time,
//! which a loaded machine inflates less). Figures only, no assertions.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use bridge_policy::secrets::scan;

use crate::scan::thread_cpu_ms;
use crate::table::{Row, median, min};

fn corpus(name: &str) -> Result<Vec<(String, String)>, String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/secrets")
        .join(name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(label, p)| {
            let family = label.split_once('/').map_or(label, |(f, _)| f);
            (family.to_owned(), p.replace('\u{23ce}', "\n"))
        })
        .collect())
}

/// Runs the secret-guard figures; `reps` repetitions of the 100 KB scan.
pub fn secret_guard(reps: usize) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for dir in ["round3/", "eval/", ""] {
        let secrets = corpus(&format!("{dir}secrets.txt"))?;
        let ordinary = corpus(&format!("{dir}ordinary.txt"))?;
        // family -> (prompts, flagged, bytes, seconds)
        let mut fam: BTreeMap<String, (usize, usize, usize, f64)> = BTreeMap::new();
        let mut run = |set: &[(String, String)], tag: &str| {
            for (family, prompt) in set {
                let t = Instant::now();
                let hit = scan(prompt).is_some();
                let e = fam.entry(format!("{tag} {family}")).or_default();
                e.3 += t.elapsed().as_secs_f64();
                e.0 += 1;
                e.1 += usize::from(hit);
                e.2 += prompt.len();
            }
        };
        run(&secrets, "secrets");
        run(&ordinary, "ordinary");
        let (mut st, mut sh, mut ot, mut oh) = (0, 0, 0, 0);
        println!("secret guard on fixtures/secrets/{dir}:");
        for (name, (n, hit, bytes, secs)) in &fam {
            let pct = *hit as f64 * 100.0 / *n as f64;
            let what = if name.starts_with("secrets") {
                "recall"
            } else {
                "false positives"
            };
            println!(
                "  {name}: {what} {pct:.2}% ({hit}/{n}), {:.1} MB/s",
                *bytes as f64 / secs.max(1e-9) / 1e6
            );
            if name.starts_with("secrets") {
                st += n;
                sh += hit;
            } else {
                ot += n;
                oh += hit;
            }
        }
        let label = match dir {
            "" => "own corpus",
            "eval/" => "eval set",
            _ => "round3 set",
        };
        let recall = sh as f64 * 100.0 / st as f64;
        rows.push(Row {
            what: format!("secret guard recall ({label})"),
            target: ">= 99 %".into(),
            measured: format!("{recall:.2} %"),
            verdict: if recall >= 99.0 { "PASS" } else { "MISS" },
        });
        rows.push(Row::le(
            &format!("secret guard false positives ({label})"),
            0.5,
            oh as f64 * 100.0 / ot as f64,
            "%",
        ));
    }
    // one 100 KB prompt made of the ordinary prompts (the slow case: no early hit)
    let ordinary = corpus("eval/ordinary.txt")?;
    let mut big = String::new();
    for (_, p) in ordinary.iter().cycle() {
        if big.len() >= 100 * 1024 {
            break;
        }
        big.push_str(p);
        big.push('\n');
    }
    let _ = scan(&big); // compiles the regexes once
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..reps {
        let (t, c) = (Instant::now(), thread_cpu_ms());
        let _ = scan(&big);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        cpu.push(thread_cpu_ms() - c);
    }
    println!(
        "secret guard: a {} KB prompt scanned in {:.2} ms (median of {reps}, min {:.2} ms; CPU median {:.2} ms)",
        big.len() / 1024,
        median(&times),
        min(&times),
        median(&cpu)
    );
    rows.push(Row::le(
        "secret scan of a 100 KB prompt (median)",
        5.0,
        median(&times),
        "ms",
    ));
    for name in SLOW_INPUTS {
        let (data, from) = slow_input(name)?;
        // as `fuzz/harness/secret_scan.rs` does: lossy UTF-8, repeated past 100 KB
        let text = String::from_utf8_lossy(&data);
        let big = text.repeat(100 * 1024 / text.len() + 1);
        let _ = scan(&big);
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        let started = Instant::now();
        // at least 3 runs; fewer than `reps` when one run is slow
        while times.len() < 3 || (times.len() < reps && started.elapsed().as_secs_f64() < 2.0) {
            let (t, c) = (Instant::now(), thread_cpu_ms());
            let _ = scan(&big);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            cpu.push(thread_cpu_ms() - c);
        }
        println!(
            "secret guard: fuzz input {name} ({from}) grown to {} KB scanned in {:.2} ms (median of {}, min {:.2} ms; CPU median {:.2} ms)",
            big.len() / 1024,
            median(&times),
            times.len(),
            min(&times),
            median(&cpu)
        );
        rows.push(Row::le(
            &format!("secret scan of fuzz input {name} at 100 KB (median)"),
            10.0,
            median(&times),
            "ms",
        ));
    }
    Ok(rows)
}

/// The slow inputs the `secret_scan` fuzz target found (docs/FUZZING.md).
const SLOW_INPUTS: &[&str] = &[
    "slow-secret-word-runs-on-one-line",
    "slow-long-nonascii-line",
];

/// A slow input's bytes and where they were read: a regression seed once fixed
/// (`fuzz/corpus/secret_scan/regress-<name>`), else `fuzz/artifacts-found/secret_scan-<name>`.
fn slow_input(name: &str) -> Result<(Vec<u8>, String), String> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut tried = Vec::new();
    for rel in [
        format!("corpus/secret_scan/regress-{name}"),
        format!("artifacts-found/secret_scan-{name}"),
    ] {
        match std::fs::read(fuzz.join(&rel)) {
            Ok(data) => return Ok((data, format!("fuzz/{rel}"))),
            Err(e) => tried.push(format!("fuzz/{rel}: {e}")),
        }
    }
    Err(tried.join("; "))
}
