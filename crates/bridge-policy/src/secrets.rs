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

mod hidden;
mod ids;
mod pairing;
mod prefilter;
mod rules;
mod vendor;

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::env::Environment;
use crate::mode::project_root;
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

/// One validated candidate: which rule, where the finding starts, and the value's span.
struct Hit {
    rule: usize,
    offset: usize,
    value: Range<usize>,
}

/// How a candidate is checked after the regex matched. The regex's group 1 (or the whole match)
/// is the value checked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Prefix formats: not a placeholder, and at least this many distinct characters.
    Varied(usize),
    /// Prefix formats whose body could also be a word: varied and random-looking.
    Random,
    /// A token inside a URL (a webhook's): varied, random-looking, not a constant's name.
    Token,
    /// A key block body: varied enough to be key material (real headers hold runs of `A`).
    KeyBlock,
    /// A JWT: three parts, not the jwt.io example.
    Jwt,
    /// Credentials: group `user`, group `pass` (connection strings, `curl -u`, `mysql -p`).
    Connection,
    /// A value given to a name (`name`, optional `pre`, one of `dq`/`sq`/`bq`/`bare`), judged by
    /// how secret-ish the name is.
    Named,
    /// [`Check::Named`] where the regex stops where the value starts (`name`, optional `pre`,
    /// `q` and `sep`) and the value is read by code ([`read_value`]), only once the name is
    /// secret-ish: a rejected name is then never followed by a scan of its value, which on one
    /// long line would be read again from every name in it (quadratic).
    NamedHead(ValueSyntax),
    /// An `Authorization: Bearer|Basic|token` value.
    Auth,
    /// An `Authorization:` header of any scheme (group `scheme`, optional) and its value `v`.
    AuthHeader,
    /// `curl -u`/`--user` credentials, quoted or braced in any way (group `v`).
    UserPass,
    /// A password given to a command-line tool's flag (group `v`, maybe quoted).
    CmdPassword,
}

struct Rule {
    kind: &'static str,
    regex: Regex,
    check: Check,
    /// Literals one of which every match contains (see `prefilter.rs`); `None`: always run.
    literals: Option<Vec<Vec<u8>>>,
    /// Its matches never span a line break (and it has no `$`): it may run line by line.
    one_line: bool,
    /// For the assignment [`Check::NamedHead`] rule: the regex that reads the groups of one of
    /// its matches (`None` for the query rule).
    groups: Option<Regex>,
    /// For a one-line rule without literals: the run every match holds (see [`Run`]); it runs
    /// only on the lines that hold one.
    run: Option<Run>,
}

