//! Secrets hidden from the patterns: invisible characters inside a token (`ghp_4Fq9` U+200B
//! `ZtL2…`: the text shows the token, the patterns see two halves), and base64 of a text that
//! holds one (`echo Z2hwXzRGcTl… | base64 -d`). The guard reads the prompt with the invisible
//! characters taken out, and the text each bounded base64 run decodes to, with the same rules.
//! So are a URL-encoded secret (`ghp%5F…`: the lines holding escapes, decoded) and a secret cut
//! across two lines (`…\` then the rest, `"abc" +` then `"def"`, a hard wrap: the two lines
//! joined, a finding counting only across the join).

use std::ops::Range;

use super::base64_decode;

/// The shortest base64 run worth decoding: 24 characters (18 bytes).
const MIN_RUN: usize = 24;

/// The maximal runs of `text` made of bytes for which `class` holds, `min` bytes or longer,
/// each with up to two `=` after it (base64 padding). One pass over the bytes: a regex with a
/// counted repetition (`[…]{24,}`) restarts at each byte of every shorter run.
pub(super) fn runs<'t, F: Fn(u8) -> bool + 't>(
    text: &'t str,
    min: usize,
    class: F,
) -> impl Iterator<Item = Range<usize>> + 't {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            if !class(bytes[at]) {
                at += 1;
                continue;
            }
            let start = at;
            while at < bytes.len() && class(bytes[at]) {
                at += 1;
            }
            let mut end = at;
            while end < bytes.len() && end < at + 2 && bytes[end] == b'=' {
                end += 1;
            }
            if at - start >= min {
                at = end;
                return Some(start..end);
            }
        }
        None
    })
}

/// A byte of standard or URL-safe base64.
fn base64_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-')
}

/// The longest run decoded (longer ones are data, an image or a bundle, not a pasted token).
const MAX_RUN: usize = 4096;
/// The most runs decoded in one prompt, and the most bytes decoded in all: the rescan's cost
/// stays bounded whatever the prompt holds.
const MAX_RUNS: usize = 64;
const MAX_DECODED: usize = 64 * 1024;

/// Characters that show as nothing: zero-width spaces and joiners, the word joiner and the
/// invisible operators, the byte-order mark, the soft hyphen, the Mongolian vowel separator,
/// the combining grapheme joiner and the bidirectional controls.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// `text` without its invisible characters, and for each byte of that (and its end) the byte
/// of `text` it came from; `None` when it has none (the common case: one pass over the bytes).
pub(super) fn without_invisible(text: &str) -> Option<(String, Vec<usize>)> {
    // every invisible character's UTF-8 encoding starts with one of these bytes
    // every invisible character's UTF-8 encoding starts with one of these bytes: only the
    // characters starting there are decoded (a byte pass, not a decode of every character)
    let lead = |b: &u8| matches!(b, 0xC2 | 0xCD | 0xE1 | 0xE2 | 0xEF);
    if !text
        .bytes()
        .enumerate()
        .any(|(at, b)| lead(&b) && text[at..].chars().next().is_some_and(invisible))
    {
        return None;
    }
    let mut clean = String::with_capacity(text.len());
    let mut map = Vec::with_capacity(text.len() + 1);
    for (at, c) in text.char_indices() {
        if invisible(c) {
            continue;
        }
        clean.push(c);
        map.extend((0..c.len_utf8()).map(|i| at + i));
    }
    map.push(text.len());
    Some((clean, map))
}

/// The base64 runs of `text` that decode to printable text, with that text (bounded: see
/// [`MAX_RUN`], [`MAX_RUNS`], [`MAX_DECODED`]).
pub(super) fn base64_texts(text: &str) -> Vec<(Range<usize>, String)> {
    let mut out = Vec::new();
    let (mut count, mut decoded_bytes) = (0, 0);
    for range in runs(text, MIN_RUN, base64_byte) {
        let run = &text[range.clone()];
        if run.len() > MAX_RUN {
            continue;
        }
        count += 1;
        decoded_bytes += run.len() * 3 / 4;
        if count > MAX_RUNS || decoded_bytes > MAX_DECODED {
            break;
        }
        let Some(bytes) = base64_decode(run) else {
            continue;
        };
        if bytes.len() < 16 {
            continue;
        }
        let Ok(decoded) = String::from_utf8(bytes) else {
            continue;
        };
        if decoded
            .chars()
            .all(|c| c.is_ascii_graphic() || matches!(c, ' ' | '\n' | '\t' | '\r'))
        {
            out.push((range, decoded));
        }
    }
    out
}

