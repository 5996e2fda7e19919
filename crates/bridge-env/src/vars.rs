//! Every variable the bridge reads, declared once: name, default, meaning, range; and how a
//! value is read.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// One environment variable the bridge reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// The default as shown to people (`--help`, the README); for a number, the number itself.
    pub default: &'static str,
    /// What it does, in one line.
    pub meaning: &'static str,
    /// Whether `doctor` may print the value (not for passwords or inline configs).
    pub shown: bool,
    /// For a number: the values it may take (inclusive) and their unit. Every numeric variable
    /// has one, so no value the environment holds can overflow the arithmetic it feeds.
    pub range: Option<Range>,
}

/// The values a numeric variable may take: whole numbers from `min` to `max`, in `unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The smallest value.
    pub min: u64,
    /// The largest value.
    pub max: u64,
    /// What one is (`minutes`, `ms`, ...), as shown after the range.
    pub unit: &'static str,
}

/// A numeric variable's value as read: what the bridge uses, and what was wrong with what was
/// given, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Number {
    /// The value used: the one given, held to the range when it was outside it, or the default
    /// when it was not a whole number.
    pub value: u64,
    /// One line naming the variable, the value and the range, when the value was not in it.
    pub error: Option<String>,
}

impl EnvVar {
    const fn new(name: &'static str, default: &'static str, meaning: &'static str) -> EnvVar {
        EnvVar {
            name,
            default,
            meaning,
            shown: true,
            range: None,
        }
    }

    /// A whole number from `min` to `max` (`unit` says what one is). A default outside the
    /// range fails the build.
    const fn number(
        name: &'static str,
        default: &'static str,
        (min, max, unit): (u64, u64, &'static str),
        meaning: &'static str,
    ) -> EnvVar {
        let v = EnvVar {
            name,
            default,
            meaning,
            shown: true,
            range: Some(Range { min, max, unit }),
        };
        let d = v.default_number();
        assert!(min <= d && d <= max, "the default is outside the range");
        v
    }

    /// The default as shown in `--help`, `doctor` and the README: for a number, with its
    /// range (`120 (1-10080 minutes)`).
    pub fn shown_default(&self) -> String {
        match self.range {
            Some(r) => format!("{} ({}-{} {})", self.default, r.min, r.max, r.unit),
            None => self.default.to_owned(),
        }
    }

    /// Reads a numeric variable's value (`None` or blank: unset, `None` back; a variable
    /// without a range: `None`). A value outside the range is held to it, one that is not a
    /// whole number gives the default; either way [`Number::error`] says so in one line.
    ///
    /// ```
    /// let n = bridge_env::TIMEOUT_MIN.read(Some("18446744073709551615")).unwrap();
    /// assert_eq!(n.value, 10_080);
    /// assert_eq!(
    ///     n.error.as_deref(),
    ///     Some("OPENCODE_BRIDGE_TIMEOUT_MIN=18446744073709551615 is out of range: give a whole number from 1 to 10080 (minutes)")
    /// );
    /// ```
    pub fn read(&self, value: Option<&str>) -> Option<Number> {
        let r = self.range?;
        let v = value.map(str::trim).filter(|v| !v.is_empty())?;
        let shown: String = if v.chars().count() > 40 {
            v.chars().take(40).chain("…".chars()).collect()
        } else {
            v.to_owned()
        };
        let shown = shown.escape_debug().to_string();
        let range = format!("a whole number from {} to {} ({})", r.min, r.max, r.unit);
        if !v.bytes().all(|b| b.is_ascii_digit()) {
            return Some(Number {
                value: self.default_number(),
                error: Some(format!(
                    "{}={shown} is not a whole number: give {range}",
                    self.name
                )),
            });
        }
        // Digits only: a number too large for a u64 is simply too large.
        let n = v.parse::<u64>().unwrap_or(u64::MAX);
        let value = n.clamp(r.min, r.max);
        Some(Number {
            value,
            error: (value != n)
                .then(|| format!("{}={shown} is out of range: give {range}", self.name)),
        })
    }
}

/// The one-line error of every numeric variable whose value is not in its range, in the
/// order of [`ALL`], read through `get`.
pub fn number_errors(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
    ALL.iter()
        .filter_map(|v| v.read(get(v.name).as_deref())?.error)
        .collect()
}

impl EnvVar {
    const fn hidden(self) -> EnvVar {
        EnvVar {
            shown: false,
            ..self
        }
    }

