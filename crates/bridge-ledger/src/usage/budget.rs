//! Budgets: at most so many USD per UTC day and per UTC month, for all tasks or for the tasks
//! of one project. Spend is the ledger's rows in the window ([`super::ledger`]) plus what the
//! tasks still running have used so far; a row of unknown cost counts at its Claude-equivalent
//! ([`super::Usage::budget_cost`]). A running task also holds its reservation
//! ([`super::reserve`]): a start is refused when the spend, what running tasks hold beyond
//! their use and what the start itself reserves would pass a budget; at 80 % it is accepted
//! with a warning. A window whose spend reached its budget stops the running tasks it covers.
//! The clock is a parameter (`now_ms`), so windows roll over in tests without waiting.

use std::path::{Path, PathBuf};

use super::ledger::RowRef;

/// The share of a budget at which a start is warned.
pub const WARN_AT: f64 = 0.8;

/// A budget as written (`5`, `5.50`, `$5`): a finite amount of 0 or more USD; the error says
/// what was wrong.
pub fn parse_usd(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let n = t.strip_prefix('$').unwrap_or(t).trim();
    match n.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "the budget {t:?} is not an amount of USD: write a number such as 5 or 2.50"
        )),
    }
}

/// Budgets in USD (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budgets {
    /// Per UTC day.
    pub day_usd: Option<f64>,
    /// Per UTC month.
    pub month_usd: Option<f64>,
}

impl Budgets {
    /// True when neither window has a budget.
    pub fn is_empty(&self) -> bool {
        self.day_usd.is_none() && self.month_usd.is_none()
    }
}

/// The budgets of the tasks whose working directory is in `path`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectBudget {
    /// The project's directory.
    pub path: PathBuf,
    /// Its budgets.
    pub budgets: Budgets,
}

/// A budget window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The UTC day.
    Day,
    /// The UTC month.
    Month,
}

impl Window {
    /// `day` or `month`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Day => "day",
            Window::Month => "month",
        }
    }
}

/// Where one budget stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// The window.
    pub window: Window,
    /// The project it is for (`None`: all tasks).
    pub project: Option<PathBuf>,
    /// Spent in the window, USD: the ledger's rows and what running tasks used so far.
    pub spent: f64,
    /// Reserved by running tasks beyond what they used so far, USD.
    pub reserved: f64,
    /// The budget, USD.
    pub budget: f64,
    /// When the window resets (epoch ms).
    pub resets_ms: u64,
}

impl Standing {
    /// True when the spend reached the budget: no start, and the running tasks it covers stop.
    pub fn exhausted(&self) -> bool {
        self.spent >= self.budget
    }

    /// True when a start reserving `more` USD would pass the budget.
    pub fn would_pass(&self, more: f64) -> bool {
        self.exhausted() || self.spent + self.reserved + more > self.budget
    }

    /// True when the spend and the reservations reached [`WARN_AT`] of the budget.
    pub fn near(&self) -> bool {
        self.spent + self.reserved >= self.budget * WARN_AT
    }

    /// The budget's variable (`OPENCODE_BRIDGE_BUDGET_DAY_USD`, ...), or for a project's
    /// budget the config file's entry.
    pub fn variable(&self) -> &'static str {
        match (self.window, &self.project) {
            (Window::Day, None) => bridge_env::BUDGET_DAY_USD.name,
            (Window::Month, None) => bridge_env::BUDGET_MONTH_USD.name,
            (Window::Day, Some(_)) => "the config file's [[budget.project]] day_usd",
            (Window::Month, Some(_)) => "the config file's [[budget.project]] month_usd",
        }
    }
}

/// A running task as the budgets count it.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// Its working directory.
    pub project: PathBuf,
    /// What it used so far, USD (unknown cost at its Claude-equivalent).
    pub used: f64,
    /// What it reserved at its start, USD (0: nothing).
    pub reserved: f64,
}

/// What a start may do.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Go ahead; these are the budgets that apply (possibly none).
    Allow(Vec<Standing>),
    /// Go ahead, but these budgets are at 80 % or more.
    Warn(Vec<Standing>),
    /// Refused: this budget is spent, or the start's reservation would pass it.
    Refuse(Standing),
}

