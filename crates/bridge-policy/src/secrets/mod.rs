//! The secret guard: refuses prompts that look like they contain a credential.
//!
//! Detectors run over the whole prompt: vendor formats with a recognisable prefix or shape
//! (`vendor.rs`: cloud and AI provider keys, VCS and registry tokens, chat and payment tokens,
//! private-key blocks), JWTs, then contextual ones: Authorization headers, connection strings and
//! command lines with a password, values given to a secret-ish name (assignments in every config
//! and code syntax, XML elements and attributes, tuples, setter calls, URL query parameters,
//! prose such as "the key is …"), a long random-looking token on a line that mentions a
//! secret word (or right after one), and such a token right after any name (a service's:
//! `cloudflare: "<token>"`, `pairing.rs`; ids that are random by design, a ULID, a KSUID, …,
//! are not keys there, `ids.rs`). The prompt is also read with its invisible characters taken
//! out, the text of each bounded base64 run, its lines with URL escapes decoded, and pairs of
//! lines joined where a token may be cut between them, all with the same rules (`hidden.rs`).
//! Each candidate is checked against placeholder rules
//! (`sk-xxx`, `<API_KEY>`, `${TOKEN}`, `$(cat …)`, `your-key-here`, repeated or sequential
//! characters, documented example values) so that ordinary coding prompts pass.
//!
//! The module is rules as data and one engine: `vendor.rs` (the vendor formats and where each
//! runs), `contextual.rs` (credentials in context and names' values) and `rules.rs` (the word
//! lists) are tables; `engine.rs` compiles them once and runs them (a literal prefilter, then
//! each rule only where its literal, anchor word or byte run is); `checks.rs`, `names.rs`,
//! `near.rs`, `pairing.rs`, `ids.rs` and `hidden.rs` judge candidates and read hidden text.
//!
//! A finding names the kind of secret and the line, never the secret itself. A project can
//! allow exact values or patterns ([`Allowlist`]); an allowed value is skipped, nothing else is.
//!
//! ```
//! use bridge_policy::secrets::scan;
//! let hit = scan("deploy with\nexport GITHUB_TOKEN=ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\n").unwrap();
//! assert_eq!(hit.kind, "GitHub token");
//! assert_eq!(hit.line, 2);
//! assert!(!hit.to_string().contains("ghp_"));
//! assert!(scan("set OPENAI_API_KEY=sk-xxx and read it with os.environ['OPENAI_API_KEY']").is_none());
//! ```

mod checks;
mod contextual;
mod engine;
mod hidden;
mod ids;
mod names;
mod near;
mod pairing;
mod prefilter;
mod rules;
#[cfg(test)]
mod tests;
mod vendor;

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::env::Environment;
use crate::mode::project_root;
use checks::*;
use contextual::*;
use engine::*;
use names::*;
use near::*;
use rules::*;

/// Where a prompt seems to hold a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SecretFinding {
    /// What kind of secret it looks like, e.g. `"AWS access key ID"`.
    pub kind: &'static str,
    /// The 1-based line of the prompt where it starts.
    pub line: usize,
}

impl fmt::Display for SecretFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} looks like it contains a secret ({})",
            self.line, self.kind
        )
    }
}

/// The project allowlist: `<project>/.claude/opencode-bridge-secrets.allow`.
pub const ALLOWLIST_FILE: &str = "opencode-bridge-secrets.allow";

/// Values the guard lets through: exact values, or `re:` patterns that must match a whole value.
/// One entry per line; blank lines and lines starting with `#` are ignored.
///
/// ```
/// use bridge_policy::secrets::{Allowlist, scan, scan_allowing};
/// let text = "TEST_TOKEN=ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi";
/// let allow = Allowlist::parse("# the CI fixture token\nghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\n");
/// assert_eq!(allow.len(), 1);
/// assert!(scan(text).is_some());
/// assert!(scan_allowing(text, &allow).is_none());
/// let by_pattern = Allowlist::parse("re:ghp_4Fq9[A-Za-z0-9]+");
/// assert!(scan_allowing(text, &by_pattern).is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    exact: Vec<String>,
    patterns: Vec<Regex>,
    path: Option<PathBuf>,
    problems: Vec<String>,
}

impl Allowlist {
    /// Parses the allowlist text. A `re:` line whose pattern does not compile is skipped and
    /// reported in [`Allowlist::problems`] (it never allows anything).
    pub fn parse(text: &str) -> Allowlist {
        let mut list = Allowlist::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(pattern) = line.strip_prefix("re:") {
                match Regex::new(&format!("^(?:{})$", pattern.trim())) {
                    Ok(re) => list.patterns.push(re),
                    Err(_) => list
                        .problems
                        .push(format!("line {}: the pattern does not compile", i + 1)),
                }
            } else {
                list.exact.push(line.to_owned());
            }
        }
        list
    }

    /// The allowlist in force for work in `cwd`: the first
    /// `.claude/opencode-bridge-secrets.allow` found walking up from `cwd` to the project root
    /// ([`project_root`]: the nearest directory with `.claude` or `.git`). Empty when there is
    /// none, or when `cwd` is in no project.
    pub fn load(env: &dyn Environment, cwd: &Path) -> Allowlist {
        let Some(root) = project_root(env, cwd) else {
            return Allowlist::default();
        };
        for dir in cwd.ancestors() {
            let path = dir.join(".claude").join(ALLOWLIST_FILE);
            if let Some(text) = env.read_to_string(&path) {
                let mut list = Allowlist::parse(&text);
                list.path = Some(path);
                return list;
            }
            if dir == root {
                break;
            }
        }
        Allowlist::default()
    }

    /// The file it was read from, when it came from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The number of usable entries (exact values and patterns).
    pub fn len(&self) -> usize {
        self.exact.len() + self.patterns.len()
    }

    /// Whether it allows nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lines that were skipped, e.g. a pattern that does not compile (never the line's text).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// Whether a matched value is allowed.
    pub fn allows(&self, value: &str) -> bool {
        self.exact.iter().any(|e| e == value) || self.patterns.iter().any(|p| p.is_match(value))
    }
}

