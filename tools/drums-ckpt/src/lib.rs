//! drums-ckpt's library: its command line, from which man/drums-ckpt.1's OPTIONS are generated.
pub mod cli;
