//! drums-overlay's library: its command line, from which man/drums-overlay.1's OPTIONS are generated.
pub mod cli;
