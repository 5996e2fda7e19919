//! Secret-guard figures over two corpora: `fixtures/secrets/` (built by `generate.py` there) and
//! the larger evaluation set `fixtures/secrets/eval/` (built by `eval/generate.py`: formats from
//! public scanners' rule sets in realistic frames, and hard negatives). Prints recall on fake
//! secrets and the false-positive rate on ordinary prompts, per format family, and asserts recall
//! >= 99 % and false positives <= 0.5 % on each corpus.

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

/// The family of a label: the part before `/` (the eval set), else the label itself.
fn family(label: &str) -> &str {
    label.split_once('/').map_or(label, |(f, _)| f)
}

struct Figures {
    recall: f64,
    fp_rate: f64,
}

fn measure(dir: &str, min_secrets: usize, min_formats: usize, min_ordinary: usize) -> Figures {
    let secrets = corpus(&format!("{dir}secrets.txt"));
    let ordinary = corpus(&format!("{dir}ordinary.txt"));
    let formats: BTreeSet<&str> = secrets.iter().map(|(l, _)| l.as_str()).collect();
    assert!(
        secrets.len() >= min_secrets,
        "{dir}: {} secrets",
        secrets.len()
    );
    assert!(
        formats.len() >= min_formats,
        "{dir}: {} formats",
        formats.len()
    );
    assert!(
        ordinary.len() >= min_ordinary,
        "{dir}: {} ordinary",
        ordinary.len()
    );

    // family -> (total, caught)
    let mut per_family: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut missed: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (label, prompt)) in secrets.iter().enumerate() {
        let entry = per_family.entry(family(label)).or_default();
        entry.0 += 1;
        match scan(prompt) {
            Some(finding) => {
                entry.1 += 1;
                let shown = finding.to_string();
                assert!(
                    !prompt
                        .lines()
                        .any(|l| l.len() > 12 && shown.contains(l.trim())),
                    "a finding must not echo the prompt: {shown}"
                );
            }
            None => {
                eprintln!("missed {dir}secrets.txt:{} ({label})", i + 1);
                *missed.entry(label).or_default() += 1;
            }
        }
    }
    let mut fp_family: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut false_positives = 0;
    for (i, (label, prompt)) in ordinary.iter().enumerate() {
        let entry = fp_family.entry(family(label)).or_default();
        entry.0 += 1;
        if let Some(f) = scan(prompt) {
            entry.1 += 1;
            false_positives += 1;
            eprintln!("false positive {dir}ordinary.txt:{} ({label}): {f}", i + 1);
        }
    }
    let caught = secrets.len() - missed.values().sum::<usize>();
    let recall = caught as f64 / secrets.len() as f64;
    let fp_rate = false_positives as f64 / ordinary.len() as f64;
    println!(
        "secret guard on fixtures/secrets/{dir}: recall {:.2}% ({caught}/{} fake secrets, {} formats), false positives {:.2}% ({false_positives}/{} ordinary prompts)",
        recall * 100.0,
        secrets.len(),
        formats.len(),
        fp_rate * 100.0,
        ordinary.len()
    );
    for (fam, (total, hit)) in &per_family {
        println!(
            "  recall {fam}: {:.2}% ({hit}/{total})",
            *hit as f64 * 100.0 / *total as f64
        );
    }
    for (fam, (total, hit)) in &fp_family {
        println!(
            "  false positives {fam}: {:.2}% ({hit}/{total})",
            *hit as f64 * 100.0 / *total as f64
        );
    }
    if !missed.is_empty() {
        println!("  missed per format: {missed:?}");
    }
    Figures { recall, fp_rate }
}

#[test]
fn secret_guard_figures() {
    let f = measure("", 300, 30, 1000);
    assert!(f.recall >= 0.99, "recall {:.4} below 0.99", f.recall);
    assert!(
        f.fp_rate <= 0.005,
        "false positives {:.4} above 0.005",
        f.fp_rate
    );
}

#[test]
fn secret_guard_figures_on_the_eval_set() {
    let f = measure("eval/", 1500, 500, 1400);
    assert!(f.recall >= 0.99, "eval recall {:.4} below 0.99", f.recall);
    assert!(
        f.fp_rate <= 0.005,
        "eval false positives {:.4} above 0.005",
        f.fp_rate
    );
}
