//! UDT's native congestion control (UDT paper; SRT's FileCC): slow start on the window, then
//! rate-based AIMD on the sending period with bandwidth-estimate-driven increase.

use super::CongestionControl;

/// UDT native control.
#[derive(Debug, Default)]
pub struct UdtCc {}

impl CongestionControl for UdtCc {
    fn name(&self) -> &str {
        "file"
    }
}
