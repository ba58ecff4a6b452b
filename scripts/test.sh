#!/usr/bin/env bash
# The test command: every unit, property, simulation and interoperability test, then the
# stress tests (marked #[ignore] because they are heavy) in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
cargo test --workspace --release -- --ignored
