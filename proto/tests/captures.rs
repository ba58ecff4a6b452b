//! Parses every UDP payload of the real libsrt 1.5.1 captures in `shared/captures` and checks
//! what each capture is known to contain, plus byte-exact re-emission of lossless control packets.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use slipstream_proto::seq::SeqNo;
use slipstream_proto::wire::{
    Ack, ControlBody, DataHeader, Handshake, HsType, Packet, PacketPosition, RejectReason,
    SrtFlags, HEADER_LEN,
};

/// One UDP datagram from a capture.
struct Datagram {
    src_port: u16,
    /// Length of the UDP payload on the wire.
    orig_len: usize,
    /// The captured part of the payload (cut at the snap length).
    payload: Vec<u8>,
}

/// Where the captures are: `SLIPSTREAM_CAPTURES` if set, else `shared/captures` beside the
/// checkout, else beside the checkout this one was cloned from (a fresh local clone, as CI
/// makes, sits elsewhere).
fn captures_dir() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut tried = Vec::new();
    if let Some(d) = std::env::var_os("SLIPSTREAM_CAPTURES") {
        tried.push(PathBuf::from(d));
    }
    tried.push(root.join("../shared/captures"));
    let origin = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["config", "--get", "remote.origin.url"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|u| u.starts_with('/'));
    if let Some(o) = origin {
        tried.push(Path::new(&o).join("../shared/captures"));
    }
    if let Some(dir) = tried.iter().find(|d| d.is_dir()) {
        return Some(dir.clone());
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("capture directory missing in CI (looked in {tried:?})");
    }
    eprintln!("skipping: capture directory not found (looked in {tried:?})");
    None
}

