//! `opencode-bridge usage`: the table with a bar per day from the ledger, its JSON, the budget
//! line, and the `--html` page opened in headless Chromium, whose screenshot must show the cost
//! and savings bars in their colours (not only a file that exists).

use crate::common::{World, run_cli};
use run_supervisor::TokenUsage;
use run_supervisor::usage::ledger::{self, Row};
use run_supervisor::usage::{CostBasis, Usage};
use std::path::PathBuf;
use std::process::Command;

/// The colours of the page's bars (render::usage::usage_html).
const COST_RGB: &str = "d9534f";
const SAVED_RGB: &str = "2e8b57";

/// Chromium: `OPENCODE_BRIDGE_TEST_CHROMIUM`, else `chromium` on PATH; under CI a missing one
/// fails the test (scripts/test.sh installs it).
fn chromium() -> Option<PathBuf> {
    let named = std::env::var_os("OPENCODE_BRIDGE_TEST_CHROMIUM").map(PathBuf::from);
    let found = named.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() && bridge_testkit::sandbox::in_ci() {
        panic!("chromium is not installed: apt-get install chromium (scripts/test.sh does)");
    }
    found
}

fn rows(now_ms: u64) -> Vec<Row> {
    let day = 86_400_000;
    let row = |task: u64, at_ms: u64, agent: &str, cost: f64, eq: f64, basis| Row {
        v: ledger::LEDGER_VERSION,
        at_ms,
        task,
        attempt: 1,
        agent: agent.into(),
        model: Some("fk/cheap".into()),
        runner: "opencode".into(),
        engine: None,
        lane: "API".into(),
        project: "/p".into(),
        usage: Usage {
            tokens: TokenUsage {
                input: 40_000,
                output: 2_000,
                ..TokenUsage::default()
            },
            cost,
            basis,
            claude_equivalent: Some(eq),
        },
    };
    vec![
        row(
            1,
            now_ms - 2 * day,
            "explore",
            0.20,
            1.10,
            CostBasis::Reported,
        ),
        row(2, now_ms - day, "worker", 0.40, 2.00, CostBasis::Estimated),
        row(3, now_ms, "worker", 0.10, 0.90, CostBasis::Reported),
    ]
}

