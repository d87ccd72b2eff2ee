//! drums-ns's library: its command line, from which man/drums-ns.1's OPTIONS are generated.
pub mod cli;
