//! Where each rule can match at all: one pass of an Aho-Corasick automaton over the prompt
//! finds the literals the rules' matches must contain, so that a rule whose literals are absent
//! is not run, and a rule whose matches stay on one line runs only on the lines that hold one.
//!
//! The literals are derived from the patterns themselves (`regex-syntax`'s literal extractor:
//! every match starts, or ends, with one of them), or from an anchor pattern given with the
//! rule (a secret word inside the match, e.g. `key` in `signingKey=`). Case-insensitive parts
//! are expanded the way the regex engine folds case, Unicode folds included (`K` KELVIN SIGN
//! for `k`, `ſ` for `s`), so skipping a rule never changes what the guard finds.

use std::collections::HashMap;
use std::ops::Range;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use regex_syntax::hir::literal::{ExtractKind, Extractor};

/// The most literals one rule may bring: beyond that the extractor shortens them.
const LIMIT_TOTAL: usize = 1000;

/// Literals every match of `pattern` must contain: its prefixes, else its suffixes. `None` when
/// there is no such set (a match may start and end with almost anything) or when one of them is
/// a single byte (found everywhere, not worth a lookup).
pub(super) fn required_literals(pattern: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::parse(pattern).ok()?;
    for kind in [ExtractKind::Prefix, ExtractKind::Suffix] {
        let mut extractor = Extractor::new();
        extractor.kind(kind).limit_total(LIMIT_TOTAL);
        let seq = extractor.extract(&hir);
        let Some(literals) = seq.literals() else {
            continue;
        };
        if literals.is_empty() || literals.iter().any(|l| l.as_bytes().len() < 2) {
            continue;
        }
        return Some(literals.iter().map(|l| l.as_bytes().to_vec()).collect());
    }
    None
}

/// The line structure of a prompt: where each line starts.
pub(super) struct Lines {
    starts: Vec<usize>,
    len: usize,
}

impl Lines {
    pub(super) fn new(text: &str) -> Lines {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines {
            starts,
            len: text.len(),
        }
    }

    /// The 0-based line holding byte `offset`.
    pub(super) fn index(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset) - 1
    }

    /// The bytes of line `index`, without its line break.
    pub(super) fn range(&self, index: usize) -> Range<usize> {
        let start = self.starts[index];
        let end = self
            .starts
            .get(index + 1)
            .map_or(self.len, |&next| next - 1);
        start..end
    }

    pub(super) fn count(&self) -> usize {
        self.starts.len()
    }
}

/// Which literals belong to which rule, in one automaton.
pub(super) struct Prefilter {
    automaton: AhoCorasick,
    /// Per automaton pattern, the rules that need it.
    owners: Vec<Vec<usize>>,
    /// Per rule: whether it is gated (has literals) and whether it runs per line.
    gated: Vec<bool>,
    per_line: Vec<bool>,
}

/// For one prompt: which gated rules can match, and on which lines.
pub(super) struct Candidates {
    present: Vec<bool>,
    lines: Vec<Vec<usize>>,
}

impl Prefilter {
    /// `rules[i]` is rule `i`'s literals (`None`: always run) and whether its matches never
    /// span a line break (then it runs only on the lines holding one of its literals).
    pub(super) fn new(rules: &[(Option<Vec<Vec<u8>>>, bool)]) -> Prefilter {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        // a literal's id, looked up by hash: the rules bring thousands of literals (case
        // variants), and a search of the list for each was quadratic at the first scan
        let mut ids: HashMap<&[u8], usize> = HashMap::new();
        let mut owners: Vec<Vec<usize>> = Vec::new();
        let mut gated = Vec::with_capacity(rules.len());
        let mut per_line = Vec::with_capacity(rules.len());
        for (rule, (literals, line)) in rules.iter().enumerate() {
            gated.push(literals.is_some());
            per_line.push(literals.is_some() && *line);
            for lit in literals.iter().flatten() {
                let id = *ids.entry(lit.as_slice()).or_insert_with(|| {
                    patterns.push(lit.clone());
                    owners.push(Vec::new());
                    patterns.len() - 1
                });
                if !owners[id].contains(&rule) {
                    owners[id].push(rule);
                }
            }
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&patterns)
            .expect("secret literals build an automaton");
        Prefilter {
            automaton,
            owners,
            gated,
            per_line,
        }
    }

    pub(super) fn candidates(&self, text: &str, lines: &Lines) -> Candidates {
        let n = self.gated.len();
        let mut present = vec![false; n];
        let mut found: Vec<Vec<usize>> = vec![Vec::new(); n];
        for m in self.automaton.find_overlapping_iter(text) {
            let mut line = None;
            for &rule in &self.owners[m.pattern().as_usize()] {
                present[rule] = true;
                if self.per_line[rule] {
                    let l = *line.get_or_insert_with(|| lines.index(m.start()));
                    let list = &mut found[rule];
                    // overlapping matches come by end position: lines only grow, but a
                    // longer literal may end later yet start on an earlier line
                    if list.last().is_none_or(|&last| last < l) {
                        list.push(l);
                    } else if !list.contains(&l) {
                        list.push(l);
                        list.sort_unstable();
                    }
                }
            }
        }
        Candidates {
            present,
            lines: found,
        }
    }

    /// Whether rule `rule` is to run at all.
    pub(super) fn may_match(&self, c: &Candidates, rule: usize) -> bool {
        !self.gated[rule] || c.present[rule]
    }

    /// The lines rule `rule` runs on, `None` for the whole text.
    pub(super) fn lines<'c>(&self, c: &'c Candidates, rule: usize) -> Option<&'c [usize]> {
        self.per_line[rule].then(|| c.lines[rule].as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_come_from_prefixes_or_suffixes() {
        let lits = required_literals(r"\b(ghp_[A-Za-z0-9]{36})\b").unwrap();
        assert_eq!(lits, [b"ghp_".to_vec()]);
        let lits = required_literals(r"\b([A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk)\b").unwrap();
        assert_eq!(lits, [b"_mmk".to_vec()]);
        assert!(required_literals(r"[a-f0-9]{32}").is_none());
        assert!(required_literals(r"[?&;][a-z]=").is_none()); // single bytes
    }

    #[test]
    fn case_folding_includes_unicode_folds() {
        let lits = required_literals(r"(?i:key)").unwrap();
        assert!(lits.contains(&"\u{212A}ey".as_bytes().to_vec()), "{lits:?}");
        assert!(lits.contains(&b"KeY".to_vec()));
    }

    #[test]
    fn lines_index_and_range() {
        let lines = Lines::new("ab\ncd\n\nef");
        assert_eq!(lines.count(), 4);
        assert_eq!(lines.index(0), 0);
        assert_eq!(lines.index(2), 0);
        assert_eq!(lines.index(3), 1);
        assert_eq!(lines.index(6), 2);
        assert_eq!(lines.range(1), 3..5);
        assert_eq!(lines.range(2), 6..6);
        assert_eq!(lines.range(3), 7..9);
    }
}
