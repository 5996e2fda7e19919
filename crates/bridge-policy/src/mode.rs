//! Routing modes and where they come from.
//!
//! Seven sources are consulted, always all of them, in this order: the `mode` argument, env
//! `OPENCODE_BRIDGE_MODE`, env `OPENCODE_MODE`, `<project>/.claude/sensitive`,
//! `<project>/.claude/insensitive`, `~/.claude/insensitive`, `$CLAUDE_CONFIG_DIR/insensitive`.
//! Sensitive wins over everything; otherwise the first source in that order that names a mode
//! decides; with none, the mode is blueprint.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::env::Environment;
use crate::error::PolicyError;

/// A routing mode: how much work may be handed to opencode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The default: every agent; editing agents work from a written blueprint.
    Blueprint,
    /// Quality-critical work: recon, docs, literature and checks only.
    Sensitive,
    /// Aggressive offload: every agent, parallel lanes encouraged.
    Insensitive,
}

impl Mode {
    /// Every mode, in the order they are documented.
    pub const ALL: [Mode; 3] = [Mode::Blueprint, Mode::Sensitive, Mode::Insensitive];

    /// Parses a mode name, ignoring case and surrounding blanks.
    ///
    /// ```
    /// use bridge_policy::Mode;
    /// assert_eq!(Mode::parse(" Sensitive "), Some(Mode::Sensitive));
    /// assert_eq!(Mode::parse("sensitve"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Mode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "blueprint" => Some(Mode::Blueprint),
            "sensitive" => Some(Mode::Sensitive),
            "insensitive" => Some(Mode::Insensitive),
            _ => None,
        }
    }

    /// The mode of a tool call's `mode` argument given as text: `None` when missing or blank
    /// (which counts as not asked for), the mode when it names one.
    ///
    /// # Errors
    /// [`PolicyError::InvalidMode`] for any other value: a typo of `sensitive` must not weaken
    /// the policy.
    ///
    /// ```
    /// use bridge_policy::Mode;
    /// assert_eq!(Mode::from_arg(Some("SENSITIVE")), Ok(Some(Mode::Sensitive)));
    /// assert_eq!(Mode::from_arg(Some(" ")), Ok(None));
    /// let err = Mode::from_arg(Some("careful")).unwrap_err();
    /// assert!(err.to_string().starts_with("the mode argument is \"careful\""));
    /// ```
    pub fn from_arg(mode: Option<&str>) -> Result<Option<Mode>, PolicyError> {
        match mode {
            None => Ok(None),
            Some(v) if v.trim().is_empty() => Ok(None),
            Some(v) => Mode::parse(v)
                .map(Some)
                .ok_or_else(|| PolicyError::InvalidMode {
                    setting: "the mode argument".to_owned(),
                    value: clip(v),
                }),
        }
    }

    /// The lowercase name (`"blueprint"`, `"sensitive"`, `"insensitive"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Blueprint => "blueprint",
            Mode::Sensitive => "sensitive",
            Mode::Insensitive => "insensitive",
        }
    }

    /// One line on what the mode allows.
    pub fn summary(self) -> &'static str {
        match self {
            Mode::Blueprint => {
                "default: every agent; recon and docs first, then give fixer/designer/worker a written blueprint (files, signatures, edge cases, acceptance criteria, test command) and verify the result"
            }
            Mode::Sensitive => {
                "quality-critical: only explorer, librarian, deep-research and oracle; fixer/worker only for mechanical edits (mechanical: true); designer and general are refused"
            }
            Mode::Insensitive => {
                "aggressive offload: every agent, parallel lanes encouraged; hard work still stays with the caller"
            }
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Accepted mode names, for messages.
pub const ACCEPTED_MODES: &str = "blueprint, sensitive or insensitive";

/// Env var that forces a mode (checked first among env vars).
pub const ENV_BRIDGE_MODE: &str = bridge_env::BRIDGE_MODE.name;
/// Second env var that forces a mode.
pub const ENV_OPENCODE_MODE: &str = bridge_env::OPENCODE_MODE.name;
/// Env var naming an extra Claude config directory searched for an `insensitive` marker.
pub const ENV_CLAUDE_CONFIG_DIR: &str = bridge_env::CLAUDE_CONFIG_DIR.name;

/// One place a mode can come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModeSource {
    /// The `mode` argument of the tool call (the user asked for it).
    Argument,
    /// An environment variable.
    EnvVar {
        /// Its name.
        name: &'static str,
    },
    /// A marker file; its existence is what counts, its content is ignored.
    Marker {
        /// Which marker this is.
        marker: MarkerKind,
        /// The full path checked (`None` when it could not be formed, e.g. HOME unset).
        path: Option<PathBuf>,
    },
    /// Nothing named a mode.
    Default,
}

