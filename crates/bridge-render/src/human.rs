//! Small humanising helpers shared by every rendering.

/// An age such as `<1m ago`, `5m ago`, `3h ago`, `2d ago` from two epoch-ms times (`then_ms`
/// comes from opencode's store: any i64, so the difference saturates).
pub fn age(then_ms: i64, now_ms: i64) -> String {
    let secs = now_ms.saturating_sub(then_ms).max(0) / 1000;
    if secs < 60 {
        "<1m ago".into()
    } else if secs < 3600 {
        format!("{}m ago", secs / 60)
    } else if secs < 86_400 {
        format!("{}h ago", secs / 3600)
    } else {
        format!("{}d ago", secs / 86_400)
    }
}

/// A duration such as `42s`, `3m05s`, `2h10m`.
pub fn duration_ms(ms: u64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    }
}

/// A count such as `950`, `12k`, `1.2M`.
pub fn count(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 10_000 {
        let tenths = n / 100;
        if tenths.is_multiple_of(10) {
            format!("{}k", tenths / 10)
        } else {
            format!("{}.{}k", tenths / 10, tenths % 10)
        }
    } else if n < 1_000_000 {
        format!("{}k", n / 1000)
    } else {
        format!("{}.{}M", n / 1_000_000, (n % 1_000_000) / 100_000)
    }
}

/// `in/out tok`.
pub fn tokens(input: u64, output: u64) -> String {
    format!("{}/{} tok", count(input), count(output))
}

/// The time of day (UTC) of an epoch-ms time, `HH:MM:SS`.
pub fn clock(ms: i64) -> String {
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// The last two components of a path (`Github/project-a`), or the path when shorter.
pub fn dir_tail(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.len() {
        0 => path.to_string(),
        1 => parts[0].to_string(),
        n => format!("{}/{}", parts[n - 2], parts[n - 1]),
    }
}

/// One line: newlines become ` ⏎ `, runs of whitespace collapse, and the result is cut to `max`
/// characters with `…`.
pub fn one_line(text: &str, max: usize) -> String {
    let flat = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    clip(&flat, max)
}

/// Cuts to `max` characters, marking the cut with `…`.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Keeps the last `max` characters of `text`, saying how much was cut.
pub fn keep_end(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_string();
    }
    let skip = total - max;
    let tail: String = text.chars().skip(skip).collect();
    format!("[… {skip} earlier characters cut]\n{tail}")
}

/// Keeps the first `max` characters of `text`, saying how much was cut.
pub fn keep_start(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}\n[… {} later characters cut]", total - max)
}

/// Pads columns so they line up: every row gets each column padded to the widest cell; the
/// last column is not padded. Columns listed in `right` are right-aligned.
pub fn table(rows: &[Vec<String>], right: &[usize]) -> Vec<String> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; cols];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = widths[i] - cell.chars().count();
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else if right.contains(&i) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// An amount of USD: 4 decimals below $1, 2 above.
pub fn usd(v: f64) -> String {
    if v.abs() < 1.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humanised_values() {
        assert_eq!(age(0, 59_000), "<1m ago");
        assert_eq!(age(0, 5 * 60_000), "5m ago");
        assert_eq!(age(0, 3 * 3_600_000 + 1), "3h ago");
        assert_eq!(age(i64::MAX, 0), "<1m ago");
        assert!(age(i64::MIN, i64::MAX).ends_with("d ago"));
        assert_eq!(age(0, 49 * 3_600_000), "2d ago");
        assert_eq!(duration_ms(185_000), "3m05s");
        assert_eq!(duration_ms(7_800_000), "2h10m");
        assert_eq!(count(650_123), "650k");
        assert_eq!(count(1_234), "1.2k");
        assert_eq!(count(2_000), "2k");
        assert_eq!(count(3_450_000), "3.4M");
        assert_eq!(clock(1_795_987_894_648), "21:31:34");
        assert_eq!(dir_tail("/home/u/Github/project-a"), "Github/project-a");
        assert_eq!(one_line("a\n\n  b  \nc", 100), "a ⏎ b ⏎ c");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(keep_end("abcdef", 2), "[… 4 earlier characters cut]\nef");
    }

    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            vec!["a".into(), "1".into(), "x".into()],
            vec!["bbb".into(), "100".into(), "y".into()],
        ];
        assert_eq!(table(&rows, &[1]), vec!["a      1  x", "bbb  100  y"]);
    }
}
