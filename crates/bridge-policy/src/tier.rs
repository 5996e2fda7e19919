//! Tiers: how hard a job is, and therefore whether it may be delegated.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::env::Environment;

/// The difficulty the caller assigns to a job. Only easy and medium jobs are delegated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Routine work with an obvious check.
    Easy,
    /// Bounded work from a clear spec whose result can be verified.
    Medium,
    /// Work where a silent mistake would change a result: stays with the caller.
    Hard,
    /// Not sure: treated as one tier harder, so it stays with the caller.
    Unsure,
}

impl Tier {
    /// Every tier.
    pub const ALL: [Tier; 4] = [Tier::Easy, Tier::Medium, Tier::Hard, Tier::Unsure];

    /// Parses a tier name, ignoring case and surrounding blanks.
    ///
    /// ```
    /// use bridge_policy::Tier;
    /// assert_eq!(Tier::parse("Medium"), Some(Tier::Medium));
    /// assert_eq!(Tier::parse("trivial"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Tier> {
        match text.trim().to_ascii_lowercase().as_str() {
            "easy" => Some(Tier::Easy),
            "medium" => Some(Tier::Medium),
            "hard" => Some(Tier::Hard),
            "unsure" => Some(Tier::Unsure),
            _ => None,
        }
    }

    /// The lowercase name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Easy => "easy",
            Tier::Medium => "medium",
            Tier::Hard => "hard",
            Tier::Unsure => "unsure",
        }
    }

    /// Whether jobs of this tier may be handed to opencode.
    ///
    /// ```
    /// use bridge_policy::Tier;
    /// assert!(Tier::Easy.is_delegable());
    /// assert!(!Tier::Unsure.is_delegable());
    /// ```
    pub fn is_delegable(self) -> bool {
        matches!(self, Tier::Easy | Tier::Medium)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Accepted tier names, for messages.
pub const ACCEPTED_TIERS: &str = "easy, medium, hard or unsure";

/// Kinds of work that are easy or medium and may be delegated.
pub const DELEGATE: &[&str] = &[
    "literature and web search, quote extraction, DOI and reference lookups",
    "bulk download, parsing, format conversion and cleaning of data",
    "collating tables from given sources",
    "boilerplate, glue and one-off scripts",
    "a function written to a given specification",
    "unit tests for existing behaviour",
    "README and documentation drafts",
    "plots from tables that already exist",
    "mechanical refactors (renames, moves, signature changes applied everywhere)",
    "UI work against a written blueprint",
];

/// Kinds of work that are hard and stay with the caller.
pub const KEEP: &[&str] = &[
    "experiment and protocol design",
    "train/test split and leakage decisions, anything touching held-out data",
    "model and feature design",
    "statistics and every number that will be reported",
    "scoring, metric and energy code",
    "debugging whose cause is not obvious",
    "architecture decisions",
    "interpreting results",
];

/// The rules that decide a tier, in one place.
pub const TIER_RULES: &[&str] = &[
    "tier is required: easy or medium is delegated; hard and unsure are refused and stay with you",
    "if a silent mistake would change a result, do not delegate",
    "if unsure, treat the job as one tier harder",
];

/// The file under a project's `.claude/` that replaces the delegate and keep lists.
pub const TIERS_FILE: &str = "opencode-bridge-tiers.json";

/// The delegate and keep lists in force for a directory: the defaults ([`DELEGATE`], [`KEEP`]),
/// or a project's own from `.claude/opencode-bridge-tiers.json` in the directory or an
/// ancestor up to the project root: `{"delegate": ["…"], "keep": ["…"]}`. A list the file gives
/// replaces that default; one it leaves out keeps the default. A file that cannot be parsed is
/// reported in `problems` and the defaults apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TierLists {
    /// Kinds of work to delegate (easy or medium).
    pub delegate: Vec<String>,
    /// Kinds of work to keep (hard).
    pub keep: Vec<String>,
    /// The project file the lists came from, if any.
    pub path: Option<PathBuf>,
    /// Problems with the project file (each one line); the defaults apply where it is wrong.
    pub problems: Vec<String>,
}

impl Default for TierLists {
    fn default() -> Self {
        TierLists {
            delegate: DELEGATE.iter().map(|s| s.to_string()).collect(),
            keep: KEEP.iter().map(|s| s.to_string()).collect(),
            path: None,
            problems: Vec::new(),
        }
    }
}

impl TierLists {
    /// The lists for work in `cwd`, read through `env`.
    ///
    /// ```
    /// use bridge_policy::{tier::TierLists, FakeEnv};
    /// use std::path::Path;
    /// let env = FakeEnv::new()
    ///     .with_dir("/p/.git")
    ///     .with_file("/p/.claude/opencode-bridge-tiers.json", r#"{"keep": ["schema migrations"]}"#);
    /// let l = TierLists::load(&env, Path::new("/p/src"));
    /// assert_eq!(l.keep, vec!["schema migrations"]);
    /// assert_eq!(l.delegate, TierLists::default().delegate);
    /// ```
    pub fn load(env: &dyn Environment, cwd: &Path) -> TierLists {
        let mut lists = TierLists::default();
        let Some(root) = crate::mode::project_root(env, cwd) else {
            return lists;
        };
        for dir in cwd.ancestors() {
            let path = dir.join(".claude").join(TIERS_FILE);
            if let Some(text) = env.read_to_string(&path) {
                lists.apply(&text, &path);
                return lists;
            }
            if dir == root {
                break;
            }
        }
        lists
    }

    fn apply(&mut self, text: &str, path: &Path) {
        let shown = path.display();
        let value: serde_json::Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                self.problems.push(format!(
                    "{shown} is not valid JSON ({e}); the default lists apply"
                ));
                return;
            }
        };
        let Some(obj) = value.as_object() else {
            self.problems.push(format!(
                "{shown} must be an object {{\"delegate\": [...], \"keep\": [...]}}; the default lists apply"
            ));
            return;
        };
        let mut used = false;
        for (key, target) in [("delegate", &mut self.delegate), ("keep", &mut self.keep)] {
            let Some(v) = obj.get(key) else { continue };
            let items: Option<Vec<String>> = v.as_array().and_then(|a| {
                a.iter()
                    .map(|i| i.as_str().map(|s| s.trim().to_owned()))
                    .collect::<Option<Vec<_>>>()
            });
            match items.filter(|i| !i.is_empty() && i.iter().all(|s| !s.is_empty())) {
                Some(items) => {
                    *target = items;
                    used = true;
                }
                None => self.problems.push(format!(
                    "{shown}: `{key}` must be a non-empty array of non-empty strings; its default applies"
                )),
            }
        }
        for key in obj.keys().filter(|k| *k != "delegate" && *k != "keep") {
            self.problems.push(format!(
                "{shown}: unknown key `{key}` (only delegate and keep)"
            ));
        }
        if used {
            self.path = Some(path.to_path_buf());
        }
    }
}
