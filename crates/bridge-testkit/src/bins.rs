//! Finding (and building on demand) the fake helper binaries of this crate from tests of other
//! crates, where `CARGO_BIN_EXE_*` is not set.
//!
//! The binaries live next to the test executable's `deps/` folder (`target/<profile>/`). A
//! binary newer than its source file is used as it is; otherwise `cargo build -p
//! bridge-testkit --bin <name>` is run once per test process (with the `CARGO` the test was
//! started by, and the same target dir and profile); if that fails, an existing binary is used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The `fake-opencode-v2` binary (a stand-in for the v2 CLI's `opencode api`).
pub fn fake_opencode_v2() -> PathBuf {
    testkit_bin("fake-opencode-v2")
}

/// The `fake-opencode` binary.
pub fn fake_opencode() -> PathBuf {
    testkit_bin("fake-opencode")
}

/// A binary of the bridge-testkit crate by name; panics with a clear message when it cannot be
/// found or built.
pub fn testkit_bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let dir = profile_dir();
    let path = dir.join(name);
    if is_fresh(&path, name) {
        built.insert(name.to_string(), path.clone());
        return path;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(["build", "--quiet", "-p", "bridge-testkit", "--bin", name])
        .args(profile_args(&dir))
        .status();
    let ok = matches!(status, Ok(s) if s.success());
    if !ok && !path.is_file() {
        panic!(
            "cannot build {name} (`{cargo} build -p bridge-testkit --bin {name}` failed: {status:?}) and {} does not exist",
            path.display()
        );
    }
    built.insert(name.to_string(), path.clone());
    path
}

/// Whether the binary exists and is newer than its source file (nextest runs every test in
/// its own process, so this saves a `cargo build` per test when `cargo build --bins` ran first).
fn is_fresh(bin: &Path, name: &str) -> bool {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/bin")
        .join(format!("{name}.rs"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(bin), modified(&src)) {
        (Some(b), Some(s)) => b >= s,
        _ => false,
    }
}

/// `target/<profile>/`, from the running test executable (`target/<profile>/deps/<test>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    let deps = exe.parent().expect("test executable has a folder");
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps has a parent").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// Build with the same profile and target dir the tests were built with.
fn profile_args(dir: &std::path::Path) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(target) = dir.parent() {
        args.push("--target-dir".to_string());
        args.push(target.display().to_string());
    }
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => args.push("--release".into()),
        Some(other) => {
            args.push("--profile".into());
            args.push(other.to_string());
        }
    }
    args
}
