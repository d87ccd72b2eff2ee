//! drums-pool's library: its command line.
pub mod cli;