/// The refusal of a start by a budget: spent, or passed by what the start would reserve.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// `day budget`, `month budget of project /p`.
    pub what: String,
    /// `is spent` or `would be passed`.
    pub how: &'static str,
    /// The budget's variable or config entry.
    pub variable: String,
    /// Spent in the window (the ledger and running tasks' use), USD.
    pub spent: f64,
    /// Held by running tasks beyond their use, USD.
    pub reserved: f64,
    /// The budget, USD.
    pub budget: f64,
    /// What this start would reserve, USD.
    pub reserve: f64,
    /// Where that amount comes from.
    pub reserve_why: String,
    /// When the window resets (UTC, RFC 3339).
    pub resets: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} {}: ${:.2} of ${:.2} used, ${:.2} more held by running tasks, and this start reserves ${:.2} ({}); it resets at {}. Wait until then or until running tasks end, give a smaller max_cost_usd, raise the budget ({}), or continue in Claude Code",
            self.what,
            self.how,
            self.spent,
            self.budget,
            self.reserved,
            self.reserve,
            self.reserve_why,
            self.resets,
            self.variable
        )
    }
}

/// Where every budget that applies to a task in `cwd` stands at `now_ms`: the global ones,
/// then those of the projects `cwd` is in. `running` is what running tasks (with their
/// project) have used so far and reserved.
pub fn standings(
    rows: &[RowRef<'_>],
    global: &Budgets,
    projects: &[ProjectBudget],
    cwd: Option<&Path>,
    running: &[Held],
    now_ms: u64,
) -> Vec<Standing> {
    let [day, month] = crate::utc::day_and_month_bounds(now_ms);
    let mut scopes: Vec<(Option<&Path>, &Budgets)> = vec![(None, global)];
    for p in projects {
        if cwd.is_some_and(|c| c.starts_with(&p.path)) {
            scopes.push((Some(&p.path), &p.budgets));
        }
    }
    let mut out = Vec::new();
    for (project, b) in scopes {
        let inside = |dir: &Path| project.is_none_or(|p| dir.starts_with(p));
        for (window, budget, (start, end)) in [
            (Window::Day, b.day_usd, day),
            (Window::Month, b.month_usd, month),
        ] {
            let Some(budget) = budget else { continue };
            let spent: f64 = rows
                .iter()
                .filter(|r| r.at_ms >= start && r.at_ms < end && inside(r.project))
                .map(|r| r.usage.budget_cost())
                .chain(
                    running
                        .iter()
                        .filter(|h| inside(&h.project))
                        .map(|h| h.used),
                )
                // Not `sum`: the sum of no f64 is -0.0, which would show as `$-0.0000`.
                .fold(0.0, |a, b| a + b);
            let reserved = running
                .iter()
                .filter(|h| inside(&h.project))
                .map(|h| (h.reserved - h.used).max(0.0))
                .fold(0.0, |a, b| a + b);
            out.push(Standing {
                window,
                project: project.map(Path::to_path_buf),
                spent,
                reserved,
                budget,
                resets_ms: end,
            });
        }
    }
    out
}

/// Whether a task that reserves `reserve` USD may start, given where its budgets stand
/// ([`standings`]). A warning counts the reservation in.
pub fn verdict(all: Vec<Standing>, reserve: f64) -> Verdict {
    if let Some(s) = all.iter().find(|s| s.would_pass(reserve)) {
        return Verdict::Refuse(s.clone());
    }
    let near = |s: &Standing| s.spent + s.reserved + reserve >= s.budget * WARN_AT;
    if all.iter().any(near) {
        return Verdict::Warn(all.into_iter().filter(near).collect());
    }
    Verdict::Allow(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::ledger::tests::row;

    fn v(rows: &[crate::usage::ledger::Row]) -> Vec<RowRef<'_>> {
        rows.iter().map(crate::usage::ledger::Row::view).collect()
    }

    const DAY: u64 = 86_400_000;

    fn held(used: f64, reserved: f64) -> Held {
        Held {
            project: "/p".into(),
            used,
            reserved,
        }
    }

    #[test]
    fn a_start_is_refused_when_its_reservation_would_pass_a_budget() {
        let b = Budgets {
            day_usd: Some(1.0),
            month_usd: None,
        };
        let at = |running: &[Held], reserve| {
            verdict(standings(&[], &b, &[], None, running, 5 * DAY), reserve)
        };
        // Nothing spent or held: a start reserving 0.6 fits, with a warning (60 % is not 80 %).
        assert!(matches!(at(&[], 0.6), Verdict::Allow(_)));
        // One task holds 0.6 and used 0.1 of it: a second 0.6 would pass the budget.
        let Verdict::Refuse(s) = at(&[held(0.1, 0.6)], 0.6) else {
            panic!("0.6 held + 0.6 asked passes 1.0")
        };
        assert_eq!((s.spent, s.reserved), (0.1, 0.5));
        assert_eq!(s.variable(), "OPENCODE_BRIDGE_BUDGET_DAY_USD");
        // 0.3 more fits, and is warned (0.9 of 1.0).
        assert!(matches!(at(&[held(0.1, 0.6)], 0.3), Verdict::Warn(_)));
        // A task past its reservation counts at its use.
        let s = &standings(&[], &b, &[], None, &[held(0.8, 0.5)], 5 * DAY)[0];
        assert_eq!((s.spent, s.reserved), (0.8, 0.0));
        // A spent window refuses even a start that reserves nothing.
        assert!(matches!(at(&[held(1.0, 0.0)], 0.0), Verdict::Refuse(_)));
    }

    #[test]
    fn the_day_window_rolls_over_at_utc_midnight_and_the_month_at_the_first() {
        // 2026-01-31 23:00 UTC.
        let jan31 = crate::utc::parse("2026-01-31T23:00:00Z").unwrap();
        let now = crate::utc::to_ms(jan31);
        let rows = [row(1, 1, now - 3_600_000, 3.0), row(2, 1, now, 2.0)];
        let b = Budgets {
            day_usd: Some(5.0),
            month_usd: Some(6.0),
        };
        let Verdict::Refuse(s) = verdict(standings(&v(&rows), &b, &[], None, &[], now), 0.0) else {
            panic!("the day's budget is spent")
        };
        assert_eq!((s.window, s.spent, s.budget), (Window::Day, 5.0, 5.0));
        assert_eq!(crate::utc::day(s.resets_ms), "2026-02-01");
        // An hour later it is February: both windows are new.
        let feb = now + 3_600_000;
        assert!(
            matches!(verdict(standings(&v(&rows), &b, &[], None, &[], feb), 0.0), Verdict::Allow(v) if v.iter().all(|s| s.spent == 0.0))
        );
        // The next day of January: the day is new, the month is not (5 of 6: a warning).
        let jan30 = now - DAY;
        let rows = [row(1, 1, jan30, 5.0)];
        let Verdict::Warn(w) = verdict(standings(&v(&rows), &b, &[], None, &[], now), 0.0) else {
            panic!("5 of 6 is past 80 %")
        };
        assert_eq!(w[0].window, Window::Month);
        assert_eq!(
            crate::utc::day(w[0].resets_ms),
            "2026-02-01",
            "the month resets on the first"
        );
        // Running tasks count too.
        assert!(matches!(
            verdict(standings(&v(&rows), &b, &[], None, &[held(1.0, 0.0)], now), 0.0),
            Verdict::Refuse(s) if s.window == Window::Month
        ));
    }

    #[test]
    fn a_project_budget_counts_only_that_project() {
        let now = 40 * DAY;
        let mut other = row(1, 1, now, 4.0);
        other.project = "/elsewhere".into();
        let rows = [other, row(2, 1, now, 1.0)];
        let p = [ProjectBudget {
            path: "/p".into(),
            budgets: Budgets {
                day_usd: Some(1.0),
                month_usd: None,
            },
        }];
        let none = Budgets::default();
        assert!(matches!(
            verdict(standings(&v(&rows), &none, &p, Some(Path::new("/p/sub")), &[], now), 0.0),
            Verdict::Refuse(s) if s.spent == 1.0 && s.project.as_deref() == Some(Path::new("/p"))
        ));
        assert!(matches!(
            verdict(standings(&v(&rows), &none, &p, Some(Path::new("/elsewhere")), &[], now), 0.0),
            Verdict::Allow(v) if v.is_empty()
        ));
    }

    #[test]
    fn unknown_cost_counts_at_its_claude_equivalent() {
        let mut r = row(1, 1, 0, 0.0);
        r.usage.basis = crate::usage::CostBasis::Unknown;
        r.usage.claude_equivalent = Some(2.0);
        let b = Budgets {
            day_usd: Some(2.0),
            month_usd: None,
        };
        assert!(matches!(
            verdict(standings(&[r.view()], &b, &[], None, &[], 1), 0.0),
            Verdict::Refuse(_)
        ));
    }
}