/// Lines of the prompt read another way (URL-decoded, or two lines joined), one reading line a
/// `\n` apart, with for each byte of it (and its end) the byte of the prompt it came from; for
/// joined lines, where in `text` each join is (a finding there counts only across one).
pub(super) struct Reading {
    pub(super) text: String,
    pub(super) map: Vec<usize>,
    pub(super) joins: Vec<usize>,
}

/// The most lines read another way per prompt, and the most bytes of them in all; a longer line
/// is not read another way (a data blob, not a pasted value).
const MAX_LINES: usize = 64;
const MAX_LINE: usize = 4096;
const MAX_READ: usize = 64 * 1024;

impl Reading {
    fn new() -> Reading {
        Reading {
            text: String::new(),
            map: Vec::new(),
            joins: Vec::new(),
        }
    }

    /// Ends a reading line whose last byte came from before `end` of the prompt.
    fn end_line(&mut self, end: usize) {
        self.text.push('\n');
        self.map.push(end);
    }

    fn finish(mut self, len: usize) -> Option<Reading> {
        if self.text.is_empty() {
            return None;
        }
        self.map.push(len);
        Some(self)
    }
}

/// The lines of `text` (without their `\n`) and where each starts.
fn lines_of(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    text.split('\n').map(move |line| {
        let start = at;
        at += line.len() + 1;
        (start, line)
    })
}

/// `line` with its `%XX` escapes decoded, and for each byte the offset in `line` it came from;
/// `None` when it has no escape or decodes to no text.
fn percent_decode(line: &str) -> Option<(String, Vec<usize>)> {
    let bytes = line.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut map = Vec::with_capacity(bytes.len());
    let mut decoded = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            map.push(i);
            decoded = true;
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        map.push(i);
        i += 1;
    }
    let text = String::from_utf8(out).ok()?;
    decoded.then_some((text, map))
}

/// The lines of `text` that hold URL escapes (`%5F` for `_`, `%2F` for `/`), decoded (twice
/// for a doubly encoded `%252F`), within [`MAX_LINES`], [`MAX_LINE`] and [`MAX_READ`].
pub(super) fn percent_decoded(text: &str) -> Option<Reading> {
    if !text.contains('%') {
        return None;
    }
    let mut reading = Reading::new();
    let (mut count, mut read) = (0, 0);
    for (start, line) in lines_of(text) {
        if line.len() > MAX_LINE || !line.contains('%') {
            continue;
        }
        let Some((once, map1)) = percent_decode(line) else {
            continue;
        };
        count += 1;
        read += line.len();
        if count > MAX_LINES || read > MAX_READ {
            break;
        }
        let (decoded, map) = match percent_decode(&once) {
            Some((twice, map2)) => (twice, map2.into_iter().map(|i| map1[i]).collect()),
            None => (once, map1),
        };
        reading.text.push_str(&decoded);
        reading
            .map
            .extend(map.into_iter().map(|i: usize| start + i));
        reading.end_line(start + line.len());
    }
    reading.finish(text.len())
}

/// A byte that may stand inside a token.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'/' | b'=' | b'.' | b'~')
}

/// How a line ends that may continue on the next, and where the text to keep from it ends:
/// a `\` continuation, a string literal closed to be concatenated (`"…" +`, `"…"` then `"…"` on
/// the next line), or a token cut by a hard wrap.
fn continued(left: &str, right: &str) -> Option<(usize, usize)> {
    let l = left.trim_end_matches([' ', '\t', '\r']);
    let r = right.trim_start_matches([' ', '\t']);
    let r_at = right.len() - r.len();
    // `abc\` + `def`: a token cut by a continuation (a blank before `\` ends a word)
    if let Some(core) = l.strip_suffix('\\')
        && core.bytes().last().is_some_and(token_byte)
    {
        return r
            .bytes()
            .next()
            .is_some_and(token_byte)
            .then_some((core.len(), r_at));
    }
    // `"abc" +`, `"abc" \`, `'abc' .`, `"abc"` then `+ "def"` or `"def"`
    let glue = l.trim_end_matches(['+', '.', '\\', ' ', '\t', '&']);
    if let Some(q) = glue.bytes().last().filter(|q| matches!(q, b'"' | b'\''))
        && glue.len() >= 2
        && token_byte(glue.as_bytes()[glue.len() - 2])
    {
        let body = r.trim_start_matches(['+', '.', '&', ' ', '\t']);
        if body.as_bytes().first() == Some(&q)
            && body.as_bytes().get(1).copied().is_some_and(token_byte)
        {
            return Some((glue.len() - 1, right.len() - body.len() + 1));
        }
        return None;
    }
    // a hard wrap: the line ends inside a long token (digits or mixed case in it), and the
    // next one goes on with token characters
    let word_at = l
        .rfind(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '=' | ':'))
        .map_or(0, |i| i + 1);
    let word = &l[word_at..];
    let random_tail = word.len() >= 6
        && word
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"()[]{}<>,;".contains(&b))
        && word.bytes().last().is_some_and(token_byte)
        && random_looking(word);
    // the next line goes on with a random fragment, not with a word or a name of its own
    // (`Implement …`, `B=…`, `key: …`)
    let next_len = r
        .bytes()
        .take_while(|&b| token_byte(b) && b != b'=')
        .count();
    let fragment = !matches!(r.as_bytes().get(next_len), Some(b'=' | b':' | b'('))
        || r[next_len..].starts_with("==");
    // a listing of hashes (one line's hash, the next line's short one) is no cut token
    let hex = |t: &str| t.bytes().all(|b| b.is_ascii_hexdigit());
    let next = &r[..next_len];
    (random_tail
        && fragment
        && next_len >= 4
        && random_looking(next)
        && !(hex(&word[word.rfind(['/', '.', '-']).map_or(0, |i| i + 1)..]) && hex(next))
        && l.len() == left.len())
    .then_some((l.len(), r_at))
}

