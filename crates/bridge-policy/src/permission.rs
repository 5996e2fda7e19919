//! opencode's permission rulesets and what they let an agent do.
//!
//! opencode 1.18 resolves every agent's permissions into one ordered list of rules
//! `{permission, pattern, action}` (its built-in defaults first, then the agent's own config in
//! key order). A tool call is decided by the **last** rule whose `permission` and `pattern` globs
//! both match (`*` any run of characters, `?` one; a pattern ending in ` *` also matches without
//! the arguments); with no matching rule the answer is `ask`. `GET /agent` and
//! `opencode agent list` print these lists; [`Ruleset::from_config`] builds the same list from an
//! agent's config for the file-reading fallback.
//!
//! The edit-class tools (`edit`, `write`, `patch`, `multiedit`, `apply_patch`) are all governed
//! by the `edit` permission in 1.18.33, and the shell by `bash`.

use serde_json::Value;

/// One rule's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The call runs.
    Allow,
    /// A person is asked; `opencode run` rejects it unless started with `--auto`.
    Ask,
    /// The call is refused (and a tool denied for every pattern is not offered at all).
    Deny,
}

impl Action {
    fn parse(text: &str) -> Option<Action> {
        match text {
            "allow" => Some(Action::Allow),
            "ask" => Some(Action::Ask),
            "deny" => Some(Action::Deny),
            _ => None,
        }
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The permission glob (`*`, `edit`, `bash`, `mcp_*`, …).
    pub permission: String,
    /// The argument glob (a path or a command; `*` for all).
    pub pattern: String,
    /// What happens.
    pub action: Action,
}

/// How far one permission reaches for some agent, read under a given treatment of `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Nothing is allowed.
    None,
    /// Only some patterns are allowed (a shell allowlist, edits to some paths).
    Some,
    /// Every pattern is allowed (the catch-all allows), perhaps with exceptions.
    All,
}

/// An ordered permission ruleset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ruleset {
    rules: Vec<Rule>,
}

impl Ruleset {
    /// The rules opencode printed (`[{permission, pattern, action}]`); entries of another shape
    /// are skipped. `None` when `value` is not an array.
    pub fn from_opencode(value: &Value) -> Option<Ruleset> {
        let rules = value
            .as_array()?
            .iter()
            .filter_map(|r| {
                Some(Rule {
                    permission: r.get("permission")?.as_str()?.to_owned(),
                    pattern: r.get("pattern")?.as_str()?.to_owned(),
                    action: Action::parse(r.get("action")?.as_str()?)?,
                })
            })
            .collect();
        Some(Ruleset { rules })
    }

