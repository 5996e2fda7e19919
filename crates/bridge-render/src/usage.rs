//! What delegation cost and saved: the line that ends a task's result, the budget warning of
//! a start, the budget lines of `opencode_policy` / the instructions / `doctor`, the usage
//! report (`opencode_usage`, `opencode-bridge usage`) with a bar per day, and its HTML page.

use run_supervisor::usage::budget::{Standing, Verdict};
use run_supervisor::usage::ledger::{Group, Summary, Totals};
use run_supervisor::usage::{CostBasis, Usage};

use crate::human::count;

/// An amount of USD (it lives with the other human formats).
pub use crate::human::usd;

/// Where prices come from and what the compare model costs (`opencode_policy`, the
/// instructions, `doctor`, `opencode_usage`): one line.
pub fn prices_line(pricing: &run_supervisor::usage::Pricing) -> String {
    let compare = match pricing.compare_price() {
        Some(p) => format!(
            "compare model {} at ${}/${} per million tokens in/out",
            pricing.compare_model(),
            per_million(p.input),
            per_million(p.output)
        ),
        None => format!(
            "compare model {}: no price in these prices, so Claude-equivalents and savings are unknown",
            pricing.compare_model()
        ),
    };
    let overrides = match pricing.prices().overrides {
        0 => String::new(),
        n => format!(", {n} from the bridge's config file"),
    };
    format!(
        "prices: {}{overrides}; {compare}\n",
        pricing.prices().source
    )
}

fn per_million(v: f64) -> String {
    let t = format!("{v:.2}");
    t.strip_suffix(".00").map(str::to_owned).unwrap_or(t)
}

/// The line that ends a task's result (`opencode_result`, the MCP task's final result):
/// cost, Claude-equivalent, saved.
pub fn usage_line(u: Option<&Usage>, model: Option<&str>, compare_model: &str) -> String {
    let Some(u) = u else {
        return "usage: not recorded for this task (it ran before the bridge kept usage)\n".into();
    };
    let model = model.unwrap_or("the agent's default model");
    let cost = match u.basis {
        CostBasis::Reported => format!("cost {}", usd(u.cost)),
        CostBasis::Estimated => format!(
            "cost ~{} (estimated from {model}'s list price: opencode recorded 0)",
            usd(u.cost)
        ),
        CostBasis::Free => "cost $0 (free model)".to_owned(),
        CostBasis::Unknown => format!(
            "cost unknown (no price for {model}; budgets count it at its Claude-equivalent)"
        ),
    };
    let toks = format!(
        "{} in / {} out tokens",
        count(u.tokens.input + u.tokens.cache_read + u.tokens.cache_write),
        count(u.tokens.output + u.tokens.reasoning)
    );
    match (u.claude_equivalent, u.saved()) {
        // A cost that is not known saves nothing that can be said: not 100 %.
        (Some(eq), Some(_)) if u.basis == CostBasis::Unknown => format!(
            "usage: {toks}, {cost}; Claude-equivalent ({compare_model}) {}; saved unknown (its cost is unknown)\n",
            usd(eq)
        ),
        (Some(eq), Some(saved)) => format!(
            "usage: {toks}, {cost}; Claude-equivalent ({compare_model}) {}; saved {} (an estimate: the same tokens at Claude's list price, tokenizers differ)\n",
            usd(eq),
            usd(saved)
        ),
        _ => format!(
            "usage: {toks}, {cost}; Claude-equivalent unknown (no price for {compare_model})\n"
        ),
    }
}

/// A start refused because the config file or a budget variable is not usable.
pub fn config_refusal(why: &str) -> String {
    format!(
        "refused: {why}. No task starts until it is fixed, so that a budget it sets is never skipped"
    )
}

/// The ledger could not be read.
pub fn ledger_unreadable(state_dir: &std::path::Path, why: &str) -> String {
    format!(
        "the usage ledger under {} cannot be read ({why}); check the state directory's permissions (OPENCODE_BRIDGE_STATE_DIR)",
        state_dir.display()
    )
}

/// `usage --html FILE` could not write the file.
pub fn html_unwritable(file: &std::path::Path, why: &str) -> String {
    format!(
        "cannot write the usage page to {} ({why}); give a writable path",
        file.display()
    )
}

/// `usage --html FILE` wrote the page.
pub fn html_written(file: &std::path::Path) -> String {
    format!(
        "wrote {} (open it in a browser: a chart of cost and savings per day)",
        file.display()
    )
}

fn scope(s: &Standing) -> String {
    match &s.project {
        Some(p) => format!("{} budget of project {}", s.window.as_str(), p.display()),
        None => format!("{} budget", s.window.as_str()),
    }
}

