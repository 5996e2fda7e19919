//! Replays the committed seeds of the `secret_scan` fuzz target (`fuzz/corpus/secret_scan/`)
//! through the same harness code, so plain `cargo test` runs them (docs/FUZZING.md).

#[path = "../../../fuzz/harness/secret_scan.rs"]
mod secret_scan;

#[test]
fn secret_scan_corpus_replays_without_panic() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/secret_scan");
    // the time bound is for the optimised fuzz build only
    secret_scan::TIME_BOUND.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| secret_scan::run(&data));
        assert!(outcome.is_ok(), "seed {} panics", path.display());
        n += 1;
    }
    assert!(n >= 50, "only {n} seeds");
}
