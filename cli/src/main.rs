//! The `slipstream` command (see `slipstream --help`).

/// Large buffers mapped on their own, on transparent huge pages with `SLIPSTREAM_HUGEPAGES=1`
/// (see [`slipstream::HugePageAlloc`]).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: slipstream::HugePageAlloc = slipstream::HugePageAlloc;

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    if std::env::var_os("SLIPSTREAM_HUGEPAGES").is_some_and(|v| v == "1") {
        slipstream::HugePageAlloc::enable();
    }
    slipstream_cli::cli::run()
}
