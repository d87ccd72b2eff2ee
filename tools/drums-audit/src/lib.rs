//! drums-audit's library: its command line, from which man/drums-audit.1's OPTIONS are generated.
pub mod cli;
