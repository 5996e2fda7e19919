//! A small YAML reader for agent frontmatter, and a JSONC reader for `opencode.jsonc`.
//!
//! Agent files use a narrow slice of YAML: nested block mappings, plain/quoted scalars, block
//! scalars (`|`, `>`), simple sequences and one-line flow collections. That slice is what is
//! read here, into a `serde_json::Value`; anything else is an error naming the line, which the
//! roster records as a warning.

use serde_json::{Map, Value};

/// Splits a markdown file into its YAML frontmatter (if any) and its body.
pub(crate) fn split_frontmatter(text: &str) -> (Option<&str>, &str) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return (Some(&rest[..offset]), &rest[offset + line.len()..]);
        }
        offset += line.len();
    }
    (None, text)
}

#[derive(Debug)]
struct Line<'a> {
    number: usize,
    indent: usize,
    /// The line without indentation and without a trailing comment.
    text: &'a str,
    /// The line without indentation, comment kept (for block scalars).
    raw: &'a str,
    /// The whole line, indentation kept (for block scalars).
    full: &'a str,
}

/// Parses a YAML document made of block mappings at the top level.
pub(crate) fn parse_yaml(text: &str) -> Result<Value, String> {
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start_matches(' ');
        if trimmed.starts_with('\t') {
            return Err(format!("line {}: tab used for indentation", i + 1));
        }
        lines.push(Line {
            number: i + 1,
            indent: raw.len() - trimmed.len(),
            text: strip_comment(trimmed).trim_end(),
            raw: trimmed.trim_end(),
            full: raw.trim_end(),
        });
    }
    let mut parser = Parser { lines, pos: 0 };
    parser.skip_blank();
    if parser.pos >= parser.lines.len() {
        return Ok(Value::Object(Map::new()));
    }
    let indent = parser.lines[parser.pos].indent;
    let value = parser.block(indent)?;
    parser.skip_blank();
    if let Some(line) = parser.lines.get(parser.pos) {
        return Err(format!("line {}: unexpected indentation", line.number));
    }
    Ok(value)
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    pos: usize,
}

impl Parser<'_> {
    fn skip_blank(&mut self) {
        while self.pos < self.lines.len() && self.lines[self.pos].text.is_empty() {
            self.pos += 1;
        }
    }

    fn block(&mut self, indent: usize) -> Result<Value, String> {
        let first = &self.lines[self.pos];
        if first.text == "-" || first.text.starts_with("- ") {
            self.sequence(indent)
        } else {
            self.mapping(indent)
        }
    }

    fn sequence(&mut self, indent: usize) -> Result<Value, String> {
        let mut items = Vec::new();
        loop {
            self.skip_blank();
            let Some(line) = self.lines.get(self.pos) else {
                break;
            };
            if line.indent != indent || !(line.text == "-" || line.text.starts_with("- ")) {
                break;
            }
            let rest = line.text[1..].trim();
            let number = line.number;
            self.pos += 1;
            if rest.is_empty() {
                items.push(self.nested(indent, number)?);
            } else if split_key(rest).is_some() {
                return Err(format!(
                    "line {number}: mappings inside sequences are not supported"
                ));
            } else {
                items.push(scalar(rest, number)?);
            }
        }
        Ok(Value::Array(items))
    }

    fn mapping(&mut self, indent: usize) -> Result<Value, String> {
        let mut map = Map::new();
        loop {
            self.skip_blank();
            let Some(line) = self.lines.get(self.pos) else {
                break;
            };
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return Err(format!("line {}: unexpected indentation", line.number));
            }
            let number = line.number;
            let Some((key, rest)) = split_key(line.text) else {
                return Err(format!("line {number}: expected `key: value`"));
            };
            let key = unquote_key(key, number)?;
            self.pos += 1;
            let value = if rest.is_empty() {
                self.nested_or_same_level_sequence(indent, number)?
            } else if rest.starts_with('|') || rest.starts_with('>') {
                self.block_scalar(indent, rest, number)?
            } else {
                scalar(rest, number)?
            };
            // opencode's YAML reader refuses a mapping with a repeated key (and drops the whole
            // frontmatter), so the bridge does not pick one of the two values either.
            if map.contains_key(&key) {
                return Err(format!("line {number}: duplicate key `{key}`"));
            }
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }

    /// The value of `key:` with nothing after the colon.
    fn nested_or_same_level_sequence(
        &mut self,
        indent: usize,
        number: usize,
    ) -> Result<Value, String> {
        self.skip_blank();
        match self.lines.get(self.pos) {
            Some(next)
                if next.indent == indent && (next.text == "-" || next.text.starts_with("- ")) =>
            {
                self.sequence(indent)
            }
            _ => self.nested(indent, number),
        }
    }

    fn nested(&mut self, indent: usize, _number: usize) -> Result<Value, String> {
        self.skip_blank();
        match self.lines.get(self.pos) {
            Some(next) if next.indent > indent => {
                let inner = next.indent;
                self.block(inner)
            }
            _ => Ok(Value::Null),
        }
    }

    fn block_scalar(
        &mut self,
        indent: usize,
        header: &str,
        number: usize,
    ) -> Result<Value, String> {
        let folded = header.starts_with('>');
        let chomp = &header[1..].trim();
        if !chomp.is_empty() && !matches!(*chomp, "-" | "+") {
            return Err(format!(
                "line {number}: unsupported block scalar header {header:?}"
            ));
        }
        let mut body: Vec<&str> = Vec::new();
        let mut body_indent = None;
        while let Some(line) = self.lines.get(self.pos) {
            if line.raw.is_empty() {
                body.push("");
                self.pos += 1;
                continue;
            }
            if line.indent <= indent {
                break;
            }
            let bi = *body_indent.get_or_insert(line.indent);
            if line.indent < bi {
                break;
            }
            // keeps indentation beyond the block's own
            body.push(&line.full[bi..]);
            self.pos += 1;
        }
        while body.last() == Some(&"") {
            body.pop();
        }
        let text = if folded {
            let mut out = String::new();
            for (i, part) in body.iter().enumerate() {
                if i > 0 {
                    out.push(if part.is_empty() || body[i - 1].is_empty() {
                        '\n'
                    } else {
                        ' '
                    });
                }
                out.push_str(part);
            }
            out
        } else {
            body.join("\n")
        };
        let text = if *chomp == "-" {
            text
        } else {
            format!("{text}\n")
        };
        Ok(Value::String(text))
    }
}

