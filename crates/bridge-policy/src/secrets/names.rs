//! How secret-ish a setting's name is: split into parts and judged by the word lists of
//! `rules.rs` (strong, weak, or no secret name), and what a loosely secret-ish name's value
//! must look like.

use super::*;

/// How secret-ish a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strength {
    /// Not a secret name (`author_id`, `cache_key`, `token_url`).
    None,
    /// A loosely secret-ish name: only a random-looking value counts (`signingKey`, `auth`).
    Weak,
    /// A secret name: any literal that is not code, a placeholder or a toy value counts.
    Strong,
}

/// Splits a name at `_`, `-`, `.`, `:`, `/`, spaces and camelCase, lower-cased.
pub(super) fn name_parts(name: &str) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    let mut upper_run = 0;
    for c in name.chars() {
        if matches!(
            c,
            '_' | '-' | '.' | ':' | '/' | ' ' | '"' | '\'' | '`' | '$' | '[' | ']'
        ) {
            parts.push(std::mem::take(&mut current));
            prev_lower = false;
            upper_run = 0;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower {
            parts.push(std::mem::take(&mut current));
        }
        // the end of an acronym: `DBId` is `db`, `id`; `APIKey` is `api`, `key`
        if c.is_ascii_lowercase()
            && current.len() >= 2
            && current.bytes().all(|b| b.is_ascii_lowercase())
            && upper_run >= 2
        {
            let last = current.pop().expect("two or more");
            parts.push(std::mem::take(&mut current));
            current.push(last);
        }
        upper_run = if c.is_ascii_uppercase() {
            upper_run + 1
        } else {
            0
        };
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    parts.push(current);
    parts.retain(|p| !p.is_empty());
    parts
}

/// How secret-ish a setting name is (see the module docs and docs/POLICY.md).
pub(super) fn strength(name: &str) -> Strength {
    let parts = name_parts(name);
    let Some(last) = parts.last() else {
        return Strength::None;
    };
    if PLAIN_LAST.contains(&last.as_str()) || ID_LIKE.contains(&last.as_str()) {
        return Strength::None;
    }
    // `keyVaultToStoreSecrets`, `key_vault_uri`: the name of a vault, not a key
    if parts.windows(2).any(|w| w[0] == "key" && w[1] == "vault") {
        return Strength::None;
    }
    let mut best = Strength::None;
    for (i, part) in parts.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| parts[j].as_str());
        let p = part.as_str();
        let next = parts.get(i + 1).map(String::as_str);
        let s = if p == "key" && next.is_some_and(|n| KEY_NOT_SECRET_NEXT.contains(&n)) {
            Strength::None // `key_down_event`, `keyPressed`, `keyFrame`
        } else if p == "key" || p == "keys" {
            match prev {
                Some(q) if PLAIN_KEY_QUALIFIERS.contains(&q) => Strength::None,
                Some(q) if STRONG_KEY_QUALIFIERS.contains(&q) => Strength::Strong,
                _ => Strength::Weak,
            }
        } else if p == "token" && prev.is_some_and(|q| PLAIN_TOKEN_QUALIFIERS.contains(&q)) {
            Strength::None
        } else if p == "pass" || p == "pw" {
            if i + 1 == parts.len() {
                Strength::Strong
            } else {
                Strength::None
            }
        } else if STRONG_WORDS.contains(&p)
            || ["password", "passwd", "secret", "token", "pwd", "apikey"]
                .iter()
                .any(|w| p.len() > w.len() + 1 && p.ends_with(w))
            // `servicekey`, `dbkey`, `appkey`: a secret key's qualifier and `key` in one word
            || p.strip_suffix("key").is_some_and(|q| STRONG_KEY_QUALIFIERS.contains(&q))
        {
            Strength::Strong
        } else if WEAK_WORDS.contains(&p) || p.ends_with("key") && p.len() > 3 {
            Strength::Weak
        } else {
            Strength::None
        };
        best = best.max_with(s);
    }
    best
}

impl Strength {
    pub(super) fn max_with(self, other: Strength) -> Strength {
        match (self, other) {
            (Strength::Strong, _) | (_, Strength::Strong) => Strength::Strong,
            (Strength::Weak, _) | (_, Strength::Weak) => Strength::Weak,
            _ => Strength::None,
        }
    }
}

/// The strength of `name`, read together with the word before it when the name is a bare
/// `key`/`token`/`secret` (`cache key is …`, `client secret: …`).
pub(super) fn named_strength(pre: &str, name: &str) -> Strength {
    const STOP: &[&str] = &[
        "the", "a", "an", "this", "that", "my", "our", "your", "its", "is", "and", "or", "of",
        "for", "with", "use", "here", "new", "old", "same",
    ];
    let bare = name_parts(name);
    if bare.len() == 1
        && !pre.is_empty()
        && !STOP.contains(&pre.to_ascii_lowercase().as_str())
        && matches!(
            bare[0].as_str(),
            "key" | "keys" | "token" | "secret" | "password"
        )
    {
        return strength(&format!("{pre}_{name}"));
    }
    strength(name)
}

/// Whether the value given to a loosely secret-ish name counts: random-looking, or base64 of
/// `user:password`.
pub(super) fn weak_value(value: &str) -> bool {
    let value = value.trim();
    if random_looking(value) || is_uuid(value) && !is_placeholder(value) {
        return true;
    }
    value.len() >= 12
        && base64_decode(value)
            .and_then(|d| String::from_utf8(d).ok())
            .and_then(|t| {
                t.split_once(':')
                    .map(|(u, p)| !u.is_empty() && connection_password(u, p))
            })
            .unwrap_or(false)
}
