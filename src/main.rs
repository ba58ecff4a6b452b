//! The `slipstream` command (see `slipstream --help`).

fn main() -> std::process::ExitCode {
    slipstream::cli::run()
}