    /// The default as a number. Evaluated in a `const`, a default that is not a decimal number
    /// fails the build.
    ///
    /// ```
    /// const N: u64 = bridge_env::MAX_PARALLEL.default_number();
    /// assert_eq!(N, 6);
    /// ```
    pub const fn default_number(&self) -> u64 {
        let digits = self.default.as_bytes();
        assert!(!digits.is_empty(), "the default is not a number");
        let mut n: u64 = 0;
        let mut i = 0;
        while i < digits.len() {
            assert!(digits[i].is_ascii_digit(), "the default is not a number");
            n = n * 10 + (digits[i] - b'0') as u64;
            i += 1;
        }
        n
    }
}

/// `OPENCODE_BRIDGE_ROOT`.
pub const ROOT: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_ROOT",
    "the server's working directory",
    "directory tree delegated tasks may use as cwd",
);
/// `OPENCODE_BRIDGE_MODEL`.
pub const MODEL: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_MODEL",
    "opencode's default",
    "model for delegated runs, provider/model[#variant]",
);
/// `OPENCODE_BRIDGE_AGENT`.
pub const AGENT: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_AGENT",
    "worker (explorer in sensitive mode)",
    "agent used when opencode_start gets none",
);
/// `OPENCODE_BRIDGE_MODE`.
pub const BRIDGE_MODE: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_MODE",
    "unset",
    "force a routing mode: blueprint, sensitive or insensitive",
);
/// `OPENCODE_MODE`.
pub const OPENCODE_MODE: EnvVar =
    EnvVar::new("OPENCODE_MODE", "unset", "same as OPENCODE_BRIDGE_MODE");
