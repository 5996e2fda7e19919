//! The engine of the secret guard: the rules compiled once ([`RULES`]), where each may match
//! ([`PREFILTER`], [`Run`]), running them over a prompt and its hidden readings, and the value
//! of a name read by code. The rules themselves are data: `vendor.rs` (self-identifying
//! formats), `contextual.rs` (credentials in context, values given to a name) and `rules.rs`
//! (the word lists); the checks of a candidate are in `checks.rs`, `names.rs`, `near.rs` and
//! `pairing.rs`.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

use super::*;

/// One validated candidate: which rule, where the finding starts, and the value's span.
pub(super) struct Hit {
    pub(super) rule: usize,
    pub(super) offset: usize,
    pub(super) value: Range<usize>,
}

/// How a candidate is checked after the regex matched. The regex's group 1 (or the whole match)
/// is the value checked.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
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

pub(super) struct Rule {
    pub(super) kind: &'static str,
    pub(super) regex: Regex,
    pub(super) check: Check,
    /// Literals one of which every match contains (see `prefilter.rs`); `None`: always run.
    pub(super) literals: Option<Vec<Vec<u8>>>,
    /// Its matches never span a line break (and it has no `$`): it may run line by line.
    pub(super) one_line: bool,
    /// For the assignment [`Check::NamedHead`] rule: the regex that reads the groups of one of
    /// its matches (`None` for the query rule).
    pub(super) groups: Option<Regex>,
    /// For a one-line rule without literals: the run every match holds (see [`Run`]); it runs
    /// only on the lines that hold one.
    pub(super) run: Option<Run>,
}

/// How a rule is prefiltered: by literals from its own pattern, by an anchor pattern's literals
/// (a word inside the match), and whether it may run line by line.
#[derive(Clone, Copy)]
pub(super) enum Scope {
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
pub(super) struct Run {
    /// The bytes of the run.
    pub(super) class: fn(u8) -> bool,
    /// Its least length.
    pub(super) min: usize,
    /// The bytes one of which follows it.
    pub(super) after: &'static [u8],
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

/// Every rule: the vendor formats, then the contextual rules, then the kinds found by code
/// (most specific first: a line's finding is named by its lowest rule).
pub(super) static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let mut list: Vec<(&'static str, String, Check, Scope)> = vendor::VENDOR
        .iter()
        .map(|(k, p, c)| {
            let scope =
                if let Some((_, run)) = vendor::VENDOR_RUNS.iter().find(|(kind, _)| kind == k) {
                    Scope::LinesRun(*run)
                } else if let Some((_, anchor)) =
                    vendor::VENDOR_ANCHORS.iter().find(|(kind, _)| kind == k)
                {
                    Scope::TextAnchor(anchor)
                } else {
                    Scope::Text
                };
            (*k, (*p).to_owned(), *c, scope)
        })
        .collect();
    list.extend(contextual::contextual());
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

/// The prefilter of [`RULES`], plus one entry after them: the lines holding a [`WORD`].
pub(super) static PREFILTER: LazyLock<prefilter::Prefilter> = LazyLock::new(|| {
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
pub(super) fn ascii_boundaries(pattern: &str) -> String {
    pattern.replace(r"\b", r"(?-u:\b)")
}

/// The index in [`RULES`] of a kind that has no regex of its own.
pub(super) fn rule_of(kind: &str) -> usize {
    RULES
        .iter()
        .rposition(|r| r.kind == kind)
        .expect("kind is listed")
}

pub(super) fn hits(text: &str) -> Vec<Hit> {
    all_hits(text, &prefilter::Lines::new(text))
}

/// [`hits_in`] over the text as written, over the text without its invisible characters (a
/// zero-width space inside a token), and over the text of each base64 run that decodes to
/// text (a known format, base64-encoded). A hit in decoded text is reported at its run.
pub(super) fn all_hits(text: &str, lines: &prefilter::Lines) -> Vec<Hit> {
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
pub(super) fn hits_in(text: &str, lines: &prefilter::Lines) -> Vec<Hit> {
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
pub(super) fn run_rule<'t>(
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
pub(super) struct Head<'t> {
    /// The word before the name (`client` in `client secret: …`), or "".
    pub(super) pre: &'t str,
    /// The name's span in the text.
    pub(super) name: Range<usize>,
    /// Whether name and value are separated by a comma.
    pub(super) comma: bool,
    /// Whether the name was quoted.
    pub(super) quoted_name: bool,
}

/// How secret-ish the name of a match is; `None` when it is not a secret name here. `seen`
/// remembers the strength of names already judged in this text (the same names recur).
pub(super) fn judge_name<'t>(
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
pub(super) fn judge_value(
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
pub(super) fn run_head_rule<'t>(
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
pub(super) fn named_value<'t>(caps: &regex::Captures<'t>) -> Option<(regex::Match<'t>, bool)> {
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
pub(super) enum ValueSyntax {
    /// As [`VALUE`]: double, single or back-quoted on one line, or bare up to whitespace or one
    /// of `"'`,;()[]{}<>`.
    Any,
    /// A URL query value: 8 or more characters up to whitespace or one of `&#"'<>`.
    Query,
}

/// How far [`read_value`] looks for the end of a punctuated password (at most 128 bytes, and
/// room for the `,`/`;` trimmed after it).
const WIDE_SCAN: usize = 256;

/// Reads the value that starts at `at` of `hay`: its span (inside the quotes) and whether it
/// was quoted; `None` when there is none. Each byte is read once per call, and a call is only
/// made for a secret-ish name, after which the next search starts past the value.
pub(super) fn read_value(
    hay: &str,
    at: usize,
    syntax: ValueSyntax,
) -> Option<(Range<usize>, bool)> {
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
            // next blank or quote when what is there is such a password, not code. Such a
            // password is at most 128 bytes (`punctuated_secret`), so its end is looked for in
            // the next WIDE_SCAN bytes only: read to the end of the text, a long line without
            // blanks was read again at every name on it (quadratic; the fuzzer's
            // `AWS_SECRET_ACCESS_KEY=${…}` repeated took 0.8 s for 100 KB in release).
            let mut window = rest.len().min(WIDE_SCAN);
            while !rest.is_char_boundary(window) {
                window -= 1;
            }
            let wide = rest[..window]
                .find(|c: char| c.is_whitespace() || "\"'`".contains(c))
                .or((window == rest.len()).then_some(window));
            if let Some(wide) = wide {
                let wide = rest[..wide].trim_end_matches([',', ';']);
                if wide.len() > end && punctuated_secret(wide) {
                    // read as a literal: the test for code does not apply to it
                    return Some((at..at + wide.len(), true));
                }
            }
            (end > 0).then(|| (at..at + end, false))
        }
        ValueSyntax::Query => {
            let end = bare_end("&#\"'<>");
            (rest[..end].chars().count() >= 8).then(|| (at..at + end, false))
        }
    }
}
