//! A random token next to a secret word: on a line that mentions one (or right after it), a
//! token random enough to be a key, or a password-like word on a line that names a password.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use super::*;

/// Lines that hold hashes, public keys or lockfile lines: no near-word findings there.
pub(super) static HASHY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&ascii_boundaries(r"(?i)ssh-(?:rsa|ed25519|dss)|ecdsa-sha2|BEGIN (?:PUBLIC KEY|CERTIFICATE)|\bsha(?:1|256|384|512)\b|sha(?:256|384|512)[-:]|\bh1:|integrity|checksum|\bdigest\b|\bmd5\b|\bcommit\b|\betag\b|fingerprint|\bnonce\b"))
        .expect("hashy pattern")
});
/// Identifiers that may be secret words.
pub(super) static WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&ascii_boundaries(r"(?i)(?:\b(?P<pre>[a-z0-9]+)[ \t]+)?(?P<w>[a-z0-9_.-]*(?:pass|pwd|secret|token|key|cred|auth|bearer|sig)[a-z0-9_.-]*)"))
        .expect("word pattern")
});
/// The groups of one [`WORD`] match: `pre` and `w` with any `w` (the match has its secret
/// word), anchored at both ends; it takes the parse [`WORD`] took (see [`head_groups`]) without
/// [`WORD`]'s large automaton.
pub(super) static WORD_GROUPS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:(?P<pre>[a-z0-9]+)[ \t]+)?(?P<w>[a-z0-9_.-]*)$")
        .expect("word groups pattern")
});
/// Candidate tokens.
pub(super) static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9+/_\-.~%!#$&*?^@]{8,300}={0,2}").expect("token pattern")
});

/// The strongest secret word on a line; `seen` remembers the strength of words already read
/// (the same names recur through a prompt).
pub(super) fn line_word<'t>(
    line: &'t str,
    seen: &mut HashMap<(&'t str, &'t str), Strength>,
) -> Strength {
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
pub(super) fn near_word_hits<'t>(
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
pub(super) fn token_lines(text: &str, count: usize) -> Vec<bool> {
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
pub(super) fn id_valued(before: &str) -> bool {
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

pub(super) fn has_password_word(line: &str) -> bool {
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
pub(super) fn strongly_random(token: &str) -> bool {
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
pub(super) struct AsciiStats {
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
pub(super) fn password_like(token: &str) -> bool {
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
