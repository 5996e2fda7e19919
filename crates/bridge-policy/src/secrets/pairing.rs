//! A service's name near a high-entropy token: `cloudflare: "<40 chars>"`,
//! `init_cloudflare("<token>")`, `export ACME=<token>`, `# acme` then the token alone on the
//! next line. The public scanners pair a vendor's keyword with its token's shape, one detector
//! per vendor; here any name will do, and the token carries the weight: it must be random
//! enough to be a key wherever it stands, and stand where a value stands (after a name and
//! `=`, `:`, `(`, a quote or a blank), not inside a path, a URL, a hash or an id.

use std::sync::LazyLock;

use regex::Regex;

use super::{Strength, base64_decode, is_placeholder, is_uuid, named_strength, strongly_random};

/// A byte of a candidate token.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'~' | b'-')
}
/// Words (names) before a token.
static WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z][A-Za-z0-9_.-]*").expect("pair word pattern"));

/// How far before the token its name may stand, in bytes (trufflehog's prefix reaches 40).
const WINDOW: usize = 48;

/// Name parts that say the token is not a secret, beyond [`super::ID_LIKE`]: a digest, an
/// image, a public key, an example.
const NOT_SECRET_PARTS: &[&str] = &[
    "ver",
    "chksum",
    "sha",
    "sha1",
    "sha256",
    "sha384",
    "sha512",
    "md5",
    "crc",
    "commit",
    "rev",
    "srcrev",
    "revision",
    "etag",
    "nonce",
    "fingerprint",
    "thumbprint",
    "integrity",
    "base64",
    "data",
    "image",
    "img",
    "src",
    "href",
    "channel",
    "trace",
    "span",
    "build",
    "run",
    "job",
    "tag",
    "branch",
    "sku",
    "blob",
    "tree",
    "object",
    "oid",
    "h1",
    "ssh",
    "rsa",
    "ed25519",
    "ecdsa",
    "cert",
    "certificate",
    "pub",
    "public",
    "publishable",
    "pk",
    "iv",
    "seed",
    "test",
    "fixture",
    "expected",
    "assert",
    "encoded",
    "decoded",
    "font",
    "woff2",
    "png",
    "jpeg",
    "gif",
    "svg",
    "pipeline",
    "container",
    "docker",
    "sha-",
    // a record and where it is kept: the token is its id (`the Postgres row <ULID>`)
    "row",
    "rows",
    "record",
    "records",
    "event",
    "events",
    "entity",
    "item",
    "items",
    "order",
    "customer",
    "message",
    "msg",
    "document",
    "doc",
    "invoice",
    "deployment",
    "postgres",
    "postgresql",
    "pg",
    "mysql",
    "mariadb",
    "sqlite",
    "mongo",
    "mongodb",
    "dynamodb",
    "dynamo",
    "cassandra",
    "redis",
    "kafka",
    "s3",
    "bigquery",
    "elasticsearch",
    // a lookup: what is looked up is an id (`Sentry.get("<hex>")`, `look up <id> in …`)
    "get",
    "find",
    "lookup",
    "look",
    "fetch",
    "load",
    "retrieve",
    "show",
    "delete",
    "remove",
    "select",
    "where",
];

/// Name parts that are secret words: a name holding one is judged by the name rules.
const SECRET_PARTS: &[&str] = &[
    "key",
    "keys",
    "token",
    "tokens",
    "secret",
    "secrets",
    "password",
    "passwd",
    "pass",
    "pwd",
    "auth",
    "cred",
    "creds",
    "credential",
    "credentials",
    "apikey",
];

