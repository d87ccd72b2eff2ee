//! drums-view's library: its command line, from which man/drums-view.1's OPTIONS are generated.
pub mod cli;
