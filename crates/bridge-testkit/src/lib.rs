//! Test support for opencode-bridge.
//!
//! - [`fake_llm`]: an OpenAI-compatible fake LLM server whose model name picks the behaviour.
//! - [`sandbox`]: the real opencode / Claude Code binaries in tests, and an isolated opencode
//!   world ([`OpencodeSandbox`]) wired to the fake LLM.

mod anthropic_api;
pub mod bins;
pub mod fake_anthropic;
pub mod fake_claude_api;
pub mod fake_llm;
mod http;
pub mod sandbox;

pub use fake_llm::{FakeLlm, RecordedRequest};
pub use sandbox::{OpencodeSandbox, RunOutput, real_claude, real_opencode};