/// A minimal pcap reader: classic pcap (either byte order, µs or ns), link types NULL,
/// EN10MB, RAW, LINUX_SLL and LINUX_SLL2; IPv4 + UDP only.
fn read_pcap(path: &Path) -> Vec<Datagram> {
    let d = std::fs::read(path).unwrap();
    assert!(d.len() >= 24, "{}: no global header", path.display());
    let magic = u32::from_le_bytes(d[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("{}: not a pcap file (magic {m:#x})", path.display()),
    };
    let u32_at = |b: &[u8], i: usize| {
        let w: [u8; 4] = b[i..i + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let linktype = u32_at(&d, 20) & 0x0FFF_FFFF;
    let l2_len = match linktype {
        0 => 4,    // DLT_NULL
        1 => 14,   // DLT_EN10MB
        101 => 0,  // DLT_RAW
        113 => 16, // LINUX_SLL
        276 => 20, // LINUX_SLL2
        t => panic!("{}: unsupported link type {t}", path.display()),
    };
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32_at(&d, off + 8) as usize;
        let rec = &d[off + 16..(off + 16 + incl).min(d.len())];
        off += 16 + incl;
        let Some(ip) = rec.get(l2_len..) else {
            continue;
        };
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 17 {
            continue;
        }
        let ihl = usize::from(ip[0] & 0x0F) * 4;
        let Some(udp) = ip.get(ihl..) else { continue };
        if udp.len() < 8 {
            continue;
        }
        let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        let orig_len = udp_len.saturating_sub(8);
        let payload = &udp[8..];
        out.push(Datagram {
            src_port: u16::from_be_bytes([udp[0], udp[1]]),
            orig_len,
            payload: payload[..payload.len().min(orig_len)].to_vec(),
        });
    }
    out
}

/// Everything a capture holds, parsed.
#[derive(Default)]
struct Summary {
    /// Data headers with their payload length on the wire.
    data: Vec<(DataHeader, usize)>,
    handshakes: Vec<(u16, Handshake)>,
    full_acks: usize,
    light_acks: usize,
    ackacks: Vec<u32>,
    ack_nos: Vec<u32>,
    nak_singles: usize,
    nak_ranges: usize,
    keepalives: usize,
    shutdowns: usize,
    reemitted: usize,
}

/// Parses every datagram (all must parse), checks byte-exact re-emission of lossless control
/// packets, and collects facts.
fn analyse(name: &str) -> Option<Summary> {
    let dir = captures_dir()?;
    let dgrams = read_pcap(&dir.join(name));
    assert!(!dgrams.is_empty(), "{name}: no UDP datagrams");
    let mut s = Summary::default();
    for (i, d) in dgrams.iter().enumerate() {
        let pkt = Packet::parse(&d.payload)
            .unwrap_or_else(|e| panic!("{name} #{i} ({} bytes): {e}", d.payload.len()));
        let c = match pkt {
            Packet::Data(h, _) => {
                s.data.push((h, d.orig_len - HEADER_LEN));
                continue;
            }
            Packet::Control(c) => c,
        };
        assert_eq!(
            d.payload.len(),
            d.orig_len,
            "{name} #{i}: control packet cut by snap length"
        );
        let cif_len = d.payload.len() - HEADER_LEN;
        let lossless = match &c.body {
            ControlBody::Handshake(hs) => {
                s.handshakes.push((d.src_port, hs.clone()));
                let e = &hs.ext;
                !(e.kmreq || e.kmrsp || e.filter || e.group || e.unknown > 0)
            }
            ControlBody::Ack(Ack { ack_no, info, .. }) => {
                match info {
                    Some(_) => {
                        s.full_acks += 1;
                        s.ack_nos.push(*ack_no);
                    }
                    None => s.light_acks += 1,
                }
                cif_len == 4 || cif_len == 28
            }
            ControlBody::Nak(r) => {
                assert!(!r.is_empty(), "{name} #{i}: empty NAK");
                for (a, b) in r.iter() {
                    if a == b {
                        s.nak_singles += 1;
                    } else {
                        s.nak_ranges += 1;
                    }
                }
                true
            }
            ControlBody::AckAck { ack_no } => {
                s.ackacks.push(*ack_no);
                d.payload[HEADER_LEN..] == [0; 4]
            }
            ControlBody::KeepAlive => {
                s.keepalives += 1;
                d.payload[HEADER_LEN..] == [0; 4]
            }
            ControlBody::Shutdown => {
                s.shutdowns += 1;
                d.payload[HEADER_LEN..] == [0; 4]
            }
            other => panic!("{name} #{i}: unexpected control packet {other:?}"),
        };
        if lossless {
            let mut out = vec![0u8; 1500];
            let n = c.emit(&mut out).expect("re-emission fits");
            assert_eq!(
                &out[..n],
                &d.payload[..],
                "{name} #{i}: re-emitted {:?} differs",
                c.body
            );
            s.reemitted += 1;
        }
    }
    Some(s)
}

fn conclusion_with(
    s: &Summary,
    pred: impl Fn(&Handshake) -> bool,
) -> impl Iterator<Item = &Handshake> {
    s.handshakes
        .iter()
        .map(|(_, h)| h)
        .filter(move |h| h.hs_type == HsType::Conclusion && pred(h))
}

#[test]
fn live_mode_streamid() {
    let Some(s) = analyse("srt-live-mode-streamid.pcap") else {
        return;
    };
    // Induction request/response, caller's and listener's conclusions.
    assert_eq!(s.handshakes.len(), 4);
    let (_, ind) = &s.handshakes[0];
    assert_eq!((ind.version, ind.hs_type), (4, HsType::Induction));
    let (_, ind_rsp) = &s.handshakes[1];
    assert_eq!(ind_rsp.extension_field, slipstream_proto::wire::SRT_MAGIC);

    let caller: Vec<_> = conclusion_with(&s, |h| h.ext.hsreq.is_some()).collect();
    assert_eq!(caller.len(), 1);
    let c = caller[0];
    assert_eq!(c.ext.stream_id.as_deref(), Some(&b"camera-7"[..]));
    assert_eq!(c.ext.congestion, None, "live is the default, not sent");
    assert_eq!(c.extension_field, 0x5, "HSREQ | CONFIG");
    let req = c.ext.hsreq.unwrap();
    assert_eq!(req.version, 0x0001_0501);
    assert_eq!(req.flags, SrtFlags(0xbf));
    assert!(!req.flags.has(SrtFlags::STREAM));
    assert_eq!(
        (req.recv_tsbpd_delay_ms, req.send_tsbpd_delay_ms),
        (120, 120)
    );
    assert_eq!(c.peer_ipv4(), Some(std::net::Ipv4Addr::LOCALHOST));

    let listener: Vec<_> = conclusion_with(&s, |h| h.ext.hsrsp.is_some()).collect();
    assert_eq!(listener.len(), 1);
    let rsp = listener[0].ext.hsrsp.unwrap();
    // The larger latency (the listener's 200 ms) wins in both directions.
    assert_eq!(
        (rsp.recv_tsbpd_delay_ms, rsp.send_tsbpd_delay_ms),
        (200, 200)
    );
    assert_eq!(rsp.flags, SrtFlags(0xbf));

    // 1000 datagrams of 1316 bytes, one message each: SOLO, not in order, numbered 1..=1000.
    assert_eq!(s.data.len(), 1000);
    for (k, (h, len)) in s.data.iter().enumerate() {
        assert_eq!(*len, 1316);
        assert_eq!(h.position, PacketPosition::Solo);
        assert!(!h.in_order && !h.retransmitted);
        assert_eq!(h.msg_no.get(), k as u32 + 1);
    }
    let first = s.data[0].0.seq;
    assert_eq!(s.data[999].0.seq, first.add(999));
    assert!(s
        .data
        .windows(2)
        .all(|w| w[0].0.timestamp <= w[1].0.timestamp));

    assert!(s.full_acks > 100 && s.light_acks == 0);
    assert_eq!(
        s.ackacks, s.ack_nos,
        "every full ACK is echoed by an ACKACK"
    );
    assert_eq!(s.nak_singles + s.nak_ranges, 0);
    assert!(s.keepalives >= 2);
    assert_eq!(s.shutdowns, 1);
    assert!(s.reemitted > 200);
}

#[test]
fn file_mode_with_loss() {
    let Some(s) = analyse("srt-file-mode-2pct-loss.pcap") else {
        return;
    };
    // Every packet appears twice (both sides of the relay).
    let caller: Vec<_> = conclusion_with(&s, |h| h.ext.hsreq.is_some()).collect();
    assert_eq!(caller.len(), 2);
    let c = caller[0];
    assert_eq!(c.ext.stream_id.as_deref(), Some(&b"in.bin"[..]));
    assert_eq!(c.ext.congestion.as_deref(), Some(&b"file"[..]));
    let req = c.ext.hsreq.unwrap();
    assert_eq!(req.flags, SrtFlags(0xe4));
    assert!(req.flags.has(SrtFlags::STREAM | SrtFlags::REXMITFLG));
    assert!(!req.flags.has(SrtFlags::TSBPD_SND) && !req.flags.has(SrtFlags::TSBPD_RCV));
    assert_eq!((req.recv_tsbpd_delay_ms, req.send_tsbpd_delay_ms), (0, 0));

    let listener: Vec<_> = conclusion_with(&s, |h| h.ext.hsrsp.is_some()).collect();
    assert_eq!(listener.len(), 2);
    let l = listener[0];
    assert_eq!(l.ext.congestion.as_deref(), Some(&b"file"[..]));
    assert_eq!(l.ext.hsrsp.unwrap().flags, SrtFlags(0xa4));

    assert!(s.full_acks > 0 && s.light_acks > 0);
    assert!(!s.ackacks.is_empty());
    assert!(s.ackacks.iter().all(|n| s.ack_nos.contains(n)));
    assert!(s.nak_singles > 0 && s.nak_ranges > 0);
    assert_eq!(s.shutdowns, 2);

    // Stream API: every packet is SOLO with its own message number; in-order flag clear.
    // A retransmission keeps the sequence and message number of its original.
    let mut msg_of: HashMap<SeqNo, u32> = HashMap::new();
    let mut rexmits = 0;
    for (h, _) in &s.data {
        assert_eq!(h.position, PacketPosition::Solo);
        assert!(!h.in_order);
        let prev = msg_of.insert(h.seq, h.msg_no.get());
        if let Some(m) = prev {
            assert_eq!(m, h.msg_no.get(), "{:?} changed message number", h.seq);
        }
        if h.retransmitted {
            rexmits += 1;
        }
    }
    assert!(rexmits > 0);
    // Sequence numbers map one-to-one onto message numbers 1..=N.
    let first = s.data[0].0.seq;
    for (seq, msg) in &msg_of {
        assert_eq!(seq.diff(first) + 1, *msg as i32);
    }
    assert!(s.reemitted > 150);
}

#[test]
fn encryption_rejected() {
    let Some(s) = analyse("srt-handshake-encryption-rejected.pcap") else {
        return;
    };
    let km: Vec<_> = conclusion_with(&s, |h| h.ext.kmreq).collect();
    assert!(!km.is_empty());
    for h in &km {
        assert_eq!(h.extension_field & 0x2, 0x2, "KMREQ flag");
        let req = h.ext.hsreq.unwrap();
        // Default receiver latency 120 ms, peer latency 0.
        assert_eq!((req.recv_tsbpd_delay_ms, req.send_tsbpd_delay_ms), (120, 0));
    }
    let rejects: Vec<_> = s
        .handshakes
        .iter()
        .filter_map(|(_, h)| match h.hs_type {
            HsType::Reject(r) => Some(r),
            _ => None,
        })
        .collect();
    assert!(rejects.len() > 1, "the caller retries");
    assert!(rejects.iter().all(|&r| r == RejectReason::UNSECURE));
    assert_eq!(RejectReason::UNSECURE.0, 1011);
    assert_eq!(rejects.len(), km.len());
    assert!(s.data.is_empty());
}
