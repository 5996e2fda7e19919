//! The secret guard: refuses prompts that look like they contain a credential.
//!
//! Detectors run in a fixed order over the whole prompt: vendor formats with a recognisable
//! prefix or shape first (cloud and AI provider keys, VCS and registry tokens, chat and payment
//! tokens, JWTs, private-key blocks), then contextual ones (Authorization headers, connection
//! strings with a password, `password=`/`api_key=`/`token=` assignments, high-entropy values next
//! to secret-ish names). Each match is checked against placeholder rules (`sk-xxx`, `<API_KEY>`,
//! `${TOKEN}`, `your-key-here`, repeated or sequential characters, documented example values) so
//! that ordinary coding prompts pass.
//!
//! A finding names the kind of secret and the line, never the secret itself.
//!
//! ```
//! use bridge_policy::secrets::scan;
//! let hit = scan("deploy with\nexport GITHUB_TOKEN=ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\n").unwrap();
//! assert_eq!(hit.kind, "GitHub token");
//! assert_eq!(hit.line, 2);
//! assert!(!hit.to_string().contains("ghp_"));
//! assert!(scan("set OPENAI_API_KEY=sk-xxx and read it with os.environ['OPENAI_API_KEY']").is_none());
//! ```

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

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
    let mut best: Option<(usize, usize)> = None; // (line, detector index)
    for (index, detector) in DETECTORS.iter().enumerate() {
        if let Some(offset) = detector.first_match(text) {
            let line = text[..offset].matches('\n').count() + 1;
            if best.is_none_or(|(l, _)| line < l) {
                best = Some((line, index));
            }
        }
    }
    best.map(|(line, index)| SecretFinding {
        kind: DETECTORS[index].kind,
        line,
    })
}

/// How a candidate is checked after the regex matched. The regex's group 1 (or the whole match)
/// is the value checked.
#[derive(Clone, Copy)]
enum Check {
    /// Prefix formats: not a placeholder, and at least this many distinct characters.
    Varied(usize),
    /// A key block body: varied enough to be key material (real headers hold runs of `A`).
    KeyBlock,
    /// A JWT: three parts, not the jwt.io example.
    Jwt,
    /// A connection string: group 1 user, group 2 password.
    Connection,
    /// An explicit secret name: a literal value that is not code, a placeholder or a toy value.
    Assignment,
    /// A secret-ish name next to a long random-looking value.
    Entropy,
    /// An `Authorization: Bearer|Basic|token` value.
    Auth,
}

struct Detector {
    kind: &'static str,
    regex: Regex,
    check: Check,
}

impl Detector {
    fn first_match(&self, text: &str) -> Option<usize> {
        for caps in self.regex.captures_iter(text) {
            let whole = caps.get(0)?;
            let value = caps.get(1).map_or(whole.as_str(), |m| m.as_str());
            let ok = match self.check {
                Check::Varied(n) => !is_placeholder(value) && distinct(value) >= n,
                Check::KeyBlock => distinct(value) >= 16,
                Check::Jwt => jwt_ok(whole.as_str()),
                Check::Connection => {
                    let user = caps.get(1).map_or("", |m| m.as_str());
                    let pass = caps.get(2).map_or("", |m| m.as_str());
                    connection_password(user, pass)
                }
                Check::Assignment => {
                    let (value, quoted) = assigned_value(&caps);
                    assigned_secret(value, quoted)
                }
                Check::Entropy => {
                    let name = caps.name("name").map_or("", |m| m.as_str());
                    let (value, _) = assigned_value(&caps);
                    secretish_name(name) && random_looking(value)
                }
                Check::Auth => auth_value(value),
            };
            if ok {
                return Some(whole.start());
            }
        }
        None
    }
}

/// Secret-ish names for assignments (the last word of the name).
const SECRET_NAME: &str = r"[A-Za-z0-9_.-]*(?i:password|passwd|passphrase|pwd|secret|secret[_-]?key|token|access[_-]?token|auth[_-]?token|refresh[_-]?token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|client[_-]?secret|credentials?)";

/// Candidate names for the entropy rule (narrowed by [`secretish_name`]).
const LOOSE_NAME: &str = r"(?i:[A-Za-z0-9_.-]*(?:secret|token|passw|pwd|key|auth|credential|webhook|hmac)[A-Za-z0-9_.-]*)";

