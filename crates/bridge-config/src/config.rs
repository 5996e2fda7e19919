//! The config file's types, how it is read and checked, and its errors.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The bridge's config file, parsed and checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The file it was read from; `None` when there was none.
    pub path: Option<PathBuf>,
    /// `[[server]]`: remote `opencode serve` instances tasks can be placed on, by name.
    pub servers: Vec<Server>,
    /// `[budget]`: USD per UTC day / month for all tasks (the variables
    /// `OPENCODE_BRIDGE_BUDGET_DAY_USD` / `_MONTH_USD` win when set).
    pub budget: Budget,
    /// `[[budget.project]]`: budgets of the tasks in one project's directory.
    pub project_budgets: Vec<ProjectBudget>,
    /// `[prices."provider/model"]`: prices that override opencode's models cache and the
    /// bridge's snapshot, USD per million tokens.
    pub prices: Vec<ModelPrice>,
}

/// Budgets in USD (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// Per UTC day.
    pub day_usd: Option<f64>,
    /// Per UTC month.
    pub month_usd: Option<f64>,
}

/// `[[budget.project]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectBudget {
    /// The project's directory (absolute).
    pub path: PathBuf,
    /// Its budgets.
    pub budget: Budget,
}

/// `[prices."provider/model"]`: USD per million tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPrice {
    /// `provider/model`.
    pub model: String,
    /// Input tokens.
    pub input: f64,
    /// Output (and reasoning) tokens.
    pub output: f64,
    /// Cache reads (the input price when absent).
    pub cache_read: Option<f64>,
    /// Cache writes (the input price when absent).
    pub cache_write: Option<f64>,
}

/// A remote `opencode serve` (`[[server]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The name callers use (`opencode_start`'s `server`): letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Its base URL, `http://` or `https://`, without a trailing `/`.
    pub url: String,
    /// The variable holding its password (Basic auth); `None`: the server asks for none.
    pub password_env: Option<String>,
    /// The Basic auth user (`opencode` unless said).
    pub username: String,
    /// The path on that host that stands for the bridge's root here.
    pub root: PathBuf,
    /// At most this many tasks run on it at once (the bridge's own limit still applies).
    pub max_parallel: Option<u32>,
}