#[test]
fn usage_table_json_and_a_page_chromium_renders() {
    let world = World::new();
    let state = world.path("xdg/state/opencode-bridge");
    let now = run_supervisor::registry::now_ms();
    ledger::append(&state, &rows(now)).unwrap();
    // Claude-equivalents are computed when the report is read, at the compare model's price
    // then: $15/$75 per million makes each row's 40k in / 2k out worth $0.75.
    let env = [
        ("OPENCODE_BRIDGE_BUDGET_DAY_USD", "0.5".to_owned()),
        (
            "OPENCODE_BRIDGE_COMPARE_MODEL",
            "anthropic/claude-opus-4-1".to_owned(),
        ),
    ];

    let page = world.path("usage.html");
    let page_arg = page.to_string_lossy().into_owned();
    let out = run_cli(&world, &env, &["usage", "--html", &page_arg]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("tasks (3 attempts), cost $0.7000 (of which ~$0.4000 estimated"),
        "{text}"
    );
    assert!(
        text.contains("Claude-equivalent (anthropic/claude-opus-4-1) $2.25; saved $1.55"),
        "{text}"
    );
    assert!(text.contains("\nby day:\n"), "{text}");
    // One bar per day, the costliest day full width.
    let bars: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("by day:"))
        .skip(2)
        .take(3)
        .collect();
    assert!(bars[1].ends_with(&"#".repeat(24)), "{bars:?}");
    assert!(bars[0].ends_with(&"#".repeat(12)), "{bars:?}");
    assert!(
        text.contains("budgets: day budget $0.1000 of $0.5000"),
        "{text}"
    );
    assert!(text.contains("wrote "), "{text}");

    let json = run_cli(&world, &env, &["usage", "--since-days", "2", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["totals"]["tasks"], 2, "{v}");
    assert_eq!(v["by_day"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["budgets"][0]["window"], "day", "{v}");

    // The last 30 days by default.
    let thirty = run_supervisor::utc::day(now - 29 * 86_400_000);
    assert!(
        text.starts_with(&format!("usage since {thirty}: 3 tasks")),
        "{text}"
    );
    // A window's end (the newest row is today's), one grouping, a project, CSV.
    let yesterday = run_supervisor::utc::day(now - 86_400_000);
    let out = run_cli(
        &world,
        &env,
        &[
            "usage",
            "--until",
            &yesterday,
            "--by",
            "month",
            "--project",
            "/p",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            " until {yesterday} in /p: 2 tasks (2 attempts), cost $0.6000"
        )),
        "{text}"
    );
    assert!(text.contains("\nby month:\n"), "{text}");
    assert!(!text.contains("\nby agent:\n"), "{text}");
    let out = run_cli(
        &world,
        &env,
        &["usage", "--project", "/elsewhere", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["totals"]["tasks"], 0, "{v}");
    let out = run_cli(&world, &env, &["usage", "--csv", "--by", "project"]);
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(
        csv.starts_with("project,tasks,attempts,input_tokens,output_tokens,cost_usd,claude_equivalent_usd,saved_usd\n/p,3,3,120000,6000,0.700000,2.250000,1.550000\n"),
        "{csv}"
    );
    let bad = run_cli(&world, &env, &["usage", "--project", "relative/dir"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("an absolute directory"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    let bad = run_cli(&world, &env, &["usage", "--since", "2026-13-01"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("use a UTC date such as"), "{err}");

    let Some(chromium) = chromium() else {
        eprintln!("note: chromium not found; the page's rendering is not checked");
        return;
    };
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing is loaded from elsewhere.
    assert!(!html.contains("src=") && !html.contains("<link"), "{html}");
    let shot = world.path("usage.png");
    let status = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=900,700",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .env("HOME", world.path("home"))
        .output()
        .unwrap();
    assert!(
        shot.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/png_colors.py");
    let counted = Command::new("python3")
        .args([script, &shot.to_string_lossy(), COST_RGB, SAVED_RGB])
        .output()
        .unwrap();
    let counts = String::from_utf8_lossy(&counted.stdout);
    assert!(
        counted.status.success(),
        "{counts}{}",
        String::from_utf8_lossy(&counted.stderr)
    );
    let count = |rgb: &str| -> usize {
        counts
            .lines()
            .find_map(|l| l.strip_prefix(rgb))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    // Three days of bars, each at least a few hundred pixels of its colour (the legend's
    // swatches are 144 pixels each).
    assert!(
        count(COST_RGB) > 1_000,
        "cost bars: {counts} (screenshot {})",
        shot.display()
    );
    assert!(
        count(SAVED_RGB) > 3_000,
        "savings bars: {counts} (screenshot {})",
        shot.display()
    );
}

/// `usage --json | head`: the reader goes away after a few bytes of a long answer (a ledger of
/// 3,000 days); the bridge stops writing and exits 0, without a panic on the closed pipe. The
/// text report of those days is shown by week.
#[test]
fn usage_into_a_closed_pipe_does_not_panic() {
    use std::io::Read;
    let world = World::new();
    let state = world.path("xdg/state/opencode-bridge");
    let day = 86_400_000;
    let mut all = Vec::new();
    for i in 0..3_000u64 {
        let mut r = rows(3 * day).remove(0);
        r.task = i + 1;
        r.at_ms = i * day;
        all.push(r);
    }
    ledger::append(&state, &all).unwrap();
    let mut child = Command::new(crate::common::binary())
        .env_clear()
        .envs(world.env())
        .current_dir(world.root())
        .args(["usage", "--json", "--since", "1970-01-01"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    assert_eq!(first[0], b'{', "{first:?}");
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.status.success(), "{:?} {err}", out.status);
    // The table of such a window is bounded: weeks past 60 days, not 3,000 day rows.
    let out = run_cli(&world, &[], &["usage", "--since", "1970-01-01"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\n3000 days: shown by week (from Monday)"),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert!(!text.contains("\nby day:\n"));
    assert!(text.len() < 60_000, "{} bytes", text.len());
    // So is its JSON, by day too: the newest 62 days, 53 weeks and 24 months, and
    // how many rows each list left out.
    for by in [None, Some("day")] {
        let mut args = vec!["usage", "--json", "--since", "1970-01-01"];
        if let Some(by) = by {
            args.extend(["--by", by]);
        }
        let out = run_cli(&world, &[], &args);
        assert!(out.status.success());
        assert!(
            out.stdout.len() < 60_000,
            "{by:?}: {} bytes",
            out.stdout.len()
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["totals"]["tasks"], 3000, "{by:?}");
        let days = v["by_day"].as_array().unwrap();
        assert_eq!(days.len(), 62, "{by:?}");
        assert_eq!(days[61]["key"], run_supervisor::utc::day(2999 * day));
        assert_eq!(v["cut"]["by_day"], 3000 - 62, "{by:?}");
        assert_eq!(v["by_week"].as_array().map(Vec::len), Some(53), "{by:?}");
        assert!(v["cut"]["by_week"].as_u64().unwrap() > 300, "{by:?}");
    }
}

/// The attributes of the `<body>` tag of a page Chromium dumped (what the page's own script
/// measured: `data-label-overlaps`, `data-overflow`, `data-viewport`, `data-date-labels`).
fn body_attr(dom: &str, name: &str) -> Option<u64> {
    let body = &dom[dom.find("<body")?..];
    let body = &body[..body.find('>')?];
    let at = body.find(&format!("{name}=\""))? + name.len() + 2;
    body[at..].split('"').next()?.parse().ok()
}

/// The chart reads from a week to a year: at 7, 60 and 365 days of usage (every fifth day
/// costing more than its Claude-equivalent), in a narrow and a wide window, headless Chromium
/// lays the page out and the page's own script finds no two labels overlapping and nothing
/// wider than the window; the dollar axis, its zero line and a negative saving are drawn, by
/// day up to 60 days and by week past them.
#[test]
fn the_chart_reads_at_a_week_two_months_and_a_year() {
    let world = World::new();
    let state = world.path("xdg/state/opencode-bridge");
    let now = run_supervisor::registry::now_ms();
    let day = 86_400_000;
    let all: Vec<Row> = (0..365u64)
        .map(|i| {
            let mut r = rows(now).remove(2);
            r.task = i + 1;
            r.at_ms = now - i * day;
            // $0.75 at the compare model's price below: every fifth day costs more.
            r.usage.cost = if i % 5 == 0 { 1.5 } else { 0.2 };
            r
        })
        .collect();
    ledger::append(&state, &all).unwrap();
    let env = [(
        "OPENCODE_BRIDGE_COMPARE_MODEL",
        "anthropic/claude-opus-4-1".to_owned(),
    )];
    let chromium = chromium();
    for (days, unit, bars) in [(7u64, "day", 7usize), (60, "day", 60), (365, "week", 53)] {
        let page = world.path(&format!("usage-{days}.html"));
        let page_arg = page.to_string_lossy().into_owned();
        let out = run_cli(
            &world,
            &env,
            &[
                "usage",
                "--since-days",
                &days.to_string(),
                "--html",
                &page_arg,
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            html.contains(&format!(">USD per {unit}</text>")),
            "{days} days"
        );
        assert!(html.contains("class=\"zero\""), "{days} days");
        assert!(html.contains("viewBox=\"0 0 800 340\""), "{days} days");
        let cost_bars = html.matches("class=\"bar cost\"").count();
        // A year is 52 or 53 weeks from Monday to Monday, the first and last partial.
        assert!(
            cost_bars == bars || (unit == "week" && (52..=54).contains(&cost_bars)),
            "{days} days: {cost_bars} bars"
        );
        if unit == "day" {
            // A day that cost more than its Claude-equivalent is a bar below the zero line.
            assert!(
                html.contains("class=\"bar saved negative\" data-key=\"")
                    && html.contains("data-usd=\"-0.750000\""),
                "{days} days: no negative bar"
            );
        }
        // An amount on or near the bars, and tick labels in dollars.
        assert!(html.contains("class=\"amount\""), "{days} days");
        assert!(
            html.contains(">$0</text>") || html.contains(">$0.00</text>"),
            "{days} days"
        );
        let Some(chromium) = &chromium else {
            eprintln!("note: chromium not found; the chart's layout is not checked");
            continue;
        };
        for width in [400u64, 1400] {
            let out = Command::new(chromium)
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    &format!("--window-size={width},900"),
                    "--dump-dom",
                ])
                .arg(format!("file://{}", page.display()))
                .env("HOME", world.path("home"))
                .output()
                .unwrap();
            let dom = String::from_utf8_lossy(&out.stdout);
            let at = |name: &str| {
                body_attr(&dom, name).unwrap_or_else(|| {
                    panic!(
                        "{days} days at {width} px: no {name} on <body> (the page's script did not run): {}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                })
            };
            // Chromium's headless window is at least 500 px wide.
            let viewport = at("data-viewport");
            if width == 400 {
                assert!(viewport <= 520, "{days} days: a {viewport} px window");
            } else {
                assert!(viewport >= 1300, "{days} days: a {viewport} px window");
            }
            assert_eq!(at("data-label-overlaps"), 0, "{days} days at {width} px");
            assert_eq!(at("data-overflow"), 0, "{days} days at {width} px");
            let labels = at("data-date-labels");
            assert!(
                (2..=14).contains(&labels) || (days == 7 && labels == 7),
                "{days} days at {width} px: {labels} date labels"
            );
        }
    }
}

/// `opencode-bridge statusline`: today's spend and saving from the ledger's end, the running
/// tasks; a state directory it cannot read gives a neutral line, exit 0 all the same.
#[test]
fn the_status_line_says_today_and_never_fails() {
    let world = World::new();
    let state = world.path("xdg/state/opencode-bridge");
    let now = run_supervisor::registry::now_ms();
    ledger::append(&state, &rows(now)).unwrap();
    let out = run_cli(&world, &[], &["statusline"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    // Only today's row: cost $0.10, its Claude-equivalent $0.90 as written.
    assert_eq!(
        text,
        "opencode: today $0.1000 spent, $0.8000 saved · 0 running\n"
    );
    let bad = world.path("bad");
    std::fs::create_dir_all(bad.join("usage/ledger-v1.jsonl")).unwrap();
    let out = run_cli(
        &world,
        &[(
            "OPENCODE_BRIDGE_STATE_DIR",
            bad.to_string_lossy().into_owned(),
        )],
        &["statusline"],
    );
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "opencode: -\n");
}
