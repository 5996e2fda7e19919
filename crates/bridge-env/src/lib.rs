//! Every environment variable opencode-bridge reads, declared once.
//!
//! Each variable is an [`EnvVar`] constant: its name, its default as shown to people and what it
//! means. [`ALL`] lists them in the order `--help`, `doctor` and the README show them. The crates
//! that read a variable use the constant's `name`, never a literal; numeric defaults are read from
//! the constant at compile time ([`EnvVar::default_number`]), so the default in `--help` and the
//! default the code uses cannot drift apart. The binary's tests check the README table and
//! `--help` against [`ALL`].
//!
//! The crate has no dependencies and does no I/O except [`Program::find`], the one lookup of the
//! `opencode` and `claude` binaries (`OPENCODE_BIN`, `CLAUDE_BIN`), used by every crate that
//! starts them.
//!
//! Not listed: variables of the system (`HOME`, `PATH`, `XDG_*`), the ones only the test kit and
//! the benchmarks read (`FAKE_*`, `*_TEST_*`, `OPENCODE_BRIDGE_BENCH_BIN`) and the build script's
//! (`OPENCODE_BRIDGE_LINK_MAP`, `OPENCODE_BRIDGE_NO_SYMBOL_ORDER`).

mod vars;

pub use vars::*;
