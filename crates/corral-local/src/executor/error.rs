//! The executor's errors.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("replica {0} is already running")]
    AlreadyRunning(String),
    #[error("replica {name} incarnation {incarnation} was already started ({dir})")]
    AlreadyStarted {
        name: String,
        incarnation: String,
        dir: PathBuf,
    },
    #[error("no replica named {0}")]
    NotFound(String),
    #[error("invalid replica spec: {0}")]
    InvalidSpec(String),
}

pub(super) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ExecutorError {
    let context = context.into();
    move |source| ExecutorError::Io { context, source }
}