/// How a rule is prefiltered: by literals from its own pattern, by an anchor pattern's literals
/// (a word inside the match), and whether it may run line by line.
#[derive(Clone, Copy)]
enum Scope {
    /// Literals from the pattern; the whole text.
    Text,
    /// Literals from the anchor; the whole text (its matches may span lines).
    TextAnchor(&'static str),
    /// Literals from the anchor; only the lines that hold one.
    LinesAnchor(&'static str),
    /// No literals: only the lines holding a run of bytes (see [`Run`]).
    LinesRun(Run),
}

/// A run of bytes of one class, and the byte right after it, that every match of a rule
/// holds, found by one byte pass: for shapes with no literal and no rare word, whose regex
/// would otherwise read every byte of a prompt (15 digits and `-` in a Twitter token, 32 of
/// `[a-h0-9]` and `-` in Mailgun's key).
#[derive(Clone, Copy)]
struct Run {
    /// The bytes of the run.
    class: fn(u8) -> bool,
    /// Its least length.
    min: usize,
    /// The bytes one of which follows it.
    after: &'static [u8],
}

/// A digit of a `\d` or `[0-9]`: a byte of a non-ASCII character counts too, since `\d` also
/// matches Unicode digits (each two bytes or more).
fn digit_byte(b: u8) -> bool {
    b.is_ascii_digit() || b >= 0x80
}

impl Run {
    /// The lines of `text` holding such a run, in order. A run holds no line break, so a
    /// match lies on the line where the run ends.
    fn lines(self, text: &str, lines: &prefilter::Lines) -> Vec<usize> {
        // the class as a table: one lookup a byte, no call
        let class: [bool; 256] = std::array::from_fn(|b| (self.class)(b as u8));
        let mut out: Vec<usize> = Vec::new();
        let mut len = 0;
        for (at, &b) in text.as_bytes().iter().enumerate() {
            if class[usize::from(b)] {
                len += 1;
                continue;
            }
            if len >= self.min && self.after.contains(&b) {
                let line = lines.index(at);
                if out.last() != Some(&line) {
                    out.push(line);
                }
            }
            len = 0;
        }
        out
    }
}

/// Vendor formats without a literal that run only on the lines holding a [`Run`].
const VENDOR_RUNS: &[(&str, Run)] = &[
    (
        "Twitter access token",
        Run {
            class: digit_byte,
            min: 15,
            after: b"-",
        },
    ),
    (
        "Facebook app access token",
        Run {
            class: digit_byte,
            min: 15,
            after: b"|%",
        },
    ),
    (
        "Asana token",
        Run {
            class: digit_byte,
            min: 16,
            after: b"/",
        },
    ),
    (
        "Mailgun signing key",
        Run {
            class: |b| b.is_ascii_digit() || (b'a'..=b'h').contains(&b),
            min: 32,
            after: b"-",
        },
    ),
];

/// Command-line tools that take a password through a flag: where [`CMD_PASSWORD`] looks (every
/// match holds one of these; the two-letter ones with the blank after them).
const CMD_TOOLS: &str = r"(?i:mysql|mariadb|docker|podman|nerdctl|helm|sshpass|redis-cli|mongo|wget|psql|pg_dump|sqlcmd|rabbitmqctl|keytool|jarsigner|openssl|ldap|zip|7z|rar|gpg|az |oc |cf )";
/// A password flag on the line of such a tool (`-p`, `-a`, `--password`, `-storepass` …).
const CMD_PASSWORD: &str = r#"(?i:\b(?:mysql|mysqldump|mysqladmin|mariadb|docker|podman|nerdctl|helm|sshpass|redis-cli|mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport|wget|psql|pg_dump|sqlcmd|rabbitmqctl|keytool|jarsigner|openssl|ldapsearch|ldapadd|ldapmodify|ldapdelete|ldapwhoami|zip|unzip|7z|7za|rar|unrar|gpg)\b|(?:az|oc|cf) )[^\n]*?[ \t](?-i:-p|-a|-P|-w|--password|--pass|--passwd|--passphrase|--storepass|--keypass|-storepass|-keypass|-srcstorepass|-deststorepass|-passin|-passout|--auth)(?:=|[ \t]+)?(?P<v>'[^'\n]+'|"[^"\n]+"|[^\s'"]+)"#;

/// Vendor formats without a literal of their own, and a word every match of theirs holds: they
/// run only on texts that hold it.
const VENDOR_ANCHORS: &[(&str, &str)] =
    &[("webhook URL", "(?i:hook)"), ("Azure client secret", "Q~")];

/// The kind of a strongly secret-named value (password, secret, token, API key …).
const KIND_STRONG: &str = "password/API key/token assignment";
/// The kind of a random value given to a loosely secret-ish name (`*Key`, `auth`, `sig` …).
const KIND_WEAK: &str = "high-entropy value in a secret-named setting";
/// The kind of a random token on a line that mentions a secret word.
const KIND_NEAR: &str = "high-entropy token next to a secret word";
/// The kind of a password-like word on a line that mentions a password.
const KIND_NEAR_PASSWORD: &str = "password next to a password word";
/// The kind of a random token right after a name that is not a secret word (a service's name).
const KIND_PAIR: &str = "high-entropy token next to a service name";

/// The name characters of an assignment: must hold a secret-ish word somewhere.
const NAME: &str = r"[A-Za-z0-9_.-]*(?i:pass|pwd|secret|token|key|cred|auth|sig|hmac|webhook|bearer|jwt|cookie|session|salt|private|license|contrase)[A-Za-z0-9_.\x{F1}-]*";
/// The secret words of [`NAME`]: one of them is in every name it matches.
const NAME_WORDS: &str = r"(?i:pass|pwd|secret|token|key|cred|auth|sig|hmac|webhook|bearer|jwt|cookie|session|salt|private|license|contrase)";
/// The head of an assignment to a name (`name` matching `name`; `pre`, the word before; `q`, a
/// quote before the name; `sep`), up to where the value starts.
fn assignment_head(name: &str) -> String {
    format!(
        r#"(?:(?P<pre>[A-Za-z][A-Za-z0-9_-]*)[ \t])?(?P<q>["'`])?(?P<name>{name})["'`]?(?:\[\]|\])?[ \t]*(?P<sep>=>|:=|===?|!==?|=|::?|->|[ \t]-[ \t]|[ \t](?:is|was|are)[ \t]|,|\()[ \t]*"#
    )
}
/// The head of a URL query parameter, up to where its value starts.
const QUERY_HEAD: &str = r#"[?&;](?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,40})="#;

/// The regex that reads the groups of an assignment-head match ([`QUERY_HEAD`] needs none: its
/// name is all but the first and last byte): the rule's head with any
/// name allowed (the rule already required the secret word), anchored at both ends of the
/// match. Anchored, it takes the parse the rule's own regex took: the rule's regex prefers a
/// `pre` word and drops it only when the name then lacks a secret word, and a name without
/// `pre` cannot cover the same span as `pre`, a blank and a name (names hold no blanks).
fn head_groups() -> Regex {
    let head = assignment_head("[A-Za-z0-9_.\\x{F1}-]+");
    Regex::new(&format!("^(?:{head})$")).expect("head groups pattern")
}
/// A value: double, single or back-quoted, or bare up to a delimiter ([`ValueSyntax::Any`] reads
/// the same by code).
const VALUE: &str =
    r#"(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|`(?P<bq>[^`\n]*)`|(?P<bare>[^\s"'`,;()\[\]{}<>]+))"#;

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let mut list: Vec<(&'static str, String, Check, Scope)> = vendor::VENDOR
        .iter()
        .map(|(k, p, c)| {
            let scope = if let Some((_, run)) = VENDOR_RUNS.iter().find(|(kind, _)| kind == k) {
                Scope::LinesRun(*run)
            } else if let Some((_, anchor)) = VENDOR_ANCHORS.iter().find(|(kind, _)| kind == k) {
                Scope::TextAnchor(anchor)
            } else {
                Scope::Text
            };
            (*k, (*p).to_owned(), *c, scope)
        })
        .collect();
    let contextual: Vec<(&'static str, String, Check, Scope)> = vec![
        ("JSON Web Token", r"\b(?:eyJ|ewog)[A-Za-z0-9_-]{8,}={0,2}\.(?:eyJ|ewo)[A-Za-z0-9_-]{8,}={0,2}\.[A-Za-z0-9_-]{16,}".into(), Check::Jwt, Scope::Text),
        ("Authorization header", r"(?i)\b(?:proxy-)?authorization[\x22']?[ \t]*[:=][ \t]*[\x22'`]?[ \t]*(?:(?P<scheme>[A-Za-z][A-Za-z0-9_-]{1,30})[ \t]+)?(?P<v>[A-Za-z0-9._~+/=@:-]{8,300})".into(), Check::AuthHeader, Scope::LinesAnchor("(?i:authorization)")),
        ("Authorization header", r"(?i)\b(?:bearer|token)\s+([A-Za-z0-9._~+/-]{20,}=*)".into(), Check::Auth, Scope::Text),
        ("connection string with a password", r"\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|redis|rediss|amqps?|mssql|sqlserver|oracle|clickhouse|cockroachdb|nats|kafka|ldaps?|smtps?|ftps?|sftp|https?|git|ssh|jdbc:[a-z]+)://(?P<user>[^\s:/@'\x22]{1,64}):(?P<pass>[^\s'\x22]{1,300})@[A-Za-z0-9.\-\[\]]+".into(), Check::Connection, Scope::Text),
        ("credentials in a command line", r#"(?:^|\s)(?:-u|--user)(?:=|[ \t]+)(?P<v>"[^"\n]{0,200}"(?::"[^"\n]{0,200}"|:'[^'\n]{0,200}')?|'[^'\n]{0,200}'|[^\s"']{1,200}(?:'[^'\n]{0,200}'|"[^"\n]{0,200}")?)"#.into(), Check::UserPass, Scope::TextAnchor("(?:-u|--user)")),
        ("credentials in a command line", CMD_PASSWORD.into(), Check::CmdPassword, Scope::LinesAnchor(CMD_TOOLS)),
        ("credentials in a command line", r#"\bhtpasswd[ \t]+-[A-Za-z]*b[A-Za-z]*[ \t]+(?:-\S+[ \t]+)*[^\s-]\S*[ \t]+\S+[ \t]+(?P<v>'[^'\n]+'|"[^"\n]+"|[^\s'"]+)"#.into(), Check::CmdPassword, Scope::Text),
        ("credentials in a command line", r#"(?:^|\s)-U[ \t]+[^\s%'"]+%(?P<v>[^\s'"]+)"#.into(), Check::CmdPassword, Scope::TextAnchor("-U")),
        ("credentials in a command line", r#"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n]*?\s-p(?P<pass>[^\s'"-][^\s'"]{5,})"#.into(), Check::Connection, Scope::Text),
        ("connection string with a password", r#"\bjdbc:oracle:[a-z0-9]+:(?P<user>[^\s/@:'"]{1,64})/(?P<pass>[^\s@'"]{1,128})@"#.into(), Check::Connection, Scope::Text),
        ("credentials in code", r#"(?i)\b(?:auth|basic_?auth|http_?auth|httpbasicauth|digestauth|credentials|login)[ \t]*(?:=[ \t]*\(?|\()[ \t]*["'](?P<user>[^"'\s]{1,80})["'][ \t]*,[ \t]*["'](?P<pass>[^"'\n]{4,200})["']"#.into(), Check::Connection, Scope::LinesAnchor("(?i:auth|credentials|login)")),
        (KIND_STRONG, assignment_head(NAME), Check::NamedHead(ValueSyntax::Any), Scope::LinesAnchor(NAME_WORDS)),
        (KIND_STRONG, r#"(?:"(?P<dq>[^"\n]{8,200})"|'(?P<sq>[^'\n]{8,200})')[ \t]*[!=]==?[ \t]*(?P<name>[A-Za-z_$][A-Za-z0-9_.$]{0,60})"#.into(), Check::Named, Scope::TextAnchor("(?:==|!=)")),
        (KIND_STRONG, format!(r#"(?P<name>{NAME})[ \t]+(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)');"#), Check::Named, Scope::LinesAnchor(r#"["'];"#)),
        (KIND_STRONG, r#"(?i)\b(?P<pre>[a-z0-9]+)[ \t](?P<name>key|token|secret|password)[ \t]+(?P<bare>[A-Za-z0-9_+/=-]{16,})"#.into(), Check::Named, Scope::LinesAnchor("(?i:key|token|secret|password)")),
        (KIND_STRONG, r#"<(?P<name>[A-Za-z_][\w.:-]{0,60})(?:\s[^<>\n]*)?>(?P<dq>[^<\n]{1,300})</"#.into(), Check::Named, Scope::Text),
        (KIND_STRONG, r#"\b(?:key|name)[ \t]*=[ \t]*"(?P<name>[^"\n]{1,80})"[ \t]+value[ \t]*=[ \t]*"(?P<dq>[^"\n]*)""#.into(), Check::Named, Scope::Text),
        (KIND_STRONG, QUERY_HEAD.into(), Check::NamedHead(ValueSyntax::Query), Scope::Text),
        (KIND_STRONG, r#"(?i)(?:^|[\s(])--?(?P<name>password|passwd|pass|token|api-key|apikey|secret|client-secret|auth-token|access-token)[= ]"#.to_owned() + VALUE, Check::Named, Scope::TextAnchor("(?i:pass|token|api-key|apikey|secret)")),
        (KIND_STRONG, r#"(?i)\b(?P<name>password|passwd|passphrase)[ \t]+(?P<bare>[^\s"']{8,})"#.into(), Check::Named, Scope::Text),
    ];
    list.extend(contextual);
    list.into_iter()
        .map(|(kind, pattern, check, scope)| {
            let (literals, one_line, run) = match scope {
                Scope::Text => (prefilter::required_literals(&pattern), false, None),
                Scope::TextAnchor(anchor) => (prefilter::required_literals(anchor), false, None),
                Scope::LinesAnchor(anchor) => (prefilter::required_literals(anchor), true, None),
                Scope::LinesRun(run) => (None, true, Some(run)),
            };
            Rule {
                kind,
                regex: Regex::new(&ascii_boundaries(&pattern))
                    .unwrap_or_else(|e| panic!("secret pattern for {kind}: {e}")),
                check,
                literals,
                one_line,
                run,
                groups: match check {
                    Check::NamedHead(ValueSyntax::Any) => Some(head_groups()),
                    _ => None,
                },
            }
        })
        .chain(
            [KIND_WEAK, KIND_NEAR, KIND_NEAR_PASSWORD, KIND_PAIR].map(|kind| Rule {
                kind,
                regex: Regex::new(r"[^\s\S]").expect("never matches"),
                check: Check::Varied(0),
                literals: Some(Vec::new()),
                one_line: false,
                groups: None,
                run: None,
            }),
        )
        .collect()
});

/// The secret words of the near-word rule's [`WORD`]: one of them is in every word it matches.
const WORD_WORDS: &str = r"(?i:pass|pwd|secret|token|key|cred|auth|bearer|sig)";

/// The prefilter of [`RULES`], plus one entry after them: the lines holding a [`WORD`].
static PREFILTER: LazyLock<prefilter::Prefilter> = LazyLock::new(|| {
    let mut rules: Vec<(Option<Vec<Vec<u8>>>, bool)> = RULES
        .iter()
        .map(|r| (r.literals.clone(), r.one_line && r.literals.is_some()))
        .collect();
    rules.push((prefilter::required_literals(WORD_WORDS), true));
    prefilter::Prefilter::new(&rules)
});

/// `pattern` with its word boundaries `\b` made ASCII ones, `(?-u:\b)`. A Unicode `\b` keeps
/// the regex engine's fast DFAs off any text with a non-ASCII character (smart quotes, an
/// accented name, U+FFFD): they give up there and a slower engine reads the rest of the text.
/// The two differ only beside a non-ASCII character, and every `\b` here stands beside an
/// ASCII letter, digit or `_` of the match, where the ASCII boundary holds wherever the Unicode
/// one does (it also holds between that character and a non-ASCII letter): the rules find what
/// they found and a little more. (The one loss, a case-folded non-ASCII letter right after the
/// boundary, KELVIN SIGN for `k` in `(?i)\bkey`, is not a secret name anyone writes.)
fn ascii_boundaries(pattern: &str) -> String {
    pattern.replace(r"\b", r"(?-u:\b)")
}

/// The index in [`RULES`] of a kind that has no regex of its own.
fn rule_of(kind: &str) -> usize {
    RULES
        .iter()
        .rposition(|r| r.kind == kind)
        .expect("kind is listed")
}

fn hits(text: &str) -> Vec<Hit> {
    all_hits(text, &prefilter::Lines::new(text))
}

/// [`hits_in`] over the text as written, over the text without its invisible characters (a
/// zero-width space inside a token), and over the text of each base64 run that decodes to
/// text (a known format, base64-encoded). A hit in decoded text is reported at its run.
fn all_hits(text: &str, lines: &prefilter::Lines) -> Vec<Hit> {
    let mut out = hits_in(text, lines);
    if let Some((clean, map)) = hidden::without_invisible(text) {
        for h in hits_in(&clean, &prefilter::Lines::new(&clean)) {
            out.push(Hit {
                rule: h.rule,
                offset: map[h.offset],
                value: map[h.value.start]..map[h.value.end],
            });
        }
    }
    // URL-decoded lines, and pairs of lines joined where a token may be cut (a finding there
    // counts only across the join)
    for reading in [hidden::percent_decoded(text), hidden::joined_lines(text)]
        .into_iter()
        .flatten()
    {
        for h in hits_in(&reading.text, &prefilter::Lines::new(&reading.text)) {
            let crosses = reading
                .joins
                .iter()
                .any(|&j| h.value.start < j && j < h.value.end);
            if reading.joins.is_empty() || crosses {
                out.push(Hit {
                    rule: h.rule,
                    offset: reading.map[h.offset],
                    value: reading.map[h.value.start]..reading.map[h.value.end],
                });
            }
        }
    }
    for (run, decoded) in hidden::base64_texts(text) {
        let found = hits_in(&decoded, &prefilter::Lines::new(&decoded));
        if let Some(rule) = found.iter().map(|h| h.rule).min() {
            out.push(Hit {
                rule,
                offset: run.start,
                value: run,
            });
        }
    }
    out
}

/// [`hits`], given the text's line structure.
fn hits_in(text: &str, lines: &prefilter::Lines) -> Vec<Hit> {
    let mut out = Vec::new();
    // the strength of each (word before, name) already judged in this text: the same names
    // recur through a prompt, on many lines
    let mut seen = HashMap::new();
    let weak = rule_of(KIND_WEAK);
    let candidates = PREFILTER.candidates(text, lines);
    for (index, rule) in RULES.iter().enumerate() {
        if !PREFILTER.may_match(&candidates, index) {
            continue;
        }
        if let Some(run) = rule.run {
            for line in run.lines(text, lines) {
                run_rule(
                    text,
                    lines.range(line),
                    index,
                    rule,
                    weak,
                    &mut seen,
                    &mut out,
                );
            }
        } else if let Some(on) = PREFILTER.lines(&candidates, index) {
            for &line in on {
                run_rule(
                    text,
                    lines.range(line),
                    index,
                    rule,
                    weak,
                    &mut seen,
                    &mut out,
                );
            }
        } else {
            run_rule(text, 0..text.len(), index, rule, weak, &mut seen, &mut out);
        }
    }
    let word_lines = PREFILTER.lines(&candidates, RULES.len()).unwrap_or(&[]);
    near_word_hits(text, lines, word_lines, &mut seen, &mut out);
    pairing::pair_hits(text, lines, rule_of(KIND_PAIR), &mut out);
    out
}

/// Runs rule `index` over `within` of `text`: the whole text, or one line of a rule whose
/// matches stay on one line (the regex still sees the text before, for `\b` and `^`; the line
/// ends at a line break or the text's end, which reads as the same boundary).
#[allow(clippy::too_many_arguments)]
fn run_rule<'t>(
    text: &'t str,
    within: Range<usize>,
    index: usize,
    rule: &Rule,
    weak: usize,
    seen: &mut HashMap<(&'t str, &'t str), Strength>,
    out: &mut Vec<Hit>,
) {
    let hay = &text[..within.end];
    let mut pos = within.start;
    if let Check::NamedHead(syntax) = rule.check {
        run_head_rule(text, hay, pos, rule, syntax, index, weak, seen, out);
        return;
    }
    {
        while pos <= hay.len()
            && let Some(caps) = rule.regex.captures_at(hay, pos)
        {
            let Some(whole) = caps.get(0) else { break };
            // the next search: after this match, or (a rejected name) right after the name,
            // so that `vendorkeyClient(token="…")` still finds `token=`
            pos = whole.end().max(pos + 1);
            let group = caps.get(1).unwrap_or(whole);
            let value = group.as_str();
            // a format's shape with the rest masked (`xoxp-…-####`, `sk_live_1234****`)
            if matches!(
                rule.check,
                Check::Varied(_) | Check::Random | Check::Token | Check::Auth
            ) && hay[group.end()..]
                .trim_start_matches(['-', '_'])
                .starts_with(['#', '*'])
            {
                continue;
            }
            let (ok, span, rule_index) = match rule.check {
                Check::Varied(n) => (
                    !is_placeholder(value) && distinct(value) >= n,
                    group.range(),
                    index,
                ),
                Check::Random => (
                    !is_placeholder(value) && distinct(value) >= 10 && random_body(value),
                    group.range(),
                    index,
                ),
                Check::Token => (
                    !is_placeholder(value)
                        && distinct(value) >= 10
                        && looks_random(value)
                        && !constant_like(value),
                    group.range(),
                    index,
                ),
                Check::KeyBlock => (distinct(value) >= 16, group.range(), index),
                Check::Jwt => (jwt_ok(whole.as_str()), whole.range(), index),
                Check::Auth => (auth_value(value), group.range(), index),
                Check::AuthHeader | Check::UserPass | Check::CmdPassword => {
                    let Some(v) = caps.name("v") else { continue };
                    let ok = match rule.check {
                        Check::AuthHeader => {
                            auth_header(caps.name("scheme").map(|m| m.as_str()), v.as_str())
                        }
                        Check::UserPass => user_pass(v.as_str()),
                        _ => cmd_password(v.as_str()),
                    };
                    (ok, v.range(), index)
                }
                Check::Connection => {
                    let user = caps.name("user").map_or("", |m| m.as_str());
                    let pass = caps.name("pass");
                    let ok = pass.is_some_and(|p| connection_password(user, p.as_str()));
                    (ok, pass.map_or(whole.range(), |p| p.range()), index)
                }
                Check::Named => {
                    let name_match = caps.name("name");
                    let pre = caps.name("pre").map_or("", |m| m.as_str());
                    let retry = name_match.map_or(whole.end(), |m| m.end());
                    let Some((m, quoted)) = named_value(&caps) else {
                        pos = whole.end().max(whole.start() + 1);
                        while pos < text.len() && !text.is_char_boundary(pos) {
                            pos += 1;
                        }
                        continue;
                    };
                    let head = Head {
                        pre,
                        name: name_match.map_or(whole.start()..whole.start(), |m| m.range()),
                        comma: caps.name("sep").is_some_and(|s| s.as_str() == ","),
                        quoted_name: caps.name("q").is_some(),
                    };
                    match judge_name(text, &head, seen) {
                        Some(strength) => {
                            judge_value(m.as_str(), m.range(), quoted, strength, index, weak)
                        }
                        None => {
                            pos = retry.max(whole.start() + 1);
                            while pos < text.len() && !text.is_char_boundary(pos) {
                                pos += 1;
                            }
                            continue;
                        }
                    }
                }
                Check::NamedHead(_) => unreachable!("head rules run in run_head_rule"),
            };
            while pos < text.len() && !text.is_char_boundary(pos) {
                pos += 1;
            }
            if ok {
                let offset = if rule.check == Check::KeyBlock {
                    whole.start()
                } else {
                    span.start
                };
                out.push(Hit {
                    rule: rule_index,
                    offset,
                    value: span,
                });
            }
        }
    }
}

/// The name part of a `Named`/`NamedHead` match.
struct Head<'t> {
    /// The word before the name (`client` in `client secret: …`), or "".
    pre: &'t str,
    /// The name's span in the text.
    name: Range<usize>,
    /// Whether name and value are separated by a comma.
    comma: bool,
    /// Whether the name was quoted.
    quoted_name: bool,
}

/// How secret-ish the name of a match is; `None` when it is not a secret name here. `seen`
/// remembers the strength of names already judged in this text (the same names recur).
fn judge_name<'t>(
    text: &'t str,
    head: &Head<'t>,
    seen: &mut HashMap<(&'t str, &'t str), Strength>,
) -> Option<Strength> {
    let name = &text[head.name.clone()];
    let strength = *seen
        .entry((head.pre, name))
        .or_insert_with(|| named_strength(head.pre, name));
    // `arn:…:secret:prod/x`, `/v1/token/abc`: part of a path, not a name
    let inside = text[..head.name.start]
        .chars()
        .last()
        .is_some_and(|c| c == ':' || c == '/');
    // `name, value` only for a quoted name: ("X-Api-Key", "…")
    let bad_comma = head.comma && !head.quoted_name;
    (strength != Strength::None && !inside && !bad_comma).then_some(strength)
}

/// Whether the value given to a name of `strength` counts, and as which rule.
fn judge_value(
    value: &str,
    span: Range<usize>,
    quoted: bool,
    strength: Strength,
    index: usize,
    weak: usize,
) -> (bool, Range<usize>, usize) {
    match strength {
        Strength::Strong if assigned_secret(value, quoted) => (true, span, index),
        Strength::Strong | Strength::Weak if weak_value(value) => (true, span, weak),
        _ => (false, span, index),
    }
}

/// Runs a [`Check::NamedHead`] rule over `hay` from `pos`. The rule's regex only finds where a
/// match is (its lazy DFA; no capture groups); the groups are read from that span with the
/// rule's small `groups` regex, whose automaton lacks the secret-word alternation that makes
/// the rule's own one large (on a line of long names, reading groups with the rule's regex cost
/// its whole automaton per byte). The value is read by [`read_value`] for a secret name only.
#[allow(clippy::too_many_arguments)]
fn run_head_rule<'t>(
    text: &'t str,
    hay: &'t str,
    mut pos: usize,
    rule: &Rule,
    syntax: ValueSyntax,
    index: usize,
    weak: usize,
    seen: &mut HashMap<(&'t str, &'t str), Strength>,
    out: &mut Vec<Hit>,
) {
    while pos <= hay.len()
        && let Some(whole) = rule.regex.find_at(hay, pos)
    {
        pos = whole.end().max(pos + 1);
        let at = whole.start();
        let head = match &rule.groups {
            // the span matched the rule, so it matches the looser groups regex (anchored)
            Some(groups) => {
                let Some(caps) = groups.captures(whole.as_str()) else {
                    continue;
                };
                let shift = |m: regex::Match<'_>| at + m.start()..at + m.end();
                Head {
                    pre: caps.name("pre").map_or("", |m| m.as_str()),
                    name: caps.name("name").map_or(at..at, shift),
                    comma: caps.name("sep").is_some_and(|s| s.as_str() == ","),
                    quoted_name: caps.name("q").is_some(),
                }
            }
            // `?name=`: the name is all but the first and the last byte
            None => Head {
                pre: "",
                name: at + 1..whole.end() - 1,
                comma: false,
                quoted_name: false,
            },
        };
        let name = head.name.clone();
        let Some(strength) = judge_name(text, &head, seen) else {
            // right after the name, so that `vendorkeyClient(token="…")` still finds `token=`
            pos = name.end.max(at + 1);
            while pos < text.len() && !text.is_char_boundary(pos) {
                pos += 1;
            }
            continue;
        };
        // no value: the whole pattern does not match here
        let Some((span, quoted)) = read_value(hay, whole.end(), syntax) else {
            continue;
        };
        // the next search starts after the value (and its closing quote)
        pos = pos.max(span.end + usize::from(quoted));
        while pos < text.len() && !text.is_char_boundary(pos) {
            pos += 1;
        }
        let (ok, span, rule_index) =
            judge_value(&text[span.clone()], span, quoted, strength, index, weak);
        if ok {
            out.push(Hit {
                rule: rule_index,
                offset: span.start,
                value: span,
            });
        }
    }
}

/// The value of a `Named` match and whether it was quoted.
fn named_value<'t>(caps: &regex::Captures<'t>) -> Option<(regex::Match<'t>, bool)> {
    if let Some(m) = caps
        .name("dq")
        .or_else(|| caps.name("sq"))
        .or_else(|| caps.name("bq"))
    {
        return Some((m, true));
    }
    caps.name("bare").map(|m| (m, false))
}

/// How the value after a [`Check::NamedHead`] match is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueSyntax {
    /// As [`VALUE`]: double, single or back-quoted on one line, or bare up to whitespace or one
    /// of `"'`,;()[]{}<>`.
    Any,
    /// A URL query value: 8 or more characters up to whitespace or one of `&#"'<>`.
    Query,
}

/// Reads the value that starts at `at` of `hay`: its span (inside the quotes) and whether it
/// was quoted; `None` when there is none. Each byte is read once per call, and a call is only
/// made for a secret-ish name, after which the next search starts past the value.
fn read_value(hay: &str, at: usize, syntax: ValueSyntax) -> Option<(Range<usize>, bool)> {
    let rest = hay.get(at..)?;
    let bare_end = |stops: &str| {
        rest.find(|c: char| c.is_whitespace() || stops.contains(c))
            .unwrap_or(rest.len())
    };
    match syntax {
        ValueSyntax::Any => {
            // Objective-C's `@"…"` string literal
            if rest.starts_with("@\"") {
                return read_value(hay, at + 1, syntax);
            }
            let first = rest.chars().next()?;
            if matches!(first, '"' | '\'' | '`') {
                let body = &rest[1..];
                let close = body.find([first, '\n'])?;
                return body[close..]
                    .starts_with(first)
                    .then(|| (at + 1..at + 1 + close, true));
            }
            let end = bare_end("\"'`,;()[]{}<>");
            // a password with brackets or `;` in it (`apikey = m{{h}o)p$…`): read on to the
            // next blank or quote when what is there is such a password, not code
            let wide = rest
                .find(|c: char| c.is_whitespace() || "\"'`".contains(c))
                .unwrap_or(rest.len());
            let wide = rest[..wide].trim_end_matches([',', ';']);
            if wide.len() > end && punctuated_secret(wide) {
                // read as a literal: the test for code does not apply to it
                return Some((at..at + wide.len(), true));
            }
            (end > 0).then(|| (at..at + end, false))
        }
        ValueSyntax::Query => {
            let end = bare_end("&#\"'<>");
            (rest[..end].chars().count() >= 8).then(|| (at..at + end, false))
        }
    }
}

/// A bare value with brackets, `;` or `,` inside that reads as a password, not as code: 8-128
/// characters, letters and digits and symbols, not a template, and not a call, an index or a
/// literal whose brackets close at its end (`get(x)`, `cfg[key]`, `{a: 1}`).
fn punctuated_secret(value: &str) -> bool {
    if !(8..=128).contains(&value.len())
        || !value.chars().any(|c| c.is_ascii_alphabetic())
        || !value.chars().any(|c| c.is_ascii_digit())
        || char_classes(value) < 3
        || is_placeholder(value)
    {
        return false;
    }
    let mut depth: i32 = 0;
    let mut balanced = true;
    for c in value.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth < 0 {
                    balanced = false;
                }
            }
            _ => {}
        }
    }
    let closes = value.ends_with([')', ']', '}']);
    !(balanced && depth == 0 && closes)
}

/// How secret-ish a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strength {
    /// Not a secret name (`author_id`, `cache_key`, `token_url`).
    None,
    /// A loosely secret-ish name: only a random-looking value counts (`signingKey`, `auth`).
    Weak,
    /// A secret name: any literal that is not code, a placeholder or a toy value counts.
    Strong,
}

/// Splits a name at `_`, `-`, `.`, `:`, `/`, spaces and camelCase, lower-cased.
fn name_parts(name: &str) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    let mut upper_run = 0;
    for c in name.chars() {
        if matches!(
            c,
            '_' | '-' | '.' | ':' | '/' | ' ' | '"' | '\'' | '`' | '$' | '[' | ']'
        ) {
            parts.push(std::mem::take(&mut current));
            prev_lower = false;
            upper_run = 0;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            parts.push(std::mem::take(&mut current));
        }
        // the end of an acronym: `DBId` is `db`, `id`; `APIKey` is `api`, `key`
        if c.is_ascii_lowercase()
            && current.len() >= 2
            && current.bytes().all(|b| b.is_ascii_lowercase())
            && upper_run >= 2
        {
            let last = current.pop().expect("two or more");
            parts.push(std::mem::take(&mut current));
            current.push(last);
        }
        upper_run = if c.is_ascii_uppercase() {
            upper_run + 1
        } else {
            0
        };
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    parts.push(current);
    parts.retain(|p| !p.is_empty());
    parts
}

/// How secret-ish a setting name is (see the module docs and docs/POLICY.md).
fn strength(name: &str) -> Strength {
    let parts = name_parts(name);
    let Some(last) = parts.last() else {
        return Strength::None;
    };
    if PLAIN_LAST.contains(&last.as_str()) || ID_LIKE.contains(&last.as_str()) {
        return Strength::None;
    }
    // `keyVaultToStoreSecrets`, `key_vault_uri`: the name of a vault, not a key
    if parts.windows(2).any(|w| w[0] == "key" && w[1] == "vault") {
        return Strength::None;
    }
    let mut best = Strength::None;
    for (i, part) in parts.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| parts[j].as_str());
        let p = part.as_str();
        let next = parts.get(i + 1).map(String::as_str);
        let s = if p == "key" && next.is_some_and(|n| KEY_NOT_SECRET_NEXT.contains(&n)) {
            Strength::None // `key_down_event`, `keyPressed`, `keyFrame`
        } else if p == "key" || p == "keys" {
            match prev {
                Some(q) if PLAIN_KEY_QUALIFIERS.contains(&q) => Strength::None,
                Some(q) if STRONG_KEY_QUALIFIERS.contains(&q) => Strength::Strong,
                _ => Strength::Weak,
            }
        } else if p == "token" && prev.is_some_and(|q| PLAIN_TOKEN_QUALIFIERS.contains(&q)) {
            Strength::None
        } else if p == "pass" || p == "pw" {
            if i + 1 == parts.len() {
                Strength::Strong
            } else {
                Strength::None
            }
        } else if STRONG_WORDS.contains(&p)
            || ["password", "passwd", "secret", "token", "pwd", "apikey"]
                .iter()
                .any(|w| p.len() > w.len() + 1 && p.ends_with(w))
            // `servicekey`, `dbkey`, `appkey`: a secret key's qualifier and `key` in one word
            || p.strip_suffix("key").is_some_and(|q| STRONG_KEY_QUALIFIERS.contains(&q))
        {
            Strength::Strong
        } else if WEAK_WORDS.contains(&p) || p.ends_with("key") && p.len() > 3 {
            Strength::Weak
        } else {
            Strength::None
        };
        best = best.max_with(s);
    }
    best
}

impl Strength {
    fn max_with(self, other: Strength) -> Strength {
        match (self, other) {
            (Strength::Strong, _) | (_, Strength::Strong) => Strength::Strong,
            (Strength::Weak, _) | (_, Strength::Weak) => Strength::Weak,
            _ => Strength::None,
        }
    }
}

/// The strength of `name`, read together with the word before it when the name is a bare
/// `key`/`token`/`secret` (`cache key is …`, `client secret: …`).
fn named_strength(pre: &str, name: &str) -> Strength {
    const STOP: &[&str] = &[
        "the", "a", "an", "this", "that", "my", "our", "your", "its", "is", "and", "or", "of",
        "for", "with", "use", "here", "new", "old", "same",
    ];
    let bare = name_parts(name);
    if bare.len() == 1
        && !pre.is_empty()
        && !STOP.contains(&pre.to_ascii_lowercase().as_str())
        && matches!(
            bare[0].as_str(),
            "key" | "keys" | "token" | "secret" | "password"
        )
    {
        return strength(&format!("{pre}_{name}"));
    }
    strength(name)
}

/// Whether the value given to a loosely secret-ish name counts: random-looking, or base64 of
/// `user:password`.
fn weak_value(value: &str) -> bool {
    let value = value.trim();
    if random_looking(value) || is_uuid(value) && !is_placeholder(value) {
        return true;
    }
    value.len() >= 12
        && base64_decode(value)
            .and_then(|d| String::from_utf8(d).ok())
            .and_then(|t| {
                t.split_once(':')
                    .map(|(u, p)| !u.is_empty() && connection_password(u, p))
            })
            .unwrap_or(false)
}

// ---------------------------------------------------------------------------------------------
// A random token next to a secret word

/// Lines that hold hashes, public keys or lockfile lines: no near-word findings there.
static HASHY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&ascii_boundaries(r"(?i)ssh-(?:rsa|ed25519|dss)|ecdsa-sha2|BEGIN (?:PUBLIC KEY|CERTIFICATE)|\bsha(?:1|256|384|512)\b|sha(?:256|384|512)[-:]|\bh1:|integrity|checksum|\bdigest\b|\bmd5\b|\bcommit\b|\betag\b|fingerprint|\bnonce\b"))
        .expect("hashy pattern")
});
/// Identifiers that may be secret words.
static WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&ascii_boundaries(r"(?i)(?:\b(?P<pre>[a-z0-9]+)[ \t]+)?(?P<w>[a-z0-9_.-]*(?:pass|pwd|secret|token|key|cred|auth|bearer|sig)[a-z0-9_.-]*)"))
        .expect("word pattern")
});
/// The groups of one [`WORD`] match: `pre` and `w` with any `w` (the match has its secret
/// word), anchored at both ends; it takes the parse [`WORD`] took (see [`head_groups`]) without
/// [`WORD`]'s large automaton.
static WORD_GROUPS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:(?P<pre>[a-z0-9]+)[ \t]+)?(?P<w>[a-z0-9_.-]*)$")
        .expect("word groups pattern")
});
/// Candidate tokens.
static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9+/_\-.~%!#$&*?^@]{8,300}={0,2}").expect("token pattern")
});