/// Removes a ` #` comment that is outside quotes.
fn strip_comment(line: &str) -> &str {
    if line.starts_with('#') {
        return "";
    }
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if (c == '"' || c == '\'') && (prev == ' ' || prev == ':' || i == 0) => {
                quote = Some(c);
            }
            None if c == '#' && prev == ' ' => return &line[..i],
            None => {}
        }
        prev = c;
    }
    line
}

/// Splits `key: rest` at the first `:` followed by a blank or the end, outside quotes.
fn split_key(text: &str) -> Option<(&str, &str)> {
    let bytes = text.as_bytes();
    let mut quote: Option<u8> = None;
    for (i, &b) in bytes.iter().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if (b == b'"' || b == b'\'') && i == 0 => quote = Some(b),
            None if b == b':' && (i + 1 == bytes.len() || bytes[i + 1] == b' ') => {
                if i == 0 {
                    return None;
                }
                return Some((text[..i].trim_end(), text[i + 1..].trim()));
            }
            None => {}
        }
    }
    None
}

fn unquote_key(key: &str, number: usize) -> Result<String, String> {
    match scalar(key, number)? {
        Value::String(s) => Ok(s),
        Value::Null => Ok(String::new()),
        other => Ok(other.to_string()),
    }
}

/// A one-line scalar or flow collection.
fn scalar(text: &str, number: usize) -> Result<Value, String> {
    let text = text.trim();
    if let Some(inner) = text.strip_prefix('"') {
        let Some(inner) = inner.strip_suffix('"') else {
            return Err(format!("line {number}: unterminated double-quoted string"));
        };
        return Ok(Value::String(unescape_double(inner)));
    }
    if let Some(inner) = text.strip_prefix('\'') {
        let Some(inner) = inner.strip_suffix('\'') else {
            return Err(format!("line {number}: unterminated single-quoted string"));
        };
        return Ok(Value::String(inner.replace("''", "'")));
    }
    if text.starts_with('[') || text.starts_with('{') {
        return flow(text, number);
    }
    Ok(plain(text))
}

fn plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        _ => {
            if let Ok(i) = text.parse::<i64>() {
                return Value::from(i);
            }
            if text.chars().any(|c| c.is_ascii_digit())
                && let Ok(f) = text.parse::<f64>()
                && f.is_finite()
            {
                return Value::from(f);
            }
            Value::String(text.to_owned())
        }
    }
}

