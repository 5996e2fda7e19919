//! Secret-guard figures over the corpora in `fixtures/secrets/` (built by `generate.py` there):
//! recall on fake secrets and the false-positive rate on ordinary prompts. Prints both, asserts
//! recall >= 99 % and false positives <= 0.5 %.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use bridge_policy::secrets::scan;

/// `(label, prompt)` pairs from a corpus file; `⏎` stands for a line break.
fn corpus(name: &str) -> Vec<(String, String)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/secrets")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (label, prompt) = l.split_once('\t').expect("label<TAB>prompt");
            (label.to_owned(), prompt.replace('\u{23ce}', "\n"))
        })
        .collect()
}

#[test]
fn secret_guard_figures() {
    let secrets = corpus("secrets.txt");
    let ordinary = corpus("ordinary.txt");
    let formats: BTreeSet<&str> = secrets.iter().map(|(l, _)| l.as_str()).collect();
    assert!(
        secrets.len() >= 300,
        "need >= 300 fake secrets, have {}",
        secrets.len()
    );
    assert!(
        formats.len() >= 30,
        "need >= 30 formats, have {}",
        formats.len()
    );
    assert!(
        ordinary.len() >= 1000,
        "need >= 1000 ordinary prompts, have {}",
        ordinary.len()
    );

    let mut missed: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (label, prompt)) in secrets.iter().enumerate() {
        match scan(prompt) {
            Some(finding) => {
                let shown = finding.to_string();
                assert!(
                    !prompt
                        .lines()
                        .any(|l| l.len() > 12 && shown.contains(l.trim())),
                    "a finding must not echo the prompt: {shown}"
                );
            }
            None => {
                eprintln!("missed secrets.txt:{} ({label})", i + 1);
                *missed.entry(label).or_default() += 1;
            }
        }
    }
    let mut false_positives: Vec<String> = Vec::new();
    for (i, (label, prompt)) in ordinary.iter().enumerate() {
        if let Some(f) = scan(prompt) {
            false_positives.push(format!("ordinary.txt:{} ({label}): {f}", i + 1));
        }
    }
    for fp in &false_positives {
        eprintln!("false positive {fp}");
    }
    let caught = secrets.len() - missed.values().sum::<usize>();
    let recall = caught as f64 / secrets.len() as f64;
    let fp_rate = false_positives.len() as f64 / ordinary.len() as f64;
    println!(
        "secret guard: recall {:.2}% ({caught}/{} fake secrets, {} formats), false positives {:.2}% ({}/{} ordinary prompts)",
        recall * 100.0,
        secrets.len(),
        formats.len(),
        fp_rate * 100.0,
        false_positives.len(),
        ordinary.len()
    );
    assert!(
        recall >= 0.99,
        "recall {recall:.4} below 0.99; missed per format: {missed:?}"
    );
    assert!(
        fp_rate <= 0.005,
        "false-positive rate {fp_rate:.4} above 0.005"
    );
}