/// The strongest secret word on a line; `seen` remembers the strength of words already read
/// (the same names recur through a prompt).
fn line_word<'t>(line: &'t str, seen: &mut HashMap<(&'t str, &'t str), Strength>) -> Strength {
    let mut best = Strength::None;
    for found in WORD.find_iter(line) {
        let (pre, w) = if found.as_str().contains([' ', '\t']) {
            let Some(caps) = WORD_GROUPS.captures(found.as_str()) else {
                continue;
            };
            let w = caps.name("w").map_or("", |m| m.as_str());
            (caps.name("pre").map_or("", |m| m.as_str()), w)
        } else {
            ("", found.as_str()) // no blank, no `pre`: the match is the word
        };
        let s = *seen
            .entry((pre, w))
            .or_insert_with(|| named_strength(pre, w));
        best = best.max_with(s);
        if best == Strength::Strong {
            break;
        }
    }
    best
}

/// Random tokens on a line with a secret word or right after one. `word_lines` are the lines
/// that hold one of [`WORD_WORDS`] (the others cannot have a secret word).
fn near_word_hits<'t>(
    text: &'t str,
    lines: &prefilter::Lines,
    word_lines: &[usize],
    seen: &mut HashMap<(&'t str, &'t str), Strength>,
    out: &mut Vec<Hit>,
) {
    let near = rule_of(KIND_NEAR);
    let near_pw = rule_of(KIND_NEAR_PASSWORD);
    let mut prev_word = Strength::None;
    let mut next = word_lines.iter().peekable();
    let candidates = token_lines(text, lines.count());
    for index in 0..lines.count() {
        let range = lines.range(index);
        if range.is_empty() && range.start == text.len() {
            break; // `split_inclusive` gives no empty last line
        }
        let start = range.start;
        // the line with its line break, as `split_inclusive` gives it
        let line = &text[start..(range.end + 1).min(text.len())];
        // a line's word counts for its tokens and the next line's: not read when neither
        // line has a token that could count
        let has = candidates[index];
        let word = if next.next_if_eq(&&index).is_some() && (has || candidates[index + 1]) {
            line_word(line, seen)
        } else {
            Strength::None
        };
        let context = word.max_with(prev_word);
        prev_word = word;
        if !has || context == Strength::None || HASHY.is_match(line) {
            continue;
        }
        let password_word = word == Strength::Strong && has_password_word(line);
        for m in TOKEN.find_iter(line) {
            let token = m
                .as_str()
                .trim_end_matches(['.', ',', ':', '!', '?'])
                .trim_start_matches(['.', '-']);
            let Some(rel) = m.as_str().find(token) else {
                continue;
            };
            let at = start + m.start() + rel;
            // the tests of the token first (most fail at once on its length), then whether it
            // is the value of an id's name (`"sessionID":"ses_…"`, `request_id=…`) or an id
            let rule = if strongly_random(token) {
                near
            } else if password_word && password_like(token) {
                near_pw
            } else {
                continue;
            };
            if id_valued(&text[start..at]) || ids::random_by_design(token) {
                continue;
            }
            out.push(Hit {
                rule,
                offset: at,
                value: at..at + token.len(),
            });
        }
    }
}