fn resets(s: &Standing) -> String {
    run_supervisor::utc::format(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(s.resets_ms),
    )
}

/// The warning of a start accepted at 80 % or more of a budget (empty otherwise).
pub fn budget_warning(v: &Verdict) -> String {
    let Verdict::Warn(near) = v else {
        return String::new();
    };
    near.iter()
        .map(|s| {
            format!(
                "warning: {} of the {} of {} is used or reserved ({} spent{}); it resets at {}; a start is refused when what it reserves would pass the budget\n",
                percent(s),
                scope(s),
                usd(s.budget),
                usd(s.spent),
                held(s),
                resets(s)
            )
        })
        .collect()
}

fn percent(s: &Standing) -> String {
    if s.budget <= 0.0 {
        return "all".into();
    }
    format!("{:.0} %", 100.0 * (s.spent + s.reserved) / s.budget)
}

/// `, $0.30 held by running tasks` (empty when nothing is held beyond use).
fn held(s: &Standing) -> String {
    if s.reserved > 0.0 {
        format!(", {} held by running tasks", usd(s.reserved))
    } else {
        String::new()
    }
}

/// The budgets and today's spend (`opencode_policy`, the instructions, `doctor`): one line.
pub fn budget_lines(standings: &[Standing], today_usd: f64) -> String {
    if standings.is_empty() {
        return format!(
            "budgets: none (OPENCODE_BRIDGE_BUDGET_DAY_USD / _MONTH_USD or the config file's [budget] set them); spent today {}\n",
            usd(today_usd)
        );
    }
    let parts: Vec<String> = standings
        .iter()
        .map(|s| {
            format!(
                "{} {} of {} ({}resets {})",
                scope(s),
                usd(s.spent),
                usd(s.budget),
                held(s).trim_start_matches(", ").to_owned()
                    + if s.reserved > 0.0 { "; " } else { "" },
                resets(s)
            )
        })
        .collect();
    format!(
        "budgets: {}; spent today {}; unknown costs count at their Claude-equivalent\n",
        parts.join(", "),
        usd(today_usd)
    )
}

const BAR_WIDTH: usize = 24;

fn bar(v: f64, max: f64) -> String {
    if max <= 0.0 || v <= 0.0 {
        return String::new();
    }
    let n = ((v / max) * BAR_WIDTH as f64).round().max(1.0) as usize;
    "#".repeat(n.min(BAR_WIDTH))
}

fn totals_cells(t: &Totals, priced: bool) -> String {
    let (eq, saved) = if priced {
        (usd(t.claude_equivalent_usd), usd(t.saved_usd))
    } else {
        ("unknown".to_owned(), "unknown".to_owned())
    };
    format!(
        "{:>5} {:>8} {:>8} {:>10} {:>10} {:>10}",
        t.tasks,
        count(t.tokens.input + t.tokens.cache_read + t.tokens.cache_write),
        count(t.tokens.output + t.tokens.reasoning),
        usd(t.cost_usd),
        eq,
        saved
    )
}

fn table(title: &str, groups: &[Group], bars: bool, priced: bool) -> String {
    if groups.is_empty() {
        return String::new();
    }
    let w = groups
        .iter()
        .map(|g| g.key.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(5, 40);
    let mut out = format!(
        "\nby {title}:\n{:<w$} {:>5} {:>8} {:>8} {:>10} {:>10} {:>10}{}\n",
        title,
        "tasks",
        "in",
        "out",
        "cost",
        "claude-eq",
        "saved",
        if bars { "  cost" } else { "" }
    );
    let max = groups.iter().map(|g| g.totals.cost_usd).fold(0.0, f64::max);
    for g in groups {
        let key: String = g.key.chars().take(40).collect();
        out.push_str(&format!("{key:<w$} {}", totals_cells(&g.totals, priced)));
        if bars {
            out.push_str(&format!("  {}", bar(g.totals.cost_usd, max)));
        }
        out.push('\n');
    }
    out
}

/// The usage report: totals, then rows by day (with a bar of cost per day), agent, model,
/// lane and engine. `since` says the window (`all time`, `since 2026-01-01`).
pub fn usage_report(s: &Summary, since: &str, compare_model: &str) -> String {
    usage_report_by(s, since, compare_model, None)
}

/// The groups `by` names (`day`, `week`, `month`, `project`, `model`, `agent`, `lane`,
/// `engine`) and whether they are in time order (with bars).
fn groups_by<'a>(s: &'a Summary, by: &str) -> (&'a [Group], bool) {
    match by {
        "week" => (&s.by_week, true),
        "month" => (&s.by_month, true),
        "project" => (&s.by_project, false),
        "model" => (&s.by_model, false),
        "agent" => (&s.by_agent, false),
        "lane" => (&s.by_lane, false),
        "engine" => (&s.by_engine, false),
        _ => (&s.by_day, true),
    }
}

