//! drums-ready's library: its command line, from which man/drums-ready.1's OPTIONS are generated.
pub mod cli;