/// `CLAUDE_CONFIG_DIR`.
pub const CLAUDE_CONFIG_DIR: EnvVar = EnvVar::new(
    "CLAUDE_CONFIG_DIR",
    "unset",
    "also searched for an `insensitive` marker file",
);
/// `OPENCODE_BRIDGE_STRUCTURED`.
pub const STRUCTURED: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_STRUCTURED",
    "auto",
    "structured results (outputSchema, structuredContent): auto (every client but Claude Code), on, off",
);
/// `OPENCODE_BRIDGE_MAX_PARALLEL`.
pub const MAX_PARALLEL: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_MAX_PARALLEL",
    "6",
    (1, 64, "tasks"),
    "delegated tasks running at once",
);
/// `OPENCODE_BRIDGE_TIMEOUT_MIN`.
pub const TIMEOUT_MIN: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_TIMEOUT_MIN",
    "120",
    (1, 10_080, "minutes"),
    "per-task timeout in minutes (timeout_minutes overrides it)",
);
/// `OPENCODE_BRIDGE_RETRIES`.
pub const RETRIES: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_RETRIES",
    "2",
    (0, 10, "retries"),
    "automatic retries of transient errors (read-only agents only)",
);
/// `OPENCODE_BRIDGE_RETRY_DELAY_S`.
pub const RETRY_DELAY_S: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_RETRY_DELAY_S",
    "20",
    (0, 3_600, "seconds"),
    "first retry delay in seconds, then x3",
);
/// `OPENCODE_BRIDGE_QUIET_MIN`.
pub const QUIET_MIN: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_QUIET_MIN",
    "10",
    (1, 1_440, "minutes"),
    "a running task silent this many minutes is flagged `quiet` in its status",
);
/// `OPENCODE_BRIDGE_API_TIMEOUT_MS`.
pub const API_TIMEOUT_MS: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_API_TIMEOUT_MS",
    "45000",
    (1, 3_600_000, "ms"),
    "timeout of one call to an opencode server",
);
/// `OPENCODE_BRIDGE_SCAN_DEADLINE_MS`.
pub const SCAN_DEADLINE_MS: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_SCAN_DEADLINE_MS",
    "35000",
    (1, 3_600_000, "ms"),
    "a session scan stops here and answers PARTIAL",
);
/// `OPENCODE_BRIDGE_KILL_GRACE_MS`.
pub const KILL_GRACE_MS: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_KILL_GRACE_MS",
    "5000",
    (0, 600_000, "ms"),
    "SIGTERM to SIGKILL grace when a task is stopped",
);
/// `OPENCODE_BRIDGE_RUN_NICE`.
pub const RUN_NICE: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_RUN_NICE",
    "10",
    (0, 19, "nice levels"),
    "runs start this much nicer than the bridge (0: the bridge's priority), so busy agents yield the CPU to interactive work",
);
/// `OPENCODE_BRIDGE_SANDBOX`.
pub const SANDBOX: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_SANDBOX",
    "auto",
    "the kernel fence (Landlock) around every run: auto (confine where the kernel can, say why not elsewhere), required (refuse to run unconfined), off",
);
/// `OPENCODE_BRIDGE_ENGINE`.
pub const ENGINE: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_ENGINE",
    "serve",
    "how opencode tasks run: `serve` (sessions on a warm local `opencode serve` the bridge starts and stops; where none starts, tasks run as `run`) or `run` (an `opencode run` process per attempt)",
);
/// `OPENCODE_BRIDGE_SERVE_IDLE_MIN`.
pub const SERVE_IDLE_MIN: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_SERVE_IDLE_MIN",
    "10",
    (1, 10_080, "minutes"),
    "a warm local server with no turn running for this many minutes stops, whether or not a bridge is attached; it starts again on the next task",
);
/// `OPENCODE_BRIDGE_SERVE_IDLE_MS`: the same idle time in milliseconds, for tests that watch a
/// server stop (not shown: people set minutes).
pub const SERVE_IDLE_MS: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_SERVE_IDLE_MS",
    "600000",
    (1_000, 604_800_000, "ms"),
    "the idle time of a warm local server in milliseconds, over OPENCODE_BRIDGE_SERVE_IDLE_MIN (tests)",
)
.hidden();
/// `OPENCODE_BRIDGE_ON_EXIT`.
pub const ON_EXIT: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_ON_EXIT",
    "leave",
    "what a clean stop of the bridge (stdin closed, SIGTERM) does to running tasks: `leave` them running (the next bridge adopts them and reports their results) or `cancel` them",
);
/// `OPENCODE_BRIDGE_SERVE_MAX`.
pub const SERVE_MAX: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_SERVE_MAX",
    "4",
    (1, 64, "servers"),
    "the serve engine keeps at most this many warm local servers (one per project, access and environment): starting another first stops the one idle longest; a server with a task running is never stopped for it",
);
/// `OPENCODE_BRIDGE_CONFIG`.
pub const CONFIG: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_CONFIG",
    "$XDG_CONFIG_HOME/opencode-bridge/config.toml (~/.config/opencode-bridge/config.toml)",
    "the bridge's config file (TOML: remote servers, budgets, prices); a named file must exist",
);
/// `OPENCODE_BRIDGE_PASS_ENV`.
pub const PASS_ENV: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_PASS_ENV",
    "unset",
    "more of the bridge's variables that reach runs (names, or prefixes ending in *, comma-separated); runs get only the basics, proxies, CA bundles and their model's provider keys otherwise",
);
/// `OPENCODE_BRIDGE_STATE_DIR`.
pub const STATE_DIR: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_STATE_DIR",
    "$XDG_STATE_HOME/opencode-bridge (~/.local/state/opencode-bridge)",
    "the task registry: every task, its outcome and output, across restarts",
);
/// `OPENCODE_BRIDGE_ROSTER`.
pub const ROSTER: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_ROSTER",
    "opencode",
    "`files`: read the agent files instead of asking opencode for its roster",
);
/// `OPENCODE_BRIDGE_PRUNE_DAYS`.
pub const PRUNE_DAYS: EnvVar = EnvVar::number(
    "OPENCODE_BRIDGE_PRUNE_DAYS",
    "7",
    (0, 36_500, "days"),
    "finished tasks older than this many days leave the registry; so do isolated tasks' worktrees neither applied nor discarded",
);
/// `OPENCODE_BRIDGE_COMPARE_MODEL`.
pub const COMPARE_MODEL: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_COMPARE_MODEL",
    "sonnet",
    "the Claude model a task's tokens are priced at for its Claude-equivalent cost and savings (an estimate: tokenizers differ); `sonnet`, `opus` and `haiku` name the newest of that family in the price data",
);
/// `OPENCODE_BRIDGE_BUDGET_DAY_USD`.
pub const BUDGET_DAY_USD: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_BUDGET_DAY_USD",
    "unset: no limit",
    "starts are refused once this many USD were spent, or would be with what running tasks and the start reserve, in the UTC day (warned at 80 %); running tasks stop once it is spent; the config file's `[budget]` may set it too, and per project",
);
/// `OPENCODE_BRIDGE_BUDGET_MONTH_USD`.
pub const BUDGET_MONTH_USD: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_BUDGET_MONTH_USD",
    "unset: no limit",
    "the same per UTC month (warned at 80 %)",
);
/// `OPENCODE_BRIDGE_BACKEND`.
pub const BACKEND: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_BACKEND",
    "unset: the server if OPENCODE_BRIDGE_SERVER_URL is set, else the store, else `opencode api`",
    "where sessions are read: store, server or api",
);
/// `OPENCODE_BRIDGE_SERVER_URL`.
pub const SERVER_URL: EnvVar = EnvVar::new(
    "OPENCODE_BRIDGE_SERVER_URL",
    "unset",
    "an `opencode serve` URL for the server backend (and renames)",
);
/// `OPENCODE_SERVER_USERNAME`.
pub const SERVER_USERNAME: EnvVar = EnvVar::new(
    "OPENCODE_SERVER_USERNAME",
    "opencode",
    "Basic auth user for that server",
);
/// `OPENCODE_SERVER_PASSWORD`.
pub const SERVER_PASSWORD: EnvVar = EnvVar::new(
    "OPENCODE_SERVER_PASSWORD",
    "unset",
    "Basic auth password for that server",
)
.hidden();
/// `OPENCODE_BIN`: see [`Program::find`] for how it is read.
pub const OPENCODE_BIN: EnvVar = EnvVar::new(
    "OPENCODE_BIN",
    "`opencode` on PATH",
    "the opencode binary to run: a path, or a name looked up on PATH",
);
/// `CLAUDE_BIN`: see [`Program::find`] for how it is read.
pub const CLAUDE_BIN: EnvVar = EnvVar::new(
    "CLAUDE_BIN",
    "`claude` on PATH",
    "the Claude Code binary (a path, or a name looked up on PATH), for tasks whose model is a Claude model (sonnet, opus, haiku, claude-...)",
);
/// `CLAUDE_CODE_SESSION_ID`: set by Claude Code (2.1.328) for the stdio servers and hooks it
/// starts.
pub const CLAUDE_SESSION: EnvVar = EnvVar::new(
    "CLAUDE_CODE_SESSION_ID",
    "set by Claude Code",
    "the Claude Code session that started the bridge: recorded with each task, so `opencode-bridge hook stop` tells that session about its own tasks",
);
/// `OPENCODE_DB`.
pub const OPENCODE_DB: EnvVar = EnvVar::new(
    "OPENCODE_DB",
    "$XDG_DATA_HOME/opencode/opencode.db",
    "opencode's SQLite store",
);
/// `OPENCODE_CONFIG` (opencode's own; read to know its roster).
pub const OPENCODE_CONFIG: EnvVar = EnvVar::new(
    "OPENCODE_CONFIG",
    "unset",
    "opencode's extra config file, read for the agent roster",
);
/// `OPENCODE_CONFIG_DIR` (opencode's own; read to know its roster).
pub const OPENCODE_CONFIG_DIR: EnvVar = EnvVar::new(
    "OPENCODE_CONFIG_DIR",
    "unset",
    "opencode's extra config directory, read for the agent roster",
);
/// `OPENCODE_CONFIG_CONTENT` (opencode's own): read for the roster, and merged under the
/// overlay every delegated run gets.
pub const OPENCODE_CONFIG_CONTENT: EnvVar = EnvVar::new(
    "OPENCODE_CONFIG_CONTENT",
    "unset",
    "opencode's inline config (JSON), read for the roster and kept under each run's overlay",
)
.hidden();
/// `RUST_LOG`.
pub const RUST_LOG: EnvVar = EnvVar::new(
    "RUST_LOG",
    "warn,rmcp::service=error",
    "log filter; logs go to stderr only",
);

