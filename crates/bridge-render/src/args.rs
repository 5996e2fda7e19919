//! Refused tool arguments: the typed value the binary's validation returns, and its two
//! wordings, one for MCP (naming the JSON field, `argument \`limit\``) and one for the command
//! line (naming the flag, `option \`--limit\``).
//!
//! Both wordings come from the same value, so the CLI never has to pick a field name out of
//! a message.

use serde_json::Value;
use std::fmt;

/// One refused argument of a `tools/call` (or of the subcommand that makes one).
#[derive(Debug, Clone, PartialEq)]
pub struct ArgError {
    /// The argument's name as the tool takes it (`title_prefix`); for
    /// [`ArgProblem::Unknown`] the name the caller sent, for [`ArgProblem::UnknownTool`] the
    /// tool's name.
    pub field: String,
    /// What was wrong with it.
    pub problem: ArgProblem,
}

/// What was wrong with an argument.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ArgProblem {
    /// The tool is not one of ours.
    UnknownTool,
    /// The tool takes no argument of this name.
    Unknown {
        /// The accepted name it most likely misspells.
        suggestion: Option<String>,
        /// Every argument the tool takes (empty: none).
        accepted: Vec<String>,
    },
    /// A required argument is absent; `expected` says what to give (`a string`).
    Missing { expected: &'static str },
    /// A required argument with a closed set of values is absent.
    MissingOneOf { allowed: Vec<&'static str> },
    /// The value has the wrong JSON type; `expected` is `a string`.
    WrongType { expected: &'static str, got: Value },
    /// A boolean argument got something else.
    NotBool { got: Value },
    /// A string that must not be empty (or blank, for required ones) is.
    Empty,
    /// A string longer than `max` characters.
    TooLong { max: usize },
    /// A value outside a closed set (compared without letter case).
    NotOneOf {
        got: Value,
        allowed: Vec<&'static str>,
    },
    /// Not a whole number in `min..=max`.
    OutOfRange { got: Value, min: u64, max: u64 },
    /// Not an amount of USD above 0 and at most `max`.
    NotUsd { got: Value, max: f64 },
    /// Not a UTC date `YYYY-MM-DD`.
    NotDate { got: Value },
    /// Not an array of 1 to `max` non-empty task ids.
    NotTaskIds { max: usize },
    /// A model in none of the accepted shapes.
    BadModel { got: String },
    /// A value starting with `-` where none can (a model, an agent, a session id): on a
    /// command line it would look like an option.
    OptionLike {
        got: Value,
        /// What the value names: `model`, `agent`, `session id`.
        what: &'static str,
    },
}

impl ArgError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, problem: ArgProblem) -> Self {
        ArgError {
            field: field.into(),
            problem,
        }
    }

    /// The wording for MCP: one line naming the JSON field and what is accepted.
    pub fn mcp_text(&self) -> String {
        self.words(&Mcp)
    }

    /// The wording for the command line: the same line naming the subcommand's flag
    /// (`--title-prefix`) or, for `id`, its positional argument (`<ID>`).
    pub fn cli_text(&self) -> String {
        self.words(&Cli)
    }

    fn words(&self, n: &dyn Naming) -> String {
        let field = n.name(&self.field);
        match &self.problem {
            ArgProblem::UnknownTool => format!("unknown tool {}", shown_name(&self.field)),
            ArgProblem::Unknown {
                suggestion,
                accepted,
            } => {
                let hint = suggestion
                    .as_deref()
                    .map(|k| format!("; did you mean `{}`?", n.flag(k)))
                    .unwrap_or_default();
                let accepted = if accepted.is_empty() {
                    n.takes_none().to_string()
                } else {
                    let names: Vec<String> = accepted.iter().map(|a| n.flag(a)).collect();
                    format!("accepted {}s: {}", n.noun(), names.join(", "))
                };
                format!(
                    "unknown {} {}{hint}; {accepted}",
                    n.noun_of(&self.field),
                    n.shown(&self.field)
                )
            }
            ArgProblem::Missing { expected } => format!("missing required {field} ({expected})"),
            ArgProblem::MissingOneOf { allowed } => {
                format!(
                    "missing required {field}; use one of {}",
                    allowed.join(", ")
                )
            }
            ArgProblem::WrongType { expected, got } => {
                format!("bad {field}: expected {expected}, got {}", kind(got))
            }
            ArgProblem::NotBool { got } => {
                format!("bad {field}: expected true or false, got {}", shown(got))
            }
            ArgProblem::Empty => format!("bad {field}: must not be empty"),
            ArgProblem::TooLong { max } => format!("bad {field}: longer than {max} characters"),
            ArgProblem::NotOneOf { got, allowed } => format!(
                "bad {field}: {} is not accepted; use one of {}",
                shown(got),
                allowed.join(", ")
            ),
            ArgProblem::OutOfRange { got, min, max } => format!(
                "bad {field}: {} is not accepted; use a whole number from {min} to {max}",
                shown(got)
            ),
            ArgProblem::NotUsd { got, max } => format!(
                "bad {field}: {} is not accepted; use an amount of USD above 0 and at most {max}, such as 0.50",
                shown(got)
            ),
            ArgProblem::NotDate { got } => format!(
                "bad {field}: {} is not accepted; use a UTC date such as 2026-01-31",
                shown(got)
            ),
            ArgProblem::NotTaskIds { max } => {
                format!("bad {field}: use an array of 1 to {max} task ids, e.g. [\"3\", \"4\"]")
            }
            ArgProblem::OptionLike { got, what } => format!(
                "bad {field}: {} starts with `-`, which no {what} does (it would read as an option); give the {what} itself",
                shown(got)
            ),
            ArgProblem::BadModel { got } => format!(
                "bad {field}: {got:?} is not accepted; use provider/model or provider/model#variant (opencode), or a Claude model: sonnet, opus, haiku, claude-... (Claude Code)"
            ),
        }
    }
}

