//! drums-sweep's library: its command line, from which man/drums-sweep.1's OPTIONS are generated.
pub mod cli;
