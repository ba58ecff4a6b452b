//! `slipstream live SRC DST`: relays messages between UDP, SRT (live mode) and files or
//! stdin/stdout, like `srt-live-transmit`. Stdin and files are read in 1316-byte chunks (seven
//! MPEG-TS packets).

use super::uri::{Uri, UriMode};
use super::{conn_config, endpoint_options, open, CliResult, Common, Summary};
use crate::api::{Connection, Endpoint};
use slipstream_proto::cc::CcRegistry;
use slipstream_proto::conn::Mode;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Seven 188-byte MPEG-TS packets, as srt-live-transmit reads.
const CHUNK: usize = 1316;
/// How often a waiting source re-checks `--duration`.
const POLL: Duration = Duration::from_millis(100);

enum Source {
    Udp(UdpSocket),
    // Field order matters: the connection drops before its endpoint.
    Srt(Connection, Endpoint),
    Reader(Box<dyn Read>),
}

enum Sink {
    Udp(UdpSocket, SocketAddr),
    Srt(Connection, Endpoint),
    Writer(Box<dyn Write>),
}

enum Got {
    Msg(usize),
    Idle,
    End,
}

fn is_std(spec: &str) -> bool {
    spec == "-" || spec == "file://con"
}

fn open_srt(
    uri: &Uri,
    common: &Common,
    registry: &CcRegistry,
) -> Result<(Connection, Endpoint), String> {
    let cfg = conn_config(Mode::Live, uri, common, registry)?;
    let (ep, c) = open(uri, cfg, endpoint_options(common, registry)?, None)?;
    eprintln!(
        "live: SRT connected with {} (latency {} ms)",
        c.peer_addr(),
        c.latency().as_millis()
    );
    Ok((c, ep))
}

fn open_source(spec: &str, common: &Common, registry: &CcRegistry) -> Result<Source, String> {
    if is_std(spec) {
        return Ok(Source::Reader(Box::new(io::stdin())));
    }
    if let Some(path) = spec.strip_prefix("file://") {
        let f = File::open(path).map_err(|e| format!("{path}: {e}"))?;
        return Ok(Source::Reader(Box::new(f)));
    }
    let uri = Uri::parse(spec)?;
    if uri.scheme == "udp" {
        let sock = UdpSocket::bind(uri.bind_addr()?).map_err(|e| format!("{spec}: {e}"))?;
        sock.set_read_timeout(Some(POLL))
            .map_err(|e| e.to_string())?;
        return Ok(Source::Udp(sock));
    }
    let (c, ep) = open_srt(&uri, common, registry)?;
    Ok(Source::Srt(c, ep))
}

fn open_sink(spec: &str, common: &Common, registry: &CcRegistry) -> Result<Sink, String> {
    if is_std(spec) {
        return Ok(Sink::Writer(Box::new(io::stdout())));
    }
    if let Some(path) = spec.strip_prefix("file://") {
        let f = File::create(path).map_err(|e| format!("{path}: {e}"))?;
        return Ok(Sink::Writer(Box::new(io::BufWriter::new(f))));
    }
    let uri = Uri::parse(spec)?;
    if uri.scheme == "udp" {
        if uri.mode == UriMode::Listener {
            return Err(format!("{spec}: UDP output needs a destination host"));
        }
        let dst = uri.remote()?;
        let local = if dst.is_ipv4() {
            SocketAddr::from(([0, 0, 0, 0], 0))
        } else {
            SocketAddr::from(([0u16; 8], 0))
        };
        let sock = UdpSocket::bind(local).map_err(|e| e.to_string())?;
        return Ok(Sink::Udp(sock, dst));
    }
    let (c, ep) = open_srt(&uri, common, registry)?;
    Ok(Sink::Srt(c, ep))
}

impl Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<Got> {
        match self {
            Source::Udp(s) => match s.recv_from(buf) {
                Ok((n, _)) => Ok(Got::Msg(n)),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    Ok(Got::Idle)
                }
                Err(e) => Err(e),
            },
            Source::Srt(c, _) => match c.recv_message_timeout(buf, POLL) {
                Ok(0) => Ok(Got::End),
                Ok(n) => Ok(Got::Msg(n)),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => Ok(Got::Idle),
                Err(e) => Err(e),
            },
            Source::Reader(r) => {
                let mut n = 0;
                while n < CHUNK {
                    match r.read(&mut buf[n..CHUNK]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(if n == 0 { Got::End } else { Got::Msg(n) })
            }
        }
    }

    fn srt(&self) -> Option<(&Connection, &Endpoint)> {
        match self {
            Source::Srt(c, e) => Some((c, e)),
            _ => None,
        }
    }
}

impl Sink {
    fn write(&mut self, msg: &[u8]) -> io::Result<()> {
        match self {
            Sink::Udp(s, dst) => s.send_to(msg, *dst).map(|_| ()),
            Sink::Srt(c, _) => c.send_message(msg),
            Sink::Writer(w) => w.write_all(msg),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        match self {
            Sink::Udp(..) => Ok(()),
            Sink::Srt(c, _) => {
                // A live close discards what is still queued (as libsrt's zero linger in live
                // mode); give the queue up to the latency plus a second to drain first, so a
                // finite source (a file) arrives whole.
                let until = Instant::now() + c.latency() + Duration::from_secs(1);
                while c.unacknowledged()? > 0 && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                c.close()
            }
            Sink::Writer(w) => w.flush(),
        }
    }

    fn srt(&self) -> Option<(&Connection, &Endpoint)> {
        match self {
            Sink::Srt(c, e) => Some((c, e)),
            _ => None,
        }
    }
}

pub(super) fn run(
    src: &str,
    dst: &str,
    duration: Option<f64>,
    count: Option<u64>,
    common: &Common,
    registry: &CcRegistry,
) -> CliResult {
    // The destination first, as srt-live-transmit does: an SRT output may wait for its peer.
    let mut sink = open_sink(dst, common, registry)?;
    let mut source = open_source(src, common, registry)?;
    let t0 = Instant::now();
    let deadline = duration.map(|s| t0 + Duration::from_secs_f64(s.max(0.0)));
    let mut buf = vec![0u8; 65_536];
    let (mut msgs, mut bytes) = (0u64, 0u64);
    let mut failure = None;
    loop {
        if count.is_some_and(|c| msgs >= c) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        match source.read(&mut buf) {
            Ok(Got::Msg(n)) => {
                if let Err(e) = sink.write(&buf[..n]) {
                    failure = Some(format!("output: {e}"));
                    break;
                }
                msgs += 1;
                bytes += n as u64;
            }
            Ok(Got::Idle) => {}
            Ok(Got::End) => break,
            Err(e) => {
                failure = Some(format!("input: {e}"));
                break;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if let Err(e) = sink.finish() {
        failure.get_or_insert(format!("closing output: {e}"));
    }
    let srt = source.srt().or_else(|| sink.srt());
    let stats = srt.and_then(|(c, _)| c.stats().ok());
    let s = Summary {
        role: "relayed",
        bytes,
        secs,
        integrity: format!(
            "{msgs} messages{}",
            stats
                .map(|s| format!(
                    ", {} lost, {} dropped too late",
                    s.pkts_rcv_loss,
                    s.pkts_rcv_dropped + s.pkts_snd_dropped
                ))
                .unwrap_or_default()
        ),
        verified: None,
        digest: None,
        source: None,
        conn: stats,
    };
    s.print();
    s.write_json(common.stats_json.as_deref(), srt.map(|(_, e)| e))?;
    match failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
