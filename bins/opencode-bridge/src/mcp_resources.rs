//! opencode sessions as MCP resources: the template `opencode://session/{id}` whose read is the
//! session's whole transcript (the text `opencode_session_output mode=full` shows), the newest
//! sessions in `resources/list`, and the `resource_link` the task tools add to their replies.
//! Sessions come from opencode's store (read-only) or server, like `opencode_sessions`.

use crate::app::App;
use crate::session_uri::{PREFIX, SERVER_PREFIX, uri};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ContentBlock, ErrorCode, ListResourceTemplatesResult, ListResourcesResult, Resource,
    ResourceContents, ResourceTemplate,
};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The template clients fill in.
pub const TEMPLATE: &str = "opencode://session/{id}";
/// Sessions `resources/list` shows, newest first (subagent sessions left out).
pub const LISTED: usize = 50;
/// Transcripts are plain text.
pub const MIME: &str = "text/plain";

/// The template of a session on a server of the config file.
pub const SERVER_TEMPLATE: &str = "opencode://server/{server}/session/{id}";

/// A `resource_link` content item to the session at `uri` ([`uri`],
/// [`crate::session_uri::task_uri`]).
pub fn link(uri: &str) -> ContentBlock {
    let id = uri.rsplit('/').next().unwrap_or(uri);
    ContentBlock::resource_link(
        Resource::new(uri, id)
            .with_title(format!("opencode session {id}"))
            .with_description("The session's transcript (resources/read)")
            .with_mime_type(MIME),
    )
}

/// `resources/templates/list`.
pub fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new(TEMPLATE, "opencode-session")
            .with_title("opencode session transcript")
            .with_description(
                "What an opencode session did: its header (state, agent, tokens, directory) and every message condensed, with `-> tool(input) [status] => result` lines; cut to 100000 characters keeping the end. {id} is a session id (ses_...), as opencode_sessions, opencode_status and resources/list show it.",
            )
            .with_mime_type(MIME),
        ResourceTemplate::new(SERVER_TEMPLATE, "opencode-server-session")
            .with_title("opencode session on a server of the bridge's config file")
            .with_description(
                "The same transcript, of a session on {server}, a [[server]] of the bridge's config file (opencode_doctor lists them).",
            )
            .with_mime_type(MIME),
    ])
}

/// How long `resources/list` waits for the session listing. Claude Code lists resources as it
/// connects and leaves a server's tools out of the first model request when its lists are not
/// all in by then (seen with 2.1.328: a 4 s first listing, the `opencode --help` probe of a
/// missing store, cost the session every bridge tool). A slower listing goes on in the
/// background and the next `resources/list` gets it.
pub const LIST_DEADLINE: Duration = Duration::from_millis(500);

/// The last complete listing, and whether one is under way.
#[derive(Debug, Default)]
pub struct Listing {
    last: Mutex<Vec<Resource>>,
    refreshing: AtomicBool,
}

