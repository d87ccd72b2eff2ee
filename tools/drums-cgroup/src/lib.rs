//! drums-cgroup's library: its command line, from which man/drums-cgroup.1's OPTIONS are generated.
pub mod cli;