/// Every variable the bridge reads, in the order `--help`, `doctor` and the README show them.
pub const ALL: &[EnvVar] = &[
    ROOT,
    MODEL,
    AGENT,
    BRIDGE_MODE,
    OPENCODE_MODE,
    CLAUDE_CONFIG_DIR,
    STRUCTURED,
    MAX_PARALLEL,
    TIMEOUT_MIN,
    RETRIES,
    RETRY_DELAY_S,
    QUIET_MIN,
    API_TIMEOUT_MS,
    SCAN_DEADLINE_MS,
    KILL_GRACE_MS,
    RUN_NICE,
    SANDBOX,
    ENGINE,
    SERVE_IDLE_MIN,
    SERVE_IDLE_MS,
    SERVE_MAX,
    ON_EXIT,
    CONFIG,
    STATE_DIR,
    PASS_ENV,
    ROSTER,
    PRUNE_DAYS,
    COMPARE_MODEL,
    BUDGET_DAY_USD,
    BUDGET_MONTH_USD,
    BACKEND,
    SERVER_URL,
    SERVER_USERNAME,
    SERVER_PASSWORD,
    OPENCODE_BIN,
    CLAUDE_BIN,
    CLAUDE_SESSION,
    OPENCODE_DB,
    OPENCODE_CONFIG,
    OPENCODE_CONFIG_DIR,
    OPENCODE_CONFIG_CONTENT,
    RUST_LOG,
];

