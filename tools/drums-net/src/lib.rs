//! drums-net's library: its command line, from which man/drums-net.1's OPTIONS are generated.
pub mod cli;
