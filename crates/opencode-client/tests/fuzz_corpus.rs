//! Replays every committed seed of the `store_rows` and `service_json` fuzz targets through the
//! same harnesses the fuzzer runs (`fuzz/harness/store.rs`, `fuzz/harness/service.rs`), so plain
//! `cargo test` covers the corpora without cargo-fuzz. See docs/FUZZING.md.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[path = "../../../fuzz/harness/service.rs"]
mod service;
#[path = "../../../fuzz/harness/store.rs"]
mod store;

fn replay(target: &str, min_seeds: usize, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= min_seeds,
        "expected the committed {target} seeds, found {}",
        files.len()
    );
    let failed: Vec<String> = files
        .iter()
        .filter(|f| {
            let data = std::fs::read(f).expect("seed readable");
            catch_unwind(AssertUnwindSafe(|| run(&data))).is_err()
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(failed.is_empty(), "{target} seeds that panic: {failed:?}");
}

#[test]
fn store_rows_corpus_replays_without_panic() {
    replay("store_rows", 10, store::run);
}

#[test]
fn service_json_corpus_replays_without_panic() {
    replay("service_json", 10, service::run);
}