/// Per line (and one more, `false`, past the last): whether it holds a run of 8 or more
/// [`TOKEN`] characters with a digit in it. Every token the near-word rule can count is such
/// a run or part of one ([`strongly_random`] and [`password_like`] want a digit), so a line
/// without one has no finding of that rule, and its secret word matters only when the next
/// line has one.
fn token_lines(text: &str, count: usize) -> Vec<bool> {
    let mut out = vec![false; count + 1];
    let (mut line, mut len, mut digit) = (0, 0, false);
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || b"+/_-.~%!#$&*?^@".contains(&b) {
            len += 1;
            digit |= b.is_ascii_digit();
            if len >= 8 && digit {
                out[line] = true;
            }
            continue;
        }
        (len, digit) = (0, false);
        if b == b'\n' {
            line += 1;
        }
    }
    out
}

/// Whether the text before a token ends with a name whose last part says id (`"sessionID": "`,
/// `request_id=`, `traceId: `): the token is that id's value.
fn id_valued(before: &str) -> bool {
    let gap = before.trim_end_matches([' ', '\t', '"', '\'', '`']);
    let Some(head) = gap.strip_suffix([':', '=']) else {
        return false;
    };
    let head = head.trim_end_matches([' ', '\t', '"', '\'', '`']);
    let start = head
        .char_indices()
        .rfind(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    name_parts(&head[start..])
        .last()
        .is_some_and(|p| ID_LIKE.contains(&p.as_str()))
}

fn has_password_word(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "creds",
        "credential",
        "secret",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// A token that is random enough to be a secret wherever it stands next to a secret word.
fn strongly_random(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    // the cheap tests first: most tokens near a secret word are words, paths or hashes; one
    // pass counts what the tests need (every caller's tokens are ASCII), and the placeholder
    // and constant tests (substring searches) come last
    if body.len() < 20 || !body.is_ascii() {
        return false;
    }
    let stats = AsciiStats::of(body);
    if stats.hexish {
        return false; // hashes, UUIDs: only next to a name (`key = <hex>`)
    }
    let (upper, lower, digits) = (stats.upper > 0, stats.lower > 0, stats.digits);
    let mixed = upper && lower && digits > 0 || (upper ^ lower) && digits >= 4;
    // one case and digits switch less often: a quarter of the characters are digits
    let switches = if upper && lower { 0.3 } else { 0.2 };
    stats.alnum * 10 >= body.len() * 8
        && mixed
        && stats.switch_rate() >= switches
        && stats.distinct >= 12
        && stats.entropy() >= 3.7
        && !body.contains("://")
        && !body.starts_with("//") // a URL after its scheme's `:`
        && !constant_like(body)
        && !is_placeholder(body)
}

/// What [`strongly_random`] measures of an ASCII token, counted in one pass.
struct AsciiStats {
    len: usize,
    upper: usize,
    lower: usize,
    digits: usize,
    alnum: usize,
    /// Changes of class (lower, upper, digit) between neighbouring letters and digits.
    switches: usize,
    distinct: usize,
    /// Only hex digits, `-` and `_` (hashes, UUIDs, UUIDs joined).
    hexish: bool,
    counts: [u16; 128],
}

impl AsciiStats {
    fn of(token: &str) -> AsciiStats {
        let mut s = AsciiStats {
            len: token.len(),
            upper: 0,
            lower: 0,
            digits: 0,
            alnum: 0,
            switches: 0,
            distinct: 0,
            hexish: true,
            counts: [0; 128],
        };
        let mut prev = None;
        for b in token.bytes() {
            let slot = &mut s.counts[usize::from(b & 0x7f)];
            if *slot == 0 {
                s.distinct += 1;
            }
            *slot = slot.saturating_add(1);
            s.hexish &= b.is_ascii_hexdigit() || b == b'-' || b == b'_';
            let class = if b.is_ascii_lowercase() {
                s.lower += 1;
                0
            } else if b.is_ascii_uppercase() {
                s.upper += 1;
                1
            } else if b.is_ascii_digit() {
                s.digits += 1;
                2
            } else {
                continue;
            };
            s.alnum += 1;
            if prev.is_some_and(|p| p != class) {
                s.switches += 1;
            }
            prev = Some(class);
        }
        s
    }

    /// As [`class_switch_rate`]: switches per neighbouring pair of letters and digits.
    fn switch_rate(&self) -> f64 {
        if self.alnum < 2 {
            return 0.0;
        }
        self.switches as f64 / (self.alnum - 1) as f64
    }

    /// As [`entropy`], in bits per character.
    fn entropy(&self) -> f64 {
        let n = self.len as f64;
        self.counts
            .iter()
            .filter(|&&k| k > 0)
            .map(|&k| {
                let p = f64::from(k) / n;
                -p * p.log2()
            })
            .sum()
    }
}

/// A password-like word: letters of both cases, a digit and a symbol, mostly alphanumeric.
fn password_like(token: &str) -> bool {
    if !(8..=64).contains(&token.len()) || token.contains("://") {
        return false;
    }
    let alnum = token.chars().filter(char::is_ascii_alphanumeric).count();
    char_classes(token.trim_end_matches('=')) == 4
        && alnum * 10 >= token.len() * 6
        && !token.contains(['/', '\\'])
        && !is_placeholder(token)
        && assigned_secret(token, true)
}

/// Whether `value` is a UUID (8-4-4-4-12 hex digits).
fn is_uuid(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The body of a prefixed token (after its last `_`, `.` or `-` prefix) switches classes as
/// random text does: `hf_` + 34 random letters, not `hf_` + a camelCase identifier.
fn random_body(value: &str) -> bool {
    let body = value.rsplit(['_', '.', '-']).next().unwrap_or(value);
    let body = if body.len() >= 12 { body } else { value };
    looks_random(body) && class_switch_rate(body) >= 0.35
}

fn distinct(value: &str) -> usize {
    let mut seen: Vec<char> = value.chars().collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Shannon entropy in bits per character.
fn entropy(value: &str) -> f64 {
    if value.is_empty() {
        return 0.0;
    }
    // ASCII counted in an array (tokens are ASCII), anything else in a map
    let mut ascii = [0usize; 128];
    let mut other = std::collections::HashMap::new();
    let mut n = 0usize;
    for c in value.chars() {
        n += 1;
        match usize::try_from(u32::from(c)) {
            Ok(i) if i < 128 => ascii[i] += 1,
            _ => *other.entry(c).or_insert(0usize) += 1,
        }
    }
    let n = n as f64;
    ascii
        .iter()
        .chain(other.values())
        .filter(|&&k| k > 0)
        .map(|&k| {
            let p = k as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// Whether a matched value is a placeholder rather than a real secret.
fn is_placeholder(value: &str) -> bool {
    // one pass for all the words (ASCII case folded, as `to_ascii_lowercase` then `contains`
    // did with 40 searches): this test runs on every candidate value, often several times
    static WORDS: LazyLock<aho_corasick::AhoCorasick> = LazyLock::new(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(PLACEHOLDER_WORDS)
            .expect("placeholder words build an automaton")
    });
    // `<your key>`, `{{ .Values.x }}`, `${VAR}`, `%(name)s`: templates, not values (a random
    // password may hold `<`, `{` or `$` on its own)
    static TEMPLATE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"<[A-Za-z_][\w .:/@|-]*>|^<|>$|\{\{.*\}\}|^\{\{|\$\{[A-Za-z_{]|%\([A-Za-z_]\w*\)",
        )
        .expect("template pattern")
    });
    if DOCUMENTED_EXAMPLES.iter().any(|e| value.contains(e))
        || WORDS
            .find_iter(value)
            .any(|m| !embedded_word(value, m.range()))
        || TEMPLATE.is_match(value)
    {
        return true;
    }
    if wordy_body(value) {
        return true;
    }
    // `cmd`, $(cmd), {Name}, [Name], !vault …: a reference, not a value
    if value.starts_with('`')
        || value.starts_with("$(")
        || (value.len() > 1
            && value.starts_with('!')
            && value[1..].chars().all(|c| c.is_ascii_lowercase()))
        || (value.starts_with('{') && value.ends_with('}'))
        || (value.starts_with('[') && value.ends_with(']'))
    {
        return true;
    }
    // $TOKEN, %(password)s, @password, :password — a variable or parameter, not a value
    if let Some(rest) = value.strip_prefix(['$', '%', '@', ':'])
        && rest.starts_with(|c: char| c.is_ascii_alphabetic() || "_{(".contains(c))
        && !looks_random(rest)
    {
        return true;
    }
    // long runs of one character (xxxxxxxx, 00000000) or of sequential characters (abcdefgh, 12345678)
    let chars: Vec<char> = value.chars().collect();
    let mut same = 1;
    let mut seq = 1;
    for w in chars.windows(2) {
        same = if w[0] == w[1] { same + 1 } else { 1 };
        seq = if (w[1] as u32).wrapping_sub(w[0] as u32) == 1 {
            seq + 1
        } else {
            1
        };
        if same >= 6 || seq >= 8 {
            return true;
        }
    }
    false
}

/// Whether a placeholder word found at `at` is only letters inside a long random value
/// (`…q3rFaKezT…` in a 130-character key): a letter on each side, the word itself letters
/// other than `x`, the value 24 characters or more and switching classes like random text.
/// `your-key-here`, `fake_token`, `sk-fakekey…`, `thisIsWhereYourKeyGoes` keep their word.
fn embedded_word(value: &str, at: Range<usize>) -> bool {
    let bytes = value.as_bytes();
    value.len() >= 24
        && at.start > 0
        && at.end < bytes.len()
        && bytes[at.start - 1].is_ascii_alphabetic()
        && bytes[at.end].is_ascii_alphabetic()
        && value[at].bytes().all(|b| b.is_ascii_alphabetic() && b != b'x' && b != b'X')
        // random text switches classes often; `thisIsWhereYourKeyGoes` does not
        && class_switch_rate(value) >= 0.35
}

/// Whether a prefixed token's body is words in camelCase (`sk_live_ThisIsNotARealKey`,
/// `ghp_YourGitHubTokenValue00`): three or more capitalised words with a vowel, of three letters
/// or more, covering most of the body's letters. Random text splits at every other capital
/// into short pieces, so it never reads so.
fn wordy_body(value: &str) -> bool {
    let Some(cut) = value.rfind(['_', '-', '.']) else {
        return false;
    };
    let body = &value[cut + 1..];
    let letters = body.bytes().filter(u8::is_ascii_alphabetic).count();
    if letters < 12 || !body.bytes().any(|b| b.is_ascii_uppercase()) {
        return false;
    }
    let (mut words, mut covered) = (0, 0);
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_uppercase() {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_lowercase() {
            i += 1;
        }
        let word = &body[start..i];
        if word.len() >= 3 && word[1..].bytes().any(|b| b"aeiouy".contains(&b)) {
            words += 1;
            covered += word.len();
        }
    }
    words >= 3 && covered * 10 >= letters * 7
}

fn is_toy(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    if TOY_VALUES.contains(&lower.as_str()) {
        return true;
    }
    // `P@ssw0rd`, `s3cr3t`, `adm1n`: a toy value spelt in leetspeak
    let plain: String = lower
        .chars()
        .map(|c| match c {
            '@' | '4' => 'a',
            '0' => 'o',
            '1' | '!' => 'i',
            '3' => 'e',
            '$' | '5' => 's',
            '7' => 't',
            c => c,
        })
        .collect();
    if plain != lower && TOY_VALUES.contains(&plain.as_str()) {
        return true;
    }
    // test…, secret…, password…, my…: a toy unless the rest is random (Lob's `test_<hex>`)
    ["test", "secret", "password", "my"].iter().any(|p| {
        lower.starts_with(p) && {
            // (as written: `random_looking` and the classes see the case)
            let rest = value[p.len()..].trim_start_matches(['_', '-', '.']);
            // `MyWiz7T4O&4915`: a password that starts with a word is still a password
            (rest.len() < 16 || !random_looking(rest)) && char_classes(rest) < 4
        }
    })
}

/// How often the character class changes (lower, upper, digit, other) per character: near 0 for
/// words and identifiers (`getToken`, `settings.SECRET_KEY`), around 0.5 for random strings.
fn class_switch_rate(value: &str) -> f64 {
    fn class(c: char) -> u8 {
        if c.is_ascii_lowercase() {
            0
        } else if c.is_ascii_uppercase() {
            1
        } else if c.is_ascii_digit() {
            2
        } else {
            3
        }
    }
    let chars: Vec<char> = value.chars().filter(char::is_ascii_alphanumeric).collect();
    if chars.len() < 2 {
        return 0.0;
    }
    let switches = chars
        .windows(2)
        .filter(|w| class(w[0]) != class(w[1]))
        .count();
    switches as f64 / (chars.len() - 1) as f64
}

/// Whether a value reads like generated random text rather than words or code.
fn looks_random(value: &str) -> bool {
    if value.len() < 8 || distinct(value) < 6 {
        return false;
    }
    // long lower-case tokens with few digits switch classes rarely but are still random
    class_switch_rate(value) >= 0.25
        || (value.len() >= 20
            && value.chars().all(|c| c.is_ascii_alphanumeric())
            && entropy(value) >= 4.0)
}

/// Whether an unquoted value is code (an identifier, a call, an attribute, a number, a
/// reference) rather than a literal.
fn is_code(value: &str) -> bool {
    static CODE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?:[&*]|[A-Za-z_][A-Za-z0-9_]*(?:\.|\(|\[|::|->|:|=|$))")
            .expect("code pattern")
    });
    if value.parse::<f64>().is_ok() {
        return true;
    }
    if value.chars().all(|c| c.is_ascii_alphabetic() || c == '_') && !looks_random(value) {
        return true; // identifiers like user_password, API_KEY, secretValue
    }
    CODE.is_match(value) && (!looks_random(value) || constant_like(value))
}

/// Whether a value is spelt like a constant's name rather than drawn at random: parts
/// (split at `_ - . :` and camelCase) that are each a word, a word and a number, or a number
/// (`SN_id_Gost28147_89`, `Ed25519.BlindKeySignatures`, `PdfEncryptionKeySize.Key128Bit`,
/// `id-Gost28147-89-None-KeyMeshing`): two parts or more, a word with lower-case letters among
/// them. Random text puts letters after digits and runs of capitals inside words (`rA1wk0Y45`,
/// `yqDVtkq`), so it is never split into such parts.
fn constant_like(value: &str) -> bool {
    if !value.contains(['_', '-', '.', ':']) || !value.chars().any(|c| c.is_ascii_lowercase()) {
        return false;
    }
    let mut words = 0;
    for part in value.split(['_', '-', '.', ':']) {
        if part.is_empty() {
            continue;
        }
        // camelCase words: a new word at a capital after a lower-case letter or a digit
        let bytes = part.as_bytes();
        let mut start = 0;
        for i in 1..=bytes.len() {
            let boundary = i == bytes.len()
                || bytes[i].is_ascii_uppercase()
                    && (bytes[i - 1].is_ascii_lowercase() || bytes[i - 1].is_ascii_digit());
            if !boundary {
                continue;
            }
            if !word_like(&part[start..i]) {
                return false;
            }
            words += 1;
            start = i;
        }
    }
    words >= 2
}

/// `Gost28147`, `Key`, `None`, `SHA256`, `89`, `u16`: letters (one capital first, or all
/// capitals) then digits, or digits alone.
fn word_like(word: &str) -> bool {
    let letters = word.trim_end_matches(|c: char| c.is_ascii_digit());
    if letters.is_empty() {
        return true;
    }
    if !letters.chars().all(|c| c.is_ascii_alphabetic()) {
        return false;
    }
    let rest = &letters[1..];
    rest.chars().all(|c| c.is_ascii_lowercase()) || letters.chars().all(|c| c.is_ascii_uppercase())
}

/// The value of an explicit `password=`/`api_key=`/`token=` assignment.
fn assigned_secret(value: &str, quoted: bool) -> bool {
    let mut value = value.trim();
    if !quoted {
        // prose: `the password accepted, …`
        value = value.trim_end_matches([',', '.', ';', ':', '!', '?', ')']);
    }
    // a URL is where a secret is used, not one (credentials in it have their own rule)
    if value.len() < 8 || value.contains(char::is_whitespace) || value.contains("://") {
        return false;
    }
    if is_placeholder(value) || is_toy(value) {
        return false;
    }
    if !quoted && is_code(value) {
        return false;
    }
    if quoted && value.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
        return false; // the name of an env var: "OPENAI_API_KEY"
    }
    // an artifact and its version: `io.jsonwebtoken:jjwt-jackson-0.11.2`
    static VERSIONED: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^[A-Za-z][A-Za-z0-9.-]*[-_@]v?\d+(?:\.\d+){1,3}$").expect("versioned pattern")
    });
    if VERSIONED.is_match(value) {
        return false;
    }
    // a slug of short words: "my-bot-token", "created_at"
    if value
        .split(['-', '_'])
        .all(|w| !w.is_empty() && w.len() <= 10 && w.chars().all(|c| c.is_ascii_alphabetic()))
    {
        return false;
    }
    // base64 of a toy value, as in documentation samples of Kubernetes secrets
    if let Some(decoded) = base64_decode(value)
        && let Ok(text) = String::from_utf8(decoded)
        && text.chars().all(|c| c.is_ascii_graphic())
        && (is_toy(&text) || is_placeholder(&text))
    {
        return false;
    }
    let classes = char_classes(value);
    classes >= 2 || value.len() >= 16
}

