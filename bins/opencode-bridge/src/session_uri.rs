//! The URIs that name opencode sessions, as the MCP resources serve them and the task replies
//! link them: `opencode://session/{id}` on this machine, `opencode://server/{server}/session/{id}`
//! on a server of the bridge's config file. Plain text, no MCP: the tool layer (`app`) names a
//! reply's session with them and `mcp_resources` reads them back.

/// The scheme and path every session URI starts with.
pub const PREFIX: &str = "opencode://session/";

/// How a session on a server of the config file is named.
pub const SERVER_PREFIX: &str = "opencode://server/";

/// The URI of a session.
pub fn uri(session_id: &str) -> String {
    format!("{PREFIX}{session_id}")
}

/// The URI of the session a task ran in: on this machine, or on the server of the config file
/// its engine names (`serve:<name>`).
pub fn task_uri(session_id: &str, engine: &str) -> String {
    match engine.strip_prefix("serve:") {
        Some(server) => format!("{SERVER_PREFIX}{server}/session/{session_id}"),
        None => uri(session_id),
    }
}
