//! Typed errors with one-line messages that say what failed and what to do.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("no opencode session {id}: check the id with opencode_sessions")]
    NotFound { id: String },
    #[error("opencode store not found at {path}: run opencode once, or set OPENCODE_DB")]
    StoreMissing { path: String },
    #[error(
        "opencode store at {path} is locked by a writer for longer than {waited_ms} ms: try again"
    )]
    StoreLocked { path: String, waited_ms: u64 },
    #[error(
        "opencode store at {path} is unreadable ({detail}): check the file, or use OPENCODE_BRIDGE_BACKEND=server"
    )]
    StoreCorrupt { path: String, detail: String },
    #[error(
        "opencode store schema is not one this bridge knows ({missing}; written by opencode {version}): upgrade opencode-bridge or use OPENCODE_BRIDGE_BACKEND=server"
    )]
    UnknownSchema { missing: String, version: String },
    #[error(
        "opencode server at {url} is not reachable ({detail}): start `opencode serve` or fix OPENCODE_BRIDGE_SERVER_URL"
    )]
    ServiceDown { url: String, detail: String },
    #[error(
        "opencode server at {url} did not answer within {timeout_ms} ms: it may be hung; raise OPENCODE_BRIDGE_API_TIMEOUT_MS or restart it"
    )]
    ServiceTimeout { url: String, timeout_ms: u64 },
    #[error(
        "opencode server at {url} refused the credentials (401): set OPENCODE_SERVER_PASSWORD (and OPENCODE_SERVER_USERNAME) to the server's"
    )]
    Unauthorized { url: String },
    #[error("opencode server at {url} answered {status}: {detail}")]
    ServiceError {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("opencode server at {url} sent a reply over {limit_bytes} bytes: refusing to read it")]
    ReplyTooLarge { url: String, limit_bytes: u64 },
    #[error("opencode server at {url} sent malformed JSON ({detail})")]
    MalformedReply { url: String, detail: String },
    #[error(
        "`opencode api` failed ({detail}): check that the opencode v2 service runs (`opencode service status`)"
    )]
    ApiCommand { detail: String },
    #[error(
        "a temporary `opencode serve` failed ({detail}): check that `opencode serve` starts in that directory (for a rename, OPENCODE_BRIDGE_SERVER_URL can name a running server instead)"
    )]
    TempServer { detail: String },
    /// opencode would not start here and said why (a configuration it refuses to load).
    #[error("opencode refuses to start here: {message}")]
    OpencodeRefused { message: String },
    /// The caller gave up (the bridge is stopping).
    #[error("stopped: the bridge is shutting down")]
    Cancelled,
    #[error("{operation} is not possible with the {backend} backend: {hint}")]
    Unsupported {
        operation: &'static str,
        backend: &'static str,
        hint: String,
    },
    #[error("bad {field}: {detail}")]
    InvalidArgument { field: &'static str, detail: String },
}
