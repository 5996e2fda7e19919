//! The usage page's chart (`opencode-bridge usage --html FILE`): cost and savings per day, or
//! per week (from Monday) when the window spans more than [`MAX_DAY_BARS`] days, as a fluid SVG
//! (a `viewBox`, CSS width 100 %) that reads from 1 to 365 days:
//!
//! - a dollar axis with round ticks and a zero line; savings below zero (a task that cost more
//!   than its Claude-equivalent) are bars below that line, in their own colour;
//! - amounts on the bars when there is room for them, else on the costliest and the most saving
//!   bar (every bar has its amount as a tooltip, and the tables below give them all);
//! - date labels thinned to one every few bars so that they never overlap.
//!
//! The page's only script measures, after layout, whether any two labels overlap and whether
//! anything is wider than the window, and writes the counts on `<body>` (`data-label-overlaps`,
//! `data-overflow`): what the headless-browser test reads back.

use run_supervisor::usage::ledger::{Group, Summary};

/// Days the chart shows one by one; a longer window is shown by week.
pub const MAX_DAY_BARS: u64 = 60;

const COST: &str = "#d9534f";
const SAVED: &str = "#2e8b57";
const LOSS: &str = "#c77c02";
const W: f64 = 800.0;
const H: f64 = 340.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 52.0;
/// Width of a date label (`MM-DD` at 12 user units) plus the gap it keeps from the next.
const DATE_LABEL_W: f64 = 52.0;
/// Width of an amount label (`$0.0000` at 10 user units) plus its gap.
const AMOUNT_W: f64 = 50.0;

/// One bar pair of the chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// The day or the week's Monday, `YYYY-MM-DD`.
    pub key: String,
    /// Cost, USD.
    pub cost: f64,
    /// Saved, USD (negative: cost more than its Claude-equivalent).
    pub saved: f64,
}

fn day_number(key: &str) -> Option<u64> {
    let t = run_supervisor::utc::parse(&format!("{key}T00:00:00Z"))?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() / 86_400)
}

fn day_key(n: u64) -> String {
    run_supervisor::utc::day(n * 86_400_000)
}

/// The Monday of day number `day` (1970-01-01, day 0, was a Thursday).
fn monday_of(day: u64) -> u64 {
    day.saturating_sub((day + 3) % 7)
}

/// The chart's buckets and their unit (`day` or `week`): every day (or week) from the window's
/// start (its first row when the window starts more than a year before its last row) to its
/// last row, empty ones included, so that the time axis is even.
pub fn buckets(s: &Summary) -> (Vec<Bucket>, &'static str) {
    let known: Vec<(u64, &Group)> = s
        .by_day
        .iter()
        .filter_map(|g| Some((day_number(&g.key)?, g)))
        .collect();
    let (Some(first), Some(last)) = (
        known.iter().map(|k| k.0).min(),
        known.iter().map(|k| k.0).max(),
    ) else {
        return (Vec::new(), "day");
    };
    let start = match s.since_ms.map(|ms| ms / 86_400_000) {
        Some(d) if d <= first && last - d < 366 => d,
        _ => first,
    };
    let bucket = |g: Option<&Group>, key: String| Bucket {
        key,
        cost: g.map_or(0.0, |g| g.totals.cost_usd),
        saved: g.map_or(0.0, |g| g.totals.saved_usd),
    };
    if last - start + 1 > MAX_DAY_BARS {
        let weeks: std::collections::BTreeMap<&str, &Group> =
            s.by_week.iter().map(|g| (g.key.as_str(), g)).collect();
        let (a, b) = (monday_of(start), monday_of(last));
        let out = (a..=b)
            .step_by(7)
            .map(|d| {
                let k = day_key(d);
                bucket(weeks.get(k.as_str()).copied(), k)
            })
            .collect();
        return (out, "week");
    }
    let days: std::collections::BTreeMap<u64, &Group> = known.into_iter().collect();
    let out = (start..=last)
        .map(|d| bucket(days.get(&d).copied(), day_key(d)))
        .collect();
    (out, "day")
}

/// A round step of about a fifth of `span`: 1, 2, 2.5 or 5 times a power of ten.
fn nice_step(span: f64) -> f64 {
    let raw = (span / 5.0).max(1e-6);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * 0.999)
        .unwrap_or(10.0 * mag)
}

/// A tick's amount: as many decimals as its step needs.
fn money(v: f64, step: f64) -> String {
    let d = (0..=4)
        .find(|d| {
            let x = step * 10f64.powi(*d);
            (x - x.round()).abs() < 1e-6
        })
        .unwrap_or(4) as usize;
    let decimals = if d == 0 { 0 } else { d.max(2) };
    let sign = if v < -1e-12 { "-" } else { "" };
    format!("{sign}${:.decimals$}", v.abs())
}

