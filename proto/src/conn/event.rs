//! What a connection reports to its owner.

use crate::wire::RejectReason;

/// Why a connection ended or failed to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// We closed it and everything sent was acknowledged.
    Local,
    /// The peer sent a shutdown.
    PeerShutdown,
    /// Nothing heard from the peer within the idle timeout: it is dead or unreachable.
    PeerIdle,
    /// The caller got no handshake answer within the connect timeout.
    ConnectTimeout,
    /// The peer rejected the handshake.
    Rejected(RejectReason),
    /// close() gave up waiting for acknowledgements after the linger time; data was lost.
    LingerTimeout,
    /// The connection was aborted locally with data outstanding.
    Aborted,
}

impl core::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CloseReason::Local => f.write_str("closed"),
            CloseReason::PeerShutdown => f.write_str("peer closed the connection"),
            CloseReason::PeerIdle => f.write_str("peer stopped responding (idle timeout)"),
            CloseReason::ConnectTimeout => {
                f.write_str("connection timed out: no answer from the peer")
            }
            CloseReason::Rejected(r) => write!(f, "peer rejected the connection: {}", r.describe()),
            CloseReason::LingerTimeout => {
                f.write_str("gave up waiting for acknowledgements: data not delivered")
            }
            CloseReason::Aborted => f.write_str("connection aborted"),
        }
    }
}

/// Connection-level events, drained with `Endpoint::poll_event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A caller's handshake completed.
    Connected,
    /// A listener accepted this connection (handshake complete).
    Accepted,
    /// The connection ended (or never started); its state can still be read until removed.
    Closed(CloseReason),
}

impl RejectReason {
    /// A human-readable explanation, as libsrt's `srt_rejectreason_str` gives.
    pub fn describe(&self) -> String {
        let s = match *self {
            RejectReason::SYSTEM => "system function error",
            RejectReason::PEER => "rejected by the peer",
            RejectReason::RESOURCE => {
                "resource allocation problem (connection limit or memory budget)"
            }
            RejectReason::ROGUE => "incorrect data in handshake",
            RejectReason::BACKLOG => "listener's backlog exceeded",
            RejectReason::IPE => "internal program error",
            RejectReason::CLOSE => "socket is closing",
            RejectReason::VERSION => "peer is older than the required version",
            RejectReason::RDV_COOKIE => "rendezvous cookie collision",
            RejectReason::BAD_SECRET => "wrong password",
            RejectReason::UNSECURE => {
                "password required or unexpected (encryption is not supported by slipstream yet)"
            }
            RejectReason::MESSAGE_API => "stream/message mode mismatch",
            RejectReason::CONGESTION => "congestion control mismatch (file vs live mode)",
            RejectReason::FILTER => "packet filter mismatch",
            RejectReason::GROUP => "group settings mismatch",
            RejectReason::TIMEOUT => "connection timeout",
            _ => "unknown reason",
        };
        format!("{s} [{}]", self.0)
    }
}
