//! Tiers: how hard a job is, and therefore whether it may be delegated.

use std::fmt;

use serde::Serialize;

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
    pub fn as_str(self) -> &'static str {
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
