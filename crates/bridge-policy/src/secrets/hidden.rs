//! Secrets hidden from the patterns: invisible characters inside a token (`ghp_4Fq9` U+200B
//! `ZtL2…`: the text shows the token, the patterns see two halves), and base64 of a text that
//! holds one (`echo Z2hwXzRGcTl… | base64 -d`). The guard reads the prompt with the invisible
//! characters taken out, and the text each bounded base64 run decodes to, with the same rules.

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
    if !text
        .bytes()
        .any(|b| matches!(b, 0xC2 | 0xCD | 0xE1 | 0xE2 | 0xEF))
        || !text.chars().any(invisible)
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