fn char_classes(value: &str) -> usize {
    let lower = value.chars().any(|c| c.is_ascii_lowercase());
    let upper = value.chars().any(|c| c.is_ascii_uppercase());
    let digit = value.chars().any(|c| c.is_ascii_digit());
    let other = value.chars().any(|c| !c.is_ascii_alphanumeric());
    [lower, upper, digit, other]
        .into_iter()
        .filter(|b| *b)
        .count()
}

/// A long value that looks random (for secret-ish names without an exact secret keyword).
fn random_looking(value: &str) -> bool {
    let value = value.trim();
    if value.len() < 16 || value.contains(char::is_whitespace) || value.contains("://") {
        return false;
    }
    if is_placeholder(value) || is_toy(value) || is_code(value) || constant_like(value) {
        return false;
    }
    let hex = value.chars().all(|c| c.is_ascii_hexdigit());
    if hex {
        return value.len() >= 32 && entropy(value) >= 3.0;
    }
    // generated secrets are (almost) all letters and digits; regexes and format strings are not
    let alnum = value.chars().filter(char::is_ascii_alphanumeric).count();
    alnum * 4 >= value.len() * 3
        && char_classes(value) >= 2
        && entropy(value) >= 3.5
        && distinct(value) >= 10
        && looks_random(value)
}

