//! The usage ledger: one row per attempt of every finished task, kept with the registry in
//! `<state dir>/usage/ledger-v1.jsonl` so that it outlives the bridge and the registry's
//! pruning (a pruned task's spend still counts against the month's budget).
//!
//! Each row is one JSON line written with one `write` on a file opened for appending, so
//! bridges sharing the state directory never interleave rows and a reader sees whole lines
//! (a torn last line, after a crash mid-write, is skipped and counted). Every row carries its
//! format version (`v`); rows of a newer version are read as far as their known fields go.
//!
//! [`summarize`] folds the rows of a window into totals and rows by day, agent, model, lane,
//! engine and runner: what `opencode_usage` and `opencode-bridge usage` show.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{CostBasis, Price, TokenUsage, Usage};

/// The format version of the rows this bridge writes.
pub const LEDGER_VERSION: u32 = 1;

/// The ledger file under the state directory.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("usage").join("ledger-v1.jsonl")
}

fn version_1() -> u32 {
    1
}

/// One attempt of one finished task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// [`LEDGER_VERSION`].
    #[serde(default = "version_1")]
    pub v: u32,
    /// When the task finished (epoch ms): the moment its spend counts at.
    pub at_ms: u64,
    /// Task id.
    pub task: u64,
    /// Attempt number (1, 2, ...).
    pub attempt: u32,
    /// Agent.
    pub agent: String,
    /// Model as the task gave it (`None`: the agent's default).
    pub model: Option<String>,
    /// `opencode` or `claude`.
    pub runner: String,
    /// The engine that ran it, as the task's record names it (`None`: the record has no
    /// engine field, i.e. `opencode run` or `claude -p`; see [`Row::engine_name`]).
    #[serde(default)]
    pub engine: Option<String>,
    /// The LANE of the session title (`LANE/agent: task`).
    pub lane: String,
    /// The task's working directory (budgets per project).
    pub project: PathBuf,
    /// What it used.
    pub usage: Usage,
}

impl Row {
    /// The engine column: the record's engine, else the runner (`opencode` = `opencode run`,
    /// `claude` = `claude -p`).
    pub fn engine_name(&self) -> &str {
        self.engine.as_deref().unwrap_or(&self.runner)
    }

    /// The UTC day of [`Row::at_ms`], `YYYY-MM-DD`.
    pub fn day(&self) -> String {
        crate::utc::day(self.at_ms)
    }
}

/// The lane of a session title `LANE/agent: task` (`-` when it has none).
pub fn lane_of(title: &str) -> String {
    match title.split_once('/') {
        Some((lane, rest)) if !lane.is_empty() && !lane.contains(' ') && rest.contains(':') => {
            lane.to_owned()
        }
        _ => "-".to_owned(),
    }
}

/// Appends `rows` to the ledger under `state_dir` (one `write` per row).
pub fn append(state_dir: &Path, rows: &[Row]) -> std::io::Result<()> {
    let p = path(state_dir);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p)?;
    for r in rows {
        let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
        line.push(b'\n');
        f.write_all(&line)?;
    }
    Ok(())
}

/// The rows of the ledger, oldest first, and how many lines could not be read.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// The rows.
    pub rows: Vec<Row>,
    /// Lines that were not rows (a torn last line, a hand edit).
    pub unreadable: usize,
}

/// Reads the ledger under `state_dir` (a missing file is an empty ledger).
pub fn read(state_dir: &Path) -> std::io::Result<Ledger> {
    let text = match std::fs::read(path(state_dir)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ledger::default()),
        Err(e) => return Err(e),
    };
    Ok(parse(&text))
}

/// Parses ledger text.
pub fn parse(text: &[u8]) -> Ledger {
    let mut l = Ledger::default();
    for line in text.split(|b| *b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Row>(line) {
            Ok(r) => l.rows.push(r),
            Err(_) => l.unreadable += 1,
        }
    }
    l
}

