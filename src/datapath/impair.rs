//! Loss injection in the production binary: [`Impaired`] passes every outgoing datagram through
//! a simulated [`Link`] (loss, delay, jitter, reordering, duplication, rate limit) in real
//! time, the way Aeron's loss interceptors sit in its media driver.
//!
//! Datagrams the link delays are held here and sent once due; the runtime calls
//! [`Datapath::service`] when [`Datapath::next_deadline`] passes. Only the outgoing direction
//! is impaired; impair both ends to impair both directions. The destination address travels
//! with each datagram through the link as a 19-byte prefix (counted by the link's rate limit).

use super::{Datapath, DatapathStats, RxBatch, Tx, Waker};
use slipstream_proto::sim::{GilbertElliott, Link, LinkConfig};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Bytes of the destination prefix: family, 16 address bytes, port.
const PREFIX: usize = 19;
/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_535;
/// Datagrams released to the inner datapath per call.
const OUT_BATCH: usize = 16;

/// How a path is impaired: the link model and the seed of its random choices.
#[derive(Debug, Clone, PartialEq)]
pub struct Impairment {
    /// The simulated link.
    pub link: LinkConfig,
    /// Seed of the link's random loss, jitter, reordering and duplication.
    pub seed: u64,
}

impl Impairment {
    /// A link with `loss` (ratio 0..=1) and one-way `delay`.
    pub fn new(loss: f64, delay: Duration) -> Self {
        Impairment {
            link: LinkConfig {
                loss,
                delay,
                ..LinkConfig::default()
            },
            seed: 1,
        }
    }

    /// Parses a netem-like spec: comma-separated `key=value` pairs among `loss=2%`,
    /// `burst=P/R[/BAD[/GOOD]]` (Gilbert–Elliott bursty loss, replacing `loss`: P is the
    /// chance per packet of entering the bad state, R of leaving it, BAD and GOOD the loss
    /// ratios in each state, default 100% and 0%, as netem's `gemodel p r 1-h 1-k`),
    /// `delay=20ms`, `jitter=2ms`, `reorder=1%`, `dup=0.1%`, `rate=100mbit`, `queue=4m`
    /// (bytes), `mtu=1500`, `seed=7`. Ratios take `%` or a plain fraction; durations take
    /// `us`, `ms` or `s` (plain numbers are milliseconds); rates take `kbit`, `mbit`, `gbit`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut imp = Impairment {
            link: LinkConfig::default(),
            seed: 1,
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}': expected key=value"))?;
            let v = v.trim();
            match k.trim() {
                "loss" => imp.link.loss = ratio(v)?,
                "burst" | "gemodel" => imp.link.burst = Some(gilbert_elliott(v)?),
                "delay" => imp.link.delay = duration(v)?,
                "jitter" => imp.link.jitter = duration(v)?,
                "reorder" => imp.link.reorder = ratio(v)?,
                "dup" | "duplicate" => imp.link.dup = ratio(v)?,
                "rate" => imp.link.rate_bps = Some(rate(v)?),
                "queue" => imp.link.queue_bytes = bytes(v)?,
                "mtu" => imp.link.mtu = v.parse().map_err(|_| format!("bad mtu '{v}'"))?,
                "seed" => imp.seed = v.parse().map_err(|_| format!("bad seed '{v}'"))?,
                other => {
                    return Err(format!(
                        "unknown impairment '{other}' (known: loss, burst, delay, jitter, reorder, \
                         dup, rate, queue, mtu, seed)"
                    ))
                }
            }
        }
        Ok(imp)
    }

    /// The spec [`Impairment::parse`] reads back into this impairment (durations to the
    /// nanosecond, ratios as exact fractions).
    pub fn to_spec(&self) -> String {
        let l = &self.link;
        let mut s = format!(
            "delay={}us,jitter={}us,loss={},reorder={},dup={},queue={},mtu={},seed={}",
            l.delay.as_nanos() as f64 / 1e3,
            l.jitter.as_nanos() as f64 / 1e3,
            l.loss,
            l.reorder,
            l.dup,
            l.queue_bytes,
            l.mtu,
            self.seed
        );
        if let Some(r) = l.rate_bps {
            s += &format!(",rate={r}bit");
        }
        if let Some(ge) = l.burst {
            s += &format!(
                ",burst={}/{}/{}/{}",
                ge.p_good_to_bad, ge.p_bad_to_good, ge.loss_bad, ge.loss_good
            );
        }
        s
    }
}