/// Hits of the pair rule `rule` over `text`, given where its lines start.
pub(super) fn pair_hits(
    text: &str,
    lines: &super::prefilter::Lines,
    rule: usize,
    out: &mut Vec<super::Hit>,
) {
    let bytes = text.as_bytes();
    for range in super::hidden::runs(text, 20, token_byte) {
        // a whole run: not the tail of a longer word (`.`, `:`, `@`, `/` before it: a path, a
        // host, a `sha256:` digest, a data URI's `base64,`)
        if range.start > 0
            && matches!(
                bytes[range.start - 1],
                b'.' | b':' | b'@' | b'/' | b'#' | b',' | b'$' | b'%' | b'&' | b'\\' | b'*'
            )
        {
            continue;
        }
        if range.end < bytes.len() && matches!(bytes[range.end], b'.' | b'@' | b'/' | b':' | b'%') {
            continue;
        }
        let token = &text[range.clone()];
        if token.len() > 200 {
            continue;
        }
        // a path of its own (`~/work/a1b2c3d4e5/proj`, `/tmp/.tmp2dD5vV`, `./out/x9`): its
        // random-looking directory names are no token
        if token.starts_with(['/', '~']) || token.starts_with("./") || token.starts_with("../") {
            continue;
        }
        // hex and UUIDs (hashes, ids) only right after `=`, `:` or `(` (see [`named`]): a cheap
        // look back before anything else, most runs of 20 characters are hashes
        let hexish = token.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if hexish && !joined(&text[..range.start]) && !starts_line(&text[..range.start]) {
            continue;
        }
        let Some(strict) = token_kind(token) else {
            continue;
        };
        // ids that are random by design (a ULID, a KSUID, a cuid, an ObjectId, a nanoid's
        // length): next to a name alone, they are the record's id
        if super::ids::random_by_design(token) || super::ids::nanoid_like(token) {
            continue;
        }
        let line = lines.index(range.start);
        let line_range = lines.range(line);
        let before = &text[line_range.start..range.start];
        let window = tail(before, WINDOW);
        // an expected value (`f(x) == "<random>"`) is compared, not given
        let gap = before.trim_end_matches([' ', '\t', '"', '\'', '`']);
        if gap.ends_with("==") || gap.ends_with("!=") {
            continue;
        }
        let label = window.trim().is_empty();
        // a hash or an id alone on its line under a name is a listing, not a key
        if label && strict {
            continue;
        }
        let name_text = if label {
            // the token alone on its line: a name on the line before (`# acme`, `acme:`)
            if line == 0 || !text[range.end..line_range.end].trim().is_empty() {
                continue;
            }
            let prev = &text[lines.range(line - 1)];
            match label_line(prev) {
                Some(label) => label,
                None => continue,
            }
        } else {
            window
        };
        // the window starts inside a word
        let cut = !label
            && window.len() < before.len()
            && before.as_bytes()[before.len() - window.len() - 1].is_ascii_alphanumeric();
        if named(name_text, cut, strict, label) {
            out.push(super::Hit {
                rule,
                offset: range.start,
                value: range,
            });
        }
    }
}

/// Whether the text before a token ends with `=`, `:` or `(` and at most a few blanks and quotes.
fn joined(before: &str) -> bool {
    let gap = before.trim_end_matches([' ', '\t', '"', '\'', '`', '[']);
    before.len() - gap.len() <= 6 && gap.ends_with(['=', ':', '(', '>'])
}

/// Whether a token starts its line (maybe after blanks): the name may be on the line before.
fn starts_line(before: &str) -> bool {
    // Only the blanks at its end are read, not the whole line back to its start: on one long
    // line that would be read again for every token on it.
    let text = before.trim_end_matches(|c: char| c.is_whitespace() && c != '\n');
    text.is_empty() || text.ends_with('\n')
}

/// The last `n` bytes of `s` (on a char boundary).
fn tail(s: &str, n: usize) -> &str {
    let mut at = s.len().saturating_sub(n);
    while !s.is_char_boundary(at) {
        at += 1;
    }
    &s[at..]
}