    /// The ruleset opencode would build from an agent's config entry: its default `*` allow,
    /// then the deprecated `tools` map (`false` denies, `true` allows; the edit-class tools map
    /// to `edit`), then `permission` (one action for everything, or tool → action or pattern
    /// map). Config maps are read in sorted key order (the bridge's JSON maps are sorted), so a
    /// tool's own key comes after `*`, as most configs intend.
    pub fn from_config(config: &Value) -> Ruleset {
        let mut rules = vec![rule("*", "*", Action::Allow)];
        if let Some(tools) = config.get("tools").and_then(Value::as_object) {
            for (tool, on) in tools {
                if let Some(on) = on.as_bool() {
                    let permission = if EDIT_TOOLS.contains(&tool.as_str()) {
                        "edit"
                    } else {
                        tool.as_str()
                    };
                    let action = if on { Action::Allow } else { Action::Deny };
                    rules.push(rule(permission, "*", action));
                }
            }
        }
        match config.get("permission") {
            Some(Value::String(a)) => {
                if let Some(action) = Action::parse(a) {
                    rules.push(rule("*", "*", action));
                }
            }
            Some(Value::Object(map)) => {
                for (key, entry) in map {
                    match entry {
                        Value::String(a) => {
                            if let Some(action) = Action::parse(a) {
                                rules.push(rule(key, "*", action));
                            }
                        }
                        Value::Object(patterns) => {
                            // The catch-all first, so listed patterns refine it.
                            let mut entries: Vec<_> = patterns.iter().collect();
                            entries.sort_by_key(|(p, _)| p.as_str() != "*");
                            for (pattern, a) in entries {
                                if let Some(action) = a.as_str().and_then(Action::parse) {
                                    rules.push(rule(key, pattern, action));
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        Ruleset { rules }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The action for one call of `permission` with argument `input`.
    ///
    /// ```
    /// use bridge_policy::permission::{Action, Ruleset};
    /// let r = Ruleset::from_opencode(&serde_json::json!([
    ///     {"permission": "*", "pattern": "*", "action": "allow"},
    ///     {"permission": "bash", "pattern": "*", "action": "deny"},
    ///     {"permission": "bash", "pattern": "git diff*", "action": "allow"},
    /// ])).unwrap();
    /// assert_eq!(r.evaluate("bash", "git diff --stat"), Action::Allow);
    /// assert_eq!(r.evaluate("bash", "rm -rf x"), Action::Deny);
    /// assert_eq!(r.evaluate("read", "src/a.rs"), Action::Allow);
    /// ```
    pub fn evaluate(&self, permission: &str, input: &str) -> Action {
        self.rules
            .iter()
            .rev()
            .find(|r| glob(&r.permission, permission) && glob(&r.pattern, input))
            .map(|r| r.action)
            .unwrap_or(Action::Ask)
    }

    /// How far `permission` reaches, with `ask` counted as allowed (`auto`, a run with `--auto`)
    /// or as denied (a run without it). A later catch-all (`*` pattern) hides every earlier rule;
    /// a pattern rule allowed after the last catch-all makes the reach at least
    /// [`Reach::Some`].
    pub fn reach(&self, permission: &str, auto: bool) -> Reach {
        let allowed = |a: Action| a == Action::Allow || (auto && a == Action::Ask);
        let relevant: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| glob(&r.permission, permission))
            .collect();
        let last_catch_all = relevant.iter().rposition(|r| is_catch_all(&r.pattern));
        let catch_all_allows = match last_catch_all {
            Some(i) => allowed(relevant[i].action),
            None => auto, // no rule: opencode asks
        };
        if catch_all_allows {
            return Reach::All;
        }
        let after = last_catch_all.map_or(0, |i| i + 1);
        if relevant[after..].iter().any(|r| allowed(r.action)) {
            Reach::Some
        } else {
            Reach::None
        }
    }

    /// The patterns `permission` allows after its last catch-all (a shell allowlist), at most
    /// `limit`.
    pub fn allowed_patterns(&self, permission: &str, limit: usize) -> Vec<String> {
        let relevant: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| glob(&r.permission, permission))
            .collect();
        let after = relevant
            .iter()
            .rposition(|r| is_catch_all(&r.pattern))
            .map_or(0, |i| i + 1);
        relevant[after..]
            .iter()
            .filter(|r| r.action == Action::Allow)
            .map(|r| r.pattern.clone())
            .take(limit)
            .collect()
    }
}

/// Tools that opencode 1.18.33's `edit` permission governs.
pub const EDIT_TOOLS: [&str; 5] = ["edit", "write", "patch", "multiedit", "apply_patch"];

fn rule(permission: &str, pattern: &str, action: Action) -> Rule {
    Rule {
        permission: permission.to_owned(),
        pattern: pattern.to_owned(),
        action,
    }
}

fn is_catch_all(pattern: &str) -> bool {
    !pattern.is_empty() && pattern.chars().all(|c| c == '*')
}

/// opencode's wildcard match: `*` any run (also across `/`), `?` one character, anchored; a
/// pattern ending in ` *` also matches the bare command.
fn glob(pattern: &str, text: &str) -> bool {
    if let Some(head) = pattern.strip_suffix(" *")
        && glob_chars(head.as_bytes(), text.as_bytes())
    {
        return true;
    }
    glob_chars(pattern.as_bytes(), text.as_bytes())
}

fn glob_chars(p: &[u8], t: &[u8]) -> bool {
    // Iterative matcher with one backtrack point (linear in practice).
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_like_opencode() {
        assert!(glob("*", "anything/at/all"));
        assert!(glob("git diff*", "git diff --stat"));
        assert!(glob("ls *", "ls"));
        assert!(glob("ls *", "ls -la"));
        assert!(!glob("ls *", "lsblk"));
        assert!(glob("mcp_*", "mcp_fs_write"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("edit", "edits"));
    }

    #[test]
    fn a_later_catch_all_hides_earlier_allows() {
        let r = Ruleset::from_opencode(&json!([
            {"permission": "*", "pattern": "*", "action": "allow"},
            {"permission": "edit", "pattern": "*", "action": "deny"},
        ]))
        .unwrap();
        assert_eq!(r.reach("edit", true), Reach::None);
        assert_eq!(r.reach("bash", false), Reach::All);
        let star_last = Ruleset::from_opencode(&json!([
            {"permission": "edit", "pattern": "*", "action": "deny"},
            {"permission": "*", "pattern": "*", "action": "allow"},
        ]))
        .unwrap();
        assert_eq!(star_last.reach("edit", false), Reach::All);
    }

    #[test]
    fn ask_counts_only_under_auto() {
        let r = Ruleset::from_config(
            &json!({"permission": {"edit": "ask", "bash": {"*": "ask", "git status": "allow"}}}),
        );
        assert_eq!(r.reach("edit", false), Reach::None);
        assert_eq!(r.reach("edit", true), Reach::All);
        assert_eq!(r.reach("bash", false), Reach::Some);
        assert_eq!(r.allowed_patterns("bash", 5), vec!["git status".to_owned()]);
        assert_eq!(r.reach("bash", true), Reach::All);
    }

    #[test]
    fn the_write_key_does_not_govern_the_write_tool() {
        let r = Ruleset::from_config(&json!({"permission": {"edit": "deny", "write": "allow"}}));
        assert_eq!(r.reach("edit", true), Reach::None);
        let legacy = Ruleset::from_config(&json!({"tools": {"write": false}}));
        assert_eq!(legacy.reach("edit", true), Reach::None);
    }
}
