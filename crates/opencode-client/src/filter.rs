//! The listing filter ([`SessionFilter`]) as plain predicates, so every backend applies it the
//! same way. The store backend pushes the cheap parts into SQL and uses these for the rest.
//!
//! Semantics:
//! - `state`: the derived state equals it;
//! - `agent`: the session's agent (row, else last assistant message) equals it, ignoring ASCII case;
//! - `directory`: a substring of the session directory, case-sensitive;
//! - `search`: a case-insensitive substring of the title or of any text part of any message
//!   (user prompts and assistant answers; not reasoning, not tool input/output);
//! - `title_prefix`: the title starts with it, case-sensitive;
//! - `since_minutes`: updated within the last N minutes (`updated_ms >= now_ms - N*60000`);
//! - `children`: include / exclude / only sessions with a parent;
//! - `limit`: at most this many sessions; `0` means no limit.

use crate::error::ClientError;
use crate::model::{Children, Session, SessionFilter};

/// Rejects filters that cannot match anything sensible (empty strings).
pub fn validate(filter: &SessionFilter) -> Result<(), ClientError> {
    let empty = |v: &Option<String>| v.as_deref().is_some_and(|s| s.trim().is_empty());
    if empty(&filter.agent) {
        return Err(ClientError::InvalidArgument {
            field: "agent",
            detail: "empty; omit it to list every agent".into(),
        });
    }
    if empty(&filter.directory) {
        return Err(ClientError::InvalidArgument {
            field: "directory",
            detail: "empty; omit it to list every directory".into(),
        });
    }
    if empty(&filter.search) {
        return Err(ClientError::InvalidArgument {
            field: "search",
            detail: "empty; omit it or give a word to look for".into(),
        });
    }
    Ok(())
}

/// The earliest `updated_ms` the `since_minutes` filter admits.
pub fn since_ms(filter: &SessionFilter, now_ms: i64) -> Option<i64> {
    filter
        .since_minutes
        .map(|m| now_ms.saturating_sub((m.min(i64::MAX as u64 / 60_000) as i64) * 60_000))
}

/// Every filter except `search` over message text (the title half of `search` is checked by
/// [`title_matches_search`]).
pub fn matches_session(s: &Session, filter: &SessionFilter, now_ms: i64) -> bool {
    if let Some(state) = filter.state
        && s.state != state
    {
        return false;
    }
    if let Some(agent) = &filter.agent
        && !s
            .agent
            .as_deref()
            .is_some_and(|a| a.eq_ignore_ascii_case(agent.trim()))
    {
        return false;
    }
    if let Some(dir) = &filter.directory
        && !s.directory.contains(dir.as_str())
    {
        return false;
    }
    if let Some(prefix) = &filter.title_prefix
        && !s.title.starts_with(prefix.as_str())
    {
        return false;
    }
    if let Some(since) = since_ms(filter, now_ms)
        && s.updated_ms < since
    {
        return false;
    }
    children_match(filter.children, s.parent_id.is_some())
}

/// Whether a session with or without a parent passes the `children` filter.
pub fn children_match(children: Children, has_parent: bool) -> bool {
    match children {
        Children::Include => true,
        Children::Exclude => !has_parent,
        Children::Only => has_parent,
    }
}

/// Whether the title alone satisfies `search` (no search → true).
pub fn title_matches_search(title: &str, filter: &SessionFilter) -> bool {
    filter
        .search
        .as_deref()
        .is_none_or(|q| contains_ignore_case(title, q))
}

/// Case-insensitive substring test (Unicode lower-casing).
pub fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    let needle = needle.trim();
    if needle.is_empty() {
        return true;
    }
    if haystack.is_ascii() && needle.is_ascii() {
        return haystack
            .as_bytes()
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()));
    }
    haystack.to_lowercase().contains(&needle.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SessionState, Tokens};

    fn session() -> Session {
        Session {
            id: "ses_1".into(),
            title: "DOCS/librarian: collect notes".into(),
            directory: "/home/u/Github/project-a".into(),
            project_id: "global".into(),
            parent_id: None,
            agent: Some("librarian".into()),
            model: Some("fk/ok".into()),
            tokens: Tokens::default(),
            cost: 0.0,
            created_ms: 1_000,
            updated_ms: 10 * 60_000,
            state: SessionState::Succeeded,
            error: None,
            version: Some("1.18.33".into()),
        }
    }

    #[test]
    fn each_filter_can_reject() {
        let s = session();
        let now = 20 * 60_000;
        let base = SessionFilter::default();
        assert!(matches_session(&s, &base, now));
        let with = |f: fn(&mut SessionFilter)| {
            let mut x = base.clone();
            f(&mut x);
            matches_session(&s, &x, now)
        };
        assert!(with(|f| f.state = Some(SessionState::Succeeded)));
        assert!(!with(|f| f.state = Some(SessionState::Running)));
        assert!(with(|f| f.agent = Some("LIBRARIAN".into())));
        assert!(!with(|f| f.agent = Some("fixer".into())));
        assert!(with(|f| f.directory = Some("project-a".into())));
        assert!(!with(|f| f.directory = Some("Project-A".into())));
        assert!(with(|f| f.title_prefix = Some("DOCS/".into())));
        assert!(!with(|f| f.title_prefix = Some("docs/".into())));
        assert!(with(|f| f.since_minutes = Some(10)));
        assert!(!with(|f| f.since_minutes = Some(9)));
        assert!(!with(|f| f.children = Children::Only));
        assert!(with(|f| f.children = Children::Exclude));
    }

    #[test]
    fn search_is_case_insensitive() {
        assert!(contains_ignore_case("Hello World", "wORLD"));
        assert!(contains_ignore_case("Überraschung", "üBER"));
        assert!(!contains_ignore_case("abc", "abd"));
        let f = SessionFilter {
            search: Some("COLLECT".into()),
            ..Default::default()
        };
        assert!(title_matches_search("DOCS/x: collect notes", &f));
        assert!(!title_matches_search("other", &f));
    }

    #[test]
    fn empty_strings_are_rejected() {
        let f = SessionFilter {
            search: Some("  ".into()),
            ..Default::default()
        };
        assert!(matches!(
            validate(&f),
            Err(ClientError::InvalidArgument {
                field: "search",
                ..
            })
        ));
        assert!(validate(&SessionFilter::default()).is_ok());
    }
}
