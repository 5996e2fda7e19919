//! Replays every committed seed of the `event_lines` and `quota_parse` fuzz targets through the
//! same harnesses the fuzzer runs (`fuzz/harness/events.rs`, `fuzz/harness/quota.rs`), so plain `cargo test` covers the corpus without
//! cargo-fuzz. See docs/FUZZING.md.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[path = "../../../fuzz/harness/events.rs"]
mod events;
#[path = "../../../fuzz/harness/quota.rs"]
mod quota;

fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn event_lines_corpus_replays_without_panic() {
    let files = seeds("event_lines");
    assert!(
        files.len() >= 10,
        "expected the committed event_lines seeds, found {}",
        files.len()
    );
    let failed: Vec<String> = files
        .iter()
        .filter(|f| {
            let data = std::fs::read(f).expect("seed readable");
            catch_unwind(AssertUnwindSafe(|| events::run(&data))).is_err()
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(failed.is_empty(), "seeds that panic: {failed:?}");
}

#[test]
fn quota_parse_corpus_replays_without_panic() {
    let files = seeds("quota_parse");
    assert!(
        files.len() >= 8,
        "expected the committed quota_parse seeds, found {}",
        files.len()
    );
    let failed: Vec<String> = files
        .iter()
        .filter(|f| {
            let data = std::fs::read(f).expect("seed readable");
            catch_unwind(AssertUnwindSafe(|| quota::run(&data))).is_err()
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(failed.is_empty(), "seeds that panic: {failed:?}");
}