/// Totals of a set of rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Distinct tasks.
    pub tasks: usize,
    /// Attempts (rows).
    pub attempts: usize,
    /// Tokens.
    pub tokens: TokenUsage,
    /// Cost (reported and estimated), USD.
    pub cost_usd: f64,
    /// Of which estimated from prices.
    pub estimated_usd: f64,
    /// The same tokens at the compare model's price, USD.
    pub claude_equivalent_usd: f64,
    /// Claude-equivalent minus cost, USD (an estimate: tokenizers differ).
    pub saved_usd: f64,
    /// Attempts of unknown cost (no price for their model): counted at their
    /// Claude-equivalent against budgets.
    pub unknown_cost_attempts: usize,
    /// Attempts of free models.
    pub free_attempts: usize,
}

impl Totals {
    /// Adds row `r`; its Claude-equivalent is its tokens at `compare`, the compare model's
    /// price now (not what the row was written with). A row of unknown cost adds to the
    /// Claude-equivalent but not to what was saved: it is not counted as free.
    fn add(&mut self, r: &RowRef<'_>, new_task: bool, compare: Option<&Price>) {
        self.tasks += usize::from(new_task);
        self.attempts += 1;
        let (a, b) = (&mut self.tokens, &r.usage.tokens);
        a.input += b.input;
        a.output += b.output;
        a.reasoning += b.reasoning;
        a.cache_read += b.cache_read;
        a.cache_write += b.cache_write;
        self.cost_usd += r.usage.cost;
        let eq = compare.map_or(0.0, |p| p.cost(&r.usage.tokens));
        self.claude_equivalent_usd += eq;
        if compare.is_some() && r.usage.basis != CostBasis::Unknown {
            self.saved_usd += eq - r.usage.cost;
        }
        match r.usage.basis {
            CostBasis::Estimated => self.estimated_usd += r.usage.cost,
            CostBasis::Unknown => self.unknown_cost_attempts += 1,
            CostBasis::Free => self.free_attempts += 1,
            CostBasis::Reported => {}
        }
    }
}

/// One group's totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// The day, agent, model, lane or engine.
    pub key: String,
    /// Its totals.
    #[serde(flatten)]
    pub totals: Totals,
}

/// The rows of a window, summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// The window's start (epoch ms; `None`: all of the ledger).
    pub since_ms: Option<u64>,
    /// Everything.
    pub totals: Totals,
    /// By UTC day, oldest first.
    pub by_day: Vec<Group>,
    /// By agent, costliest first.
    pub by_agent: Vec<Group>,
    /// By model (`default` for the agent's own), costliest first.
    pub by_model: Vec<Group>,
    /// By lane, costliest first.
    pub by_lane: Vec<Group>,
    /// By engine, costliest first.
    pub by_engine: Vec<Group>,
    /// By week (keyed by its Monday, `YYYY-MM-DD`), oldest first.
    pub by_week: Vec<Group>,
    /// By UTC month (`YYYY-MM`), oldest first.
    pub by_month: Vec<Group>,
    /// By project (the task's working directory), costliest first.
    pub by_project: Vec<Group>,
    /// The window's end (epoch ms, exclusive; `None`: now).
    pub until_ms: Option<u64>,
    /// Ledger lines that could not be read.
    pub unreadable_lines: usize,
    /// The compare model had a price when this was summed: without one, Claude-equivalents
    /// and savings are unknown (shown so, never as $0).
    pub compare_priced: bool,
}

/// One row as [`summarize_rows`] and the budgets read it: borrowed from a [`Row`] or from the
/// ledger's text.
#[derive(Debug, Clone, Copy)]
pub struct RowRef<'a> {
    /// [`Row::at_ms`].
    pub at_ms: u64,
    /// [`Row::task`].
    pub task: u64,
    /// [`Row::agent`].
    pub agent: &'a str,
    /// [`Row::model`].
    pub model: Option<&'a str>,
    /// [`Row::engine_name`].
    pub engine: &'a str,
    /// [`Row::lane`].
    pub lane: &'a str,
    /// [`Row::project`].
    pub project: &'a Path,
    /// [`Row::usage`].
    pub usage: &'a Usage,
}

impl Row {
    /// This row as a [`RowRef`].
    pub fn view(&self) -> RowRef<'_> {
        RowRef {
            at_ms: self.at_ms,
            task: self.task,
            agent: &self.agent,
            model: self.model.as_deref(),
            engine: self.engine_name(),
            lane: &self.lane,
            project: &self.project,
            usage: &self.usage,
        }
    }
}