/// `P/R[/BAD[/GOOD]]`, each a ratio (see [`Impairment::parse`]).
pub(crate) fn gilbert_elliott(v: &str) -> Result<GilbertElliott, String> {
    let parts: Vec<&str> = v.split(['/', ',']).map(str::trim).collect();
    if !(2..=4).contains(&parts.len()) {
        return Err(format!(
            "bad burst loss '{v}': expected P/R[/BAD[/GOOD]], e.g. 1%/30%"
        ));
    }
    let ge = GilbertElliott {
        p_good_to_bad: ratio(parts[0])?,
        p_bad_to_good: ratio(parts[1])?,
        loss_bad: parts.get(2).map_or(Ok(1.0), |p| ratio(p))?,
        loss_good: parts.get(3).map_or(Ok(0.0), |p| ratio(p))?,
    };
    if ge.p_bad_to_good <= 0.0 {
        return Err(format!(
            "bad burst loss '{v}': R (leaving the bad state) must be above 0"
        ));
    }
    Ok(ge)
}

impl Impairment {
    /// Long-run loss ratio of the configured loss model.
    pub fn mean_loss(&self) -> f64 {
        match self.link.burst {
            None => self.link.loss,
            Some(ge) => {
                let bad = ge.p_good_to_bad / (ge.p_good_to_bad + ge.p_bad_to_good);
                bad * ge.loss_bad + (1.0 - bad) * ge.loss_good
            }
        }
    }
}

pub(crate) fn ratio(v: &str) -> Result<f64, String> {
    let (num, scale) = match v.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (v, 1.0),
    };
    let r = num
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("bad ratio '{v}'"))?
        * scale;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("ratio '{v}' is not between 0 and 100%"))
    }
}

pub(crate) fn duration(v: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration '{v}' (e.g. 20ms, 500us, 1s)");
    let (num, unit) = if let Some(n) = v.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else {
        (v, 1e-3)
    };
    let x: f64 = num.trim().parse().map_err(|_| bad())?;
    if !(0.0..=3600.0).contains(&(x * unit)) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(x * unit))
}

/// A rate in bits per second: "300mbit", "1.5gbit", "800kbit" or a plain number.
pub fn rate(v: &str) -> Result<u64, String> {
    let l = v.to_ascii_lowercase();
    let (num, mul) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(s, m)| l.strip_suffix(s).map(|n| (n.to_string(), *m)))
        .unwrap_or((l.clone(), 1.0));
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad rate '{v}' (e.g. 100mbit)"))?;
    if x <= 0.0 {
        return Err(format!("rate '{v}' must be positive"));
    }
    Ok((x * mul) as u64)
}

pub(crate) fn bytes(v: &str) -> Result<usize, String> {
    let l = v.to_ascii_lowercase();
    let (num, mul) = match l.chars().last() {
        Some('k') => (&l[..l.len() - 1], 1 << 10),
        Some('m') => (&l[..l.len() - 1], 1 << 20),
        Some('g') => (&l[..l.len() - 1], 1 << 30),
        _ => (&l[..], 1),
    };
    num.trim()
        .parse::<usize>()
        .map(|n| n.saturating_mul(mul))
        .map_err(|_| format!("bad size '{v}' (e.g. 4m)"))
}

/// A datapath whose outgoing datagrams cross a simulated link first.
#[derive(Debug)]
pub struct Impaired<D: Datapath> {
    inner: D,
    link: Link,
    scratch: Vec<u8>,
    out: Vec<u8>,
    out_txs: Vec<Tx>,
}

impl<D: Datapath> Impaired<D> {
    /// Wraps `inner`.
    pub fn new(inner: D, imp: Impairment) -> Self {
        let mut cfg = imp.link;
        cfg.mtu = cfg.mtu.saturating_add(PREFIX);
        Impaired {
            inner,
            link: Link::new(cfg, imp.seed),
            scratch: vec![0; MAX_DATAGRAM + PREFIX],
            out: vec![0; OUT_BATCH * MAX_DATAGRAM],
            out_txs: Vec::with_capacity(OUT_BATCH),
        }
    }

    /// Sends every datagram the link has delivered by `now`.
    fn flush(&mut self, now: Instant) -> io::Result<()> {
        loop {
            self.out_txs.clear();
            while self.out_txs.len() < OUT_BATCH {
                let Some(n) = self.link.poll_deliver(now, &mut self.scratch) else {
                    break;
                };
                let Some(dst) = decode(&self.scratch) else {
                    continue;
                };
                let len = n.saturating_sub(PREFIX);
                let at = self.out_txs.len() * MAX_DATAGRAM;
                self.out[at..at + len].copy_from_slice(&self.scratch[PREFIX..PREFIX + len]);
                self.out_txs.push(Tx::single(dst, at, len));
            }
            if self.out_txs.is_empty() {
                return Ok(());
            }
            self.inner.send(&self.out, &self.out_txs)?;
        }
    }
}

