//! The real-time traffic smoother of SS-RTUDP (the paper's Fig. 5): a credit bucket that
//! real-time packets pass at once and non-real-time packets wait on, whose refresh period
//! doubles after loss and shrinks by a step otherwise.
//!
//! Calling protocol: one [`Smoother`] per sending host (process), built with [`Smoother::new`]
//! at a time `now`. Before sending a real-time packet call [`Smoother::take_rt`] (it never
//! refuses); before handing a non-real-time packet to the kernel ask
//! [`Smoother::try_nrt`], and keep the packet queued when it says no. Report what the
//! receivers said with [`Smoother::on_report`] (whether they saw loss). Call
//! [`Smoother::handle_timeout`] at [`Smoother::next_refresh`] (or later: a late call
//! refreshes once, from the time it is made).
//!
//! Choices where the paper is silent, each a field of [`SmootherConfig`]:
//! - what a credit buys: a datagram of any size (the paper's packet), or
//!   [`CreditUnit::Byte`], the measured alternative: a full datagram's bytes, a datagram taking
//!   its own size;
//! - whether a non-real-time packet needs `CNS ≥ 0` (Fig. 5) or at least one credit (the
//!   prose): [`NrtRule`], default [`NrtRule::OneCredit`], with which no refresh interval
//!   releases more non-real-time packets than the credits it began with;
//! - the period adapts once per refresh, on whether any report of loss came since the last;
//! - the credits of a refresh come all at once (Fig. 5); [`SmootherConfig::spread`] is the
//!   alternative, measured against it: one credit every `RP / CBD`, the period adapting every
//!   `CBD` of those, the same long-run rate without a burst of `CBD` back to back.

use std::time::{Duration, Instant};

/// A full datagram, IP bytes: what one credit is worth when credits count bytes (an
/// Ethernet MTU).
pub const FULL_DATAGRAM: usize = 1500;

/// What one credit buys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreditUnit {
    /// One datagram, whatever its size (the paper's packet).
    #[default]
    Packet,
    /// [`FULL_DATAGRAM`] bytes of IP packets: a datagram takes its own size in credit, so a
    /// 316-byte real-time datagram takes a fifth of a full one's.
    Byte,
}

/// When a non-real-time packet may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NrtRule {
    /// With at least one credit left (`CNS ≥ 1`), as the paper's prose says.
    OneCredit,
    /// While the credits are not negative (`CNS ≥ 0`), as its Fig. 5 draws it: one packet
    /// more a refresh, taken from the next.
    NonNegative,
}

/// The longest period a smoother takes: longer ones in a [`SmootherConfig`] are cut to it.
pub const MAX_PERIOD: Duration = Duration::from_secs(3600);

/// The smoother's parameters; the defaults are the paper's Table 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmootherConfig {
    /// Credit bucket depth (CBD), packets.
    pub depth: u32,
    /// Initial refresh period (RP0).
    pub rp0: Duration,
    /// Shortest refresh period (RPmin).
    pub rp_min: Duration,
    /// Longest refresh period (RPmax).
    pub rp_max: Duration,
    /// Step by which a loss-free refresh shortens the period (ΔRP).
    pub rp_step: Duration,
    /// When a non-real-time packet may leave.
    pub nrt_rule: NrtRule,
    /// Hand out a refresh's credits one at a time, evenly over the period, instead of all at
    /// its start.
    pub spread: bool,
    /// Start with an empty bucket and the longest period (RPmax), and earn the way down to
    /// faster periods, instead of the paper's full bucket at RP0: hosts that start together
    /// then do not all send a bucket at once before any report can reach them.
    pub cautious_start: bool,
    /// What a credit buys.
    pub unit: CreditUnit,
    /// Adapt the period on a fixed cadence, whatever the period (loss in the last
    /// `adapt_every` doubles it, none shortens it by the step), instead of once per refresh
    /// (Fig. 5): smoothers whose periods differ then still adapt at the same pace.
    pub adapt_every: Option<Duration>,
}

impl Default for SmootherConfig {
    fn default() -> Self {
        SmootherConfig {
            depth: 40,
            rp0: Duration::from_millis(10),
            rp_min: Duration::from_millis(5),
            rp_max: Duration::from_millis(100),
            rp_step: Duration::from_millis(2),
            nrt_rule: NrtRule::OneCredit,
            spread: false,
            cautious_start: false,
            unit: CreditUnit::Packet,
            adapt_every: None,
        }
    }
}

