//! `srt://` and `udp://` addresses in the conventions of srt-tools (`srt-live-transmit`):
//! `srt://host:port?mode=caller|listener&latency=MS&streamid=X&mss=N&maxbw=BYTES_PER_S`.
//! An empty host means listener, a host means caller, unless `mode=` says otherwise.

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
    /// `maxbw=` (bytes per second).
    pub max_bw: Option<u64>,
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
            mode: if host.is_empty() {
                UriMode::Listener
            } else {
                UriMode::Caller
            },
            latency: None,
            stream_id: None,
            mss: None,
            max_bw: None,
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
            match k {
                "mode" => {
                    uri.mode = match v.as_str() {
                        "caller" | "client" => UriMode::Caller,
                        "listener" | "server" => UriMode::Listener,
                        "rendezvous" => return Err("rendezvous mode is not supported yet".into()),
                        other => return Err(format!("'{s}': unknown mode '{other}'")),
                    }
                }
                "latency" => uri.latency = Some(Duration::from_millis(num("latency")?)),
                "streamid" => uri.stream_id = Some(v.clone()),
                "mss" => uri.mss = Some(num("mss")?.min(65_535) as u32),
                "maxbw" => uri.max_bw = Some(num("maxbw")?),
                "passphrase" | "pbkeylen" => {
                    return Err("encryption (passphrase) is not supported yet".into())
                }
                // Accepted for compatibility with srt-tools command lines; no effect here.
                "transtype" | "blocking" | "timeout" | "conntimeo" | "rcvbuf" | "sndbuf" => {}
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
        ] {
            assert!(Uri::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Uri::parse("udp://:5000").unwrap().scheme, "udp");
    }
}