fn encode(dst: SocketAddr, out: &mut [u8]) {
    match dst.ip() {
        IpAddr::V4(ip) => {
            out[0] = 4;
            out[1..5].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out[0] = 6;
            out[1..17].copy_from_slice(&ip.octets());
        }
    }
    out[17..19].copy_from_slice(&dst.port().to_be_bytes());
}

fn decode(b: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_be_bytes([b[17], b[18]]);
    let ip = match b[0] {
        4 => IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4])),
        6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[1..17]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

impl<D: Datapath> Datapath for Impaired<D> {
    fn name(&self) -> &'static str {
        // The backend that moves the datagrams; the impairment shows in the stats.
        self.inner.name()
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
    fn receive_queue_bytes(&self) -> Option<usize> {
        self.inner.receive_queue_bytes()
    }

    fn send(&mut self, buf: &[u8], txs: &[Tx]) -> io::Result<usize> {
        let now = Instant::now();
        for tx in txs {
            for seg in tx.segments() {
                let len = seg.len().min(MAX_DATAGRAM);
                encode(tx.dst, &mut self.scratch);
                self.scratch[PREFIX..PREFIX + len]
                    .copy_from_slice(&buf[seg.start..seg.start + len]);
                self.link.send(now, &self.scratch[..PREFIX + len]);
            }
        }
        self.flush(now)?;
        Ok(txs.len())
    }

    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<RxBatch<'_>> {
        self.inner.recv(timeout)
    }

    fn waker(&self) -> io::Result<Waker> {
        self.inner.waker()
    }

    fn next_deadline(&self) -> Option<Instant> {
        match (self.link.next_delivery(), self.inner.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn service(&mut self) -> io::Result<()> {
        self.inner.service()?;
        self.flush(Instant::now())
    }

    fn stats(&self) -> DatapathStats {
        let mut s = self.inner.stats();
        let l = self.link.stats();
        s.impaired_lost = l.lost + l.queue_drops + l.mtu_drops;
        s.impaired_delivered = l.delivered;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_netem_specs() {
        let i = Impairment::parse("loss=2%,delay=20ms,jitter=500us,rate=100mbit,seed=9").unwrap();
        assert!((i.link.loss - 0.02).abs() < 1e-12);
        assert_eq!(i.link.delay, Duration::from_millis(20));
        assert_eq!(i.link.jitter, Duration::from_micros(500));
        assert_eq!(i.link.rate_bps, Some(100_000_000));
        assert_eq!(i.seed, 9);
        assert_eq!(
            Impairment::parse("delay=1s").unwrap().link.delay.as_secs(),
            1
        );
        assert_eq!(
            Impairment::parse("queue=4m").unwrap().link.queue_bytes,
            4 << 20
        );
        assert!(Impairment::parse("loss=200%").is_err());
        assert!(Impairment::parse("bogus=1").is_err());
        assert!(Impairment::parse("loss").is_err());
    }

    #[test]
    fn burst_loss_and_spec_round_trip() {
        let i =
            Impairment::parse("burst=1%/30%,delay=12.5ms,jitter=3us,rate=1gbit,dup=0.1%").unwrap();
        let ge = i.link.burst.unwrap();
        assert_eq!((ge.p_good_to_bad, ge.p_bad_to_good), (0.01, 0.3));
        assert_eq!((ge.loss_bad, ge.loss_good), (1.0, 0.0));
        assert!((i.mean_loss() - 0.01 / 0.31).abs() < 1e-12);
        assert_eq!(Impairment::parse(&i.to_spec()).unwrap(), i);
        let j = Impairment::parse("loss=0.1%,reorder=2%,queue=64k,mtu=9000,seed=3").unwrap();
        assert_eq!(Impairment::parse(&j.to_spec()).unwrap(), j);
        assert!(Impairment::parse("burst=1%").is_err());
        assert!(Impairment::parse("burst=1%/0").is_err());
        assert!(Impairment::parse("burst=1%/2%/3%/4%/5%").is_err());
    }

    #[test]
    fn address_prefix_round_trips() {
        let mut b = [0u8; PREFIX];
        for a in ["127.0.0.1:9000", "[::1]:65535"] {
            let a: SocketAddr = a.parse().unwrap();
            encode(a, &mut b);
            assert_eq!(decode(&b), Some(a));
        }
    }
}