/// Counters of a [`Smoother`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmootherStats {
    /// Real-time packets passed.
    pub rt: u64,
    /// Non-real-time packets released.
    pub nrt: u64,
    /// Non-real-time packets told to wait (a packet asked about twice counts twice).
    pub nrt_held: u64,
    /// Times the period adapted (once a refresh, or on [`SmootherConfig::adapt_every`]'s
    /// cadence).
    pub refreshes: u64,
    /// Of those, the ones that doubled it.
    pub lossy_refreshes: u64,
}

/// A credit bucket shared by all of a host's traffic; see the module's calling protocol.
#[derive(Debug, Clone)]
pub struct Smoother {
    cfg: SmootherConfig,
    /// Credit in bytes: a credit is [`FULL_DATAGRAM`] of them, whatever the unit.
    credits: i64,
    rp: Duration,
    next: Instant,
    loss: bool,
    /// Spread credits handed out since the period last adapted.
    ticks: u32,
    /// When the period next adapts, with [`SmootherConfig::adapt_every`].
    next_adapt: Instant,
    stats: SmootherStats,
}

impl Smoother {
    /// A full bucket at `now`, the period at `rp0` (bounded by `rp_min` and `rp_max`); with
    /// [`SmootherConfig::cautious_start`], an empty bucket and the period at `rp_max`.
    /// Periods longer than [`MAX_PERIOD`] are cut to it.
    pub fn new(cfg: SmootherConfig, now: Instant) -> Self {
        let cut = |d: Duration| d.min(MAX_PERIOD);
        let rp_min = cut(cfg.rp_min);
        let rp_max = cut(cfg.rp_max).max(rp_min);
        let cfg = SmootherConfig {
            rp0: cut(cfg.rp0),
            rp_min,
            rp_max,
            rp_step: cut(cfg.rp_step),
            adapt_every: cfg.adapt_every.map(cut),
            ..cfg
        };
        let (rp, credits) = if cfg.cautious_start {
            (rp_max, 0)
        } else {
            (cfg.rp0.clamp(cfg.rp_min, rp_max), depth_bytes(&cfg))
        };
        let depth = cfg.depth.max(1);
        Smoother {
            credits,
            rp,
            next: now + if cfg.spread { rp / depth } else { rp },
            loss: false,
            ticks: 0,
            next_adapt: now + cfg.adapt_every.unwrap_or_default(),
            stats: SmootherStats::default(),
            cfg,
        }
    }

    /// A real-time datagram of `ip_bytes` leaves: it takes its credit, into debt if need be.
    pub fn take_rt(&mut self, ip_bytes: usize) {
        self.credits -= self.cost(ip_bytes);
        self.stats.rt += 1;
    }

    /// What a datagram of `ip_bytes` takes, in bytes of credit.
    fn cost(&self, ip_bytes: usize) -> i64 {
        match self.cfg.unit {
            CreditUnit::Packet => FULL_DATAGRAM as i64,
            CreditUnit::Byte => ip_bytes.max(1) as i64,
        }
    }

    /// Whether a full non-real-time datagram would be let go now (nothing is taken or
    /// counted).
    pub fn nrt_ready(&self) -> bool {
        self.credits >= self.floor(FULL_DATAGRAM)
    }

    /// The credit a non-real-time datagram of `ip_bytes` needs to leave: its own (never more
    /// than a full bucket), or with Fig. 5's rule only none owed.
    fn floor(&self, ip_bytes: usize) -> i64 {
        match self.cfg.nrt_rule {
            NrtRule::OneCredit => self.cost(ip_bytes).min(depth_bytes(&self.cfg).max(1)),
            NrtRule::NonNegative => 0,
        }
    }

    /// Whether a non-real-time datagram of `ip_bytes` may leave now; if so, it has taken its
    /// credit.
    pub fn try_nrt(&mut self, ip_bytes: usize) -> bool {
        if self.credits >= self.floor(ip_bytes) {
            self.credits -= self.cost(ip_bytes);
            self.stats.nrt += 1;
            true
        } else {
            self.stats.nrt_held += 1;
            false
        }
    }

    /// A non-real-time packet is kept waiting: its sender found no credit
    /// ([`Self::nrt_ready`] said no). Counted as a refused [`Self::try_nrt`] is.
    pub fn note_held(&mut self) {
        self.stats.nrt_held += 1;
    }

