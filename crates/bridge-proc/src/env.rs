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
/// | variable | what it is (opencode 1.18.33 unless said) | why it is dropped |
/// |---|---|---|
/// | `OPENCODE_SERVER_PASSWORD` | the Basic-auth password `opencode serve` and its clients use | another server's password: a child would protect itself with it or present it to the wrong server. A temporary server sets its own after removal. |
/// | `OPENCODE_SERVER_USERNAME` | the user name that goes with it | the same. |
/// | `OPENCODE_PID` | set by every opencode at start-up, for its children | names the parent instance, not the child. |
/// | `OPENCODE_RUN_ID` | a run's id (opencode 1.x before 1.18; not in 1.18.33) | an inherited run id made 1.x fail with "Session not found". |
/// | `OPENCODE_SESSION_ID` | the parent's session (earlier versions; not in 1.18.33) | the child has its own session. |
/// | `OPENCODE_WORKSPACE_ID` | set for workspace servers; a server with it routes requests into that workspace | the child would serve the parent's workspace. |
/// | `OPENCODE_CLIENT` | the front end (`acp`, the desktop app), used in the user agent | the child is not that client. |
/// | `OPENCODE_ROUTE` | the TUI's initial route (JSON) | would open the child on the parent's screen. |
/// | `OPENCODE_CALLER` | who called the parent (earlier versions; not in 1.18.33) | the caller is the bridge, not the parent's. |
/// | `OPENCODE_EDITOR_SSE_PORT` | the editor integration's event port (as `CLAUDE_CODE_SSE_PORT`) | a child would talk to the parent's editor. |
/// | `OPENCODE` | `"1"`, set by every opencode at start-up for its children | "running inside opencode": the child is not. |
///
/// Entries a version no longer sets cost nothing and keep older versions right.
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
