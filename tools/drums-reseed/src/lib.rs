//! drums-reseed's library: its command line, from which man/drums-reseed.1's OPTIONS are generated.
pub mod cli;
