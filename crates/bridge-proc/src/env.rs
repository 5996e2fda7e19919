//! The inherited environment a child opencode must not see.
//!
//! opencode marks its own process tree with variables (its pid, its client, its server's
//! credentials, its workspace). A run, a `serve` or an `api` call started by the bridge is a
//! separate instance: inheriting them ties it to the instance the bridge itself runs under (an
//! inherited server password or run id makes opencode 1.x fail with "Session not found").

/// Variables removed from every child opencode's environment (runs, temporary servers, the
/// roster's server, `claude -p` runs, version probes). One list for every place that starts
/// opencode; why each is here:
///
/// | variable | set by | why it is dropped |
/// |---|---|---|
/// | `OPENCODE_SERVER_PASSWORD` | the user, for `opencode serve` | the Basic-auth password of another server; a child would authenticate to (or protect itself with) the wrong one. A temporary server sets its own after removal. |
/// | `OPENCODE_SERVER_USERNAME` | the user, with the password | the same, for the user name. |
/// | `OPENCODE_PID` | every opencode at start-up, for its children (observed in 1.18) | names the parent instance; a child would take itself for part of it. |
/// | `OPENCODE_RUN_ID` | opencode 1.x for the processes of a run | an inherited run id makes 1.x fail with "Session not found". |
/// | `OPENCODE_SESSION_ID` | opencode for tool processes of a session | the parent's session, not the child's. |
/// | `OPENCODE_WORKSPACE_ID` | opencode for workspace servers (observed in 1.18) | routes the child's server into the parent's workspace. |
/// | `OPENCODE_CLIENT` | opencode's front ends (`acp`, the desktop app; observed in 1.18) | the client kind of the parent; it goes into the child's user agent and behaviour. |
/// | `OPENCODE_ROUTE` | the opencode TUI/desktop for their children | the parent's routing. |
/// | `OPENCODE_CALLER` | opencode front ends for their children | who called the parent, not the bridge. |
/// | `OPENCODE_EDITOR_SSE_PORT` | editor integrations of opencode | the parent's editor event port; a child would talk to the parent's editor. |
/// | `OPENCODE` | every opencode at start-up, `"1"` (observed in 1.18) | "running inside opencode": the child is not. |
///
/// The rename and roster servers of `opencode-client` used to drop only `OPENCODE_PID` and
/// `OPENCODE_RUN_ID`; they are opencode instances like a run, so they drop the same list.
pub const DROPPED_ENV: &[&str] = &[
    "OPENCODE_SERVER_PASSWORD",
    "OPENCODE_SERVER_USERNAME",
    "OPENCODE_PID",
    "OPENCODE_RUN_ID",
    "OPENCODE_SESSION_ID",
    "OPENCODE_WORKSPACE_ID",
    "OPENCODE_CLIENT",
    "OPENCODE_ROUTE",
    "OPENCODE_CALLER",
    "OPENCODE_EDITOR_SSE_PORT",
    "OPENCODE",
];
