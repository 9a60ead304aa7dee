//! The one error a shim's fold or restore returns, below the [`Shim`]
//! contract and the [`OpenAiBody`] parser that both return it.
//!
//! [`Shim`]: crate::Shim
//! [`OpenAiBody`]: crate::OpenAiBody

/// Why a shim could not fold or restore; the runtime falls back to the
/// original behaviour and shows the message in `lastError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimError(pub String);

impl ShimError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        ShimError(message.into())
    }
}

impl std::fmt::Display for ShimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShimError {}