/// The bridge's state directory from an environment lookup: `OPENCODE_BRIDGE_STATE_DIR`, else
/// `$XDG_STATE_HOME/opencode-bridge`, else `~/.local/state/opencode-bridge` (the one rule the
/// supervisor and the session reader share: the registry and the runs' worlds live there).
pub fn state_dir(get: impl Fn(&str) -> Option<String>) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let nonempty = |k: &str| get(k).filter(|s| !s.trim().is_empty()).map(PathBuf::from);
    nonempty(STATE_DIR.name)
        .or_else(|| nonempty("XDG_STATE_HOME").map(|d| d.join("opencode-bridge")))
        .or_else(|| nonempty("HOME").map(|h| h.join(".local/state/opencode-bridge")))
}

/// A binary the bridge starts, chosen by a variable.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    /// The variable that names it.
    pub var: EnvVar,
    /// Its name on `PATH` when the variable is unset.
    pub name: &'static str,
    /// What to tell the user when it is not on `PATH`.
    pub missing: &'static str,
}

/// opencode (`OPENCODE_BIN`).
pub const OPENCODE: Program = Program {
    var: OPENCODE_BIN,
    name: "opencode",
    missing: "opencode was not found on PATH: install it (npm i -g opencode-ai) or set OPENCODE_BIN to its path",
};

/// Claude Code (`CLAUDE_BIN`).
pub const CLAUDE: Program = Program {
    var: CLAUDE_BIN,
    name: "claude",
    missing: "claude was not found on PATH: install Claude Code (npm i -g @anthropic-ai/claude-code) or set CLAUDE_BIN to its path; a Claude model (sonnet, opus, haiku, claude-…) runs through it",
};

impl Program {
    /// The binary to run, from the variable's value (`None` or empty: unset), the way a shell
    /// reads a command name:
    ///
    /// - a value with a `/` is a path (relative ones to the current directory), which must be
    ///   an executable file;
    /// - a bare name (`OPENCODE_BIN=opencode-dev`) is looked up on `PATH`;
    /// - unset, [`name`](Self::name) is looked up on `PATH`.
    ///
    /// The error says what to fix.
    pub fn find(&self, value: Option<&Path>) -> Result<PathBuf, String> {
        self.find_on(value, std::env::var_os("PATH").as_deref())
    }