/// Whether `token` is random enough to be a key: `Some(strict)`, where `strict` means it is hex
/// or a UUID (hashes and ids share those shapes, so the name must stand right before it).
fn token_kind(token: &str) -> Option<bool> {
    let body = token.trim_end_matches('=');
    if body.len() < 20 {
        return None;
    }
    // the cheap tests first: most runs of 20 characters are words joined by `_` or `-`
    if body.bytes().all(|b| b.is_ascii_hexdigit()) {
        let ok = (24..=128).contains(&body.len())
            && body.bytes().any(|b| b.is_ascii_alphabetic())
            && body.bytes().any(|b| b.is_ascii_digit())
            && super::entropy(body) >= 3.3
            && !is_placeholder(body);
        return ok.then_some(true);
    }
    if is_uuid(body) {
        return (!is_placeholder(body)).then_some(true);
    }
    if !strongly_random(body) {
        return None;
    }
    // base64 of text is encoded text, not a key (the decoded text is scanned on its own)
    if let Some(decoded) = base64_decode(token)
        && decoded.len() >= 12
        && let Ok(text) = String::from_utf8(decoded)
        && text
            .chars()
            .all(|c| c.is_ascii_graphic() || c == ' ' || c == '\n')
    {
        return None;
    }
    Some(false)
}

/// A line that only names something: `# acme`, `// acme api`, `acme:`, `[acme]`.
fn label_line(line: &str) -> Option<&str> {
    let t = line.trim();
    let t = t
        .trim_start_matches(['#', '/', ';', '*', '['])
        .trim_end_matches([':', ']', '='])
        .trim();
    (!t.is_empty()
        && t.len() <= 40
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || " _.-".contains(c)))
    .then_some(t)
}

/// Whether the text before a token names it as a secret-like thing: a word stands there, none
/// of the words says hash, id, path or public, and none is a known non-secret setting name
/// (`publicToken`, `cache_key`). For a `strict` token (hex, UUID) the name must be right before
/// it, joined by `=`, `:` or `(` (`acme_conn = Acme("…")`), not by words, blanks or commas
/// alone (`git show <sha>`, `Distance, "<uuid>"`), unless the name is a `label` line of its own.
fn named(window: &str, cut: bool, strict: bool, label: bool) -> bool {
    let mut any = false;
    let mut last_end = 0;
    for w in WORD.find_iter(window) {
        let word = w.as_str().trim_end_matches(['.', '-']);
        // another token (`candidate("<random>") == "<random>"`) is no name
        if word.len() >= 8 && word.bytes().any(|b| b.is_ascii_digit()) && super::looks_random(word)
        {
            continue;
        }
        // the tail of a word cut by the window is no name
        if w.start() == 0 && cut {
            continue;
        }
        let parts = super::name_parts(word);
        if parts.is_empty() {
            continue;
        }
        if parts
            .iter()
            .any(|p| super::ID_LIKE.contains(&p.as_str()) || NOT_SECRET_PARTS.contains(&p.as_str()))
        {
            return false;
        }
        // a secret word in a name that is not secret (`publicToken`, `key_id`, `max_tokens`)
        if parts.iter().any(|p| SECRET_PARTS.contains(&p.as_str()))
            && named_strength("", word) == Strength::None
        {
            return false;
        }
        any = any || word.len() >= 2;
        last_end = w.end();
    }
    if !any {
        return false;
    }
    if strict && !label {
        // only joining punctuation between the last word and the token; a bare `: ` is how a
        // log or a listing shows a hash (`GitLab: <sha>`), so after a colon only a quoted one
        let gap = &window[last_end..];
        let quoted = gap.ends_with(['"', '\'', '`']);
        return gap.len() <= 8
            && (gap.contains(['=', '(']) || gap.contains(':') && quoted)
            && gap.chars().all(|c| {
                matches!(
                    c,
                    '=' | ':' | '(' | ',' | '"' | '\'' | '`' | ' ' | '\t' | '>' | '['
                )
            });
    }
    true
}
