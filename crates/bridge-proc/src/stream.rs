//! Bounded output capture and text cutting.
//!
//! [`HeadTail`] keeps the first and the last bytes of a stream up to a cap (half each) and
//! counts what was dropped in between, so a run that floods its output costs bounded memory
//! and the reader still sees how it began and how it ended. [`LineSplitter`] cuts a stream
//! read in chunks into lines without copying the lines that lie whole inside a chunk, and
//! bounds the length of a line. [`cut_text`] applies the character limits of results and
//! replies.

use std::borrow::Cow;
use std::collections::VecDeque;

/// Past this size a bounded buffer that must grow takes its whole share at once: one
/// allocation instead of a chain of doublings, each copying the bytes so far and leaving the
/// old block behind in the allocator.
const GROW_WHOLE: usize = 64 * 1024;

/// The capacity a buffer bounded by `limit` bytes should grow to when it needs `need` bytes:
/// doubling while small, then `limit` at once.
pub fn grown_capacity(capacity: usize, need: usize, limit: usize) -> usize {
    if need > GROW_WHOLE {
        limit.max(need)
    } else {
        (capacity * 2).max(need).min(limit.max(need))
    }
}

/// Keeps at most `cap` bytes of a stream: its head and its tail, with the cut marked.
#[derive(Debug, Clone)]
pub struct HeadTail {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
    total: u64,
}

impl HeadTail {
    /// An empty buffer that keeps at most `cap` bytes (at least 2).
    pub fn new(cap: usize) -> Self {
        HeadTail {
            cap: cap.max(2),
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped: 0,
            total: 0,
        }
    }

