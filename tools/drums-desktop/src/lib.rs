//! drums-desktop's library: its command line, from which man/drums-desktop.1's OPTIONS are generated.
pub mod cli;
