//! The server's own settings, read once from the environment.
//!
//! Library crates read the variables they own themselves (the policy its mode variables, the
//! supervisor its limits, the client its backend settings), each by its [`bridge_env`] entry;
//! this module holds what only the binary uses, and renders the table for `--help`.

use std::path::{Path, PathBuf};

/// Every variable the bridge reads, declared once in [`bridge_env`]. `doctor` prints the ones
/// that are set; `--help` and the README list them all (tests check both against it).
pub use bridge_env::ALL as ENV_VARS;

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
    /// The bridge's config file ([`bridge_config`]), or the one line that says what is wrong
    /// with it (the server does not start with a broken one; `doctor` shows it).
    pub file: Result<bridge_config::Config, String>,
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
        let explicit = std::env::var_os(bridge_env::ROOT.name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let root_explicit = explicit.is_some();
        let root = absolute(&explicit.unwrap_or(cwd));
        let home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|h| absolute(Path::new(&h)));
        let structured = match std::env::var(bridge_env::STRUCTURED.name) {
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
            file: bridge_config::Config::load(|k| std::env::var(k).ok()),
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
            v.name,
            v.meaning,
            v.shown_default()
        ));
    }
    out
}

/// Applies the config file's `[budget]`, `[[budget.project]]` and `[prices]` to `cfg` (the
/// budget variables win over the file's global ones). `Err`: the file, or a budget variable,
/// is not usable; the bridge then refuses starts with that line rather than run without the
/// budgets it was given.
pub fn apply_usage_config(
    cfg: &mut run_supervisor::SupervisorConfig,
    var: impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    use run_supervisor::usage::budget::{Budgets, ProjectBudget, parse_usd};
    use run_supervisor::usage::{Price, Pricing};
    let file = bridge_config::Config::load(&var)?;
    let env_usd = |ev: bridge_env::EnvVar| -> Result<Option<f64>, String> {
        match var(ev.name).filter(|v| !v.trim().is_empty()) {
            Some(v) => parse_usd(&v)
                .map(Some)
                .map_err(|e| format!("{}: {e}", ev.name)),
            None => Ok(None),
        }
    };
    cfg.budgets = Budgets {
        day_usd: env_usd(bridge_env::BUDGET_DAY_USD)?.or(file.budget.day_usd),
        month_usd: env_usd(bridge_env::BUDGET_MONTH_USD)?.or(file.budget.month_usd),
    };
    cfg.project_budgets = file
        .project_budgets
        .iter()
        .map(|p| ProjectBudget {
            path: p.path.canonicalize().unwrap_or_else(|_| p.path.clone()),
            budgets: Budgets {
                day_usd: p.budget.day_usd,
                month_usd: p.budget.month_usd,
            },
        })
        .collect();
    let overrides: Vec<(String, Price)> = file
        .prices
        .iter()
        .map(|p| {
            (
                p.model.clone(),
                Price {
                    input: p.input,
                    output: p.output,
                    cache_read: p.cache_read,
                    cache_write: p.cache_write,
                },
            )
        })
        .collect();
    cfg.pricing = Pricing::from_lookup(&var, &overrides);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_come_from_the_variables_over_the_config_file_and_bad_ones_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(
            &file,
            "[budget]\nday_usd = 5\nmonth_usd = 40\n[prices.\"fk/cheap\"]\ninput = 1\noutput = 2\n",
        )
        .unwrap();
        let env = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        let config = || ("OPENCODE_BRIDGE_CONFIG", file.display().to_string());
        let mut cfg = run_supervisor::SupervisorConfig::default();
        apply_usage_config(
            &mut cfg,
            env(vec![
                config(),
                ("OPENCODE_BRIDGE_BUDGET_DAY_USD", "$2".into()),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.budgets.day_usd, Some(2.0), "the variable wins");
        assert_eq!(cfg.budgets.month_usd, Some(40.0), "the file's month");
        assert_eq!(
            cfg.pricing.prices().get("fk/cheap").map(|p| p.output),
            Some(2.0)
        );
        let err = apply_usage_config(
            &mut cfg,
            env(vec![
                config(),
                ("OPENCODE_BRIDGE_BUDGET_MONTH_USD", "lots".into()),
            ]),
        )
        .unwrap_err();
        assert!(err.contains("OPENCODE_BRIDGE_BUDGET_MONTH_USD"), "{err}");
        assert!(err.contains("not an amount of USD"), "{err}");
        std::fs::write(&file, "[budget]\nday_usd = -1\n").unwrap();
        let err = apply_usage_config(&mut cfg, env(vec![config()])).unwrap_err();
        assert!(
            err.contains("config.toml") && err.contains("budget.day_usd"),
            "{err}"
        );
    }

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

    /// The README's table rows: (variable, default) as written, backticks kept.
    fn readme_rows(readme: &str) -> Vec<(String, String, String)> {
        let start = readme
            .find("## Environment variables")
            .expect("README has an `## Environment variables` section");
        let section = &readme[start..];
        let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
        section[..end]
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').splitn(3, " | ").collect();
                let cell = |i: usize| cells.get(i).map_or("", |c| c.trim()).to_owned();
                (cell(0).trim_matches('`').to_owned(), cell(1), cell(2))
            })
            .collect()
    }

    /// Defaults compare without backticks: the README marks code, `--help` is plain text.
    fn plain(s: &str) -> String {
        s.replace('`', "")
    }

    /// The README table as the variable table says it should be (the README's own wording of a
    /// meaning is kept, since it may link to other docs).
    fn expected_readme_table(rows: &[(String, String, String)]) -> String {
        let mut out = String::from("| variable | default | meaning |\n|---|---|---|\n");
        for v in ENV_VARS {
            let meaning = rows
                .iter()
                .find(|(name, _, _)| name == v.name)
                .map_or(v.meaning.to_owned(), |(_, _, m)| m.clone());
            let default = rows
                .iter()
                .find(|(name, d, _)| name == v.name && plain(d) == plain(&v.shown_default()))
                .map_or(v.shown_default(), |(_, d, _)| d.clone());
            out.push_str(&format!("| `{}` | {default} | {meaning} |\n", v.name));
        }
        out
    }

    /// The README table has one row per variable, in the table's order, with its default.
    /// On failure the expected table is printed: paste it over the README's.
    #[test]
    fn readme_table_agrees_with_the_variable_table() {
        let readme = include_str!("../../../README.md");
        let rows = readme_rows(readme);
        let got: Vec<(String, String)> =
            rows.iter().map(|(n, d, _)| (n.clone(), plain(d))).collect();
        let want: Vec<(String, String)> = ENV_VARS
            .iter()
            .map(|v| (v.name.to_owned(), plain(&v.shown_default())))
            .collect();
        assert!(
            got == want,
            "README's environment table disagrees with bridge_env::ALL (names, order or \
             defaults); the expected table:\n\n{}",
            expected_readme_table(&rows)
        );
    }

    /// `--help` shows every variable with its meaning and default, as the table says.
    #[test]
    fn help_lists_every_variable_with_its_default() {
        use clap::CommandFactory;
        let help = crate::cli::Cli::command().render_long_help().to_string();
        for v in ENV_VARS {
            let entry = format!(
                "  {}\n      {} (default: {})\n",
                v.name,
                v.meaning,
                v.shown_default()
            );
            assert!(help.contains(&entry), "--help lacks {entry:?}:\n{help}");
        }
    }
}