/// `resources/list`: the newest sessions that are not subagent sessions, or, when listing them
/// takes longer than [`LIST_DEADLINE`], the last complete listing (empty at first).
pub async fn list(app: &Arc<App>, listing: &Arc<Listing>) -> Result<ListResourcesResult, McpError> {
    let last = || {
        ListResourcesResult::with_all_items(
            listing
                .last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    };
    if listing.refreshing.swap(true, Ordering::SeqCst) {
        return Ok(last());
    }
    let (app, shared) = (app.clone(), listing.clone());
    let task = tokio::spawn(async move {
        let fresh = fetch(&app).await;
        if let Ok(resources) = &fresh {
            *shared.last.lock().unwrap_or_else(|e| e.into_inner()) = resources.clone();
        }
        shared.refreshing.store(false, Ordering::SeqCst);
        fresh
    });
    match tokio::time::timeout(LIST_DEADLINE, task).await {
        Ok(Ok(fresh)) => fresh.map(ListResourcesResult::with_all_items),
        Ok(Err(e)) => Err(McpError::internal_error(
            format!("cannot list sessions: {e}"),
            None,
        )),
        Err(_) => {
            tracing::info!(
                "resources/list: the session listing is slow; answering with the last one (the next resources/list has the new one)"
            );
            Ok(last())
        }
    }
}

async fn fetch(app: &App) -> Result<Vec<Resource>, McpError> {
    let sessions = app
        .recent_sessions(LISTED)
        .await
        .map_err(|e| McpError::internal_error(format!("cannot list sessions: {e}"), None))?;
    Ok(sessions
        .iter()
        .map(|s| {
            let name = if s.title.trim().is_empty() {
                s.id.clone()
            } else {
                s.title.clone()
            };
            let agent = s.agent.as_deref().unwrap_or("?");
            Resource::new(uri(&s.id), name)
                .with_description(format!(
                    "{} session {} (agent {agent}) in {}",
                    s.state.as_str(),
                    s.id,
                    s.directory
                ))
                .with_mime_type(MIME)
        })
        .collect())
}

/// `resources/read`.
pub async fn read(app: &App, uri: &str) -> Result<ResourceContents, McpError> {
    let (server, id) = session_id(uri)?;
    match app.session_transcript(id, server).await {
        Ok(Some(text)) => Ok(ResourceContents::text(text, uri).with_mime_type(MIME)),
        Ok(None) => Err(McpError::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "resource not found: no opencode session has the id `{}`; resources/list and opencode_sessions show the sessions",
                crate::stdio_guard::clip(id)
            ),
            Some(json!({"uri": uri})),
        )),
        Err(e) => Err(McpError::internal_error(
            format!("cannot read session {id}: {e}"),
            Some(json!({"uri": uri})),
        )),
    }
}

/// The server (for `opencode://server/{server}/session/{id}`) and session id of a session URI,
/// or a one-line `-32602` saying what a good URI looks like.
fn session_id(uri: &str) -> Result<(Option<&str>, &str), McpError> {
    let bad = |what: &str| {
        McpError::new(
            ErrorCode::INVALID_PARAMS,
            format!(
                "bad resource uri `{}`: {what}; use {TEMPLATE} (or {SERVER_TEMPLATE}) with a session id such as ses_3f2a9c… (resources/list shows them)",
                crate::stdio_guard::clip(uri)
            ),
            Some(json!({"uri": uri})),
        )
    };
    let (server, id) = if let Some(id) = uri.strip_prefix(PREFIX) {
        (None, id)
    } else if let Some(rest) = uri.strip_prefix(SERVER_PREFIX) {
        match rest.split_once("/session/") {
            Some((server, id))
                if !server.is_empty()
                    && server.len() <= 64
                    && !server.starts_with('-')
                    && server
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) =>
            {
                (Some(server), id)
            }
            _ => return Err(bad("that is not a server's session")),
        }
    } else {
        return Err(bad("this server only has opencode session resources"));
    };
    let well_formed = id.len() > 4
        && id.len() <= 100
        && id.starts_with("ses_")
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if well_formed {
        Ok((server, id))
    } else {
        Err(bad("that is not a session id"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_uri::task_uri;

    #[test]
    fn session_uris_are_parsed_strictly() {
        assert_eq!(
            session_id("opencode://session/ses_abc123").unwrap(),
            (None, "ses_abc123")
        );
        assert_eq!(
            session_id("opencode://server/devbox/session/ses_abc123").unwrap(),
            (Some("devbox"), "ses_abc123")
        );
        assert_eq!(
            task_uri("ses_abc123", "serve:devbox"),
            "opencode://server/devbox/session/ses_abc123"
        );
        assert_eq!(
            task_uri("ses_abc123", "run"),
            "opencode://session/ses_abc123"
        );
        for bad in [
            "opencode://session/",
            "opencode://session/abc",
            "opencode://session/ses_a/../b",
            "opencode://session/ses_ x",
            "file:///etc/passwd",
            "opencode://task/3",
            "opencode://server//session/ses_abc",
            "opencode://server/-x/session/ses_abc",
            "opencode://server/a b/session/ses_abc",
            "opencode://server/devbox/ses_abc",
        ] {
            let e = session_id(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{bad}");
            assert!(!e.message.contains('\n'), "{}", e.message);
            assert!(e.message.contains(TEMPLATE), "{}", e.message);
        }
    }
}