/// Returns the first line holding a secret-looking value, if any. When several detectors fire on
/// that line, the most specific one (a vendor format before a generic rule) names the kind.
///
/// ```
/// use bridge_policy::secrets::scan;
/// let f = scan("DATABASE_URL=postgres://app:Vq3#mZ8pLw@db.internal/app").unwrap();
/// assert_eq!((f.kind, f.line), ("connection string with a password", 1));
/// assert_eq!(scan("DATABASE_URL=postgres://app:${DB_PASSWORD}@db/app"), None);
/// ```
pub fn scan(text: &str) -> Option<SecretFinding> {
    scan_allowing(text, &Allowlist::default())
}

/// [`scan`], skipping values the allowlist allows.
pub fn scan_allowing(text: &str, allow: &Allowlist) -> Option<SecretFinding> {
    findings(text, allow).into_iter().next()
}

/// Every line holding a secret-looking value that the allowlist does not allow, one finding per
/// line (the most specific kind), in line order.
///
/// ```
/// use bridge_policy::secrets::{findings, Allowlist};
/// let text = "a\npassword = \"Zq8#rT2!vLp9\"\nb\nkey: AKIAZ7Q4M2KD8XW3PL6T\n";
/// let lines: Vec<usize> = findings(text, &Allowlist::default()).iter().map(|f| f.line).collect();
/// assert_eq!(lines, [2, 4]);
/// ```
pub fn findings(text: &str, allow: &Allowlist) -> Vec<SecretFinding> {
    let lines = prefilter::Lines::new(text);
    let mut best: Vec<(usize, usize)> = all_hits(text, &lines) // (line, rule)
        .into_iter()
        .filter(|hit| allow.is_empty() || !allow.allows(&text[hit.value.clone()]))
        .map(|hit| (lines.index(hit.offset) + 1, hit.rule))
        .collect();
    // per line the lowest rule (the most specific kind): sorted, the first of each line
    best.sort_unstable();
    best.dedup_by_key(|(line, _)| *line);
    best.into_iter()
        .map(|(line, rule)| SecretFinding {
            kind: RULES[rule].kind,
            line,
        })
        .collect()
}

/// The byte ranges of every secret-looking value in `text` (allowlist ignored), sorted; used to
/// keep secrets out of session titles.
pub fn secret_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans: Vec<Range<usize>> = hits(text).into_iter().map(|h| h.value).collect();
    spans.sort_by_key(|r| (r.start, r.end));
    spans
}

/// `text` with every secret-looking value ([`secret_spans`]) and every long random-looking
/// token (20+ characters of letters and digits that switch classes like random text, whatever
/// stands near them) replaced by `[secret]`: the text session titles are built from.
///
/// ```
/// use bridge_policy::secrets::redact;
/// let r = redact("call it with ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi please");
/// assert_eq!(r, "call it with [secret] please");
/// assert_eq!(redact("q9XzL2mT7vB4nK8sW3pR6yH1"), "[secret]");
/// assert_eq!(redact("fix parse_configuration_file"), "fix parse_configuration_file");
/// ```
pub fn redact(text: &str) -> String {
    static LOOSE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/=_~.-]{20,}").expect("loose token pattern"));
    let mut spans = secret_spans(text);
    let loose = |t: &str| {
        let t = t.trim_matches(['.', '-', '=']);
        let digits = t.chars().filter(char::is_ascii_digit).count();
        t.len() >= 20
            && digits >= 2
            && t.chars().any(|c| c.is_ascii_alphabetic())
            && looks_random(t)
    };
    for m in LOOSE.find_iter(text) {
        let run = m.as_str();
        // A path (`/tmp/.tmp2dD5vV/out`, `--dir=/srv/x`, `~/a/b`) is judged by its parts: a
        // random directory name is no secret, a long random part still is.
        let path_at = ["=/", ":/", "=~/"]
            .iter()
            .filter_map(|p| run.find(p).map(|i| i + 1))
            .chain(
                (run.starts_with('/') || run.starts_with("~/") || run.starts_with("./"))
                    .then_some(0),
            )
            .min();
        match path_at {
            Some(at) => {
                if loose(&run[..at]) {
                    spans.push(m.start()..m.start() + at);
                }
                let mut start = m.start() + at;
                for part in run[at..].split('/') {
                    if loose(part) {
                        spans.push(start..start + part.len());
                    }
                    start += part.len() + 1;
                }
            }
            None if loose(run) => spans.push(m.range()),
            None => {}
        }
    }
    spans.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in spans {
        if span.start < at {
            at = at.max(span.end);
            continue;
        }
        out.push_str(&text[at..span.start]);
        out.push_str("[secret]");
        at = span.end;
    }
    out.push_str(&text[at..]);
    out
}
