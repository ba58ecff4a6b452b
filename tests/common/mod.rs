//! Helpers shared by the integration tests that need root or read tool output.
#![allow(dead_code)]

use std::process::Command;

/// Lossy UTF-8 of a process's output.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether the tests run in CI (`CI=true`), where nothing they need may be skipped.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether a root-only test runs: as root, or in CI (where it then fails without root).
/// Elsewhere it says what it skips.
pub fn root_test(name: &str) -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| text(&o.stdout).trim() == "0");
    if !root && !ci() {
        eprintln!("skipping {name}: needs root (network namespaces, TUN devices); runs in CI");
    }
    root || ci()
}

/// `ip netns list`.
pub fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output();
    out.map(|o| text(&o.stdout)).unwrap_or_default()
}