/// A row read from the ledger's text without copying its strings (those without escapes).
#[derive(Debug, Deserialize)]
pub struct TextRow<'a> {
    at_ms: u64,
    task: u64,
    #[serde(borrow)]
    agent: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    model: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    runner: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    engine: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    lane: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    project: std::borrow::Cow<'a, str>,
    usage: Usage,
}

impl TextRow<'_> {
    /// This row as a [`RowRef`].
    pub fn view(&self) -> RowRef<'_> {
        RowRef {
            at_ms: self.at_ms,
            task: self.task,
            agent: &self.agent,
            model: self.model.as_deref(),
            engine: self.engine.as_deref().unwrap_or(&self.runner),
            lane: &self.lane,
            project: Path::new(self.project.as_ref()),
            usage: &self.usage,
        }
    }
}

/// The ledger's text, as read by [`read_text`].
pub type Text = Vec<u8>;

/// The ledger file's bytes (empty when there is none): what [`parse_text`] borrows from.
pub fn read_text(state_dir: &Path) -> std::io::Result<Text> {
    match std::fs::read(path(state_dir)) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// How far before the time asked for [`read_text_since`] goes on reading: bridges sharing a
/// ledger append their rows as their tasks finish, so the file is in time order but for rows
/// that two bridges wrote at nearly the same moment.
pub const ORDER_SLACK_MS: u64 = 3_600_000;

/// The end of the ledger file that holds every row at or after `since_ms` (empty when there is
/// no ledger), for [`parse_text`]: read backwards in 64 kB blocks until a row older than
/// `since_ms` less [`ORDER_SLACK_MS`], so that what a day's or a month's budget needs costs
/// that window's rows, not a year's. Lines that are not rows are passed over; the text may
/// start with older rows (those of the last block), which callers filter by time anyway.
pub fn read_text_since(state_dir: &Path, since_ms: u64) -> std::io::Result<Text> {
    use std::io::{Read, Seek, SeekFrom};
    const BLOCK: u64 = 64 * 1024;
    let mut f = match std::fs::File::open(path(state_dir)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let cutoff = since_ms.saturating_sub(ORDER_SLACK_MS);
    let mut start = f.seek(SeekFrom::End(0))?;
    // The file's bytes from `start` to its end; the first `unjudged` of them (which may begin
    // in the middle of a line) have not been looked at yet, the lines after them are recent.
    let mut tail: Text = Vec::new();
    let mut unjudged = 0;
    loop {
        let from = start.saturating_sub(BLOCK);
        let mut block = vec![0u8; usize::try_from(start - from).unwrap_or(0)];
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut block)?;
        unjudged += block.len();
        block.extend_from_slice(&tail);
        tail = block;
        start = from;
        // The lines in tail[..unjudged], last first: `end` is where the current one ends.
        let mut end = unjudged;
        loop {
            let line_start = match tail[..end].iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None if start == 0 => 0,
                // Cut by the block's start: judged with the block before it.
                None => break,
            };
            if at_ms_of(&tail[line_start..end]).is_some_and(|at| at < cutoff) {
                tail.drain(..end);
                return Ok(tail);
            }
            if line_start == 0 {
                return Ok(tail);
            }
            end = line_start - 1;
        }
        unjudged = end;
    }
}

/// The time of a ledger line (`None`: not a row).
fn at_ms_of(line: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct At {
        at_ms: u64,
    }
    serde_json::from_slice::<At>(line).ok().map(|a| a.at_ms)
}

/// The rows of ledger text, borrowing its strings, and how many lines could not be read: the
/// fast path of `opencode_usage` (no copy of any string per row).
pub fn parse_text(text: &[u8]) -> (Vec<TextRow<'_>>, usize) {
    let (mut rows, mut bad) = (Vec::new(), 0);
    for line in text.split(|b| *b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<TextRow<'_>>(line) {
            Ok(r) => rows.push(r),
            Err(_) => bad += 1,
        }
    }
    (rows, bad)
}

/// Sums the rows at or after `since_ms`, their Claude-equivalents at `compare` (the compare
/// model's price now; `None`: it has none).
pub fn summarize(ledger: &Ledger, since_ms: Option<u64>, compare: Option<Price>) -> Summary {
    summarize_rows(
        ledger.rows.iter().map(Row::view),
        ledger.unreadable,
        since_ms,
        compare,
    )
}

