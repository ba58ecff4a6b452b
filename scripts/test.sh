#!/usr/bin/env bash
# The test command: every unit, property, simulation and interoperability test, then the
# stress tests (marked #[ignore] because they are heavy), optimized: the `ci` profile of
# Cargo.toml (release without link-time optimization, which took most of CI's time).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
cargo test --workspace --profile ci -- --ignored