fn auth_value(value: &str) -> bool {
    let value = value.trim_end_matches(['"', '\'']);
    if is_placeholder(value) || is_code(value) || value.len() < 12 {
        return false;
    }
    if let Some(decoded) = base64_decode(value)
        && let Ok(text) = String::from_utf8(decoded)
        && let Some((user, pass)) = text.split_once(':')
    {
        return connection_password(user, pass);
    }
    distinct(value) >= 10 && char_classes(value) >= 2
}

/// An `Authorization:` header's value, given its scheme (`Basic`, `Bearer`, `SSWS`, none …).
fn auth_header(scheme: Option<&str>, value: &str) -> bool {
    let value = value.trim_end_matches(['.', ',', ';', ':']);
    match scheme.map(str::to_ascii_lowercase).as_deref() {
        Some("basic") => basic_credentials(value),
        // Digest's fields are a nonce and a hash; a `-H "Authorization: $X"` has no scheme
        Some("digest") => false,
        _ => auth_value(value),
    }
}

/// A `Basic` value: base64 of `user:password` (a password, or a user alone that is a key).
fn basic_credentials(value: &str) -> bool {
    let Some(text) = base64_decode(value).and_then(|d| String::from_utf8(d).ok()) else {
        return false;
    };
    let Some((user, pass)) = text.split_once(':') else {
        return false;
    };
    if !text.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        return false;
    }
    if pass.is_empty() {
        return user.len() >= 3 && !is_toy(user) && !is_placeholder(user);
    }
    connection_password(user, pass)
}