/// Sums the rows at or after `since_ms`; `unreadable` is the count of lines that were not rows.
/// Claude-equivalents and savings are computed here, at `compare` (the compare model's price
/// when the report is read), never taken from what a row was written with.
pub fn summarize_rows<'a>(
    rows: impl IntoIterator<Item = RowRef<'a>>,
    unreadable: usize,
    since_ms: Option<u64>,
    compare: Option<Price>,
) -> Summary {
    summarize_window(
        rows,
        unreadable,
        &Window {
            since_ms,
            ..Window::default()
        },
        compare,
    )
}

/// Which rows a report sums.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// From this moment on (epoch ms; `None`: the ledger's start).
    pub since_ms: Option<u64>,
    /// Before this moment (epoch ms; `None`: no end).
    pub until_ms: Option<u64>,
    /// Only the tasks whose working directory is in this one.
    pub project: Option<PathBuf>,
}

/// The Monday of the week of UTC day number `day` (days since 1970-01-01, a Thursday).
fn monday_of(day: u64) -> u64 {
    // Saturating: the first days of 1970 belong to a week that began before it.
    day.saturating_sub((day + 3) % 7)
}

/// [`summarize_rows`] over the rows of `window`.
pub fn summarize_window<'a>(
    rows: impl IntoIterator<Item = RowRef<'a>>,
    unreadable: usize,
    window: &Window,
    compare: Option<Price>,
) -> Summary {
    type Map<'a> = BTreeMap<&'a str, (Totals, u64)>;
    let compare = compare.as_ref();
    let since_ms = window.since_ms;
    let mut s = Summary {
        since_ms,
        until_ms: window.until_ms,
        unreadable_lines: unreadable,
        compare_priced: compare.is_some(),
        ..Summary::default()
    };
    let mut weeks: BTreeMap<u64, (Totals, u64)> = BTreeMap::new();
    let mut months: BTreeMap<String, (Totals, u64)> = BTreeMap::new();
    let mut projects: BTreeMap<&Path, (Totals, u64)> = BTreeMap::new();
    // By day number (the date text is made once per day, not once per row).
    let mut days: BTreeMap<u64, (Totals, u64)> = BTreeMap::new();
    let (mut agents, mut models, mut lanes, mut engines) =
        (Map::new(), Map::new(), Map::new(), Map::new());
    let mut last_task = u64::MAX;
    // A task's attempts are adjacent rows (written together): counting a task once per
    // group needs only the previous task id of that group.
    let add = |e: &mut (Totals, u64), r: &RowRef<'_>| {
        let new_task = e.1 != r.task.wrapping_add(1);
        e.0.add(r, new_task, compare);
        e.1 = r.task.wrapping_add(1);
    };
    for r in rows {
        if since_ms.is_some_and(|t| r.at_ms < t)
            || window.until_ms.is_some_and(|t| r.at_ms >= t)
            || window
                .project
                .as_deref()
                .is_some_and(|p| !r.project.starts_with(p))
        {
            continue;
        }
        s.totals.add(&r, last_task != r.task, compare);
        last_task = r.task;
        add(days.entry(r.at_ms / 86_400_000).or_default(), &r);
        add(agents.entry(r.agent).or_default(), &r);
        add(models.entry(r.model.unwrap_or("default")).or_default(), &r);
        add(lanes.entry(r.lane).or_default(), &r);
        add(engines.entry(r.engine).or_default(), &r);
        let day = r.at_ms / 86_400_000;
        add(weeks.entry(monday_of(day)).or_default(), &r);
        let month = crate::utc::day(r.at_ms)[..7].to_owned();
        add(months.entry(month).or_default(), &r);
        add(projects.entry(r.project).or_default(), &r);
    }
    let costliest = |m: Map<'_>| {
        let mut v: Vec<Group> = m
            .into_iter()
            .map(|(k, (totals, _))| Group {
                key: k.to_owned(),
                totals,
            })
            .collect();
        v.sort_by(|a, b| b.totals.cost_usd.total_cmp(&a.totals.cost_usd));
        v
    };
    s.by_day = days
        .into_iter()
        .map(|(day, (totals, _))| Group {
            key: crate::utc::day(day * 86_400_000),
            totals,
        })
        .collect();
    s.by_agent = costliest(agents);
    s.by_model = costliest(models);
    s.by_lane = costliest(lanes);
    s.by_engine = costliest(engines);
    s.by_week = weeks
        .into_iter()
        .map(|(monday, (totals, _))| Group {
            key: crate::utc::day(monday * 86_400_000),
            totals,
        })
        .collect();
    s.by_month = months
        .into_iter()
        .map(|(key, (totals, _))| Group { key, totals })
        .collect();
    let mut by_project: Vec<Group> = projects
        .into_iter()
        .map(|(p, (totals, _))| Group {
            key: p.display().to_string(),
            totals,
        })
        .collect();
    by_project.sort_by(|a, b| b.totals.cost_usd.total_cmp(&a.totals.cost_usd));
    s.by_project = by_project;
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(task: u64, attempt: u32, at_ms: u64, cost: f64) -> Row {
        Row {
            v: LEDGER_VERSION,
            at_ms,
            task,
            attempt,
            agent: "explore".into(),
            model: Some("fk/cheap".into()),
            runner: "opencode".into(),
            engine: None,
            lane: "API".into(),
            project: "/p".into(),
            usage: Usage {
                tokens: TokenUsage {
                    input: 10,
                    output: 5,
                    ..TokenUsage::default()
                },
                cost,
                basis: CostBasis::Reported,
                claude_equivalent: Some(cost * 10.0),
            },
        }
    }

    #[test]
    fn the_end_read_since_a_time_holds_every_later_row_and_stops_a_block_past_it() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_text_since(dir.path(), 0).unwrap().is_empty());
        // 3,000 rows a minute apart (about 600 kB, ten blocks), then one written late out of
        // order (within the slack) and a line that is not a row.
        let minute = 60_000;
        let rows: Vec<Row> = (0..3000)
            .map(|i| row(i, 1, 10_000_000 + i * minute, 1.0))
            .collect();
        append(dir.path(), &rows).unwrap();
        let late = row(
            9_999,
            1,
            10_000_000 + 2_990 * minute - ORDER_SLACK_MS / 2,
            7.0,
        );
        append(dir.path(), std::slice::from_ref(&late)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(path(dir.path()))
            .unwrap()
            .write_all(b"not a row\n")
            .unwrap();
        let whole = read_text(dir.path()).unwrap();
        for since in [
            0,
            10_000_000 + 2_990 * minute,
            10_000_000 + 1_000 * minute,
            u64::MAX,
        ] {
            let tail = read_text_since(dir.path(), since).unwrap();
            assert!(whole.ends_with(&tail), "{since}: not the file's end");
            let (got, _) = parse_text(&tail);
            let (all, bad) = parse_text(&whole);
            assert_eq!(bad, 1);
            let want: Vec<u64> = all
                .iter()
                .filter(|r| r.at_ms >= since)
                .map(|r| r.task)
                .collect();
            let have: Vec<u64> = got
                .iter()
                .filter(|r| r.at_ms >= since)
                .map(|r| r.task)
                .collect();
            assert_eq!(have, want, "{since}");
            assert!(have.contains(&9_999) || since > late.at_ms);
            // Only a block's worth (64 kB, about 320 rows) older than the slack is read.
            let old = got
                .iter()
                .filter(|r| r.at_ms < since.saturating_sub(ORDER_SLACK_MS))
                .count();
            assert!(old <= 400, "{since}: {old} old rows read");
        }
        assert_eq!(read_text_since(dir.path(), 0).unwrap(), whole);
    }

    #[test]
    fn rows_survive_a_round_trip_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let rows = [row(1, 1, 1_000, 0.5), row(1, 2, 1_000, 0.25)];
        append(dir.path(), &rows).unwrap();
        append(dir.path(), &[row(2, 1, 90_000_000, 1.0)]).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path(dir.path()))
            .unwrap();
        f.write_all(br#"{"v":1,"at_ms":3,"ta"#).unwrap();
        let l = read(dir.path()).unwrap();
        assert_eq!(l.rows.len(), 3);
        assert_eq!(l.rows[0], rows[0]);
        assert_eq!(l.unreadable, 1);
        // Priced now at $1/$2 per million: 10 in + 5 out tokens cost $0.00002 each row.
        let now = Price {
            input: 1.0,
            output: 2.0,
            cache_read: None,
            cache_write: None,
        };
        let s = summarize(&l, None, Some(now));
        assert_eq!((s.totals.tasks, s.totals.attempts), (2, 3));
        assert!((s.totals.cost_usd - 1.75).abs() < 1e-9);
        // Computed at read: the rows were written with 10 times their cost, which is ignored.
        assert!((s.totals.claude_equivalent_usd - 3.0 * 0.00002).abs() < 1e-12);
        assert!((s.totals.saved_usd - (3.0 * 0.00002 - 1.75)).abs() < 1e-9);
        assert!(s.compare_priced);
        assert_eq!(s.by_day.len(), 2);
        assert_eq!(s.by_day[0].key, "1970-01-01");
        assert_eq!(s.by_day[0].totals.tasks, 1);
        assert_eq!(s.by_day[1].key, "1970-01-02");
        assert_eq!(s.by_engine[0].key, "opencode");
        assert_eq!(s.by_agent[0].totals.tasks, 2);
        let since = summarize(&l, Some(2_000), Some(now));
        assert_eq!(since.totals.tasks, 1);
        // A newer row with fields this bridge does not know is still read.
        let newer = br#"{"v":2,"at_ms":5,"task":9,"attempt":1,"agent":"a","model":null,"runner":"opencode","engine":"serve","lane":"-","project":"/","usage":{"tokens":{"input":1,"output":1,"reasoning":0,"cache_read":0,"cache_write":0},"cost":0.1,"basis":"reported","claude_equivalent":null},"later":1}"#;
        let l = parse(newer);
        assert_eq!(l.rows[0].engine_name(), "serve");
    }

    #[test]
    fn unknown_costs_are_never_saved_and_an_unpriced_compare_model_saves_nothing() {
        let mut unknown = row(1, 1, 5, 0.0);
        unknown.usage.basis = CostBasis::Unknown;
        let l = Ledger {
            rows: vec![unknown, row(2, 1, 6, 0.00001)],
            unreadable: 0,
        };
        let p = Price {
            input: 1.0,
            output: 2.0,
            cache_read: None,
            cache_write: None,
        };
        let s = summarize(&l, None, Some(p));
        // Only the known row's saving counts: the unknown one is not 100 % saved.
        assert!((s.totals.saved_usd - (0.00002 - 0.00001)).abs() < 1e-12);
        assert!((s.totals.claude_equivalent_usd - 0.00004).abs() < 1e-12);
        assert_eq!(s.totals.unknown_cost_attempts, 1);
        let s = summarize(&l, None, None);
        assert!(!s.compare_priced);
        assert_eq!(
            (s.totals.claude_equivalent_usd, s.totals.saved_usd),
            (0.0, 0.0)
        );
    }

    #[test]
    fn a_window_has_an_end_a_project_and_weeks_and_months() {
        let day = 86_400_000;
        // 2026-11-29 (a Sunday), 2026-11-30 (Monday), 2026-12-02.
        let sun = crate::utc::to_ms(crate::utc::parse("2026-11-29T10:00:00Z").unwrap());
        let mut other = row(3, 1, sun + 3 * day, 4.0);
        other.project = "/q".into();
        let rows = [row(1, 1, sun, 1.0), row(2, 1, sun + day, 2.0), other];
        let w = Window {
            since_ms: None,
            until_ms: Some(sun + 3 * day),
            project: Some("/p".into()),
        };
        let s = summarize_window(rows.iter().map(Row::view), 0, &w, None);
        assert_eq!(s.totals.tasks, 2);
        let weeks: Vec<&str> = s.by_week.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(weeks, ["2026-11-23", "2026-11-30"]);
        let months: Vec<&str> = s.by_month.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(months, ["2026-11"]);
        let all = summarize_window(rows.iter().map(Row::view), 0, &Window::default(), None);
        assert_eq!(all.by_project[0].key, "/q");
        assert_eq!(all.by_month.len(), 2);
    }

    #[test]
    fn lanes_come_from_titles() {
        assert_eq!(lane_of("API/explore: find the bug"), "API");
        assert_eq!(lane_of("a title of my own"), "-");
        assert_eq!(lane_of("and/or: x y"), "and");
    }
}