/// A fragment of a token rather than a word: it has digits and letters, or a capital after a
/// small letter (`ab12`, `xKq`, not `Implement`, `release`).
fn random_looking(fragment: &str) -> bool {
    let b = fragment.as_bytes();
    let letters = b.iter().any(u8::is_ascii_alphabetic);
    let digits = b.iter().any(u8::is_ascii_digit);
    let camel = b
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    letters && digits || camel
}

/// Pairs of lines of `text` joined where a token may be cut between them (see [`continued`]),
/// each the first line's text and the second's, within [`MAX_LINES`], [`MAX_LINE`] and
/// [`MAX_READ`]. A finding in a joined line counts only when its value crosses the join.
pub(super) fn joined_lines(text: &str) -> Option<Reading> {
    if !text.contains('\n') {
        return None;
    }
    let mut reading = Reading::new();
    let (mut count, mut read) = (0, 0);
    let mut lines = lines_of(text).peekable();
    while let Some((start, line)) = lines.next() {
        let Some(&(next_start, next)) = lines.peek() else {
            break;
        };
        if line.len() > MAX_LINE || next.len() > MAX_LINE {
            continue;
        }
        let Some((keep, from)) = continued(line, next) else {
            continue;
        };
        count += 1;
        read += line.len() + next.len();
        if count > MAX_LINES || read > MAX_READ {
            break;
        }
        reading.text.push_str(&line[..keep]);
        reading.map.extend(start..start + keep);
        reading.joins.push(reading.text.len());
        reading.text.push_str(&next[from..]);
        reading
            .map
            .extend(next_start + from..next_start + next.len());
        reading.end_line(next_start + next.len());
    }
    reading.finish(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_escapes_are_decoded_with_a_map_back() {
        let text = "a\nGET /x?t=ab%5Fcd%252Fef 200\n";
        let r = percent_decoded(text).expect("a line with escapes");
        assert_eq!(r.text, "GET /x?t=ab_cd/ef 200\n");
        // `_` came from the `%` of `%5F`, `/` from the `%` of `%252F`
        let underscore = r.text.find('_').expect("decoded");
        assert_eq!(&text[r.map[underscore]..r.map[underscore] + 3], "%5F");
        let slash = r.text.find("/ef").expect("decoded twice");
        assert_eq!(&text[r.map[slash]..r.map[slash] + 5], "%252F");
        assert_eq!(r.map.len(), r.text.len() + 1);
        assert!(percent_decoded("100% sure, 50 %").is_none());
    }

    #[test]
    fn lines_are_joined_only_where_a_token_may_be_cut() {
        let joined = |t: &str| joined_lines(t).map(|r| r.text);
        assert_eq!(
            joined("export K=ab12cd\\\nef34gh\n").as_deref(),
            Some("export K=ab12cdef34gh\n")
        );
        assert_eq!(
            joined("k = (\"ab12cd\"\n    \"ef34gh\")").as_deref(),
            Some("k = (\"ab12cdef34gh\")\n")
        );
        assert_eq!(
            joined("k = \"ab12cd\" +\n  \"ef34gh\";").as_deref(),
            Some("k = \"ab12cdef34gh\";\n")
        );
        assert_eq!(
            joined("token: ab12Cd9x\nef34gh").as_deref(),
            Some("token: ab12Cd9xef34gh\n")
        );
        // a command's continuation, and prose, join nothing
        assert_eq!(joined("docker run \\\n  --rm img"), None);
        assert_eq!(joined("the quick brown\nfox jumps"), None);
        let r = joined_lines("x ab12cd\\\nef34gh").expect("joined");
        assert_eq!(r.joins, [8]);
        assert_eq!(r.map[8], 10, "the join maps to the second line's start");
    }
}