fn unescape_double(inner: &str) -> String {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('/') => out.push('/'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A one-line flow collection without nesting: `[a, b]` or `{a: b, c: d}`.
fn flow(text: &str, number: usize) -> Result<Value, String> {
    let (open, close) = if text.starts_with('[') {
        ('[', ']')
    } else {
        ('{', '}')
    };
    let Some(inner) = text.strip_prefix(open).and_then(|t| t.strip_suffix(close)) else {
        return Err(format!("line {number}: unterminated flow collection"));
    };
    if inner.contains(['[', '{']) {
        return Err(format!(
            "line {number}: nested flow collections are not supported"
        ));
    }
    let parts = inner.split(',').map(str::trim).filter(|p| !p.is_empty());
    if open == '[' {
        let items: Result<Vec<Value>, String> = parts.map(|p| scalar(p, number)).collect();
        return Ok(Value::Array(items?));
    }
    let mut map = Map::new();
    for part in parts {
        let Some((k, v)) = split_key(part).or_else(|| part.split_once(':')) else {
            return Err(format!(
                "line {number}: expected `key: value` in flow mapping"
            ));
        };
        let key = unquote_key(k.trim(), number)?;
        if map.contains_key(&key) {
            return Err(format!("line {number}: duplicate key `{key}`"));
        }
        map.insert(key, scalar(v.trim(), number)?);
    }
    Ok(Value::Object(map))
}

/// Parses JSON with comments (`//`, `/* */`) and trailing commas, as opencode accepts.
pub(crate) fn parse_jsonc(text: &str) -> Result<Value, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '/' if chars.peek() == Some(&'/') => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    if n == '\n' {
                        out.push('\n');
                    }
                    prev = n;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    // drop trailing commas: a ',' followed only by blanks before '}' or ']'
    let mut cleaned = String::with_capacity(out.len());
    let bytes: Vec<char> = out.chars().collect();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            cleaned.push(c);
            if c == '\\' && i + 1 < bytes.len() {
                cleaned.push(bytes[i + 1]);
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            cleaned.push(c);
        } else if c == ',' {
            let next = bytes[i + 1..].iter().find(|c| !c.is_whitespace());
            if !matches!(next, Some('}') | Some(']')) {
                cleaned.push(c);
            }
        } else {
            cleaned.push(c);
        }
        i += 1;
    }
    serde_json::from_str(&cleaned).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frontmatter_with_nested_permission_map() {
        let text = "---\ndescription: Reviews code # comment\nmode: subagent\ntemperature: 0.1\npermission:\n  edit: deny\n  bash:\n    \"git diff*\": allow\n    \"*\": ask\ncolor: \"#FFB454\"\n---\nYou review.\n";
        let (fm, body) = split_frontmatter(text);
        assert_eq!(body, "You review.\n");
        let v = parse_yaml(fm.unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"description":"Reviews code","mode":"subagent","temperature":0.1,
                   "permission":{"edit":"deny","bash":{"git diff*":"allow","*":"ask"}},
                   "color":"#FFB454"})
        );
    }

    #[test]
    fn block_scalars_sequences_and_flow() {
        let v = parse_yaml(
            "description: >\n  Finds files\n  and symbols.\nprompt: |\n  line one\n    indented\ntags:\n- a\n- 'b c'\nflow: {edit: deny, bash: allow}\nlist: [1, two]\n",
        )
        .unwrap();
        assert_eq!(v["description"], "Finds files and symbols.\n");
        assert_eq!(v["prompt"], "line one\n  indented\n");
        assert_eq!(v["tags"], json!(["a", "b c"]));
        assert_eq!(v["flow"], json!({"edit":"deny","bash":"allow"}));
        assert_eq!(v["list"], json!([1, "two"]));
    }

    #[test]
    fn broken_yaml_names_the_line() {
        let err = parse_yaml("description: ok\n  oops: 1\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
        let err = parse_yaml("just words\n").unwrap_err();
        assert!(err.starts_with("line 1:"), "{err}");
        assert!(parse_yaml("a: \"open\n").is_err());
    }

    #[test]
    fn no_frontmatter_means_body_only() {
        let (fm, body) = split_frontmatter("hello\n---\n");
        assert!(fm.is_none());
        assert_eq!(body, "hello\n---\n");
    }

    #[test]
    fn jsonc_comments_and_trailing_commas() {
        let v = parse_jsonc(
            "{\n // c\n \"agent\": {\"a\": {\"prompt\": \"http://x/*y*/\",}, /* b */},\n \"k\": [1,2,],\n}",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"agent":{"a":{"prompt":"http://x/*y*/"}},"k":[1,2]})
        );
    }
}