/// Days a report shows one by one; a longer window is shown by week.
pub const MAX_DAY_ROWS: usize = 60;

/// [`usage_report`] with only the grouping `by` (`None`: by day, or by week past
/// [`MAX_DAY_ROWS`] days, then by agent, model, lane and engine).
pub fn usage_report_by(s: &Summary, since: &str, compare_model: &str, by: Option<&str>) -> String {
    let t = &s.totals;
    let mut out = format!(
        "usage {since}: {} tasks ({} attempts), cost {}{}; {}\n",
        t.tasks,
        t.attempts,
        usd(t.cost_usd),
        if t.estimated_usd > 0.0 {
            format!(
                " (of which ~{} estimated from list prices)",
                usd(t.estimated_usd)
            )
        } else {
            String::new()
        },
        if s.compare_priced {
            format!(
                "Claude-equivalent ({compare_model}) {}; saved {}",
                usd(t.claude_equivalent_usd),
                usd(t.saved_usd)
            )
        } else {
            format!("Claude-equivalent unknown (no price for {compare_model}); saved unknown")
        }
    );
    out.push_str(
        "savings are an estimate: the same tokens at Claude's list price now (tokenizers differ)\n",
    );
    if t.unknown_cost_attempts > 0 {
        out.push_str(&format!(
            "{} attempts had no price for their model: their cost shows as $0 here, counts at its Claude-equivalent against budgets and is left out of what was saved\n",
            t.unknown_cost_attempts
        ));
    }
    if t.free_attempts > 0 {
        out.push_str(&format!("{} attempts used free models\n", t.free_attempts));
    }
    if s.unreadable_lines > 0 {
        out.push_str(&format!(
            "note: {} ledger lines could not be read and are left out\n",
            s.unreadable_lines
        ));
    }
    if t.attempts == 0 {
        out.push_str("no task finished in this window\n");
        return out;
    }
    if let Some(by) = by {
        let (groups, bars) = groups_by(s, by);
        out.push_str(&table(by, groups, bars, s.compare_priced));
        return out;
    }
    if s.by_day.len() > MAX_DAY_ROWS {
        out.push_str(&format!(
            "\n{} days: shown by week (from Monday); by=day shows each day\n",
            s.by_day.len()
        ));
        out.push_str(&table("week", &s.by_week, true, s.compare_priced));
    } else {
        out.push_str(&table("day", &s.by_day, true, s.compare_priced));
    }
    out.push_str(&table("agent", &s.by_agent, false, s.compare_priced));
    out.push_str(&table("model", &s.by_model, false, s.compare_priced));
    out.push_str(&table("lane", &s.by_lane, false, s.compare_priced));
    out.push_str(&table("engine", &s.by_engine, false, s.compare_priced));
    out
}

/// The grouping `by` (`None`: by day) as CSV: a header, then one line per group.
/// Claude-equivalent and saved are empty when the compare model has no price.
pub fn usage_csv(s: &Summary, by: Option<&str>) -> String {
    let by = by.unwrap_or("day");
    let (groups, _) = groups_by(s, by);
    let mut out = format!(
        "{by},tasks,attempts,input_tokens,output_tokens,cost_usd,claude_equivalent_usd,saved_usd\n"
    );
    for g in groups {
        let t = &g.totals;
        let key = if g.key.contains([',', '"', '\n']) {
            format!("\"{}\"", g.key.replace('"', "\"\""))
        } else {
            g.key.clone()
        };
        let (eq, saved) = if s.compare_priced {
            (
                format!("{:.6}", t.claude_equivalent_usd),
                format!("{:.6}", t.saved_usd),
            )
        } else {
            (String::new(), String::new())
        };
        out.push_str(&format!(
            "{key},{},{},{},{},{:.6},{eq},{saved}\n",
            t.tasks,
            t.attempts,
            t.tokens.input + t.tokens.cache_read + t.tokens.cache_write,
            t.tokens.output + t.tokens.reasoning,
            t.cost_usd
        ));
    }
    out
}

/// A self-contained HTML page: totals, a chart of cost and savings per day (per week past 60
/// days, [`crate::chart`]), then the text report.
pub fn usage_html(s: &Summary, since: &str, compare_model: &str) -> String {
    crate::chart::page(
        s,
        since,
        compare_model,
        &usage_report(s, since, compare_model),
    )
}
