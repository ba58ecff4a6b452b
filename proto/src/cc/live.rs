//! Live pacing (SRT's LiveCC): no window, a sending period set from a maximum bandwidth.

use super::CongestionControl;

/// Live pacing controller.
#[derive(Debug, Default)]
pub struct LiveCc {}

impl CongestionControl for LiveCc {
    fn name(&self) -> &str {
        "live"
    }
}
