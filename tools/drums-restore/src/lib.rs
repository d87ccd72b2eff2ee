//! drums-restore's library: its command line, from which man/drums-restore.1's OPTIONS are generated.
pub mod cli;
