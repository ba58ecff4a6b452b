//! `srt://` and `udp://` addresses in the conventions of srt-tools (`srt-live-transmit`):
//! `srt://host:port?mode=caller|listener&latency=MS&streamid=X&...`. An empty or unspecified
//! host (`srt://:9000`, `srt://[::]:9000`, `srt://0.0.0.0:9000`) means listener, any other
//! host caller, unless `mode=` says otherwise.
//!
//! Every parameter is either honoured or rejected with a reason; none is accepted and
//! ignored. Units are libsrt's: milliseconds for times, bytes for buffers, bytes per second
//! for rates, percent for `oheadbw`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Which side of the handshake a URI asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriMode {
    /// Connect to host:port.
    Caller,
    /// Bind host:port (any address when the host is empty) and accept.
    Listener,
}

/// A parsed `scheme://host:port?query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    /// "srt" or "udp".
    pub scheme: String,
    /// Host name or address (brackets removed); empty when none was given.
    pub host: String,
    /// Port.
    pub port: u16,
    /// `mode=` or the default from the host.
    pub mode: UriMode,
    /// `latency=` (milliseconds).
    pub latency: Option<Duration>,
    /// `streamid=` (percent-decoded).
    pub stream_id: Option<String>,
    /// `mss=`.
    pub mss: Option<u32>,
    /// `maxbw=` (bytes per second; -1 the default rule, 0 relative to the input rate).
    pub max_bw: Option<i64>,
    /// `rcvlatency=` (milliseconds): the latency this end receives with.
    pub rcv_latency: Option<Duration>,
    /// `peerlatency=` (milliseconds): the latency asked of the peer's receiver.
    pub peer_latency: Option<Duration>,
    /// `inputbw=` (bytes per second), for `maxbw=0`.
    pub input_bw: Option<u64>,
    /// `oheadbw=` (percent, 5 to 100), for `maxbw=0`.
    pub overhead_bw: Option<u32>,
    /// `payloadsize=` (bytes, at most 1456): the largest live message.
    pub payload_size: Option<usize>,
    /// `conntimeo=` (milliseconds): how long a caller tries to connect.
    pub connect_timeout: Option<Duration>,
    /// `rcvbuf=` (bytes).
    pub rcv_buf: Option<usize>,
    /// `sndbuf=` (bytes).
    pub snd_buf: Option<usize>,
    /// `timeout=` (milliseconds): an SRT input that delivers nothing this long is taken for
    /// gone (as a receive timeout, SRTO_RCVTIMEO).
    pub timeout: Option<Duration>,
    /// `tlpktdrop=` (boolean): too-late packet drop.
    pub too_late_drop: Option<bool>,
    /// `nakreport=` (boolean): periodic loss reports.
    pub nak_report: Option<bool>,
    /// `transtype=` (`live` or `file`).
    pub trans_type: Option<String>,
}

/// The largest live payload: a 1500-byte packet less IPv4, UDP and SRT headers.
pub const MAX_LIVE_PAYLOAD: usize = 1456;

fn boolean(s: &str, what: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "yes" | "on" | "true" => Ok(true),
        "0" | "no" | "off" | "false" => Ok(false),
        _ => Err(format!(
            "'{s}': {what} must be a boolean (1/0, yes/no, on/off), not '{v}'"
        )),
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in '{s}'"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("'{s}' is not UTF-8 once decoded"))
}

