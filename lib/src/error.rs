//! One error type for every tool, and the one place where an error becomes an exit code.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Exit codes shared by every Drums tool (documented in drums(7) and docs/record.md).
pub mod exit {
    pub const OK: i32 = 0;
    /// A check ran to the end and its answer is "no" (not ready, audit rule failed, something left behind).
    pub const CHECK_FAILED: i32 = 1;
    /// The command line is wrong (unknown option, missing argument).
    pub const USAGE: i32 = 2;
    /// The input is wrong: malformed JSON, unknown record version, a missing field, a hostile path.
    pub const BAD_INPUT: i32 = 3;
    /// Something the tool needs is missing from this machine: not root, a program, CRIU, a kernel feature.
    pub const ENVIRONMENT: i32 = 4;
    /// The operation was attempted and failed; what it created is in the ledger.
    pub const FAILED: i32 = 5;
    /// A check could not be completed (a session vanished mid-audit): never reported as a pass.
    pub const INCOMPLETE: i32 = 6;
    /// The tool or subcommand is not implemented yet.
    pub const NOT_IMPLEMENTED: i32 = 7;
    /// A session's ledger holds a whole line this version does not understand (a later format version, an
    /// entry kind it does not know): the session was left as it is, nothing of it removed.
    pub const NOT_UNDERSTOOD: i32 = 8;
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{msg}")]
    BadInput { msg: String, field: Option<String> },
    #[error("{0}")]
    Environment(String),
    #[error("{0}")]
    Failed(String),
    /// A process the tool started could not be started or is not running any more: its role and its
    /// log, a path inside the session, so that a caller can tell which one without parsing the message.
    #[error("{msg}")]
    Process { role: String, log: PathBuf, msg: String },
    #[error("{path}: {what}: {source}")]
    Io { what: String, path: PathBuf, #[source] source: std::io::Error },
    #[error("{0}")]
    CheckFailed(String),
    #[error("{0}")]
    Incomplete(String),
    #[error("{0} is not implemented yet")]
    NotImplemented(String),
    #[error("{0}")]
    NotUnderstood(String),
    /// The original failure, and a cleanup that failed after it: both are reported.
    #[error("{cause}; cleanup also failed: {cleanup}")]
    WithCleanup { cause: Box<Error>, cleanup: Box<Error> },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(what: impl Into<String>, path: impl AsRef<Path>, source: std::io::Error) -> Error {
        Error::Io { what: what.into(), path: path.as_ref().to_path_buf(), source }
    }
    pub fn bad_input(msg: impl Into<String>) -> Error {
        Error::BadInput { msg: msg.into(), field: None }
    }
    pub fn bad_field(field: impl Into<String>, msg: impl Into<String>) -> Error {
        let field = field.into();
        Error::BadInput { msg: format!("field `{}`: {}", field, msg.into()), field: Some(field) }
    }
    pub fn failed(msg: impl Into<String>) -> Error {
        Error::Failed(msg.into())
    }
    pub fn usage(msg: impl Into<String>) -> Error {
        Error::Usage(msg.into())
    }
    pub fn env(msg: impl Into<String>) -> Error {
        Error::Environment(msg.into())
    }
    /// Keep `self` as the cause and attach a cleanup failure to it, if there was one.
    pub fn with_cleanup(self, cleanup: Result<()>) -> Error {
        match cleanup {
            Ok(()) => self,
            Err(c) => Error::WithCleanup { cause: Box::new(self), cleanup: Box::new(c) },
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => exit::USAGE,
            Error::BadInput { .. } => exit::BAD_INPUT,
            Error::Environment(_) => exit::ENVIRONMENT,
            Error::Failed(_) | Error::Process { .. } | Error::Io { .. } => exit::FAILED,
            Error::CheckFailed(_) => exit::CHECK_FAILED,
            Error::Incomplete(_) => exit::INCOMPLETE,
            Error::NotImplemented(_) => exit::NOT_IMPLEMENTED,
            Error::NotUnderstood(_) => exit::NOT_UNDERSTOOD,
            Error::WithCleanup { cause, .. } => cause.exit_code(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Error::Usage(_) => "usage",
            Error::BadInput { .. } => "bad_input",
            Error::Environment(_) => "environment",
            Error::Failed(_) | Error::Process { .. } | Error::Io { .. } => "failed",
            Error::CheckFailed(_) => "check_failed",
            Error::Incomplete(_) => "incomplete",
            Error::NotImplemented(_) => "not_implemented",
            Error::NotUnderstood(_) => "not_understood",
            Error::WithCleanup { cause, .. } => cause.kind(),
        }
    }

    /// The one-line JSON object a tool prints on stderr.
    pub fn to_record(&self, tool: &str) -> ErrorRecord {
        let mut r = ErrorRecord::new(tool, self.kind(), self.exit_code(), self.to_string());
        match self {
            Error::BadInput { field: Some(f), .. } => r.field = Some(f.clone()),
            Error::Io { path, source, .. } => {
                r.path = Some(path.clone());
                r.errno = source.raw_os_error();
            }
            Error::Process { role, log, .. } => {
                r.process = Some(role.clone());
                r.log = Some(log.clone());
            }
            Error::WithCleanup { cleanup, .. } => r.cleanup_error = Some(cleanup.to_string()),
            _ => {}
        }
        r
    }
}

impl From<nix::Error> for Error {
    fn from(e: nix::Error) -> Error {
        Error::Failed(format!("system call failed: {e}"))
    }
}

/// Attach a path and an action to an I/O result.
pub trait IoContext<T> {
    fn ctx(self, what: &str, path: impl AsRef<Path>) -> Result<T>;
}
impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: &str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(what, path, e))
    }
}
impl<T> IoContext<T> for nix::Result<T> {
    fn ctx(self, what: &str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(what, path, std::io::Error::from_raw_os_error(e as i32)))
    }
}

/// The record format version: the `drums` member of every record and of the error object. A record
/// whose `drums` member differs is refused. (Here, below the records, so that the error object can carry
/// it; crate::record re-exports it.)
pub const VERSION: u32 = 1;

/// A report's `type` member as a type of its own: one variant, serialized as the record's type name, so
/// that decoding a record of another type fails instead of reading it as this one.
/// `record_type!(SweepType = "sweep")` makes `SweepType::Tag`, written and read as `"sweep"`, and
/// `SweepType::NAME`, the name itself.
#[macro_export]
macro_rules! record_type {
    ($name:ident = $value:literal) => {
        #[doc = concat!("The `type` member `\"", $value, "\"`.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            #[default]
            #[serde(rename = $value)]
            Tag,
        }
        impl $name {
            pub const NAME: &'static str = $value;
        }
    };
}

crate::record_type!(ErrorType = "error");

/// The error object on stderr (docs/record.md, "Error object"). The members after `message` are there
/// only when they apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    pub drums: u32,
    #[serde(rename = "type")]
    pub record_type: ErrorType,
    pub tool: String,
    pub kind: String,
    pub exit: i32,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// With `path`, when the failure has an OS error number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_error: Option<String>,
}

impl ErrorRecord {
    pub fn new(tool: &str, kind: &str, exit: i32, message: String) -> ErrorRecord {
        ErrorRecord { drums: VERSION, record_type: ErrorType::Tag, tool: tool.into(), kind: kind.into(), exit, message, field: None, path: None, errno: None, process: None, log: None, cleanup_error: None }
    }
}
