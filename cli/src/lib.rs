//! The `slipstream` command line (`slipstream --help`), its benchmarks and their plots, on
//! the [`slipstream`] library. An application that registers congestion controllers of its
//! own runs the command line with them through [`cli::run_with`].

mod bench;
pub mod cli;
mod plot;
