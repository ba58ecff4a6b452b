//! `slipstream demo`: both ends in one process on loopback, each sending through a simulated
//! lossy, delayed link ([`Impaired`](slipstream::datapath::Impaired)), with generated data and an
//! end-to-end XXH3-128 check.

use super::{conn_config, endpoint_options, progress_bar, CliResult, Common, StatsJson, Summary};
use slipstream::api::Endpoint;
use slipstream::datapath::Impairment;
use slipstream::transfer::{self, Verdict};
use slipstream_proto::cc::CcRegistry;
use slipstream_proto::conn::Mode;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Deterministic pseudo-random bytes (xorshift64*), `left` of them.
#[derive(Debug)]
pub struct PseudoRandom {
    state: u64,
    left: u64,
}

impl PseudoRandom {
    /// `len` bytes from `seed`.
    pub fn new(seed: u64, len: u64) -> Self {
        PseudoRandom {
            state: seed | 1,
            left: len,
        }
    }
}

impl Read for PseudoRandom {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.left as usize);
        for chunk in buf[..n].chunks_mut(8) {
            self.state ^= self.state >> 12;
            self.state ^= self.state << 25;
            self.state ^= self.state >> 27;
            let v = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

pub(super) fn run(
    size_mib: u64,
    loss_pct: f64,
    delay_ms: u64,
    common: &Common,
    registry: &CcRegistry,
) -> CliResult {
    if !(0.0..100.0).contains(&loss_pct) {
        return Err("--loss must be a percentage below 100".into());
    }
    let stats_json = StatsJson::open(common.stats_json.as_deref())?;
    let bytes = size_mib << 20;
    let imp = match &common.netem {
        Some(spec) => Impairment::parse(spec).map_err(|e| format!("--netem: {e}"))?,
        None => Impairment::new(loss_pct / 100.0, Duration::from_millis(delay_ms)),
    };
    let mut rx_opts = endpoint_options(common, registry)?;
    let mut tx_opts = rx_opts.clone();
    rx_opts.set_impairment(Some(Impairment {
        seed: imp.seed.wrapping_add(1),
        ..imp.clone()
    }));
    tx_opts.set_impairment(Some(imp.clone()));
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let rx_ep = Endpoint::bind(loopback, rx_opts).map_err(|e| e.to_string())?;
    let tx_ep = Endpoint::bind(loopback, tx_opts).map_err(|e| e.to_string())?;
    let uri = super::uri::Uri::parse("srt://127.0.0.1:1")?;
    let cfg = conn_config(Mode::File, &uri, common, registry)?;
    rx_ep.listen(cfg.clone()).map_err(|e| e.to_string())?;
    eprintln!(
        "demo: {size_mib} MiB over loopback through a simulated link, each direction: {:.2}% \
         loss, {} ms delay{}",
        imp.link.loss * 100.0,
        imp.link.delay.as_millis(),
        imp.link
            .rate_bps
            .map(|r| format!(", {} Mbit/s", r / 1_000_000))
            .unwrap_or_default()
    );

    std::thread::scope(|s| {
        let receiver = s.spawn(|| -> io::Result<Verdict> {
            let conn = rx_ep.accept_timeout(Duration::from_secs(10))?;
            transfer::recv_stream(&conn, io::sink(), |_| {})
        });
        let conn = tx_ep
            .connect(rx_ep.local_addr(), cfg)
            .map_err(|e| format!("connect: {e}"))?;
        let pb = progress_bar(common, Some(bytes));
        let t0 = Instant::now();
        let sent = transfer::send_stream(&conn, PseudoRandom::new(0x5151, bytes), |n| {
            pb.set_position(n)
        });
        let secs = t0.elapsed().as_secs_f64();
        pb.finish_and_clear();
        let stats = conn.stats().ok();
        let sent = sent.map_err(|e| format!("send failed: {e}"))?;
        let verdict = receiver
            .join()
            .map_err(|_| "receiver thread panicked".to_string())?
            .map_err(|e| format!("receive failed: {e}"))?;
        let (integrity, ok) = match verdict {
            Verdict::Verified {
                bytes: b, digest, ..
            } if b == sent.bytes && digest == sent.digest => (
                format!(
                    "verified: digest trailer matches (XXH3-128 {})",
                    super::hex(&digest)
                ),
                true,
            ),
            v => (format!("NOT verified: {v:?}"), false),
        };
        let sum = Summary {
            role: "demo transferred",
            bytes: sent.bytes,
            secs,
            integrity,
            verified: Some(ok),
            digest: Some(sent.digest),
            source: None,
            conn: stats,
        };
        sum.print();
        let dp = tx_ep.datapath_stats();
        eprintln!(
            "simulated link (sender side): {} datagrams dropped, {} delivered",
            dp.impaired_lost, dp.impaired_delivered
        );
        sum.write_json(&stats_json, Some(&tx_ep));
        if ok {
            Ok(())
        } else {
            Err("integrity check failed".into())
        }
    })
}
