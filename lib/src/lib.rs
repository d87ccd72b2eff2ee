//! Drums: the shared library behind the Drums tools. A tool's main parses arguments and calls in here.

pub mod account;
pub mod audit;
pub mod boundary;
pub mod cdp;
pub mod cgroup;
pub mod ckpt;
pub mod cli;
pub mod criu;
pub mod criu_image;
pub mod desktop;
pub mod destroy;
pub mod error;
pub mod image;
pub mod inroot;
pub mod ledger;
pub mod mapped;
pub mod mountinfo;
pub mod net;
pub mod netlink;
pub mod ns;
pub mod nsenter;
pub mod overlay;
pub mod pool;
pub mod proc;
pub mod ready;
pub mod record;
pub mod reseed;
pub mod restore;
pub mod runtime;
pub mod session_io;
pub mod spool;
pub mod state;
pub mod validate;
pub mod x11;

pub use error::{Error, Result};
pub use record::Session;
