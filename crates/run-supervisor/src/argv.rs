//! The one way a run's command line is put together, for both runners: no caller string is
//! ever an option.
//!
//! opencode parses its arguments with yargs, which reads any separate argument starting with
//! `-` as a new option (`--title --dir=/elsewhere` is a title-less run in `/elsewhere`); an
//! array option such as `-f` also swallows the words after it. Claude Code parses with
//! commander, whose options with an optional value (`--resume [value]`) do the same. Both
//! parsers read `--name=value`, given as ONE argument, as that option with exactly that value,
//! whatever the value holds (`--title=--dir=/x` is the title `--dir=/x`; verified with
//! opencode 1.18.33 and Claude Code 2.1.328).
//!
//! So [`Argv`] takes the bridge's own words (subcommands and switches) only as `&'static str`
//! literals, and every value, the caller's and the bridge's alike, through
//! [`Argv::value`], which writes `--name=value` as one element. A value can therefore never
//! stand on its own in the argument list. Values that can only be mistakes when they start
//! with `-` (a model, an agent, a session id, a variant) are refused before any of this
//! ([`option_like`], used by the supervisor's spec check and the binary's argument check);
//! a title may start with `-` and is still only a title.

use std::ffi::{OsStr, OsString};

/// A command line under construction: literals of the bridge and `--name=value` elements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Argv(Vec<OsString>);

impl Argv {
    /// Starts with the bridge's own words: a subcommand (`run`) or switches (`-p`).
    pub fn new(words: &[&'static str]) -> Argv {
        Argv(words.iter().map(OsString::from).collect())
    }

    /// A switch without a value (`--auto`), or a subcommand word: a literal of the bridge.
    pub fn word(&mut self, word: &'static str) -> &mut Argv {
        self.0.push(word.into());
        self
    }

    /// The option `name` (a long option, `--title`) with `value`, as the single element
    /// `--title=value`: the parser can only read it as that option's value.
    ///
    /// # Panics
    /// When `name` is not a long option (`--x`) or holds a `=`: a programming error.
    pub fn value(&mut self, name: &'static str, value: impl AsRef<OsStr>) -> &mut Argv {
        assert!(
            name.len() > 2 && name.starts_with("--") && !name.contains('='),
            "{name} is not a long option name"
        );
        let mut element = OsString::from(name);
        element.push("=");
        element.push(value);
        self.0.push(element);
        self
    }

    /// The finished argument list (after the program).
    pub fn into_args(self) -> Vec<OsString> {
        self.0
    }
}

/// True when `value` would look like an option on a command line (it starts with `-`,
/// leading white space ignored). Used to refuse values that can only be mistakes: a model,
/// an agent, a session id, a variant or effort.
pub fn option_like(value: &str) -> bool {
    value.trim_start().starts_with('-')
}

/// Values a caller could pass to smuggle options into a command line: the classes of the
/// adversarial report (another directory, a file for the model, approvals, another agent or
/// session, the end of options). Every test of argv building walks them.
pub const INJECTION_SAMPLES: [&str; 8] = [
    "--dir=/tmp/elsewhere",
    "--file=/etc/passwd",
    "-f",
    "--auto",
    "--agent=build",
    "-m",
    "--session=x",
    "--",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(a: Argv) -> Vec<String> {
        a.into_args()
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn every_value_is_one_element_joined_to_its_option() {
        let mut a = Argv::new(&["run"]);
        a.value("--format", "json")
            .value("--title", "--dir=/tmp/elsewhere")
            .value("--agent", "-f")
            .value("--title", "a\nb = c --auto")
            .value("--session", "")
            .word("--auto");
        assert_eq!(
            strs(a),
            [
                "run",
                "--format=json",
                "--title=--dir=/tmp/elsewhere",
                "--agent=-f",
                "--title=a\nb = c --auto",
                "--session=",
                "--auto"
            ]
        );
    }

    #[test]
    fn injection_values_never_stand_alone() {
        for v in INJECTION_SAMPLES.iter().chain(&["-", " --auto"]) {
            let mut a = Argv::new(&["run"]);
            a.value("--title", v).value("--model", v);
            let args = strs(a);
            assert_eq!(args.len(), 3, "{v:?}: {args:?}");
            assert!(
                args[1..]
                    .iter()
                    .all(|x| x.starts_with("--title=") || x.starts_with("--model=")),
                "{v:?}: {args:?}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "is not a long option name")]
    fn a_short_option_cannot_carry_a_value() {
        Argv::new(&[]).value("-m", "x");
    }

    #[test]
    fn option_like_values() {
        for v in ["-m", "--auto", " -x", "\t--dir=/x", "-"] {
            assert!(option_like(v), "{v:?}");
        }
        for v in ["fk/ok", "ses_1", "a-b", "worker", "", "x --auto"] {
            assert!(!option_like(v), "{v:?}");
        }
    }
}
