//! Handshake control packets (draft-sharabayko-srt §3.2.1 and §4.3): the 48-byte UDT-compatible
//! body and the SRT extensions (HSREQ/HSRSP, KMREQ/KMRSP, stream id, congestion, filter, group),
//! plus slipstream's own capability extension.

use super::WireError;
use crate::seq::SeqNo;

/// Handshake version of the caller's induction request (UDT legacy).
pub const HS_VERSION_UDT4: u32 = 4;
/// Handshake version 5 (SRT).
pub const HS_VERSION_SRT5: u32 = 5;
/// The extension field of a v5 induction response: "SRT" magic 0x4A17.
pub const SRT_MAGIC: u16 = 0x4A17;

/// Handshake type field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HsType {
    /// 0xFFFFFFFD.
    Done,
    /// 0xFFFFFFFE.
    Agreement,
    /// 0xFFFFFFFF.
    Conclusion,
    /// 0x00000000 (rendezvous).
    WaveAHand,
    /// 0x00000001.
    Induction,
    /// 1000 and above: a rejection with its reason.
    Reject(RejectReason),
    /// Anything else.
    Unknown(u32),
}

/// Rejection reasons (libsrt's `SRT_REJ_*` + 1000 on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejectReason(pub u32);

impl RejectReason {
    /// Unknown reason.
    pub const UNKNOWN: RejectReason = RejectReason(1000);
    /// System function error.
    pub const SYSTEM: RejectReason = RejectReason(1001);
    /// Rejected by the peer.
    pub const PEER: RejectReason = RejectReason(1002);
    /// System resource failure.
    pub const RESOURCE: RejectReason = RejectReason(1003);
    /// Rogue peer or incorrect parameters.
    pub const ROGUE: RejectReason = RejectReason(1004);
    /// Listener's backlog exceeded.
    pub const BACKLOG: RejectReason = RejectReason(1005);
    /// Internal program error.
    pub const IPE: RejectReason = RejectReason(1006);
    /// Socket is closing.
    pub const CLOSE: RejectReason = RejectReason(1007);
    /// Peer is older than the minimum version.
    pub const VERSION: RejectReason = RejectReason(1008);
    /// Rendezvous cookie collision.
    pub const RDV_COOKIE: RejectReason = RejectReason(1009);
    /// Wrong password.
    pub const BAD_SECRET: RejectReason = RejectReason(1010);
    /// Password required or unexpected.
    pub const UNSECURE: RejectReason = RejectReason(1011);
    /// Stream flag collision (message API mismatch).
    pub const MESSAGE_API: RejectReason = RejectReason(1012);
    /// Incompatible congestion controller.
    pub const CONGESTION: RejectReason = RejectReason(1013);
    /// Incompatible packet filter.
    pub const FILTER: RejectReason = RejectReason(1014);
    /// Incompatible group.
    pub const GROUP: RejectReason = RejectReason(1015);
    /// Connection timeout.
    pub const TIMEOUT: RejectReason = RejectReason(1016);
}

/// SRT flags carried in HSREQ/HSRSP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrtFlags(pub u32);

impl SrtFlags {
    /// The sender uses TSBPD.
    pub const TSBPD_SND: u32 = 0x01;
    /// The receiver uses TSBPD.
    pub const TSBPD_RCV: u32 = 0x02;
    /// Encryption supported.
    pub const CRYPT: u32 = 0x04;
    /// Too-late packet drop.
    pub const TLPKTDROP: u32 = 0x08;
    /// Periodic NAK reports.
    pub const NAKREPORT: u32 = 0x10;
    /// The R (retransmitted) bit is in use; message numbers are 26 bits.
    pub const REXMITFLG: u32 = 0x20;
    /// Stream (byte) mode rather than message mode.
    pub const STREAM: u32 = 0x40;
    /// Packet filter supported.
    pub const FILTER: u32 = 0x80;
    /// True when every bit of `f` is set.
    pub const fn has(self, f: u32) -> bool {
        self.0 & f == f
    }
}

/// The HSREQ / HSRSP extension body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrtHs {
    /// SRT library version, 0x00XXYYZZ.
    pub version: u32,
    /// SRT flags.
    pub flags: SrtFlags,
    /// TSBPD delay the receiver applies, in milliseconds.
    pub recv_tsbpd_delay_ms: u16,
    /// TSBPD delay the sender asks for, in milliseconds.
    pub send_tsbpd_delay_ms: u16,
}

/// slipstream's own handshake extension: both ends are slipstream and agree on extras such as
/// the end-to-end file digest trailer. Peers that do not know it ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlipstreamExt {
    /// Protocol revision of the extension.
    pub version: u32,
    /// Capability bits.
    pub flags: u32,
}

impl SlipstreamExt {
    /// Extension type code.
    pub const TYPE: u16 = 0x5353;
    /// A file transfer ends with a size + BLAKE3 digest trailer in the byte stream.
    pub const FILE_DIGEST: u32 = 0x1;
}

/// Parsed handshake extensions. Bounded: the stream id is at most 512 bytes, the congestion
/// controller name at most 64.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HsExtensions {
    /// HSREQ (from the caller).
    pub hsreq: Option<SrtHs>,
    /// HSRSP (from the listener).
    pub hsrsp: Option<SrtHs>,
    /// A KMREQ was present: the peer wants encryption.
    pub kmreq: bool,
    /// A KMRSP was present.
    pub kmrsp: bool,
    /// Stream id (SID extension), bytes as the application wrote them.
    pub stream_id: Option<Vec<u8>>,
    /// Congestion controller name ("live" or "file").
    pub congestion: Option<Vec<u8>>,
    /// A packet-filter extension was present.
    pub filter: bool,
    /// A group extension was present.
    pub group: bool,
    /// slipstream's capability extension.
    pub slipstream: Option<SlipstreamExt>,
    /// How many unknown extensions were skipped.
    pub unknown: u16,
}

/// A handshake control packet body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// 4 (UDT induction request) or 5.
    pub version: u32,
    /// Encryption field (key length / 8 in v5 conclusions, 0 otherwise).
    pub encryption: u16,
    /// Extension field: [`SRT_MAGIC`] in the induction response, extension flags in a conclusion
    /// (0x1 HSREQ, 0x2 KMREQ, 0x4 CONFIG), 2 (UDT_DGRAM) in a v4 induction request.
    pub extension_field: u16,
    /// The sender's initial packet sequence number.
    pub initial_seq: SeqNo,
    /// Maximum segment size in bytes (IP packet size, e.g. 1500).
    pub mss: u32,
    /// Flow window in packets.
    pub flow_window: u32,
    /// Handshake type.
    pub hs_type: HsType,
    /// The sender's SRT socket id.
    pub socket_id: u32,
    /// SYN cookie.
    pub cookie: u32,
    /// The peer IP as the sender saw it, 16 raw bytes as on the wire.
    pub peer_ip: [u8; 16],
    /// Extensions (only in v5 conclusions).
    pub ext: HsExtensions,
}

impl Handshake {
    /// Length of the fixed body.
    pub const BODY_LEN: usize = 48;

    /// Parses a handshake control information field (after the 16-byte header).
    pub fn parse(cif: &[u8]) -> Result<Self, WireError> {
        let _ = cif;
        todo!()
    }

    /// Writes the body and extensions into `buf`; returns the length or `None` if it does not fit.
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        let _ = buf;
        todo!()
    }
}
