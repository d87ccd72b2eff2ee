//! Drums: the shared library behind the Drums tools. A tool's main parses arguments and calls in here.

pub mod audit;
pub mod cgroup;
pub mod cli;
pub mod destroy;
pub mod error;
pub mod guest;
pub mod ledger;
pub mod proc;
pub mod record;
pub mod state;

pub use error::{Error, Result};
pub use record::Session;
