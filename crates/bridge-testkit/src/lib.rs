//! Test support for opencode-bridge.
//!
//! - [`fake_llm`]: an OpenAI-compatible fake LLM server whose model name picks the behaviour.
//! - [`sandbox`]: the real opencode / Claude Code binaries in tests, and an isolated opencode
//!   world ([`OpencodeSandbox`]) wired to the fake LLM.
//! - [`http`]: the loopback HTTP plumbing of the fakes, for any test that needs a server
//!   (scripted answers, a hung service, a closed port).

mod anthropic_api;
pub mod bins;
pub mod fake_anthropic;
pub mod fake_claude_api;
pub mod fake_llm;
pub mod http;
pub mod sandbox;

pub use fake_llm::{FakeLlm, RecordedRequest};
pub use sandbox::{OpencodeSandbox, RunOutput, SandboxServe, real_claude, real_opencode};

/// Runs `git -C dir <args>` with a fixed test identity (author and committer `t`), output
/// discarded, for tests that build a small repository.
///
/// # Panics
/// When git cannot be run or exits non-zero.
pub fn git(dir: &std::path::Path, args: &[&str]) {
    let st = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run git: {e}"));
    assert!(st.success(), "git {args:?} in {}", dir.display());
}

/// Makes `dir` a git repository holding `files` (path, content) in one commit, `init`.
///
/// # Panics
/// When a file cannot be written or git fails.
pub fn git_repo(dir: &std::path::Path, files: &[(&str, &str)]) {
    git(dir, &["init", "-q"]);
    for (path, content) in files {
        std::fs::write(dir.join(path), content)
            .unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
    }
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "init"]);
}
