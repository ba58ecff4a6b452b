//! The `slipstream` command (see `slipstream --help`).

/// Large buffers on transparent huge pages (see [`slipstream::HugePageAlloc`]);
/// `SLIPSTREAM_HUGEPAGES=0` turns that off.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: slipstream::HugePageAlloc = slipstream::HugePageAlloc;

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    if std::env::var_os("SLIPSTREAM_HUGEPAGES").is_some_and(|v| v == "0") {
        slipstream::HugePageAlloc::disable();
    }
    slipstream::cli::run()
}