impl Server {
    /// The password from its variable: `Ok(None)` when the server has no `password_env`, an
    /// error naming the variable when it is unset or empty.
    pub fn password(&self, var: impl Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
        let Some(name) = &self.password_env else {
            return Ok(None);
        };
        match var(name).filter(|v| !v.is_empty()) {
            Some(v) => Ok(Some(v)),
            None => Err(format!(
                "server {:?}: its password variable {name} is not set in the bridge's environment; set it (the password is never in the config file)",
                self.name
            )),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: Vec<RawServer>,
    #[serde(default)]
    budget: Option<RawBudget>,
    #[serde(default)]
    prices: std::collections::BTreeMap<String, RawPrice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    #[serde(default)]
    day_usd: Option<f64>,
    #[serde(default)]
    month_usd: Option<f64>,
    #[serde(default)]
    project: Vec<RawProjectBudget>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProjectBudget {
    path: PathBuf,
    #[serde(default)]
    day_usd: Option<f64>,
    #[serde(default)]
    month_usd: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    input: f64,
    output: f64,
    #[serde(default)]
    cache_read: Option<f64>,
    #[serde(default)]
    cache_write: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: String,
    url: String,
    #[serde(default)]
    password_env: Option<String>,
    #[serde(default)]
    username: Option<String>,
    root: PathBuf,
    #[serde(default)]
    max_parallel: Option<u32>,
}

/// Names a server may not take: `local` stands for the bridge's own engine.
pub const RESERVED_SERVER_NAMES: &[&str] = &["local"];

impl Config {
    /// Where the config file is: the variable's file (which must exist), else the default
    /// place when that file exists, else none. `var` reads the environment.
    pub fn locate(var: impl Fn(&str) -> Option<String>) -> Result<Option<PathBuf>, String> {
        if let Some(named) = var(bridge_env::CONFIG.name).filter(|v| !v.trim().is_empty()) {
            let path = PathBuf::from(named.trim());
            if !path.is_file() {
                return Err(format!(
                    "{}={} names no file; create it or unset the variable",
                    bridge_env::CONFIG.name,
                    path.display()
                ));
            }
            return Ok(Some(path));
        }
        let base = var("XDG_CONFIG_HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".config")));
        Ok(base
            .map(|b| b.join("opencode-bridge").join("config.toml"))
            .filter(|p| p.is_file()))
    }

    /// Finds and reads the config file (see [`Config::locate`]); an empty config when there
    /// is none. The error is one line naming the file.
    pub fn load(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        match Config::locate(var)? {
            None => Ok(Config::default()),
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    format!("the config file {} cannot be read: {e}", path.display())
                })?;
                Config::parse(&text, &path)
            }
        }
    }

    /// Parses a config file's text; `path` is named in errors and kept.
    pub fn parse(text: &str, path: &Path) -> Result<Config, String> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let msg = e.message().trim().replace('\n', " ");
            let place = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            format!(
                "the config file {}{place} is not valid: {msg}",
                path.display()
            )
        })?;
        let bad = |what: String| format!("the config file {}: {what}", path.display());
        let mut servers: Vec<Server> = Vec::with_capacity(raw.server.len());
        for s in raw.server {
            let name = s.name.trim().to_owned();
            if name.is_empty()
                || name.len() > 64
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                || name.starts_with('-')
            {
                return Err(bad(format!(
                    "server name {name:?} is not accepted; use 1-64 letters, digits, '.', '_' or '-'"
                )));
            }
            if RESERVED_SERVER_NAMES.contains(&name.as_str()) {
                return Err(bad(format!(
                    "server name {name:?} is reserved for the bridge's own engine; choose another"
                )));
            }
            if servers.iter().any(|o| o.name == name) {
                return Err(bad(format!(
                    "server {name:?} is named twice; names must be unique"
                )));
            }
            let url = s.url.trim().trim_end_matches('/').to_owned();
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            if rest.is_none_or(|r| r.is_empty() || r.contains(char::is_whitespace)) {
                return Err(bad(format!(
                    "server {name:?}: url {:?} is not an http:// or https:// URL",
                    s.url
                )));
            }
            if let Some(var) = &s.password_env
                && (var.is_empty()
                    || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    || var.starts_with(|c: char| c.is_ascii_digit()))
            {
                return Err(bad(format!(
                    "server {name:?}: password_env {var:?} is not a variable name; name the variable that holds the password, never the password"
                )));
            }
            if !s.root.is_absolute() {
                return Err(bad(format!(
                    "server {name:?}: root {:?} is not an absolute path on that host",
                    s.root
                )));
            }
            if s.max_parallel == Some(0) {
                return Err(bad(format!(
                    "server {name:?}: max_parallel must be at least 1"
                )));
            }
            servers.push(Server {
                name,
                url,
                password_env: s.password_env,
                username: s
                    .username
                    .filter(|u| !u.trim().is_empty())
                    .unwrap_or_else(|| "opencode".to_owned()),
                root: s.root,
                max_parallel: s.max_parallel,
            });
        }
        let usd = |what: &str, v: Option<f64>| match v {
            Some(x) if !x.is_finite() || x < 0.0 => Err(bad(format!(
                "{what} = {x} is not an amount of USD; write 0 or more, such as 5 or 2.50"
            ))),
            _ => Ok(v),
        };
        let mut budget = Budget::default();
        let mut project_budgets = Vec::new();
        if let Some(b) = raw.budget {
            budget = Budget {
                day_usd: usd("budget.day_usd", b.day_usd)?,
                month_usd: usd("budget.month_usd", b.month_usd)?,
            };
            for p in b.project {
                if !p.path.is_absolute() {
                    return Err(bad(format!(
                        "budget.project path {:?} is not absolute; write the project's full path",
                        p.path
                    )));
                }
                if p.day_usd.is_none() && p.month_usd.is_none() {
                    return Err(bad(format!(
                        "budget.project {:?} sets no budget; give day_usd or month_usd",
                        p.path
                    )));
                }
                project_budgets.push(ProjectBudget {
                    budget: Budget {
                        day_usd: usd("budget.project.day_usd", p.day_usd)?,
                        month_usd: usd("budget.project.month_usd", p.month_usd)?,
                    },
                    path: p.path,
                });
            }
        }
        let mut prices = Vec::new();
        for (model, p) in raw.prices {
            if !model.contains('/') || model.starts_with('/') || model.ends_with('/') {
                return Err(bad(format!(
                    "prices.{model:?} is not a provider/model name; write it as [prices.\"provider/model\"]"
                )));
            }
            for (what, v) in [
                ("input", Some(p.input)),
                ("output", Some(p.output)),
                ("cache_read", p.cache_read),
                ("cache_write", p.cache_write),
            ] {
                if v.is_some_and(|x| !x.is_finite() || x < 0.0) {
                    return Err(bad(format!(
                        "prices.{model:?}.{what} must be 0 or more (USD per million tokens)"
                    )));
                }
            }
            prices.push(ModelPrice {
                model,
                input: p.input,
                output: p.output,
                cache_read: p.cache_read,
                cache_write: p.cache_write,
            });
        }
        Ok(Config {
            path: Some(path.to_owned()),
            servers,
            budget,
            project_budgets,
            prices,
        })
    }

    /// The server of this name.
    pub fn server(&self, name: &str) -> Option<&Server> {
        self.servers.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/c/config.toml"))
    }

    #[test]
    fn a_server_is_read_with_its_defaults() {
        let cfg =
            parse("[[server]]\nname = \"a\"\nurl = \"https://h:1/\"\nroot = \"/srv\"\n").unwrap();
        let s = cfg.server("a").unwrap();
        assert_eq!(s.url, "https://h:1");
        assert_eq!(s.username, "opencode");
        assert_eq!(s.password_env, None);
        assert_eq!(s.password(|_| None), Ok(None));
    }

    #[test]
    fn mistakes_are_one_line_naming_the_file() {
        for (text, needle) in [
            (
                "[[server]]\nname = \"a\"\nurl = \"ftp://x\"\nroot = \"/s\"\n",
                "not an http",
            ),
            (
                "[[server]]\nname = \"local\"\nurl = \"http://x\"\nroot = \"/s\"\n",
                "reserved",
            ),
            (
                "[[server]]\nname = \"-x\"\nurl = \"http://x\"\nroot = \"/s\"\n",
                "not accepted",
            ),
            (
                "[[server]]\nname = \"a\"\nurl = \"http://x\"\nroot = \"rel\"\n",
                "absolute",
            ),
            (
                "[[server]]\nname = \"a\"\nurl = \"http://x\"\nroot = \"/s\"\npassword_env = \"hunter 2\"\n",
                "never the password",
            ),
            (
                "[[server]]\nname = \"a\"\nurl = \"http://x\"\nroot = \"/s\"\n[[server]]\nname = \"a\"\nurl = \"http://y\"\nroot = \"/s\"\n",
                "twice",
            ),
            (
                "[[server]]\nname = \"a\"\nurl = \"http://x\"\nroot = \"/s\"\npasword = 1\n",
                "line 5",
            ),
            ("[sever]\n", "unknown field"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{err}");
            assert!(err.contains("/c/config.toml"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn budgets_and_prices_are_read_and_checked() {
        let cfg = parse(
            "[budget]\nday_usd = 5\nmonth_usd = 40.5\n[[budget.project]]\npath = \"/p\"\nday_usd = 1\n[prices.\"fk/cheap\"]\ninput = 1\noutput = 2.5\n",
        )
        .unwrap();
        assert_eq!(cfg.budget.day_usd, Some(5.0));
        assert_eq!(cfg.budget.month_usd, Some(40.5));
        assert_eq!(cfg.project_budgets[0].path, Path::new("/p"));
        assert_eq!(cfg.project_budgets[0].budget.day_usd, Some(1.0));
        assert_eq!(cfg.prices[0].model, "fk/cheap");
        assert_eq!(cfg.prices[0].output, 2.5);
        for (text, needle) in [
            ("[budget]\nday_usd = -1\n", "not an amount"),
            ("[budget]\nweek_usd = 1\n", "unknown field"),
            (
                "[[budget.project]]\npath = \"rel\"\nday_usd = 1\n",
                "not absolute",
            ),
            ("[[budget.project]]\npath = \"/p\"\n", "sets no budget"),
            ("[prices.cheap]\ninput = 1\noutput = 1\n", "provider/model"),
            ("[prices.\"a/b\"]\ninput = -1\noutput = 1\n", "0 or more"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn the_password_comes_from_its_variable() {
        let cfg = parse(
            "[[server]]\nname = \"a\"\nurl = \"http://x\"\nroot = \"/s\"\npassword_env = \"A_PW\"\n",
        )
        .unwrap();
        let s = &cfg.servers[0];
        assert_eq!(
            s.password(|v| (v == "A_PW").then(|| "pw".to_owned())),
            Ok(Some("pw".to_owned()))
        );
        let err = s.password(|_| None).unwrap_err();
        assert!(err.contains("A_PW is not set"), "{err}");
    }

    #[test]
    fn the_file_is_found_where_the_variables_say() {
        let dir = tempfile::tempdir().unwrap();
        let xdg = dir.path().join("xdg");
        std::fs::create_dir_all(xdg.join("opencode-bridge")).unwrap();
        let env = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        // No file: an empty config.
        let none = Config::load(env(vec![("XDG_CONFIG_HOME", xdg.display().to_string())])).unwrap();
        assert_eq!(none, Config::default());
        std::fs::write(
            xdg.join("opencode-bridge/config.toml"),
            "[[server]]\nname = \"b\"\nurl = \"http://x\"\nroot = \"/s\"\n",
        )
        .unwrap();
        let found =
            Config::load(env(vec![("XDG_CONFIG_HOME", xdg.display().to_string())])).unwrap();
        assert_eq!(found.servers[0].name, "b");
        // A named file must exist.
        let missing = dir.path().join("nope.toml");
        let err = Config::load(env(vec![(
            "OPENCODE_BRIDGE_CONFIG",
            missing.display().to_string(),
        )]))
        .unwrap_err();
        assert!(err.contains("names no file"), "{err}");
    }
}