/// `curl -u` credentials as written: `user:pass`, `"user:pass"`, `user:'pass'`,
/// `"{user}":"{pass}"`, `":key"` (no user), `"key:"` (no password).
fn user_pass(written: &str) -> bool {
    let raw: String = written
        .chars()
        .filter(|c| !matches!(c, '"' | '\''))
        .collect();
    let Some((user, pass)) = raw.split_once(':') else {
        return false;
    };
    let unbrace = |s: &str| -> String {
        match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(inner) if !inner.contains(['{', '}', '$', ' ']) => inner.to_owned(),
            _ => s.to_owned(),
        }
    };
    let (user, pass) = (unbrace(user.trim()), unbrace(pass.trim()));
    let key_alone = |k: &str| {
        k.len() >= 8 && !is_placeholder(k) && !is_toy(k) && (password_like(k) || looks_random(k))
    };
    match (user.is_empty(), pass.is_empty()) {
        (true, true) => false,
        (false, true) => key_alone(&user),
        (true, false) => key_alone(&pass),
        (false, false) => !is_placeholder(&user) && connection_password(&user, &pass),
    }
}

/// A password given to a tool's flag (`mysql -p'…'`, `docker login -p …`, `redis-cli -a …`).
fn cmd_password(written: &str) -> bool {
    let quoted = written.len() >= 2
        && (written.starts_with('"') && written.ends_with('"')
            || written.starts_with('\'') && written.ends_with('\''));
    let value = if quoted {
        &written[1..written.len() - 1]
    } else {
        written
    };
    let value = value.strip_prefix("pass:").unwrap_or(value);
    if value.starts_with(['-', '/', '~', '.'])
        || value.contains("://")
        || ["env:", "file:", "fd:", "stdin"]
            .iter()
            .any(|p| value.starts_with(p))
        || !value.chars().any(|c| c.is_ascii_alphabetic())
    {
        return false;
    }
    assigned_secret(value, quoted)
}

fn connection_password(user: &str, pass: &str) -> bool {
    if pass.len() < 4 || is_placeholder(pass) || is_toy(pass) || pass == user {
        return false;
    }
    // `xxx:yyyy`, `-u 1000:1000` (a uid and gid), `host:8080`
    let first = pass.chars().next().unwrap_or(' ');
    if pass.chars().all(|c| c == first)
        || pass.len() <= 6 && pass.chars().all(|c| c.is_ascii_digit())
    {
        return false;
    }
    // ${DB_PASSWORD}, :password (a named parameter), {password}
    if pass.starts_with(['{', ':', '[']) || pass.chars().all(|c| c == '*') {
        return false;
    }
    // host:port written without a user, e.g. "http://localhost:8080@" is not a password, nor
    // "https://registry.example:443/@scope/pkg"
    let port = pass.split('/').next().unwrap_or(pass);
    !(port.chars().all(|c| c.is_ascii_digit()) && (user.contains('.') || pass.contains('/')))
}

fn jwt_ok(token: &str) -> bool {
    const JWT_IO_EXAMPLE_SIGNATURE: &str = "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 || parts[2].starts_with(JWT_IO_EXAMPLE_SIGNATURE) {
        return false;
    }
    let Some(header) = base64_decode(parts[0]) else {
        return false;
    };
    let header = String::from_utf8_lossy(&header);
    header.contains("\"alg\"") && !header.contains("\"none\"") && distinct(parts[2]) >= 10
}