/// The MCP wording ([`ArgError::mcp_text`]).
impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.mcp_text())
    }
}

impl std::error::Error for ArgError {}

/// How one audience names arguments.
trait Naming {
    /// `argument \`limit\`` / `option \`--limit\``.
    fn name(&self, field: &str) -> String {
        format!("{} `{}`", self.noun_of(field), self.flag(field))
    }
    /// The bare name: `limit` / `--limit`.
    fn flag(&self, field: &str) -> String;
    /// A name the caller sent, clipped and on one line, in backticks.
    fn shown(&self, field: &str) -> String;
    /// `argument` / `option` (or `argument` for a positional one).
    fn noun_of(&self, field: &str) -> &'static str;
    fn noun(&self) -> &'static str;
    fn takes_none(&self) -> &'static str;
}

struct Mcp;

impl Naming for Mcp {
    fn flag(&self, field: &str) -> String {
        field.to_string()
    }
    fn shown(&self, field: &str) -> String {
        shown_name(field)
    }
    fn noun_of(&self, _: &str) -> &'static str {
        "argument"
    }
    fn noun(&self) -> &'static str {
        "argument"
    }
    fn takes_none(&self) -> &'static str {
        "this tool takes no arguments"
    }
}

struct Cli;

impl Naming for Cli {
    fn flag(&self, field: &str) -> String {
        if field == "id" {
            "<ID>".into()
        } else {
            format!("--{}", field.replace('_', "-"))
        }
    }
    fn shown(&self, field: &str) -> String {
        shown_name(&self.flag(field))
    }
    fn noun_of(&self, field: &str) -> &'static str {
        if field == "id" { "argument" } else { "option" }
    }
    fn noun(&self) -> &'static str {
        "option"
    }
    fn takes_none(&self) -> &'static str {
        "this command takes no options"
    }
}

