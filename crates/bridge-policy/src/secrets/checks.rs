//! The checks of a candidate value: placeholders, toy values, code, constants' names,
//! randomness, and the credentials of headers, URLs and command lines. Pure functions of the
//! value.

use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

use super::*;

/// A bare value with brackets, `;` or `,` inside that reads as a password, not as code: 8-128
/// characters, letters and digits and symbols, not a template, and not a call, an index or a
/// literal whose brackets close at its end (`get(x)`, `cfg[key]`, `{a: 1}`).
pub(super) fn punctuated_secret(value: &str) -> bool {
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

/// Whether `value` is a UUID (8-4-4-4-12 hex digits).
pub(super) fn is_uuid(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The body of a prefixed token (after its last `_`, `.` or `-` prefix) switches classes as
/// random text does: `hf_` + 34 random letters, not `hf_` + a camelCase identifier.
pub(super) fn random_body(value: &str) -> bool {
    let body = value.rsplit(['_', '.', '-']).next().unwrap_or(value);
    let body = if body.len() >= 12 { body } else { value };
    looks_random(body) && class_switch_rate(body) >= 0.35
}

pub(super) fn distinct(value: &str) -> usize {
    let mut seen: Vec<char> = value.chars().collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Shannon entropy in bits per character.
pub(super) fn entropy(value: &str) -> f64 {
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
pub(super) fn is_placeholder(value: &str) -> bool {
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
pub(super) fn embedded_word(value: &str, at: Range<usize>) -> bool {
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
pub(super) fn wordy_body(value: &str) -> bool {
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

pub(super) fn is_toy(value: &str) -> bool {
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
pub(super) fn class_switch_rate(value: &str) -> f64 {
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
pub(super) fn looks_random(value: &str) -> bool {
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
pub(super) fn is_code(value: &str) -> bool {
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
pub(super) fn constant_like(value: &str) -> bool {
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
pub(super) fn word_like(word: &str) -> bool {
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
pub(super) fn assigned_secret(value: &str, quoted: bool) -> bool {
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

pub(super) fn char_classes(value: &str) -> usize {
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
pub(super) fn random_looking(value: &str) -> bool {
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

pub(super) fn auth_value(value: &str) -> bool {
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
pub(super) fn auth_header(scheme: Option<&str>, value: &str) -> bool {
    let value = value.trim_end_matches(['.', ',', ';', ':']);
    match scheme.map(str::to_ascii_lowercase).as_deref() {
        Some("basic") => basic_credentials(value),
        // Digest's fields are a nonce and a hash; a `-H "Authorization: $X"` has no scheme
        Some("digest") => false,
        _ => auth_value(value),
    }
}

/// A `Basic` value: base64 of `user:password` (a password, or a user alone that is a key).
pub(super) fn basic_credentials(value: &str) -> bool {
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
pub(super) fn user_pass(written: &str) -> bool {
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
pub(super) fn cmd_password(written: &str) -> bool {
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

pub(super) fn connection_password(user: &str, pass: &str) -> bool {
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

pub(super) fn jwt_ok(token: &str) -> bool {
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
pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
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