/// The four marker files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// `<project>/.claude/sensitive`
    ProjectSensitive,
    /// `<project>/.claude/insensitive`
    ProjectInsensitive,
    /// `~/.claude/insensitive`
    HomeInsensitive,
    /// `$CLAUDE_CONFIG_DIR/insensitive`
    ClaudeConfigInsensitive,
}

impl MarkerKind {
    /// The mode a present marker stands for.
    pub fn mode(self) -> Mode {
        match self {
            MarkerKind::ProjectSensitive => Mode::Sensitive,
            _ => Mode::Insensitive,
        }
    }

    fn pattern(self) -> &'static str {
        match self {
            MarkerKind::ProjectSensitive => "<project>/.claude/sensitive",
            MarkerKind::ProjectInsensitive => "<project>/.claude/insensitive",
            MarkerKind::HomeInsensitive => "~/.claude/insensitive",
            MarkerKind::ClaudeConfigInsensitive => "$CLAUDE_CONFIG_DIR/insensitive",
        }
    }
}

impl fmt::Display for ModeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModeSource::Argument => f.write_str("the mode argument"),
            ModeSource::EnvVar { name } => write!(f, "env {name}"),
            ModeSource::Marker {
                path: Some(path), ..
            } => write!(f, "marker file {}", path.display()),
            ModeSource::Marker { marker, path: None } => {
                write!(f, "marker file {}", marker.pattern())
            }
            ModeSource::Default => f.write_str("default (no source names a mode)"),
        }
    }
}

/// What one source said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reading {
    /// It names this mode.
    Says(Mode),
    /// The argument was not given or the variable is not set.
    NotSet,
    /// The variable is set to an empty (or blank) value, which counts as unset.
    Empty,
    /// The marker file does not exist.
    Absent,
    /// The source could not be checked; the text says why (e.g. "no project root").
    Skipped(String),
}

impl fmt::Display for Reading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reading::Says(mode) => write!(f, "{mode}"),
            Reading::NotSet => f.write_str("not set"),
            Reading::Empty => f.write_str("empty (counts as not set)"),
            Reading::Absent => f.write_str("absent"),
            Reading::Skipped(why) => write!(f, "skipped: {why}"),
        }
    }
}

/// One consulted source and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consulted {
    /// Where we looked.
    pub source: ModeSource,
    /// What we found.
    pub reading: Reading,
}

/// The outcome of mode detection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ModeDecision {
    /// The mode in force.
    pub mode: Mode,
    /// The source that decided it ([`ModeSource::Default`] when none named a mode).
    pub decided_by: ModeSource,
    /// Every source consulted, in order, with its reading.
    pub consulted: Vec<Consulted>,
    /// The nearest parent of the working directory holding `.claude` or `.git`, if any.
    pub project_root: Option<PathBuf>,
}

impl ModeDecision {
    /// A one-line reason, e.g. `sensitive (from env OPENCODE_MODE)`.
    pub fn reason(&self) -> String {
        format!("{} (from {})", self.mode, self.decided_by)
    }
}

/// The nearest ancestor of `cwd` (itself included) holding a `.claude` or `.git` entry.
///
/// ```
/// use bridge_policy::{mode::project_root, FakeEnv};
/// use std::path::Path;
/// let env = FakeEnv::new().with_dir("/w/repo/.git").with_dir("/w/repo/sub/pkg");
/// assert_eq!(project_root(&env, Path::new("/w/repo/sub/pkg")).as_deref(), Some(Path::new("/w/repo")));
/// assert_eq!(project_root(&env, Path::new("/w")), None);
/// ```
pub fn project_root(env: &dyn Environment, cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .find(|dir| env.exists(&dir.join(".claude")) || env.exists(&dir.join(".git")))
        .map(Path::to_path_buf)
}