/// The JSON type of a value, as an error names it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value the caller sent, as JSON, clipped to 40 characters.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// A name the caller sent, for an error text: JSON-escaped (so it stays on one line), clipped to
/// 40 characters, in backticks.
fn shown_name(name: &str) -> String {
    let quoted = Value::String(name.to_string()).to_string();
    let inner = &quoted[1..quoted.len() - 1];
    if inner.chars().count() > 40 {
        format!("`{}...`", inner.chars().take(40).collect::<String>())
    } else {
        format!("`{inner}`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn both(field: &str, problem: ArgProblem) -> (String, String) {
        let e = ArgError::new(field, problem);
        (e.mcp_text(), e.cli_text())
    }

    #[test]
    fn names_the_caller_sent_stay_on_one_short_line() {
        // Found by the tool_args fuzz target: an unknown argument named with a newline made a
        // two-line error, and a huge name was echoed whole.
        assert_eq!(shown_name("a\nb"), "`a\\nb`");
        let long = "x".repeat(10_000);
        assert_eq!(shown_name(&long), format!("`{}...`", "x".repeat(40)));
    }

    #[test]
    fn the_cli_names_flags_where_mcp_names_fields() {
        assert_eq!(
            both(
                "title_prefix",
                ArgProblem::OutOfRange {
                    got: json!(0),
                    min: 1,
                    max: 500
                }
            ),
            (
                "bad argument `title_prefix`: 0 is not accepted; use a whole number from 1 to 500"
                    .into(),
                "bad option `--title-prefix`: 0 is not accepted; use a whole number from 1 to 500"
                    .into()
            )
        );
        assert_eq!(
            both(
                "id",
                ArgProblem::WrongType {
                    expected: "a string",
                    got: json!(3)
                }
            ),
            (
                "bad argument `id`: expected a string, got a number".into(),
                "bad argument `<ID>`: expected a string, got a number".into()
            )
        );
        assert_eq!(
            both(
                "tier",
                ArgProblem::MissingOneOf {
                    allowed: vec!["easy", "medium"]
                }
            ),
            (
                "missing required argument `tier`; use one of easy, medium".into(),
                "missing required option `--tier`; use one of easy, medium".into()
            )
        );
        assert_eq!(
            both(
                "promt",
                ArgProblem::Unknown {
                    suggestion: Some("prompt".into()),
                    accepted: vec!["tier".into(), "prompt".into()]
                }
            ),
            (
                "unknown argument `promt`; did you mean `prompt`?; accepted arguments: tier, prompt"
                    .into(),
                "unknown option `--promt`; did you mean `--prompt`?; accepted options: --tier, --prompt"
                    .into()
            )
        );
        let (mcp, cli) = both(
            "x",
            ArgProblem::Unknown {
                suggestion: None,
                accepted: vec![],
            },
        );
        assert_eq!(mcp, "unknown argument `x`; this tool takes no arguments");
        assert_eq!(cli, "unknown option `--x`; this command takes no options");
    }

    #[test]
    fn values_are_shown_as_json_and_clipped() {
        let e = ArgError::new(
            "state",
            ArgProblem::NotOneOf {
                got: json!("d".repeat(100)),
                allowed: vec!["running"],
            },
        );
        assert_eq!(
            e.to_string(),
            format!(
                "bad argument `state`: \"{}... is not accepted; use one of running",
                "d".repeat(39)
            )
        );
        let e = ArgError::new(
            "model",
            ArgProblem::OptionLike {
                got: json!(format!("--dir=/{}", "x".repeat(5000))),
                what: "model",
            },
        );
        assert_eq!(
            e.mcp_text(),
            format!(
                "bad argument `model`: \"--dir=/{}... starts with `-`, which no model does (it would read as an option); give the model itself",
                "x".repeat(32)
            )
        );
        let e = ArgError::new("title", ArgProblem::TooLong { max: 200 });
        assert_eq!(
            e.cli_text(),
            "bad option `--title`: longer than 200 characters"
        );
        let e = ArgError::new("mechanical", ArgProblem::NotBool { got: json!("yes") });
        assert_eq!(
            e.cli_text(),
            "bad option `--mechanical`: expected true or false, got \"yes\""
        );
    }
}
