//! Lays the functions a cold start runs next to each other in the release binary.
//!
//! A cold start (`initialize`, `tools/list`, exit) runs about 750 kB of the binary's 6 MB of
//! code, spread over all of it; the kernel maps code 64 kB around every page that faults, so
//! scattered code costs resident memory far beyond its size. `startup-order.txt` lists those
//! functions (by linker symbol; regenerate it with
//! `cargo run --release -p bridge-bench --bin startup-order`) and lld's
//! `--symbol-ordering-file` puts them first. Names that no longer exist are ignored, so a
//! stale list costs memory, never correctness. See docs/PERFORMANCE.md, "Cold start".
//!
//! Only for release builds on x86_64 Linux with glibc, where rustc (1.90 and later) links with
//! its own lld; skipped when a linker is configured by hand or when
//! `OPENCODE_BRIDGE_NO_SYMBOL_ORDER` is set.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=startup-order.txt");
    println!("cargo:rerun-if-env-changed=OPENCODE_BRIDGE_NO_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=OPENCODE_BRIDGE_LINK_MAP");
    if env::var("PROFILE").as_deref() == Ok("release")
        && let Ok(map) = env::var("OPENCODE_BRIDGE_LINK_MAP")
    {
        // For `bridge-bench --bin startup-order`: where every function landed.
        println!("cargo:rustc-link-arg-bin=opencode-bridge=-Wl,-Map={map}");
    }
    if !wanted() {
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let file = Path::new(&dir).join("startup-order.txt");
    if !file.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=opencode-bridge=-Wl,--symbol-ordering-file={}",
        file.display()
    );
    println!("cargo:rustc-link-arg-bin=opencode-bridge=-Wl,--no-warn-symbol-ordering");
}

fn wanted() -> bool {
    let var = |k: &str| env::var(k).unwrap_or_default();
    if env::var_os("OPENCODE_BRIDGE_NO_SYMBOL_ORDER").is_some()
        || var("PROFILE") != "release"
        || var("CARGO_CFG_TARGET_ARCH") != "x86_64"
        || var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || env::var_os("RUSTC_LINKER").is_some()
    {
        return false;
    }
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if ["linker", "fuse-ld", "link-self-contained"]
        .iter()
        .any(|f| flags.contains(f))
    {
        return false;
    }
    rustc_minor().is_some_and(|m| m >= 90)
}

/// The minor version of the compiler cargo runs (`rustc 1.95.0 (...)` gives 95).
fn rustc_minor() -> Option<u32> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    (parts.next()? == "1").then_some(())?;
    parts.next()?.parse().ok()
}