    /// A non-real-time datagram of `ip_bytes` left without asking (its sender had checked
    /// [`Self::nrt_ready`], and another took the credit in between): it takes its credit all
    /// the same.
    pub fn take_nrt(&mut self, ip_bytes: usize) {
        self.credits -= self.cost(ip_bytes);
        self.stats.nrt += 1;
    }

    /// A receiver's report: `lost` if it saw loss (gaps or deadline misses) since its last.
    pub fn on_report(&mut self, lost: bool) {
        self.loss |= lost;
    }

    /// Moves the next refresh `by` later. Called once after [`Self::new`] with a random share
    /// of the first period, it keeps hosts started together from refreshing (and sending
    /// their credits) in step.
    pub fn delay_refresh(&mut self, by: Duration) {
        self.next += by;
    }

    /// When the next refresh is due.
    pub fn next_refresh(&self) -> Instant {
        match self.cfg.adapt_every {
            Some(_) => self.next.min(self.next_adapt),
            None => self.next,
        }
    }

    /// Refreshes if one is due: the period doubles if loss was reported since the last
    /// refresh, shrinks by the step otherwise (within its bounds), the bucket gains `depth`
    /// credits up to `depth`, and the next refresh is a period from `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(every) = self.cfg.adapt_every {
            if now >= self.next_adapt {
                self.adapt();
                self.next_adapt = now + every.max(Duration::from_micros(1));
            }
        }
        if now < self.next {
            return;
        }
        let depth = depth_bytes(&self.cfg);
        if self.cfg.spread {
            // One credit now; the period adapts once every `depth` of these.
            self.credits = (self.credits + FULL_DATAGRAM as i64).min(depth);
            self.ticks += 1;
            if self.ticks >= self.cfg.depth.max(1) && self.cfg.adapt_every.is_none() {
                self.ticks = 0;
                self.adapt();
            }
            self.next = now + self.rp / self.cfg.depth.max(1);
            return;
        }
        if self.cfg.adapt_every.is_none() {
            self.adapt();
        }
        self.credits = (self.credits + depth).min(depth);
        self.next = now + self.rp;
    }

    /// The period doubles if loss was reported since it last adapted, else shrinks by the
    /// step, within its bounds.
    fn adapt(&mut self) {
        self.rp = if self.loss {
            self.stats.lossy_refreshes += 1;
            (self.rp * 2).min(self.cfg.rp_max)
        } else {
            self.rp
                .saturating_sub(self.cfg.rp_step)
                .max(self.cfg.rp_min)
        };
        self.loss = false;
        self.stats.refreshes += 1;
    }

    /// The refresh period now.
    pub fn period(&self) -> Duration {
        self.rp
    }

    /// Credits left, in full datagrams (rounded down; negative: debt of real-time packets).
    pub fn credits(&self) -> i64 {
        self.credits.div_euclid(FULL_DATAGRAM as i64)
    }

    /// The counters.
    pub fn stats(&self) -> SmootherStats {
        self.stats
    }
}