/// Decodes standard or URL-safe base64, padded or not; `None` when it is not base64.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut bits = 0u32;
    let mut nbits = 0;
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((bits >> nbits) as u8);
            bits &= (1 << nbits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finding_names_kind_and_line_without_the_secret() {
        let text = "line one\nline two\npassword = \"Zq8#rT2!vLp9\"\n";
        let hit = scan(text).unwrap();
        assert_eq!(hit.line, 3);
        assert_eq!(hit.kind, "password/API key/token assignment");
        assert!(!hit.to_string().contains("Zq8"));
    }

    #[test]
    fn placeholders_and_code_pass() {
        for ok in [
            "api_key = os.environ[\"API_KEY\"]",
            "token = get_token()",
            "password: str",
            "Authorization: Bearer <TOKEN>",
            "Authorization: Bearer ${TOKEN}",
            "AKIAIOSFODNN7EXAMPLE is the documented example key",
            "postgres://user:password@localhost:5432/app",
            "postgres://app:${DB_PASSWORD}@db/app",
            "sk-xxx",
            "tokenizer.pad_token = tokenizer.eos_token",
            "max_tokens=4096",
            "password_regex = r'^(?=.*[A-Z])(?=.*\\d)(?=.*[!@#$%]).{12,64}$'",
            "TOKEN_URL = 'https://oauth2.googleapis.com/token'",
            "API_KEY_HEADER = 'X-Api-Key'",
            "auth: { username: 'admin', password: process.env.ADMIN_PW }",
            "kubectl get secret db-creds -o jsonpath='{.data.password}' | base64 -d",
            "token = jwt.encode({'sub': user.id}, key, algorithm='HS256')",
        ] {
            assert_eq!(scan(ok), None, "{ok}");
        }
    }

    #[test]
    fn contextual_secrets_are_found() {
        for (text, kind) in [
            (
                "Host=db;Username=app;Password=Xk9#mP2$vL;",
                "password/API key/token assignment",
            ),
            (
                "secret: wJalrXUtnFEMI/K7MDENG/bPxRfiCYzK8T3q2Lw",
                "password/API key/token assignment",
            ),
            (
                "curl -u x -H 'Authorization: Bearer 4fG7hJ2kL9mN3pQ6rS8tV1wX5yZ0aB'",
                "Authorization header",
            ),
            (
                "mongodb+srv://etl:Qw7%23kLm2pZ@cluster0.ab1cd.mongodb.net/db",
                "connection string with a password",
            ),
            (
                "abstractKey = 'b7e1c2f09a4d4e6f8c3b2a1d0e9f8a7b6c5d4e3f2a1b0c9d'",
                "high-entropy value in a secret-named setting",
            ),
        ] {
            assert_eq!(scan(text).map(|f| f.kind), Some(kind), "{text}");
        }
    }

    #[test]
    fn name_strength_reads_the_parts() {
        for strong in [
            "password",
            "DB_PASS",
            "JWT_SIGNING_KEY",
            "api_key",
            "x-api-key",
            "db.password",
            "client_secret",
            "setApiKey",
        ] {
            assert_eq!(strength(strong), Strength::Strong, "{strong}");
        }
        for weak in ["key", "auth", "STRIPE_KEY", "abstractKey", "sig"] {
            assert_eq!(strength(weak), Strength::Weak, "{weak}");
        }
        for plain in [
            "author_id",
            "primary_key",
            "cache_key",
            "signal_id",
            "keyboard",
            "idempotency_key",
            "max_tokens",
            "credentialsId",
            "dev.credentials.url",
            "password_hash",
            "publishableKey",
            "pad_token",
            "secretKeyRef",
        ] {
            assert_eq!(strength(plain), Strength::None, "{plain}");
        }
        assert_eq!(named_strength("cache", "key"), Strength::None);
        assert_eq!(named_strength("client", "secret"), Strength::Strong);
    }

    #[test]
    fn allowlist_skips_only_the_allowed_value() {
        let text = "A=ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\nB=ghp_9Zq1WtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gQq\n";
        let allow = Allowlist::parse("ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\nre:[\n");
        assert_eq!(allow.len(), 1);
        assert_eq!(allow.problems().len(), 1);
        let f = scan_allowing(text, &allow).unwrap();
        assert_eq!(f.line, 2);
        assert_eq!(findings(text, &Allowlist::default()).len(), 2);
    }

    /// `unit` repeated past 100 KB, as the fuzz harness grows an input.
    fn grown(unit: &str) -> String {
        unit.repeat(100 * 1024 / unit.len() + 1)
    }

    /// `text` with `insert` put in at byte `at` (a char boundary).
    fn with_inserted(text: &str, at: usize, insert: &str) -> String {
        format!("{}{insert}{}", &text[..at], &text[at..])
    }

    /// Fuzz input `slow-secret-word-runs-on-one-line` (fuzz/corpus/secret_scan/): 340 long
    /// names holding `secret`, each followed by `=`, on one 100 KB line. Once quadratic (each
    /// rejected name re-read the rest of the line as its value); the names are not secret
    /// names, and a real assignment in the middle of that line is still found. (Its time is
    /// measured by the bench, `--only secrets`, not asserted here.)
    #[test]
    fn one_line_of_secret_word_names_is_read_right() {
        let unit = format!("{}secret{}=", "a".repeat(47), "a".repeat(247));
        assert_eq!(unit.len(), 301);
        let big = grown(&unit);
        assert_eq!(findings(&big, &Allowlist::default()), []);
        let real = with_inserted(&big, unit.len() * 170, " client_secret = \"Zq8#rT2!vLp9\" ");
        let found = findings(&real, &Allowlist::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].kind, found[0].line), (KIND_STRONG, 1));
        // the same shape with `token` and with a URL query (the query rule re-read the same way)
        assert_eq!(
            scan(&grown(&format!(
                "{}token{}=",
                "a".repeat(47),
                "a".repeat(247)
            ))),
            None
        );
        let query = grown("?x=");
        assert_eq!(scan(&query), None);
        let real = with_inserted(&query, 3 * 5000, "&access_token=Zq8rT2vLp9Xk3mN7 ");
        assert_eq!(
            scan(&real).map(|f| (f.kind, f.line)),
            Some((KIND_STRONG, 1))
        );
    }

    /// Fuzz input `slow-long-nonascii-line` (fuzz/corpus/secret_scan/): a secret word, a long
    /// hex-and-`u` token and two U+FFFD, repeated to one 100 KB line. The non-ASCII characters
    /// kept the regex engine's DFAs off the Unicode `\b` of the rules; with ASCII boundaries the
    /// verdict is the same: the token is a placeholder (a run of one letter), and a random token
    /// in its place is found on that line.
    #[test]
    fn long_non_ascii_line_is_read_right() {
        let unit = "Set up the CI secret. The va\u{fffd}ue is 44021uuuuuuuuuuuuuuuuuuuuu84ee6af8b2901466f5c5c5aaefbd0467fb8 and it should be exposed as enc\u{fffd}ryptionKey.";
        let big = grown(unit);
        assert_eq!(findings(&big, &Allowlist::default()), []);
        let real = big.replacen(
            "44021uuuuuuuuuuuuuuuuuuuuu84ee6af8b2901466f5c5c5aaefbd0467fb8",
            "q9XzL2mT7vB4nK8sW3pR6yH1",
            1,
        );
        let found = findings(&real, &Allowlist::default());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].kind, found[0].line), (KIND_NEAR, 1));
        // a vendor format on such a line: the word boundary beside non-ASCII text still holds
        let vendor = with_inserted(
            &big,
            unit.len() * 300,
            "é ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi é",
        );
        assert_eq!(
            scan(&vendor).map(|f| (f.kind, f.line)),
            Some(("GitHub token", 1))
        );
    }

    /// The vendor rules that run only on the lines holding a [`Run`] still find their shapes,
    /// on any line, in every written form (`%7C` for `|`; Unicode digits, which `\d` matches).
    #[test]
    fn run_gated_rules_find_their_shapes() {
        let arabic: String = "٨٣٠٦١٥٩٢٧٤٦٣٠٥١".into();
        for (value, kind) in [
            (
                "8306159274630518274-q9XzL2mT7vB4nK8sW3pR6yH1Lp".to_owned(),
                "Twitter access token",
            ),
            (
                "830615927463051|q9XzL2mT7vB4nK8sW3pR6yH1LpQw".to_owned(),
                "Facebook app access token",
            ),
            (
                "830615927463051%7Cq9XzL2mT7vB4nK8sW3pR6yH1LpQw".to_owned(),
                "Facebook app access token",
            ),
            (
                format!("x{arabic}|q9XzL2mT7vB4nK8sW3pR6yH1LpQw"),
                "Facebook app access token",
            ),
            (
                "1/8306159274630518/2746305182748301:9f2c4e7a1b3d5f60718293a4b5c6d7e8".to_owned(),
                "Asana token",
            ),
            (
                "9f2c4e7a1b3d5f60718293a4b5c6d7e8-4a1b3d5f-60718293".to_owned(),
                "Mailgun signing key",
            ),
            (
                "aB38Q~q9XzL2mT7vB4nK8sW3pR6yH1LpQwErT".to_owned(),
                "Azure client secret",
            ),
        ] {
            let text = format!("first line\nthe value we use is {value} here\nlast line");
            assert_eq!(
                scan(&text).map(|f| (f.kind, f.line)),
                Some((kind, 2)),
                "{value}"
            );
        }
    }

    /// A secret word on a line without any token still makes the next line's token count
    /// (the near-word rule skips reading a word only when neither line has a token); without
    /// it the token would count only as a token under a label (the pairing rule's kind).
    #[test]
    fn a_secret_word_counts_for_the_next_line() {
        let text = "intro\nthe api secret, on the next line:\n  q9XzL2mT7vB4nK8sW3pR6yH1\n";
        assert_eq!(scan(text).map(|f| (f.kind, f.line)), Some((KIND_NEAR, 3)));
    }

    #[test]
    fn base64_roundtrip() {
        assert_eq!(base64_decode("dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert!(base64_decode("not base64!").is_none());
    }
}
