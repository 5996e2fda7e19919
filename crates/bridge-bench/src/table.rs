//! The figures table every section adds rows to, and the statistics of its figures.

pub(crate) struct Row {
    pub(crate) what: String,
    pub(crate) target: String,
    pub(crate) measured: String,
    pub(crate) verdict: &'static str,
}

impl Row {
    /// A figure whose target is an upper bound.
    pub(crate) fn le(what: &str, target: f64, got: f64, unit: &str) -> Row {
        Row {
            what: what.into(),
            target: format!("<= {target} {unit}"),
            measured: format!("{got:.2} {unit}"),
            verdict: if got <= target { "PASS" } else { "MISS" },
        }
    }

    /// A figure whose target is a lower bound.
    pub(crate) fn ge(what: &str, target: f64, got: f64, unit: &str) -> Row {
        Row {
            what: what.into(),
            target: format!(">= {target} {unit}"),
            measured: format!("{got:.0} {unit}"),
            verdict: if got >= target { "PASS" } else { "MISS" },
        }
    }

    pub(crate) fn info(what: &str, measured: String) -> Row {
        Row {
            what: what.into(),
            target: "-".into(),
            measured,
            verdict: "info",
        }
    }

    pub(crate) fn failed(what: &str, why: &str) -> Row {
        println!("{what}: not measured: {why}");
        Row {
            what: what.into(),
            target: "-".into(),
            measured: format!("not measured ({why})"),
            verdict: "MISS",
        }
    }
}

pub(crate) fn print_table(rows: &[Row]) {
    println!("| measure | target | measured | verdict |");
    println!("|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} |",
            r.what, r.target, r.measured, r.verdict
        );
    }
}

pub(crate) fn median(v: &[f64]) -> f64 {
    pct(v, 50)
}

pub(crate) fn pct(v: &[f64], p: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) * p / 100).min(v.len() - 1)]
}

pub(crate) fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}