/// The bucket's depth in bytes of credit.
fn depth_bytes(cfg: &SmootherConfig) -> i64 {
    i64::from(cfg.depth) * FULL_DATAGRAM as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const FULL: usize = FULL_DATAGRAM;

    #[test]
    fn periods_beyond_an_hour_are_cut_to_it() {
        let t0 = Instant::now();
        for (spread, adapt_every) in [(false, None), (true, Some(Duration::MAX))] {
            let mut s = Smoother::new(
                SmootherConfig {
                    rp0: Duration::MAX,
                    rp_min: Duration::MAX,
                    rp_max: Duration::MAX,
                    rp_step: Duration::MAX,
                    spread,
                    adapt_every,
                    ..SmootherConfig::default()
                },
                t0,
            );
            assert_eq!(s.period(), MAX_PERIOD);
            s.on_report(true);
            for _ in 0..3 {
                s.handle_timeout(s.next_refresh());
            }
            assert_eq!(s.period(), MAX_PERIOD);
        }
    }

    /// Refreshes at each due time, with loss reported before those marked; the periods after.
    fn trace(s: &mut Smoother, losses: &[bool]) -> Vec<u64> {
        losses
            .iter()
            .map(|&lost| {
                s.on_report(lost);
                s.handle_timeout(s.next_refresh());
                s.period().as_millis() as u64
            })
            .collect()
    }

    #[test]
    fn the_period_follows_fig_5() {
        let t = Instant::now();
        let mut s = Smoother::new(SmootherConfig::default(), t);
        assert_eq!(s.period(), 10 * MS);
        let mut losses = vec![true, true];
        losses.extend([false; 18]);
        let p = trace(&mut s, &losses);
        assert_eq!(&p[..6], &[20, 40, 38, 36, 34, 32]);
        assert_eq!(p[18..], [6, 5]);
        // Five lossy refreshes from the shortest period reach the longest, and stay there.
        assert_eq!(trace(&mut s, &[true; 6]), [10, 20, 40, 80, 100, 100]);
        // 48 loss-free refreshes take it back from the longest to the shortest.
        let back = trace(&mut s, &[false; 48]);
        assert_eq!((back[46], back[47]), (6, 5));
        assert_eq!(s.stats().lossy_refreshes, 2 + 6);
    }

    #[test]
    fn a_cautious_start_earns_its_credits_and_its_pace() {
        let t = Instant::now();
        let cfg = SmootherConfig {
            cautious_start: true,
            ..SmootherConfig::default()
        };
        let mut s = Smoother::new(cfg, t);
        assert_eq!((s.period(), s.credits()), (100 * MS, 0));
        assert!(!s.try_nrt(FULL), "nothing before the first refresh");
        s.delay_refresh(30 * MS);
        assert_eq!(s.next_refresh(), t + 130 * MS);
        s.handle_timeout(t + 100 * MS);
        assert_eq!(s.credits(), 0, "not due yet");
        // Loss-free refreshes shorten the period step by step from the longest.
        assert_eq!(trace(&mut s, &[false; 3]), [98, 96, 94]);
        assert_eq!((0..100).take_while(|_| s.try_nrt(FULL)).count(), 40);
    }

    #[test]
    fn real_time_packets_never_wait_and_nrt_ones_wait_for_credit() {
        for rule in [NrtRule::OneCredit, NrtRule::NonNegative] {
            let t = Instant::now();
            let cfg = SmootherConfig {
                nrt_rule: rule,
                ..SmootherConfig::default()
            };
            let mut s = Smoother::new(cfg, t);
            // 30 real-time packets, then as many NRT ones as will go.
            (0..30).for_each(|_| s.take_rt(FULL));
            let first = (0..100).take_while(|_| s.try_nrt(FULL)).count();
            // Real-time packets go into debt; the refresh repays it first.
            (0..50).for_each(|_| s.take_rt(FULL));
            assert!(s.credits() < 0);
            s.handle_timeout(s.next_refresh());
            let second = (0..100).take_while(|_| s.try_nrt(FULL)).count();
            match rule {
                NrtRule::OneCredit => assert_eq!((first, second), (10, 0)),
                NrtRule::NonNegative => assert_eq!((first, second), (11, 0)),
            }
            // An idle bucket holds no more than its depth.
            for _ in 0..3 {
                s.handle_timeout(s.next_refresh());
            }
            let full = (0..100).take_while(|_| s.try_nrt(FULL)).count();
            let want = if rule == NrtRule::OneCredit { 40 } else { 41 };
            assert_eq!(full, want);
        }
    }

    /// Byte credits: a small real-time datagram takes a share of a credit, and a
    /// non-real-time one needs its own size; with packet credits each takes a whole one.
    #[test]
    fn byte_credits_charge_each_datagram_its_size() {
        let t = Instant::now();
        for unit in [CreditUnit::Packet, CreditUnit::Byte] {
            let cfg = SmootherConfig {
                unit,
                ..SmootherConfig::default()
            };
            let mut s = Smoother::new(cfg, t);
            // 100 real-time datagrams of 300 bytes: 100 credits, or 30,000 bytes (20 credits).
            (0..100).for_each(|_| s.take_rt(300));
            let full = (0..100).take_while(|_| s.try_nrt(FULL)).count();
            match unit {
                CreditUnit::Packet => assert_eq!((s.credits(), full), (-60, 0)),
                CreditUnit::Byte => assert_eq!((s.credits(), full), (0, 20)),
            }
        }
        let cfg = SmootherConfig {
            unit: CreditUnit::Byte,
            ..SmootherConfig::default()
        };
        let mut s = Smoother::new(cfg, t);
        (0..39).for_each(|_| s.take_rt(FULL));
        s.take_rt(500);
        // 1,000 bytes of credit left: a full datagram waits, a 700-byte one goes.
        assert!(!s.nrt_ready());
        assert!(!s.try_nrt(FULL));
        assert!(s.try_nrt(700));
        assert!(!s.try_nrt(700), "300 bytes left");
        assert_eq!(s.stats().nrt, 1);
    }

    /// With a fixed cadence the period adapts every `adapt_every`, between refreshes too, and
    /// the next wake-up is the sooner of the two.
    #[test]
    fn a_fixed_cadence_adapts_the_period_whatever_its_length() {
        let t = Instant::now();
        let cfg = SmootherConfig {
            adapt_every: Some(10 * MS),
            rp0: 100 * MS,
            rp_max: 1000 * MS,
            ..SmootherConfig::default()
        };
        let mut s = Smoother::new(cfg, t);
        for k in 1..=5 {
            s.handle_timeout(t + 10 * MS * k);
        }
        assert_eq!(
            s.period(),
            90 * MS,
            "five loss-free steps before the first refresh"
        );
        s.on_report(true);
        s.handle_timeout(t + 60 * MS);
        assert_eq!(s.period(), 180 * MS);
        assert_eq!(s.next_refresh(), t + 70 * MS);
        assert_eq!(s.stats().refreshes, 6);
        // The refresh itself no longer adapts: at 100 ms credit comes, the period stays.
        for k in 7..=10 {
            s.handle_timeout(t + 10 * MS * k);
        }
        assert_eq!(s.period(), 172 * MS);
        assert_eq!(s.stats().refreshes, 10, "adaptations, not refreshes");
    }

    /// Spread credits: a backlog leaves one packet every RP / CBD, never two together, at the
    /// same long-run rate; the period still follows Fig. 5, once every CBD credits.
    #[test]
    fn spread_credits_pace_a_backlog_at_the_same_rate() {
        let t = Instant::now();
        let fixed = SmootherConfig {
            spread: true,
            rp_min: 10 * MS,
            rp_max: 10 * MS,
            ..SmootherConfig::default()
        };
        let mut s = Smoother::new(fixed, t);
        // The first bucket is full; drain it.
        assert_eq!((0..100).take_while(|_| s.try_nrt(FULL)).count(), 40);
        let mut released = Vec::new();
        let mut now = t;
        while now < t + 100 * MS {
            now += Duration::from_micros(10);
            s.handle_timeout(now);
            while s.try_nrt(FULL) {
                released.push(now);
            }
        }
        // 10 ms / 40 = 250 µs a credit: about 400 in 100 ms, never two at once.
        assert!((395..=401).contains(&released.len()), "{}", released.len());
        assert!(released
            .windows(2)
            .all(|w| w[1] - w[0] >= Duration::from_micros(240)));
        // The period adapts once per 40 credits: 10 → 8 → 6, then doubles after loss.
        let mut s = Smoother::new(
            SmootherConfig {
                spread: true,
                ..SmootherConfig::default()
            },
            t,
        );
        let mut periods = Vec::new();
        for lost in [false, false, true] {
            s.on_report(lost);
            for _ in 0..40 {
                s.handle_timeout(s.next_refresh());
            }
            periods.push(s.period().as_millis());
        }
        assert_eq!(periods, [8, 6, 12]);
    }

    /// Fig. 6's burst: NRT packets offered far faster than the rate for six initial periods
    /// leave at most `depth` (`depth + 1` by Fig. 5's rule) a refresh interval.
    #[test]
    fn a_burst_leaves_no_more_than_the_bucket_each_period() {
        for (rule, most) in [(NrtRule::OneCredit, 40), (NrtRule::NonNegative, 41)] {
            let t = Instant::now();
            let cfg = SmootherConfig {
                nrt_rule: rule,
                ..SmootherConfig::default()
            };
            let mut s = Smoother::new(cfg, t);
            let mut per_interval = vec![0u32];
            let mut now = t;
            while now < t + 60 * MS {
                now += Duration::from_micros(50);
                if now >= s.next_refresh() {
                    s.handle_timeout(now);
                    per_interval.push(0);
                }
                if s.try_nrt(FULL) {
                    *per_interval.last_mut().unwrap() += 1;
                }
            }
            assert!(per_interval.len() >= 6, "{per_interval:?}");
            assert!(per_interval.iter().all(|&n| n <= most), "{per_interval:?}");
        }
    }
}