    /// Appends bytes. Only the bytes that will be kept are copied; the buffers grow by
    /// doubling but never past their share of the cap.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_cap = self.cap / 2;
        if self.head.len() < head_cap {
            let n = (head_cap - self.head.len()).min(bytes.len());
            let need = self.head.len() + n;
            if need > self.head.capacity() {
                let target = grown_capacity(self.head.capacity(), need, head_cap);
                self.head.reserve_exact(target - self.head.len());
            }
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return;
        }
        let tail_cap = self.cap - head_cap;
        if bytes.len() >= tail_cap {
            self.dropped += (self.tail.len() + bytes.len() - tail_cap) as u64;
            self.tail.clear();
            self.tail.reserve_exact(tail_cap);
            self.tail.extend(&bytes[bytes.len() - tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(tail_cap);
        if overflow > 0 {
            self.tail.drain(..overflow);
            self.dropped += overflow as u64;
        }
        let need = self.tail.len() + bytes.len();
        if need > self.tail.capacity() {
            let target = grown_capacity(self.tail.capacity(), need, tail_cap);
            self.tail.reserve_exact(target - self.tail.len());
        }
        self.tail.extend(bytes);
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Bytes pushed in total.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Bytes dropped from the middle.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped
    }

    /// Bytes currently kept.
    pub fn kept_bytes(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// The kept text, with a marker line where bytes were dropped. Invalid UTF-8 (for example
    /// a character split by the cut) is replaced.
    pub fn to_string_lossy(&self) -> String {
        let marker = (self.dropped > 0).then(|| {
            format!(
                "\n[... {} bytes cut: output over the {} byte capture limit ...]\n",
                self.dropped, self.cap
            )
        });
        let mut out = String::with_capacity(
            self.head.len() + marker.as_ref().map_or(0, String::len) + self.tail.len(),
        );
        out.push_str(&String::from_utf8_lossy(&self.head));
        if let Some(m) = &marker {
            out.push_str(m);
        }
        let (a, b) = self.tail.as_slices();
        match (std::str::from_utf8(a), std::str::from_utf8(b)) {
            (Ok(a), Ok(b)) => {
                out.push_str(a);
                out.push_str(b);
            }
            _ => out.push_str(&self.tail_lossy()),
        }
        out
    }

    /// The tail decoded lossily as one piece, copied only when the ring buffer's two halves
    /// split a character or hold invalid UTF-8.
    fn tail_lossy(&self) -> Cow<'_, str> {
        let (a, b) = self.tail.as_slices();
        if b.is_empty() {
            return String::from_utf8_lossy(a);
        }
        if let (Ok(a), Ok(b)) = (std::str::from_utf8(a), std::str::from_utf8(b)) {
            let mut s = String::with_capacity(a.len() + b.len());
            s.push_str(a);
            s.push_str(b);
            return Cow::Owned(s);
        }
        let mut joined = Vec::with_capacity(a.len() + b.len());
        joined.extend_from_slice(a);
        joined.extend_from_slice(b);
        Cow::Owned(String::from_utf8_lossy(&joined).into_owned())
    }

    /// The last `n` bytes kept, lossily decoded (for error messages); starts on the first
    /// character boundary at or after the cut.
    pub fn tail_string(&self, n: usize) -> String {
        // The text ends with the tail: when the tail alone is long enough, decode just that.
        let tail = self.tail_lossy();
        if tail.len() >= n {
            return last_bytes(&tail, n).to_owned();
        }
        let s = self.to_string_lossy();
        last_bytes(&s, n).to_owned()
    }
}

/// The last `n` bytes of `s`, moved forward to a character boundary.
fn last_bytes(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// One piece of a stream cut by [`LineSplitter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A whole line, without its `\n` (a `\r` before it is kept).
    Line(&'a [u8]),
    /// A line longer than the limit: it is skipped up to its `\n` and reported once.
    TooLong,
}

/// A partial line buffer larger than this is freed once its line is complete, so one long
/// line does not pin its memory for the rest of the run.
const PENDING_KEEP: usize = 1 << 20;

/// Cuts a byte stream, fed in chunks of any size, into `\n`-terminated lines.
///
/// A line that lies whole inside a chunk is handed out as a slice of that chunk; only a line
/// split across chunks is gathered in an internal buffer. A line longer than `max_line` bytes
/// (not counting its `\n`) is reported as [`Piece::TooLong`] once, as soon as it is known to
/// be too long, and its remaining bytes are skipped, so the buffer never holds more than
/// `max_line` bytes. The pieces do not depend on where the chunks are cut.
#[derive(Debug)]
pub struct LineSplitter {
    pending: Vec<u8>,
    max_line: usize,
    skipping: bool,
}

impl LineSplitter {
    /// A splitter that accepts lines of at most `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        LineSplitter {
            pending: Vec::new(),
            max_line,
            skipping: false,
        }
    }

    /// Feeds the next chunk of the stream; `out` gets every line it completes, in order.
    pub fn feed(&mut self, chunk: &[u8], mut out: impl FnMut(Piece<'_>)) {
        let rest = self.feed_first(chunk, &mut out);
        self.feed_rest(rest, out);
    }

    /// The first half of [`feed`](Self::feed): completes the line that earlier chunks began,
    /// if `chunk` ends it, handing it (or [`Piece::TooLong`]) to `out`; returns the rest of
    /// `chunk`, for [`feed_rest`](Self::feed_rest). The line handed out is the only one
    /// gathered in the internal buffer, so it borrows from the splitter; the lines of the rest
    /// borrow from the chunk alone and can outlive the next call.
    pub fn feed_first<'c>(&mut self, chunk: &'c [u8], out: impl FnOnce(Piece<'_>)) -> &'c [u8] {
        if self.pending.is_empty() && !self.skipping {
            return chunk;
        }
        let Some(pos) = memchr::memchr(b'\n', chunk) else {
            if self.keep_partial(chunk) {
                out(Piece::TooLong);
            }
            return &[];
        };
        let part = &chunk[..pos];
        if self.skipping {
            self.skipping = false;
        } else if self.pending.len() + part.len() > self.max_line {
            out(Piece::TooLong);
            self.clear_pending();
        } else {
            self.pending.extend_from_slice(part);
            out(Piece::Line(&self.pending));
            self.clear_pending();
        }
        &chunk[pos + 1..]
    }

    /// The second half of [`feed`](Self::feed), on what [`feed_first`](Self::feed_first)
    /// returned: every line that lies whole in `chunk` goes to `out` as a slice of it; an
    /// unfinished end is kept for the next chunk.
    pub fn feed_rest<'a>(&mut self, mut chunk: &'a [u8], mut out: impl FnMut(Piece<'a>)) {
        debug_assert!(chunk.is_empty() || (self.pending.is_empty() && !self.skipping));
        while let Some(pos) = memchr::memchr(b'\n', chunk) {
            let part = &chunk[..pos];
            chunk = &chunk[pos + 1..];
            out(if part.len() > self.max_line {
                Piece::TooLong
            } else {
                Piece::Line(part)
            });
        }
        if self.keep_partial(chunk) {
            out(Piece::TooLong);
        }
    }

    /// Keeps `chunk`, a line's beginning (or more of it) without its `\n`, for the next chunk.
    /// True when the line just grew too long: the caller reports it (once), and the rest of it
    /// is skipped.
    fn keep_partial(&mut self, chunk: &[u8]) -> bool {
        if self.skipping || chunk.is_empty() {
            return false;
        }
        if self.pending.len() + chunk.len() > self.max_line {
            self.clear_pending();
            self.skipping = true;
            true
        } else {
            self.pending.extend_from_slice(chunk);
            false
        }
    }

    /// Ends the stream: a last line without `\n` goes to `out` (unless it was too long).
    pub fn finish(&mut self, mut out: impl FnMut(Piece<'_>)) {
        if !self.skipping && !self.pending.is_empty() {
            out(Piece::Line(&self.pending));
        }
        self.clear_pending();
        self.skipping = false;
    }

    /// Bytes of an unfinished line held (for tests and accounting).
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    fn clear_pending(&mut self) {
        if self.pending.capacity() > PENDING_KEEP {
            self.pending = Vec::new();
        } else {
            self.pending.clear();
        }
    }
}

/// Result of cutting a text to a character budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The text after cutting, with a marker where something was removed.
    pub text: String,
    /// Characters in the original text.
    pub total_chars: usize,
    /// True when something was removed.
    pub truncated: bool,
}

/// Default number of characters a result shows when neither head nor tail is asked for.
pub const RESULT_CHARS: usize = 60_000;
/// Hard cap on any reply.
pub const REPLY_CHARS: usize = 100_000;

fn first_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn last_chars(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().rev().nth(n - 1) {
        Some((i, _)) => &s[i..],
        None => s,
    }
}

/// Cuts `text` for a result: `head` keeps the first characters, `tail` the last ones, both
/// keep both ends; with neither, texts over [`RESULT_CHARS`] keep their last
/// [`RESULT_CHARS`] characters. The outcome never exceeds [`REPLY_CHARS`] characters plus the
/// marker line.
pub fn cut_text(text: &str, head: Option<usize>, tail: Option<usize>) -> Cut {
    let total = text.chars().count();
    let (h, t) = match (head, tail) {
        (None, None) => (0, RESULT_CHARS),
        (Some(h), None) => (h, 0),
        (None, Some(t)) => (0, t),
        (Some(h), Some(t)) => (h, t),
    };
    let h = h.min(REPLY_CHARS);
    let t = t.min(REPLY_CHARS - h);
    if h + t >= total {
        return Cut {
            text: text.to_owned(),
            total_chars: total,
            truncated: false,
        };
    }
    let removed = total - h - t;
    let marker = format!("[... {removed} of {total} characters cut ...]");
    let mut out = String::new();
    let head_part = first_chars(text, h);
    let tail_part = last_chars(text, t);
    out.push_str(head_part);
    if !head_part.is_empty() {
        out.push('\n');
    }
    out.push_str(&marker);
    if !tail_part.is_empty() {
        out.push('\n');
    }
    out.push_str(tail_part);
    Cut {
        text: out,
        total_chars: total,
        truncated: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_streams_are_kept_whole() {
        let mut b = HeadTail::new(100);
        b.push(b"hello ");
        b.push(b"world");
        assert_eq!(b.to_string_lossy(), "hello world");
        assert_eq!(b.dropped_bytes(), 0);
    }

    #[test]
    fn large_streams_keep_head_and_tail_and_mark_the_cut() {
        let mut b = HeadTail::new(10);
        for i in 0..100u8 {
            b.push(&[b'a' + (i % 26)]);
        }
        assert_eq!(b.kept_bytes(), 10);
        assert_eq!(b.dropped_bytes(), 90);
        assert_eq!(b.total_bytes(), 100);
        let s = b.to_string_lossy();
        assert!(s.starts_with("abcde"), "{s}");
        assert!(s.contains("90 bytes cut"), "{s}");
        // bytes 95..100 are 'r'..'v' (i % 26 for 95 is 17 = 'r')
        assert!(s.ends_with("rstuv"), "{s}");
    }

    #[test]
    fn one_huge_push_is_bounded() {
        let mut b = HeadTail::new(1000);
        b.push(&vec![b'x'; 5_000_000]);
        b.push(b"END");
        assert_eq!(b.kept_bytes(), 1000);
        assert!(b.to_string_lossy().ends_with("xEND"));
    }

    #[test]
    fn results_are_cut_to_the_last_60000_characters_by_default() {
        let text: String = "é".repeat(70_000);
        let c = cut_text(&text, None, None);
        assert!(c.truncated);
        assert_eq!(c.total_chars, 70_000);
        assert!(
            c.text
                .starts_with("[... 10000 of 70000 characters cut ...]\n")
        );
        assert_eq!(c.text.chars().filter(|&ch| ch == 'é').count(), 60_000);
    }

    #[test]
    fn head_and_tail_keep_the_asked_ends() {
        let text = "0123456789";
        assert_eq!(
            cut_text(text, Some(3), None).text,
            "012\n[... 7 of 10 characters cut ...]"
        );
        assert_eq!(
            cut_text(text, None, Some(2)).text,
            "[... 8 of 10 characters cut ...]\n89"
        );
        assert_eq!(
            cut_text(text, Some(2), Some(2)).text,
            "01\n[... 6 of 10 characters cut ...]\n89"
        );
        assert!(!cut_text(text, Some(5), Some(5)).truncated);
        assert!(!cut_text("short", None, None).truncated);
    }

    #[test]
    fn replies_never_exceed_the_hard_cap() {
        let text = "y".repeat(300_000);
        let c = cut_text(&text, Some(90_000), Some(90_000));
        let ys = c.text.chars().filter(|&ch| ch == 'y').count();
        assert_eq!(ys, REPLY_CHARS);
        let c = cut_text(&text, Some(500_000), None);
        assert_eq!(c.text.chars().filter(|&ch| ch == 'y').count(), REPLY_CHARS);
    }

    #[derive(Debug, PartialEq)]
    enum Got {
        Line(String),
        TooLong,
    }

    /// Feeds `stream` in chunks of `size` bytes and collects what comes out.
    fn split(stream: &[u8], size: usize, max_line: usize) -> Vec<Got> {
        let mut out = Vec::new();
        let mut push = |p: Piece<'_>| {
            out.push(match p {
                Piece::Line(l) => Got::Line(String::from_utf8_lossy(l).into_owned()),
                Piece::TooLong => Got::TooLong,
            })
        };
        let mut sp = LineSplitter::new(max_line);
        for chunk in stream.chunks(size) {
            sp.feed(chunk, &mut push);
        }
        sp.finish(&mut push);
        assert_eq!(sp.pending_bytes(), 0);
        out
    }

    fn line(s: &str) -> Got {
        Got::Line(s.to_owned())
    }

    #[test]
    fn lines_split_across_reads_come_out_whole_wherever_the_cut() {
        let stream = b"a\nbb\r\n\nccc\nlast without newline";
        let want = vec![
            line("a"),
            line("bb\r"),
            line(""),
            line("ccc"),
            line("last without newline"),
        ];
        for size in 1..=stream.len() {
            assert_eq!(split(stream, size, 100), want, "chunks of {size}");
        }
    }

    #[test]
    fn a_line_over_the_limit_is_reported_once_and_skipped() {
        let stream = b"12345\n123456\nok\n1234567890123\nafter\ntoo long at the end";
        let want = vec![
            line("12345"),
            Got::TooLong,
            line("ok"),
            Got::TooLong,
            line("after"),
            Got::TooLong,
        ];
        for size in 1..=stream.len() {
            assert_eq!(split(stream, size, 5), want, "chunks of {size}");
        }
    }

    #[test]
    fn whole_lines_inside_a_chunk_are_handed_out_without_a_copy() {
        let chunk = b"first\nsecond\npart";
        let range = chunk.as_ptr_range();
        let mut sp = LineSplitter::new(100);
        let mut seen = 0;
        sp.feed(chunk, |p| {
            let Piece::Line(l) = p else {
                panic!("unexpected {p:?}")
            };
            assert!(range.contains(&l.as_ptr()), "line was copied");
            seen += 1;
        });
        assert_eq!(seen, 2);
        assert_eq!(sp.pending_bytes(), 4);
        let mut rest = Vec::new();
        sp.feed(b"ial\n", |p| rest.push(format!("{p:?}")));
        assert_eq!(rest, vec![format!("{:?}", Piece::Line(b"partial"))]);
    }

    #[test]
    fn buffers_never_grow_past_their_share_of_the_cap() {
        let mut b = HeadTail::new(3000);
        for _ in 0..20 {
            b.push(&[b'z'; 700]);
            assert!(b.head.capacity() <= 1500, "head {}", b.head.capacity());
            assert!(b.tail.capacity() <= 1500, "tail {}", b.tail.capacity());
        }
        assert_eq!(b.kept_bytes(), 3000);
        assert_eq!(b.dropped_bytes(), 20 * 700 - 3000);
    }

    /// The text as the straightforward decoding gives it: head, marker, tail joined then decoded.
    fn reference_text(b: &HeadTail) -> String {
        let mut out = String::from_utf8_lossy(&b.head).into_owned();
        if b.dropped > 0 {
            out.push_str(&format!(
                "\n[... {} bytes cut: output over the {} byte capture limit ...]\n",
                b.dropped, b.cap
            ));
        }
        let tail: Vec<u8> = b.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }

    #[test]
    fn text_and_tail_match_the_plain_decoding_when_the_ring_wraps_a_character() {
        // 'é' is two bytes; pushes of odd lengths make the ring's seam fall inside one, and
        // invalid bytes must still come out as U+FFFD.
        let mut b = HeadTail::new(40);
        let mut pieces: Vec<Vec<u8>> = Vec::new();
        for i in 0..60 {
            let mut p = "é".repeat(i % 4).into_bytes();
            p.push(b'a' + (i % 26) as u8);
            if i % 7 == 0 {
                p.push(0xff);
            }
            pieces.push(p);
        }
        for p in &pieces {
            b.push(p);
            let want = reference_text(&b);
            assert_eq!(b.to_string_lossy(), want);
            for n in [0, 1, 2, 3, 5, 19, 20, 21, 30, 200] {
                let mut start = want.len().saturating_sub(n);
                while !want.is_char_boundary(start) {
                    start += 1;
                }
                assert_eq!(b.tail_string(n), want[start..], "n = {n}");
            }
        }
        assert!(b.dropped_bytes() > 0);
    }
}