/// Words that make a name secret-ish when they are a whole part of it.
const SECRET_WORDS: &[&str] = &[
    "secret",
    "secrets",
    "token",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "auth",
    "credential",
    "credentials",
    "apikey",
    "hmac",
    "webhook",
];
/// Words that make a following `key` secret-ish (`signing_key`, `apiKey`).
const KEY_QUALIFIERS: &[&str] = &[
    "api",
    "access",
    "signing",
    "signature",
    "encryption",
    "master",
    "private",
    "session",
    "app",
    "license",
    "secret",
    "client",
    "auth",
    "hmac",
    "jwt",
    "cookie",
    "webhook",
];

/// Whether a setting name is secret-ish: one of its parts (split at `_`, `-`, `.` and camelCase)
/// is a secret word, or it is `<qualifier> key`, or an upper-case `…_KEY`.
fn secretish_name(name: &str) -> bool {
    if name.len() > 4 && name.ends_with("_KEY") && !name.chars().any(|c| c.is_ascii_lowercase()) {
        return true;
    }
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if matches!(c, '_' | '-' | '.') {
            parts.push(std::mem::take(&mut current));
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            parts.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    parts.push(current);
    parts.retain(|p| !p.is_empty());
    parts.iter().enumerate().any(|(i, part)| {
        SECRET_WORDS.contains(&part.as_str())
            || (part == "key" && i > 0 && KEY_QUALIFIERS.contains(&parts[i - 1].as_str()))
    })
}

/// The assigned value and whether it was quoted.
fn assigned_value<'t>(caps: &regex::Captures<'t>) -> (&'t str, bool) {
    if let Some(m) = caps.name("dq").or_else(|| caps.name("sq")) {
        return (m.as_str(), true);
    }
    (caps.name("bare").map_or("", |m| m.as_str()), false)
}