    /// [`find`](Self::find) with the given `PATH`.
    pub fn find_on(&self, value: Option<&Path>, path: Option<&OsStr>) -> Result<PathBuf, String> {
        let value = value.filter(|v| !v.as_os_str().is_empty());
        let Some(value) = value else {
            return on_path(Path::new(self.name), path).ok_or_else(|| self.missing.to_owned());
        };
        if value.as_os_str().as_encoded_bytes().contains(&b'/') {
            return if is_executable(value) {
                Ok(value.to_path_buf())
            } else {
                Err(format!(
                    "{}={} is not an executable file: fix the path or unset it to use `{}` from PATH",
                    self.var.name,
                    value.display(),
                    self.name
                ))
            };
        }
        on_path(value, path).ok_or_else(|| {
            format!(
                "{}={} was not found on PATH: give its full path, or unset it to use `{}` from PATH",
                self.var.name,
                value.display(),
                self.name
            )
        })
    }
}

fn on_path(name: &Path, path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|dir| dir.join(name))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn names_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            assert!(
                ALL[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }

    #[test]
    fn numeric_defaults_parse() {
        assert_eq!(TIMEOUT_MIN.default_number(), 120);
        assert_eq!(API_TIMEOUT_MS.default_number(), 45_000);
    }

    /// Every variable whose default is a number has a range, and reading any value, however
    /// large or odd, gives a value in it and at most a one-line error naming the range.
    #[test]
    fn every_number_is_bounded_with_a_one_line_error() {
        for v in ALL {
            let numeric = !v.default.is_empty() && v.default.bytes().all(|b| b.is_ascii_digit());
            assert_eq!(numeric, v.range.is_some(), "{}", v.name);
            let Some(r) = v.range else { continue };
            for raw in [
                "18446744073709551615",
                "99999999999999999999999999999999",
                "-1",
                "1e308",
                "NaN",
                "0",
                " 7 ",
                "\n12",
            ] {
                let n = v.read(Some(raw)).unwrap();
                assert!((r.min..=r.max).contains(&n.value), "{}={raw:?}", v.name);
                if let Some(e) = &n.error {
                    assert!(e.starts_with(v.name) && !e.contains('\n'), "{e}");
                    assert!(
                        e.contains(&format!("from {} to {} ({})", r.min, r.max, r.unit)),
                        "{e}"
                    );
                }
            }
            assert_eq!(v.read(None), None);
            assert_eq!(v.read(Some("  ")), None);
            let d = v.read(Some(v.default)).unwrap();
            assert_eq!((d.value, d.error), (v.default_number(), None));
            assert!(v.shown_default().contains(&format!("{}-{}", r.min, r.max)));
        }
        let e = TIMEOUT_MIN.read(Some("abc")).unwrap();
        assert_eq!(e.value, 120);
        assert_eq!(
            e.error.as_deref(),
            Some(
                "OPENCODE_BRIDGE_TIMEOUT_MIN=abc is not a whole number: give a whole number from 1 to 10080 (minutes)"
            )
        );
        let long = RETRY_DELAY_S.read(Some(&"9".repeat(5000))).unwrap();
        assert!(long.error.unwrap().len() < 200);
        let errors = number_errors(|k| {
            (k == RETRY_DELAY_S.name || k == MAX_PARALLEL.name)
                .then(|| "18446744073709551615".to_owned())
        });
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with(MAX_PARALLEL.name), "{errors:?}");
    }

    #[test]
    fn a_path_a_bare_name_or_unset() {
        let dir = tempfile::tempdir().unwrap();
        let exe = |name: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let oc = exe("opencode");
        let dev = exe("opencode-dev");
        let path = Some(dir.path().as_os_str());
        assert_eq!(OPENCODE.find_on(None, path), Ok(oc.clone()));
        assert_eq!(OPENCODE.find_on(Some(Path::new("")), path), Ok(oc.clone()));
        assert_eq!(
            OPENCODE.find_on(Some(Path::new("opencode-dev")), path),
            Ok(dev.clone())
        );
        assert_eq!(OPENCODE.find_on(Some(&dev), None), Ok(dev.clone()));
        let e = OPENCODE
            .find_on(Some(Path::new("opencode-nope")), path)
            .unwrap_err();
        assert!(
            e.starts_with("OPENCODE_BIN=opencode-nope was not found on PATH"),
            "{e}"
        );
        let e = OPENCODE
            .find_on(Some(&dir.path().join("nope")), path)
            .unwrap_err();
        assert!(e.contains("is not an executable file"), "{e}");
        assert_eq!(CLAUDE.find_on(None, path), Err(CLAUDE.missing.to_owned()));
    }
}