/// Detects the routing mode for work in `cwd`.
///
/// `mode_arg` is the mode the user asked for, if any (a tool call's text goes through
/// [`Mode::from_arg`] first).
/// Every source is consulted; sensitive wins whenever any source says so; otherwise the first
/// source naming a mode decides, in the order the module docs list; otherwise blueprint.
///
/// # Errors
/// [`PolicyError::InvalidMode`] when an env var holds an unrecognised value:
/// such a value is never ignored, because a typo of `sensitive` must not weaken the policy.
///
/// ```
/// use bridge_policy::{mode::detect_mode, FakeEnv, Mode};
/// use std::path::Path;
///
/// let env = FakeEnv::new()
///     .with_home("/home/u")
///     .with_file("/home/u/.claude/insensitive", "")
///     .with_file("/home/u/proj/.claude/sensitive", "");
/// let d = detect_mode(&env, Path::new("/home/u/proj/src"), None).unwrap();
/// assert_eq!(d.mode, Mode::Sensitive);
/// assert_eq!(d.reason(), "sensitive (from marker file /home/u/proj/.claude/sensitive)");
///
/// let typo = FakeEnv::new().with_var("OPENCODE_MODE", "sensitve");
/// let err = detect_mode(&typo, Path::new("/tmp"), None).unwrap_err();
/// assert!(err.to_string().contains("OPENCODE_MODE"));
/// ```
pub fn detect_mode(
    env: &dyn Environment,
    cwd: &Path,
    mode_arg: Option<Mode>,
) -> Result<ModeDecision, PolicyError> {
    let root = project_root(env, cwd);
    let mut consulted = Vec::with_capacity(7);

    let arg_reading = match mode_arg {
        None => Reading::NotSet,
        Some(mode) => Reading::Says(mode),
    };
    consulted.push(Consulted {
        source: ModeSource::Argument,
        reading: arg_reading,
    });

    for name in [ENV_BRIDGE_MODE, ENV_OPENCODE_MODE] {
        let reading = match env.var(name) {
            None => Reading::NotSet,
            Some(v) if v.trim().is_empty() => Reading::Empty,
            Some(v) => Reading::Says(Mode::parse(&v).ok_or_else(|| PolicyError::InvalidMode {
                setting: format!("env {name}"),
                value: clip(&v),
            })?),
        };
        consulted.push(Consulted {
            source: ModeSource::EnvVar { name },
            reading,
        });
    }

    let project_claude = root.as_ref().map(|r| r.join(".claude"));
    for (marker, dir, missing) in [
        (
            MarkerKind::ProjectSensitive,
            project_claude.clone(),
            "no project root (no .claude or .git above the working directory)",
        ),
        (
            MarkerKind::ProjectInsensitive,
            project_claude,
            "no project root (no .claude or .git above the working directory)",
        ),
        (
            MarkerKind::HomeInsensitive,
            env.home_dir().map(|h| h.join(".claude")),
            "home directory unknown (HOME not set)",
        ),
        (
            MarkerKind::ClaudeConfigInsensitive,
            claude_config_dir(env),
            "CLAUDE_CONFIG_DIR not set",
        ),
    ] {
        let file = match marker {
            MarkerKind::ProjectSensitive => "sensitive",
            _ => "insensitive",
        };
        let path = dir.map(|d| d.join(file));
        // One file is consulted once: in the home directory (or with `$CLAUDE_CONFIG_DIR` at
        // `~/.claude`) the project's insensitive marker is also the home one.
        let seen = |c: &Consulted| matches!(&c.source, ModeSource::Marker { path: Some(q), .. } if path.as_ref() == Some(q));
        if path.is_some() && consulted.iter().any(seen) {
            continue;
        }
        let reading = match &path {
            None => Reading::Skipped(missing.to_owned()),
            Some(p) if env.exists(p) => Reading::Says(marker.mode()),
            Some(_) => Reading::Absent,
        };
        consulted.push(Consulted {
            source: ModeSource::Marker { marker, path },
            reading,
        });
    }

    let says = |wanted: Option<Mode>| {
        consulted.iter().find(|c| match (&c.reading, wanted) {
            (Reading::Says(m), Some(w)) => *m == w,
            (Reading::Says(_), None) => true,
            _ => false,
        })
    };
    let (mode, decided_by) = match says(Some(Mode::Sensitive)).or_else(|| says(None)) {
        Some(Consulted {
            source,
            reading: Reading::Says(mode),
        }) => (*mode, source.clone()),
        _ => (Mode::Blueprint, ModeSource::Default),
    };
    Ok(ModeDecision {
        mode,
        decided_by,
        consulted,
        project_root: root,
    })
}

/// `$CLAUDE_CONFIG_DIR` as a path (a leading `~/` is expanded), `None` when unset or empty.
fn claude_config_dir(env: &dyn Environment) -> Option<PathBuf> {
    let raw = env.var(ENV_CLAUDE_CONFIG_DIR)?;
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    if let Some(rest) = raw.strip_prefix("~/") {
        return env.home_dir().map(|h| h.join(rest));
    }
    Some(PathBuf::from(raw))
}

/// Keeps error messages short even for a huge bogus value.
fn clip(value: &str) -> String {
    const MAX: usize = 40;
    let value = value.trim();
    if value.chars().count() <= MAX {
        value.to_owned()
    } else {
        let head: String = value.chars().take(MAX).collect();
        format!("{head}…")
    }
}