static DETECTORS: LazyLock<Vec<Detector>> = LazyLock::new(|| {
    let value_assign = |name: &str| {
        format!(
            r#"["']?\b(?P<name>{name})\b["']?\s*(?:=>|:=|=|:\s|:["']|\s(?:=|is)\s)\s*(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s"',;)}}\]]+))"#
        )
    };
    let cli_flag = |name: &str| {
        format!(r#"--{name}[= ](?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s"']+))"#)
    };
    let list: Vec<(&'static str, String, Check)> = vec![
        ("private key block", r"-----BEGIN[A-Z ]{0,20}PRIVATE KEY(?: BLOCK)?-----(?:\\n|\s)*(?:[A-Za-z-]+: [^\n\\]*(?:\\n|\s)+)*([A-Za-z0-9+/=]{40,})".into(), Check::KeyBlock),
        ("PuTTY private key", r"PuTTY-User-Key-File-\d: [a-z0-9-]+\s*\n(?:[A-Za-z-]+: [^\n]*\n){1,3}Public-Lines: \d+\s*\n([A-Za-z0-9+/=]{40,})".into(), Check::Varied(12)),
        ("AWS access key ID", r"\b((?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[0-9A-Z]{16})\b".into(), Check::Varied(8)),
        ("AWS secret access key", r#"(?i)aws.{0,20}(?:secret|private).{0,20}?[:=]\s*["']?([A-Za-z0-9/+]{40})\b"#.into(), Check::Varied(12)),
        ("GitHub token", r"\b((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255})\b".into(), Check::Varied(10)),
        ("GitHub token", r"\b(github_pat_[A-Za-z0-9_]{60,255})\b".into(), Check::Varied(10)),
        ("GitLab token", r"\b((?:glpat|gldt|glrt|glptt|glcbt|glft|glsoat|gloas)-[A-Za-z0-9_-]{20,64})\b".into(), Check::Varied(8)),
        ("Bitbucket app password", r"\b(ATBB[A-Za-z0-9_=.-]{28,})\b".into(), Check::Varied(10)),
        ("Atlassian API token", r"\b(ATATT3[A-Za-z0-9_=.-]{100,})".into(), Check::Varied(10)),
        ("npm token", r"\b(npm_[A-Za-z0-9]{36})\b".into(), Check::Varied(10)),
        ("PyPI token", r"\b(pypi-AgE[A-Za-z0-9_-]{50,})".into(), Check::Varied(10)),
        ("RubyGems API key", r"\b(rubygems_[a-f0-9]{48})\b".into(), Check::Varied(8)),
        ("NuGet API key", r"\b(oy2[a-z0-9]{43})\b".into(), Check::Varied(10)),
        ("Docker Hub token", r"\b(dckr_pat_[A-Za-z0-9_-]{27,})".into(), Check::Varied(10)),
        ("Terraform Cloud token", r"\b([A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,})".into(), Check::Varied(10)),
        ("HashiCorp Vault token", r"\b(hv[sbr]\.[A-Za-z0-9_-]{24,})".into(), Check::Varied(10)),
        ("Anthropic API key", r"\b(sk-ant-[a-z0-9]{2,10}\d{0,2}-[A-Za-z0-9_-]{40,})".into(), Check::Varied(12)),
        ("OpenAI API key", r"\b(sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,})".into(), Check::Varied(12)),
        ("OpenRouter API key", r"\b(sk-or-v1-[a-f0-9]{64})\b".into(), Check::Varied(10)),
        ("AI provider API key", r"\b(sk-[A-Za-z0-9]{32,})\b".into(), Check::Varied(12)),
        ("AI provider API key", r"\b((?:gsk|xai|pplx|r8|fw|nvapi)[_-][A-Za-z0-9_-]{32,})".into(), Check::Varied(12)),
        ("Hugging Face token", r"\b(hf_[A-Za-z0-9]{34,})\b".into(), Check::Varied(10)),
        ("Google API key", r"\b(AIza[0-9A-Za-z_-]{35})".into(), Check::Varied(10)),
        ("Google OAuth client secret", r"\b(GOCSPX-[A-Za-z0-9_-]{28})".into(), Check::Varied(10)),
        ("Google OAuth token", r"\b(ya29\.[0-9A-Za-z_-]{30,})".into(), Check::Varied(10)),
        ("Google OAuth refresh token", r"\b(1//0[A-Za-z0-9_-]{40,})".into(), Check::Varied(10)),
        ("Azure storage account key", r"(?i)AccountKey=([A-Za-z0-9+/]{80,}={0,2})".into(), Check::Varied(12)),
        ("Azure shared access signature", r"[?&]sig=([A-Za-z0-9%+/]{30,}(?:%3D|=){0,2})".into(), Check::Varied(12)),
        ("Azure client secret", r"\b([A-Za-z0-9_~.-]{3}8Q~[A-Za-z0-9_~.-]{31,34})".into(), Check::Varied(10)),
        ("DigitalOcean token", r"\b(do[por]_v1_[a-f0-9]{64})\b".into(), Check::Varied(8)),
        ("Databricks token", r"\b(dapi[a-f0-9]{32}(?:-\d)?)\b".into(), Check::Varied(8)),
        ("Slack token", r"\b(xox[abposr]-[0-9A-Za-z-]{10,})".into(), Check::Varied(8)),
        ("Slack token", r"\b(xapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{32,})".into(), Check::Varied(8)),
        ("Slack webhook URL", r"(hooks\.slack\.com/(?:services|workflows)/T[A-Z0-9]{6,}/[A-Z0-9]{6,}/[A-Za-z0-9]{16,})".into(), Check::Varied(8)),
        ("Discord webhook URL", r"(discord(?:app)?\.com/api/webhooks/\d{15,20}/[A-Za-z0-9_-]{50,})".into(), Check::Varied(10)),
        ("Discord bot token", r"\b([MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40})\b".into(), Check::Varied(12)),
        ("Telegram bot token", r"\b(\d{8,10}:AA[0-9A-Za-z_-]{33})".into(), Check::Varied(10)),
        ("Microsoft Teams webhook URL", r"(\.webhook\.office\.com/webhookb2/[a-f0-9-]{36}@[a-f0-9-]{36}/IncomingWebhook/[a-f0-9]{32}/[a-f0-9-]{36})".into(), Check::Varied(8)),
        ("Twilio API key", r"\b(SK[0-9a-f]{32})\b".into(), Check::Varied(8)),
        ("SendGrid API key", r"\b(SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})".into(), Check::Varied(10)),
        ("Mailgun API key", r"\b(key-[0-9a-f]{32})\b".into(), Check::Varied(8)),
        ("Mailchimp API key", r"\b([0-9a-f]{32}-us\d{1,2})\b".into(), Check::Varied(8)),
        ("Stripe secret key", r"\b((?:sk|rk)_(?:live|test)_[0-9A-Za-z]{20,})\b".into(), Check::Varied(10)),
        ("Stripe webhook secret", r"\b(whsec_[A-Za-z0-9]{32,})\b".into(), Check::Varied(10)),
        ("Square token", r"\b(sq0(?:atp|csp)-[0-9A-Za-z_-]{22,43})".into(), Check::Varied(10)),
        ("Square token", r"\b(EAAA[A-Za-z0-9_-]{60})\b".into(), Check::Varied(10)),
        ("PayPal/Braintree access token", r"(access_token\$(?:production|sandbox)\$[0-9a-z]{16}\$[0-9a-f]{32})".into(), Check::Varied(8)),
        ("Shopify token", r"\b(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})\b".into(), Check::Varied(8)),
        ("Linear API key", r"\b(lin_api_[A-Za-z0-9]{40})\b".into(), Check::Varied(10)),
        ("Notion token", r"\b((?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{46}))\b".into(), Check::Varied(10)),
        ("Doppler token", r"\b(dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,})".into(), Check::Varied(10)),
        ("Postman API key", r"\b(PMAK-[a-f0-9]{24}-[a-f0-9]{34})\b".into(), Check::Varied(8)),
        ("Grafana token", r"\b(glsa_[A-Za-z0-9]{32}_[a-f0-9]{8})\b".into(), Check::Varied(8)),
        ("Sentry auth token", r"\b(sntr[ysu]_[A-Za-z0-9+/=_-]{40,})".into(), Check::Varied(10)),
        ("New Relic key", r"\b(NRAK-[A-Z0-9]{27})\b".into(), Check::Varied(8)),
        ("JSON Web Token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}".into(), Check::Jwt),
        ("Authorization header", r"(?i)\b(?:authorization|proxy-authorization)\s*[:=]\s*[\x22']?\s*(?:bearer|basic|token|digest)\s+([A-Za-z0-9._~+/=-]{12,})".into(), Check::Auth),
        ("Authorization header", r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{20,}=*)".into(), Check::Auth),
        ("connection string with a password", r"\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|redis|rediss|amqps?|mssql|sqlserver|oracle|clickhouse|cockroachdb|nats|kafka|ldaps?|smtps?|ftps?|sftp|https?|jdbc:[a-z]+)://([^\s:/@'\x22]{1,64}):([^\s@/'\x22]{1,128})@[A-Za-z0-9.\-\[\]]+".into(), Check::Connection),
        ("password/API key/token assignment", value_assign(SECRET_NAME), Check::Assignment),
        ("password/API key/token assignment", cli_flag(r"(?:password|passwd|pass|token|api-key|apikey|secret|client-secret|auth-token|access-token)"), Check::Assignment),
        ("high-entropy value in a secret-named setting", value_assign(LOOSE_NAME), Check::Entropy),
    ];
    list.into_iter()
        .map(|(kind, pattern, check)| Detector {
            kind,
            regex: Regex::new(&pattern)
                .unwrap_or_else(|e| panic!("secret pattern for {kind}: {e}")),
            check,
        })
        .collect()
});

fn distinct(value: &str) -> usize {
    let mut seen: Vec<char> = value.chars().collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Shannon entropy in bits per character.
fn entropy(value: &str) -> f64 {
    let chars: Vec<char> = value.chars().collect();
    if chars.is_empty() {
        return 0.0;
    }
    let mut counts = std::collections::HashMap::new();
    for c in &chars {
        *counts.entry(*c).or_insert(0usize) += 1;
    }
    let n = chars.len() as f64;
    counts
        .values()
        .map(|&k| {
            let p = k as f64 / n;
            -p * p.log2()
        })
        .sum()
}

const PLACEHOLDER_WORDS: &[&str] = &[
    "example",
    "sample",
    "dummy",
    "placeholder",
    "your",
    "redacted",
    "changeme",
    "change_me",
    "change-me",
    "insert",
    "replace",
    "fake",
    "mock",
    "todo",
    "fixme",
    "foobar",
    "lorem",
    "xxxx",
    "****",
    "...",
    "not-a-real",
    "notreal",
    "…",
    "<",
    ">",
    "${",
    "{{",
    "%(",
    "%s",
    "process.env",
    "os.environ",
    "getenv",
    "env(",
    "env.",
    "secrets.",
    "vault(",
    "here",
];

/// Example values published in vendors' documentation.
const DOCUMENTED_EXAMPLES: &[&str] = &[
    "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "sk_test_BQokikJOvBiI2HlWgH4olfQ2",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
];

/// Whether a matched value is a placeholder rather than a real secret.
fn is_placeholder(value: &str) -> bool {
    if DOCUMENTED_EXAMPLES.iter().any(|e| value.contains(e)) {
        return true;
    }
    let lower = value.to_ascii_lowercase();
    if PLACEHOLDER_WORDS.iter().any(|w| lower.contains(w)) {
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

/// Toy values that show up in tutorials and tests.
const TOY_VALUES: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "test",
    "testing",
    "admin",
    "root",
    "guest",
    "user",
    "username",
    "postgres",
    "mysql",
    "redis",
    "default",
    "demo",
    "local",
    "localhost",
    "dev",
    "development",
    "pass",
    "pw",
    "pwd",
    "qwerty",
    "letmein",
    "hunter2",
    "abc123",
    "123456",
    "1234",
    "12345678",
    "none",
    "null",
    "nil",
    "undefined",
    "true",
    "false",
    "bearer",
    "basic",
    "required",
    "optional",
    "string",
    "str",
    "bytes",
    "int",
    "any",
    "unknown",
    "hidden",
    "masked",
    "empty",
    "blank",
    "n/a",
    "na",
    "tbd",
];

fn is_toy(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    TOY_VALUES.contains(&lower.as_str())
        || lower.starts_with("test")
        || lower.starts_with("secret")
        || lower.starts_with("password")
        || lower.starts_with("my")
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
    value.len() >= 8 && class_switch_rate(value) >= 0.25 && distinct(value) >= 6
}

/// Whether an unquoted value is code (an identifier, a call, an attribute, a number, a
/// reference) rather than a literal.
fn is_code(value: &str) -> bool {
    static CODE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?:[&*]|[A-Za-z_][A-Za-z0-9_]*(?:\.|\(|\[|::|->|$))").expect("code pattern")
    });
    if value.parse::<f64>().is_ok() {
        return true;
    }
    if value.chars().all(|c| c.is_ascii_alphabetic() || c == '_') && !looks_random(value) {
        return true; // identifiers like user_password, API_KEY, secretValue
    }
    CODE.is_match(value) && !looks_random(value)
}

/// The value of an explicit `password=`/`api_key=`/`token=` assignment.
fn assigned_secret(value: &str, quoted: bool) -> bool {
    let value = value.trim();
    if value.len() < 8 || value.contains(char::is_whitespace) {
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
    if is_placeholder(value) || is_toy(value) || is_code(value) {
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

fn connection_password(user: &str, pass: &str) -> bool {
    if pass.is_empty() || is_placeholder(pass) || is_toy(pass) || pass == user {
        return false;
    }
    // ${DB_PASSWORD}, :password (a named parameter), {password}
    if pass.starts_with(['{', ':', '[']) || pass.chars().all(|c| c == '*') {
        return false;
    }
    // host:port written without a user, e.g. "http://localhost:8080@" is not a password
    !(pass.chars().all(|c| c.is_ascii_digit()) && user.contains('.'))
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
                "signingKey = 'b7e1c2f09a4d4e6f8c3b2a1d0e9f8a7b6c5d4e3f2a1b0c9d'",
                "high-entropy value in a secret-named setting",
            ),
        ] {
            assert_eq!(scan(text).map(|f| f.kind), Some(kind), "{text}");
        }
    }

    #[test]
    fn secretish_names_are_whole_parts() {
        for yes in [
            "JWT_SIGNING_KEY",
            "webhookSigningSecret",
            "app_secret",
            "auth",
            "STRIPE_KEY",
            "apiKey",
            "x-api-key",
            "cookieSecret",
            "db.password",
        ] {
            assert!(secretish_name(yes), "{yes}");
        }
        for no in [
            "author_id",
            "primary_key",
            "cache_key",
            "signal_id",
            "keyboard",
            "idempotency_key",
            "tokens_total",
        ] {
            assert!(!secretish_name(no), "{no}");
        }
    }

    #[test]
    fn base64_roundtrip() {
        assert_eq!(base64_decode("dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert!(base64_decode("not base64!").is_none());
    }
}