impl Uri {
    /// Parses `s`, accepting only the schemes listed.
    pub fn parse(s: &str) -> Result<Uri, String> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| format!("'{s}': expected scheme://host:port"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "srt" && scheme != "udp" {
            return Err(format!("'{s}': unsupported scheme '{scheme}' (srt or udp)"));
        }
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let authority = authority.trim_end_matches('/');
        let (host, port) = if let Some(r) = authority.strip_prefix('[') {
            let (h, p) = r
                .split_once("]:")
                .ok_or_else(|| format!("'{s}': expected [ipv6]:port"))?;
            (h, p)
        } else {
            authority
                .rsplit_once(':')
                .ok_or_else(|| format!("'{s}': missing port"))?
        };
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{s}': bad port '{port}'"))?;
        let mut uri = Uri {
            scheme,
            host: host.to_string(),
            port,
            mode: if host.is_empty()
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|a| a.is_unspecified())
            {
                UriMode::Listener
            } else {
                UriMode::Caller
            },
            latency: None,
            stream_id: None,
            mss: None,
            max_bw: None,
            rcv_latency: None,
            peer_latency: None,
            input_bw: None,
            overhead_bw: None,
            payload_size: None,
            connect_timeout: None,
            rcv_buf: None,
            snd_buf: None,
            timeout: None,
            too_late_drop: None,
            nak_report: None,
            trans_type: None,
        };
        for kv in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = percent_decode(v)?;
            let num = |what: &str| -> Result<u64, String> {
                v.parse::<u64>()
                    .map_err(|_| format!("'{s}': bad {what} '{v}'"))
            };
            let ms = |what: &str| num(what).map(Duration::from_millis);
            let bytes = |what: &str| -> Result<usize, String> {
                match num(what)? {
                    0 => Err(format!("'{s}': {what} must be more than 0 bytes")),
                    n => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
                }
            };
            match k {
                "mode" => {
                    uri.mode = match v.as_str() {
                        "caller" | "client" => UriMode::Caller,
                        "listener" | "server" => UriMode::Listener,
                        "rendezvous" => return Err("rendezvous mode is not supported yet".into()),
                        other => return Err(format!("'{s}': unknown mode '{other}'")),
                    }
                }
                "latency" => uri.latency = Some(ms("latency")?),
                "rcvlatency" => uri.rcv_latency = Some(ms("rcvlatency")?),
                "peerlatency" => uri.peer_latency = Some(ms("peerlatency")?),
                "streamid" => uri.stream_id = Some(v.clone()),
                "mss" => {
                    let m = num("mss")?;
                    if !(76..=65_535).contains(&m) {
                        return Err(format!("'{s}': mss must be 76 to 65535 bytes, not {m}"));
                    }
                    uri.mss = Some(m as u32);
                }
                "maxbw" => {
                    let b = v
                        .parse::<i64>()
                        .map_err(|_| format!("'{s}': bad maxbw '{v}'"))?;
                    if b < -1 {
                        return Err(format!(
                            "'{s}': maxbw is -1 (default), 0 (input rate plus oheadbw) or \
                             bytes per second"
                        ));
                    }
                    uri.max_bw = Some(b);
                }
                "inputbw" => uri.input_bw = Some(num("inputbw")?),
                "oheadbw" => {
                    let p = num("oheadbw")?;
                    if !(5..=100).contains(&p) {
                        return Err(format!("'{s}': oheadbw is a percentage, 5 to 100"));
                    }
                    uri.overhead_bw = Some(p as u32);
                }
                "payloadsize" => {
                    let p = num("payloadsize")? as usize;
                    if !(1..=MAX_LIVE_PAYLOAD).contains(&p) {
                        return Err(format!(
                            "'{s}': payloadsize must be 1 to {MAX_LIVE_PAYLOAD} bytes"
                        ));
                    }
                    uri.payload_size = Some(p);
                }
                "conntimeo" => uri.connect_timeout = Some(ms("conntimeo")?),
                "rcvbuf" => uri.rcv_buf = Some(bytes("rcvbuf")?),
                "sndbuf" => uri.snd_buf = Some(bytes("sndbuf")?),
                "timeout" => uri.timeout = Some(ms("timeout")?),
                "tlpktdrop" => uri.too_late_drop = Some(boolean(s, "tlpktdrop", &v)?),
                "nakreport" => uri.nak_report = Some(boolean(s, "nakreport", &v)?),
                "transtype" => match v.as_str() {
                    "live" | "file" => uri.trans_type = Some(v.clone()),
                    other => {
                        return Err(format!("'{s}': transtype is live or file, not '{other}'"))
                    }
                },
                "passphrase" | "pbkeylen" => {
                    return Err("encryption (passphrase) is not supported yet".into())
                }
                other => return Err(format!("'{s}': unknown parameter '{other}'")),
            }
        }
        if uri.mode == UriMode::Caller && uri.host.is_empty() {
            return Err(format!("'{s}': caller mode needs a host"));
        }
        Ok(uri)
    }

    /// The address to connect or send to.
    pub fn remote(&self) -> Result<SocketAddr, String> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve '{}': {e}", self.host))?
            .next()
            .ok_or_else(|| format!("'{}' has no address", self.host))
    }

    /// Options that only an SRT address takes, given on another scheme.
    pub fn srt_only_options(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let set = [
            ("latency", self.latency.is_some()),
            ("rcvlatency", self.rcv_latency.is_some()),
            ("peerlatency", self.peer_latency.is_some()),
            ("streamid", self.stream_id.is_some()),
            ("mss", self.mss.is_some()),
            ("maxbw", self.max_bw.is_some()),
            ("inputbw", self.input_bw.is_some()),
            ("oheadbw", self.overhead_bw.is_some()),
            ("payloadsize", self.payload_size.is_some()),
            ("conntimeo", self.connect_timeout.is_some()),
            ("rcvbuf", self.rcv_buf.is_some()),
            ("sndbuf", self.snd_buf.is_some()),
            ("timeout", self.timeout.is_some()),
            ("tlpktdrop", self.too_late_drop.is_some()),
            ("nakreport", self.nak_report.is_some()),
            ("transtype", self.trans_type.is_some()),
        ];
        for (name, on) in set {
            if on {
                v.push(name);
            }
        }
        v
    }

    /// The address to bind for a listener (any address when the host is empty).
    pub fn bind_addr(&self) -> Result<SocketAddr, String> {
        if self.host.is_empty() {
            Ok(SocketAddr::from(([0, 0, 0, 0], self.port)))
        } else {
            self.remote()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_and_caller_defaults() {
        let u = Uri::parse("srt://:9000").unwrap();
        assert_eq!(
            (u.mode, u.port, u.host.as_str()),
            (UriMode::Listener, 9000, "")
        );
        let u = Uri::parse("srt://example.org:9000").unwrap();
        assert_eq!(u.mode, UriMode::Caller);
        let u = Uri::parse("srt://127.0.0.1:9000?mode=listener").unwrap();
        assert_eq!(u.mode, UriMode::Listener);
        assert_eq!(u.bind_addr().unwrap(), "127.0.0.1:9000".parse().unwrap());
    }

    #[test]
    fn query_parameters() {
        let u = Uri::parse(
            "srt://[::1]:1234?latency=200&streamid=%23!%3A%3Ar%3Dfoo&mss=1360&maxbw=1000000",
        )
        .unwrap();
        assert_eq!(u.host, "::1");
        assert_eq!(u.latency, Some(Duration::from_millis(200)));
        assert_eq!(u.stream_id.as_deref(), Some("#!::r=foo"));
        assert_eq!(u.mss, Some(1360));
        assert_eq!(u.max_bw, Some(1_000_000));
        assert_eq!(u.remote().unwrap(), "[::1]:1234".parse().unwrap());
        let u = Uri::parse(
            "srt://h:1?rcvlatency=300&peerlatency=50&maxbw=0&inputbw=2500000&oheadbw=50\
             &payloadsize=1316&conntimeo=500&rcvbuf=4000000&sndbuf=2000000&timeout=3000\
             &tlpktdrop=off&nakreport=0&transtype=live",
        )
        .unwrap();
        assert_eq!(u.rcv_latency, Some(Duration::from_millis(300)));
        assert_eq!(u.peer_latency, Some(Duration::from_millis(50)));
        assert_eq!(u.max_bw, Some(0));
        assert_eq!((u.input_bw, u.overhead_bw), (Some(2_500_000), Some(50)));
        assert_eq!(u.payload_size, Some(1316));
        assert_eq!(u.connect_timeout, Some(Duration::from_millis(500)));
        assert_eq!((u.rcv_buf, u.snd_buf), (Some(4_000_000), Some(2_000_000)));
        assert_eq!(u.timeout, Some(Duration::from_secs(3)));
        assert_eq!((u.too_late_drop, u.nak_report), (Some(false), Some(false)));
        assert_eq!(u.srt_only_options().len(), 13);
        assert_eq!(Uri::parse("srt://h:1?maxbw=-1").unwrap().max_bw, Some(-1));
    }

    #[test]
    fn unspecified_hosts_listen() {
        for s in ["srt://:9000", "srt://[::]:9000", "srt://0.0.0.0:9000"] {
            assert_eq!(Uri::parse(s).unwrap().mode, UriMode::Listener, "{s}");
        }
        let u = Uri::parse("srt://[::]:9000").unwrap();
        assert_eq!(u.bind_addr().unwrap(), "[::]:9000".parse().unwrap());
        assert_eq!(
            Uri::parse("srt://127.0.0.1:9000").unwrap().mode,
            UriMode::Caller
        );
    }

    #[test]
    fn rejects_bad_uris() {
        for bad in [
            "srt://host",
            "http://h:1",
            "srt://h:99999",
            "srt://:1?mode=caller",
            "srt://h:1?mode=rendezvous",
            "srt://h:1?latency=abc",
            "srt://h:1?bogus=1",
            "srt://h:1?streamid=%zz",
            "srt://h:1?passphrase=secret123",
            "srt://h:1?maxbw=-2",
            "srt://h:1?oheadbw=1",
            "srt://h:1?payloadsize=1500",
            "srt://h:1?payloadsize=0",
            "srt://h:1?rcvbuf=0",
            "srt://h:1?tlpktdrop=maybe",
            "srt://h:1?transtype=bulk",
            "srt://h:1?mss=10",
            "srt://h:1?blocking=true",
        ] {
            assert!(Uri::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Uri::parse("udp://:5000").unwrap().scheme, "udp");
    }
}
