//! drums-guest's library: its command line, from which man/drums-guest.1's OPTIONS are generated.
pub mod cli;