/// An amount with its sign in front (`-$0.4000`).
fn signed_usd(v: f64) -> String {
    if v < 0.0 {
        format!("-{}", crate::human::usd(-v))
    } else {
        crate::human::usd(v)
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The chart: an `<svg>` element (empty window: a short note instead). `priced` is false when
/// the compare model has no price (savings unknown: only cost bars).
pub fn svg(s: &Summary) -> String {
    let (bars, unit) = buckets(s);
    if bars.is_empty() {
        return "<p class=\"empty\">No task finished in this window: nothing to chart.</p>\n"
            .into();
    }
    let priced = s.compare_priced;
    let saved_of = |b: &Bucket| if priced { b.saved } else { 0.0 };
    let hi = bars
        .iter()
        .map(|b| b.cost.max(saved_of(b)))
        .fold(0.0, f64::max);
    let lo = bars.iter().map(saved_of).fold(0.0, f64::min);
    let span = if hi - lo > 0.0 { hi - lo } else { 1.0 };
    let step = nice_step(span);
    let top_v = ((hi / step).ceil() * step).max(step);
    let bottom_v = (lo / step).floor() * step;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let y = |v: f64| TOP + (top_v - v) / (top_v - bottom_v) * plot_h;
    let mut out = format!(
        "<svg id=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"cost and savings per {unit}\">\n"
    );
    // The dollar axis: grid lines, tick labels, its title; the zero line on top.
    let mut v = bottom_v;
    while v <= top_v + step / 2.0 {
        let yy = y(v);
        out.push_str(&format!(
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#e4e4e4\"/>\n<text class=\"axis tick\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\">{}</text>\n",
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            money(v, step)
        ));
        v += step;
    }
    out.push_str(&format!(
        "<text class=\"axis title\" x=\"14\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">USD per {unit}</text>\n",
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    ));
    let slot = plot_w / bars.len() as f64;
    let bw = (slot * 0.4).min(28.0);
    let zero = y(0.0);
    let rect = |out: &mut String, b: &Bucket, x: f64, v: f64, class: &str, color: &str, what| {
        let (mut y0, mut y1) = (y(v.max(0.0)), y(v.min(0.0)));
        // A non-zero amount is never invisible.
        if v != 0.0 && y1 - y0 < 1.5 {
            if v > 0.0 {
                y0 = y1 - 1.5;
            } else {
                y1 = y0 + 1.5;
            }
        }
        out.push_str(&format!(
            "<rect class=\"{class}\" data-key=\"{}\" data-usd=\"{v:.6}\" x=\"{x:.1}\" y=\"{y0:.1}\" width=\"{bw:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{} {what}: {}</title></rect>\n",
            esc(&b.key),
            y1 - y0,
            esc(&b.key),
            signed_usd(v)
        ));
    };
    for (i, b) in bars.iter().enumerate() {
        let mid = LEFT + (i as f64 + 0.5) * slot;
        rect(
            &mut out,
            b,
            mid - bw - 0.5,
            b.cost,
            "bar cost",
            COST,
            "cost",
        );
        if priced {
            let (class, color) = if b.saved < 0.0 {
                ("bar saved negative", LOSS)
            } else {
                ("bar saved", SAVED)
            };
            rect(&mut out, b, mid + 0.5, b.saved, class, color, "saved");
        }
    }
    out.push_str(&format!(
        "<line class=\"zero\" x1=\"{LEFT}\" y1=\"{zero:.1}\" x2=\"{:.1}\" y2=\"{zero:.1}\" stroke=\"#555\"/>\n",
        W - RIGHT
    ));
    // Amounts: on every bar when two fit in a slot, else on the costliest and the most saving.
    let amount = |out: &mut String, i: usize, v: f64, right: bool| {
        let mid = LEFT + (i as f64 + 0.5) * slot;
        let x = if right {
            mid + 0.5 + bw / 2.0
        } else {
            mid - 0.5 - bw / 2.0
        };
        let x = x.clamp(LEFT + AMOUNT_W / 2.0, W - RIGHT - AMOUNT_W / 2.0);
        let yy = if v >= 0.0 { y(v) - 4.0 } else { y(v) + 12.0 };
        out.push_str(&format!(
            "<text class=\"amount\" x=\"{x:.1}\" y=\"{yy:.1}\" font-size=\"10\" text-anchor=\"middle\">{}</text>\n",
            signed_usd(v)
        ));
    };
    if slot >= 2.0 * AMOUNT_W {
        for (i, b) in bars.iter().enumerate() {
            if b.cost != 0.0 {
                amount(&mut out, i, b.cost, false);
            }
            if priced && b.saved != 0.0 {
                amount(&mut out, i, b.saved, true);
            }
        }
    } else {
        let peak = |f: &dyn Fn(&Bucket) -> f64| {
            bars.iter()
                .enumerate()
                .max_by(|a, b| f(a.1).abs().total_cmp(&f(b.1).abs()))
                .filter(|(_, b)| f(b) != 0.0)
                .map(|(i, b)| (i, f(b)))
        };
        let cost = peak(&|b| b.cost);
        let saved = if priced { peak(&|b| b.saved) } else { None };
        if let Some((i, v)) = saved {
            amount(&mut out, i, v, true);
        }
        // The costliest bar's amount too, unless it would sit on the saving's.
        if let Some((i, v)) = cost {
            let clear = saved.is_none_or(|(j, sv)| {
                (i as f64 - j as f64).abs() * slot >= AMOUNT_W || (y(v) - y(sv)).abs() >= 14.0
            });
            if clear {
                amount(&mut out, i, v, false);
            }
        }
    }
    // Date labels: one every `every` bars, so that they never overlap.
    let fit = (plot_w / DATE_LABEL_W).floor().max(1.0) as usize;
    let every = bars.len().div_ceil(fit).max(1);
    for (i, b) in bars.iter().enumerate().filter(|(i, _)| i % every == 0) {
        out.push_str(&format!(
            "<text class=\"date\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">{}</text>\n",
            LEFT + (i as f64 + 0.5) * slot,
            TOP + plot_h + 18.0,
            esc(b.key.get(5..).unwrap_or(&b.key))
        ));
    }
    let (from, to) = (&bars[0].key, &bars[bars.len() - 1].key);
    let caption = match unit {
        "week" => format!("weeks from Monday, {from} to the week of {to}"),
        _ => format!("days (UTC), {from} to {to}"),
    };
    out.push_str(&format!(
        "<text class=\"axis caption\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">{}</text>\n</svg>\n",
        LEFT + plot_w / 2.0,
        H - 8.0,
        esc(&caption)
    ));
    out
}

/// The legend under the page's heading.
pub fn legend(s: &Summary) -> String {
    let (_, unit) = buckets(s);
    let mut out =
        format!("<p class=\"legend\"><span style=\"background:{COST}\"></span>cost per {unit}");
    if s.compare_priced {
        out.push_str(&format!(
            "<span style=\"background:{SAVED}\"></span>saved per {unit}<span style=\"background:{LOSS}\"></span>negative saving (cost above the Claude-equivalent)"
        ));
    } else {
        out.push_str(" (savings unknown: the compare model has no price)");
    }
    out.push_str("</p>\n");
    out
}

/// The page's script: measures the laid-out page and writes on `<body>` how many pairs of
/// chart labels overlap (`data-label-overlaps`), how many elements reach past the window's
/// width (`data-overflow`, the scrolling table excepted), the window's width
/// (`data-viewport`) and how many date labels show (`data-date-labels`). It changes nothing.
pub const MEASURE_SCRIPT: &str = r#"<script>
(function () {
  function measure() {
    var b = document.body, w = document.documentElement.clientWidth;
    var labels = Array.prototype.slice.call(document.querySelectorAll('#chart text.date, #chart text.amount'));
    var boxes = labels.map(function (t) { return t.getBoundingClientRect(); });
    var overlaps = 0;
    for (var i = 0; i < boxes.length; i++)
      for (var j = i + 1; j < boxes.length; j++) {
        var p = boxes[i], q = boxes[j];
        if (p.left < q.right && q.left < p.right && p.top < q.bottom && q.top < p.bottom) overlaps++;
      }
    var over = 0;
    Array.prototype.forEach.call(document.body.querySelectorAll('*'), function (e) {
      if (e.closest('.scroll') || e.tagName === 'SCRIPT') return;
      var r = e.getBoundingClientRect();
      if (r.width > 0 && (r.right > w + 0.5 || r.left < -0.5)) over++;
    });
    if (document.documentElement.scrollWidth > w) over++;
    b.setAttribute('data-label-overlaps', overlaps);
    b.setAttribute('data-overflow', over);
    b.setAttribute('data-viewport', w);
    b.setAttribute('data-date-labels', document.querySelectorAll('#chart text.date').length);
  }
  measure();
  window.addEventListener('resize', measure);
})();
</script>
"#;

/// The whole page: heading, totals, legend, chart, then `report` (the text report, in a box
/// that scrolls sideways on a narrow window).
pub fn page(s: &Summary, since: &str, compare_model: &str, report: &str) -> String {
    let totals = if s.compare_priced {
        format!(
            "Cost {}, Claude-equivalent ({}) {}, saved {}. Savings are an estimate: the same tokens at Claude's list price (tokenizers differ).",
            crate::human::usd(s.totals.cost_usd),
            esc(compare_model),
            crate::human::usd(s.totals.claude_equivalent_usd),
            crate::human::usd(s.totals.saved_usd)
        )
    } else {
        format!(
            "Cost {}; Claude-equivalent and savings unknown ({} has no price).",
            crate::human::usd(s.totals.cost_usd),
            esc(compare_model)
        )
    };
    format!(
        r##"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>opencode-bridge usage</title>
<style>body{{font-family:sans-serif;margin:1em auto;padding:0 1em;max-width:1100px;background:#fff;color:#222}}h1{{font-size:1.4em}}h1,p{{overflow-wrap:anywhere}}#chart{{display:block;width:100%;height:auto}}.scroll{{overflow-x:auto}}pre{{font-size:12px}}.legend span{{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}}</style>
</head><body>
<h1>opencode-bridge usage {since}</h1>
<p>{totals}</p>
{legend}{chart}<div class="scroll"><pre>{report}</pre></div>
{script}</body></html>
"##,
        since = esc(since),
        legend = legend(s),
        chart = svg(s),
        report = esc(report),
        script = MEASURE_SCRIPT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use run_supervisor::usage::ledger::Totals;

    fn summary(days: &[(&str, f64, f64)]) -> Summary {
        let g = |k: &str, c: f64, sv: f64| Group {
            key: k.into(),
            totals: Totals {
                tasks: 1,
                attempts: 1,
                cost_usd: c,
                saved_usd: sv,
                ..Totals::default()
            },
        };
        Summary {
            by_day: days.iter().map(|(k, c, s)| g(k, *c, *s)).collect(),
            compare_priced: true,
            ..Summary::default()
        }
    }

    #[test]
    fn days_fill_their_gaps_and_a_long_window_goes_by_week() {
        let s = summary(&[("2026-03-01", 1.0, 2.0), ("2026-03-04", 0.5, -0.2)]);
        let (b, unit) = buckets(&s);
        assert_eq!(unit, "day");
        assert_eq!(b.len(), 4);
        assert_eq!(b[3].saved, -0.2);
        let mut s = summary(&[("2026-01-01", 1.0, 2.0), ("2026-03-31", 0.5, 0.5)]);
        s.by_week = vec![Group {
            key: "2025-12-29".into(),
            totals: Totals {
                cost_usd: 1.0,
                ..Totals::default()
            },
        }];
        let (b, unit) = buckets(&s);
        assert_eq!(unit, "week");
        assert_eq!(b[0].key, "2025-12-29");
        assert_eq!(b[0].cost, 1.0);
        // 2025-12-29 to the Monday of 2026-03-31 (03-30): 14 weeks.
        assert_eq!(b.len(), 14);
        assert_eq!(b[13].key, "2026-03-30");
    }

    #[test]
    fn ticks_are_round_and_negative_savings_are_drawn_below_zero() {
        assert_eq!(nice_step(1.0), 0.2);
        assert_eq!(nice_step(12.0), 2.5);
        assert_eq!(money(0.25, 0.05), "$0.25");
        assert_eq!(money(-0.5, 0.25), "-$0.50");
        assert_eq!(money(10.0, 2.0), "$10");
        let s = summary(&[("2026-03-01", 1.0, 2.0), ("2026-03-02", 0.5, -0.4)]);
        let svg = svg(&s);
        assert!(svg.contains("class=\"bar saved negative\""), "{svg}");
        assert!(svg.contains(">-$0.50</text>"), "{svg}");
        assert!(svg.contains(">-$0.4000</text>"), "{svg}");
        assert!(svg.contains("class=\"zero\""), "{svg}");
        assert!(svg.contains(">USD per day</text>"), "{svg}");
        // Amounts on the bars when they fit.
        assert!(svg.contains("class=\"amount\""), "{svg}");
        assert!(svg.contains(">$2.00</text>"), "{svg}");
    }

    #[test]
    fn date_labels_are_thinned_to_fit() {
        let days: Vec<String> = (0..60).map(|i| day_key(20_000 + i)).collect();
        let rows: Vec<(&str, f64, f64)> = days.iter().map(|d| (d.as_str(), 1.0, 1.0)).collect();
        let svg = svg(&summary(&rows));
        let labels = svg.matches("class=\"date\"").count();
        let fit = ((W - LEFT - RIGHT) / DATE_LABEL_W).floor() as usize;
        assert!(labels <= fit && labels >= fit / 2, "{labels} labels");
    }
}
