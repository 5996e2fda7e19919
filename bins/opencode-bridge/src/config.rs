//! The server's own settings, read once from the environment.
//!
//! Library crates read the variables they own themselves (the policy its mode variables, the
//! supervisor its limits, the client its backend settings); this module holds what only the
//! binary uses, and the table of every variable that `doctor` and the README show.

use std::path::{Path, PathBuf};

/// One environment variable the bridge reads, with its default as shown to people.
#[derive(Debug, Clone, Copy)]
pub struct EnvVar {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

/// Every variable the bridge reads. `doctor` prints the ones that are set.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "OPENCODE_BRIDGE_ROOT",
        default: "the server's working directory",
        meaning: "directory tree delegated tasks may use as cwd",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_MODEL",
        default: "opencode's default",
        meaning: "model for delegated runs, provider/model[#variant]",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_AGENT",
        default: "worker (explorer in sensitive mode)",
        meaning: "agent used when opencode_start gets none",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_MODE",
        default: "unset",
        meaning: "force a routing mode: blueprint, sensitive or insensitive",
    },
    EnvVar {
        name: "OPENCODE_MODE",
        default: "unset",
        meaning: "same as OPENCODE_BRIDGE_MODE",
    },
    EnvVar {
        name: "CLAUDE_CONFIG_DIR",
        default: "unset",
        meaning: "also searched for an `insensitive` marker file",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_STRUCTURED",
        default: "auto",
        meaning: "structured results (outputSchema, structuredContent): auto (every client but Claude Code), on, off",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_MAX_PARALLEL",
        default: "6",
        meaning: "delegated tasks running at once (1-64)",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_TIMEOUT_MIN",
        default: "120",
        meaning: "per-task timeout in minutes (timeout_minutes overrides it)",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_RETRIES",
        default: "2",
        meaning: "automatic retries of transient errors (read-only agents only)",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_RETRY_DELAY_S",
        default: "20",
        meaning: "first retry delay in seconds, then x3",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_QUIET_MIN",
        default: "10",
        meaning: "a running task silent this many minutes is flagged `quiet` in its status",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_API_TIMEOUT_MS",
        default: "45000",
        meaning: "timeout of one call to an opencode server",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_SCAN_DEADLINE_MS",
        default: "35000",
        meaning: "a session scan stops here and answers PARTIAL",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_KILL_GRACE_MS",
        default: "5000",
        meaning: "SIGTERM to SIGKILL grace when a task is stopped",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_STATE_DIR",
        default: "$XDG_STATE_HOME/opencode-bridge (~/.local/state/opencode-bridge)",
        meaning: "the task registry: every task, its outcome and output, across restarts",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_ROSTER",
        default: "opencode",
        meaning: "`files`: read the agent files instead of asking opencode for its roster",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_PRUNE_DAYS",
        default: "7",
        meaning: "finished tasks older than this many days leave the registry",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_BACKEND",
        default: "unset: the server if OPENCODE_BRIDGE_SERVER_URL is set, else the store, else `opencode api`",
        meaning: "where sessions are read: store, server or api",
    },
    EnvVar {
        name: "OPENCODE_BRIDGE_SERVER_URL",
        default: "unset",
        meaning: "an `opencode serve` URL for the server backend (and renames)",
    },
    EnvVar {
        name: "OPENCODE_SERVER_USERNAME",
        default: "opencode",
        meaning: "Basic auth user for that server",
    },
    EnvVar {
        name: "OPENCODE_SERVER_PASSWORD",
        default: "unset",
        meaning: "Basic auth password for that server",
    },
    EnvVar {
        name: "OPENCODE_BIN",
        default: "`opencode` on PATH",
        meaning: "the opencode binary to run",
    },
    EnvVar {
        name: "CLAUDE_BIN",
        default: "`claude` on PATH",
        meaning: "the Claude Code binary, for tasks whose model is a Claude model (sonnet, opus, haiku, claude-...)",
    },
    EnvVar {
        name: "OPENCODE_DB",
        default: "$XDG_DATA_HOME/opencode/opencode.db",
        meaning: "opencode's SQLite store",
    },
    EnvVar {
        name: "RUST_LOG",
        default: "warn",
        meaning: "log filter; logs go to stderr only",
    },
];

/// What the binary itself needs (the libraries read their own variables).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The tree delegated tasks may use as their working directory (canonical when it exists).
    pub root: PathBuf,
    /// Whether `OPENCODE_BRIDGE_ROOT` set the root (else it is the server's working directory).
    pub root_explicit: bool,
    /// `HOME`, canonical, to recognise a root that is the home directory.
    pub home: Option<PathBuf>,
    /// Which clients get structured results (`OPENCODE_BRIDGE_STRUCTURED`).
    pub structured: Structured,
}

