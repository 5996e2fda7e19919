//! `opencode-bridge check-secrets [FILE|-]`: the secret guard as a command, for Claude Code
//! hooks and git pre-commit hooks (docs/POLICY.md, "Secret guard").
//!
//! Reads FILE (or stdin for `-` or no argument), prints one `FILE:LINE: KIND` line per finding
//! on stdout (never the value) and exits 1; exits 0 when clean, 2 when the input cannot be
//! read. The project allowlist of the current directory is honoured.

use std::io::Read;
use std::path::Path;

use bridge_policy::SystemEnv;
use bridge_policy::secrets::{Allowlist, findings};

/// Runs the check; returns the exit code.
pub fn run(file: Option<&str>) -> i32 {
    let name = file.unwrap_or("-");
    let text = if name == "-" {
        let mut buf = Vec::new();
        if let Err(e) = std::io::stdin().read_to_end(&mut buf) {
            eprintln!("opencode-bridge check-secrets: cannot read stdin: {e}");
            return 2;
        }
        String::from_utf8_lossy(&buf).into_owned()
    } else {
        match std::fs::read(name) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                eprintln!("opencode-bridge check-secrets: cannot read {name}: {e}");
                return 2;
            }
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| Path::new(".").to_path_buf());
    let allow = Allowlist::load(&SystemEnv, &cwd);
    if let Some(path) = allow.path() {
        for p in allow.problems() {
            eprintln!("opencode-bridge check-secrets: {}: {p}", path.display());
        }
    }
    let found = findings(&text, &allow);
    for f in &found {
        println!("{name}:{}: {}", f.line, f.kind);
    }
    if found.is_empty() { 0 } else { 1 }
}
