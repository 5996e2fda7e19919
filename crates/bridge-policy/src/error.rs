//! Errors of the policy crate.

/// A configuration problem that stops the policy from deciding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A mode source holds a value that is not a mode name.
    #[error(
        "{setting} is {value:?}, which is not a routing mode: use blueprint, sensitive or insensitive (or unset it), then retry"
    )]
    InvalidMode {
        /// Where the value came from: `env OPENCODE_MODE`, `the mode argument`, ...
        setting: String,
        /// The offending value (clipped to 40 characters).
        value: String,
    },
}