/// Which clients get `outputSchema`s and `structuredContent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structured {
    /// Every client but Claude Code: Claude Code 2.1.328 hands the model the JSON of
    /// `structuredContent` instead of the text, and the text is what the model should read
    /// (its next steps, advice and rules are not in the data).
    Auto,
    /// Every client.
    On,
    /// No client.
    Off,
}

impl Structured {
    /// The value of `OPENCODE_BRIDGE_STRUCTURED`, or why it is not accepted.
    pub fn parse(value: &str) -> Result<Structured, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Structured::Auto),
            "on" | "1" | "true" | "yes" => Ok(Structured::On),
            "off" | "0" | "false" | "no" => Ok(Structured::Off),
            _ => Err(format!(
                "OPENCODE_BRIDGE_STRUCTURED={value:?} is not accepted; use auto, on or off (auto is used)"
            )),
        }
    }

    /// Whether a client of this name (`clientInfo.name`) gets structured results.
    pub fn for_client(self, client_name: Option<&str>) -> bool {
        match self {
            Structured::On => true,
            Structured::Off => false,
            Structured::Auto => client_name != Some("claude-code"),
        }
    }
}

impl Settings {
    /// Reads the settings from the process environment; malformed numbers fall back to the
    /// default with a warning on stderr.
    pub fn from_env() -> Settings {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let explicit = std::env::var_os("OPENCODE_BRIDGE_ROOT")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let root_explicit = explicit.is_some();
        let root = absolute(&explicit.unwrap_or(cwd));
        let home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|h| absolute(Path::new(&h)));
        let structured = match std::env::var("OPENCODE_BRIDGE_STRUCTURED") {
            Ok(v) => Structured::parse(&v).unwrap_or_else(|e| {
                eprintln!("opencode-bridge: warning: {e}");
                Structured::Auto
            }),
            Err(_) => Structured::Auto,
        };
        Settings {
            root,
            root_explicit,
            home,
            structured,
        }
    }

    /// Why the root is too broad for editing agents: it was not set explicitly and is `/` or
    /// the home directory (a server started there by accident). `None` when it is fine.
    pub fn broad_root(&self) -> Option<&'static str> {
        if self.root_explicit {
            return None;
        }
        if self.root == Path::new("/") {
            Some("the filesystem root")
        } else if self.home.as_deref() == Some(self.root.as_path()) {
            Some("the home directory")
        } else {
            None
        }
    }

    /// The one line that names the root and where it came from.
    pub fn root_line(&self) -> String {
        let from = if self.root_explicit {
            "OPENCODE_BRIDGE_ROOT"
        } else {
            "the server's working directory; OPENCODE_BRIDGE_ROOT is not set"
        };
        let mut line = format!(
            "Delegation root: {} (from {from}); tasks may only work inside it.",
            self.root.display()
        );
        if let Some(what) = self.broad_root() {
            line.push_str(&format!(
                " It is {what}: editing agents are refused until OPENCODE_BRIDGE_ROOT names the projects tree."
            ));
        }
        line
    }
}

/// A path made absolute and canonical when possible (symlinks resolved), else cleaned lexically.
pub fn absolute(path: &Path) -> PathBuf {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        return canonical;
    }
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The environment variable table for `--help`.
pub fn env_help() -> String {
    let mut out = String::from("Environment variables:\n");
    for v in ENV_VARS {
        out.push_str(&format!(
            "  {}\n      {} (default: {})\n",
            v.name, v.meaning, v.default
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README documents every variable the bridge reads.
    #[test]
    fn structured_results_go_to_every_client_but_claude_code_by_default() {
        assert_eq!(Structured::parse("AUTO"), Ok(Structured::Auto));
        assert_eq!(Structured::parse("on"), Ok(Structured::On));
        assert_eq!(Structured::parse(" off "), Ok(Structured::Off));
        let e = Structured::parse("maybe").unwrap_err();
        assert!(e.contains("use auto, on or off"), "{e}");
        assert!(Structured::Auto.for_client(Some("python-mcp")));
        assert!(Structured::Auto.for_client(None));
        assert!(!Structured::Auto.for_client(Some("claude-code")));
        assert!(Structured::On.for_client(Some("claude-code")));
        assert!(!Structured::Off.for_client(Some("python-mcp")));
    }

    #[test]
    fn readme_lists_every_variable() {
        let readme = include_str!("../../../README.md");
        for v in ENV_VARS {
            assert!(
                readme.contains(&format!("`{}`", v.name)),
                "README misses {}",
                v.name
            );
        }
    }
}
