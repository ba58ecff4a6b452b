//! Development driver: the engine on a plain std UDP socket, no runtime. Receives one file
//! (listener) or sends one (caller) in file mode. Used to debug interop with libsrt.
use slipstream_proto::conn::{ConnConfig, Event, Mode};
use slipstream_proto::endpoint::{Endpoint, EndpointConfig};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sock = UdpSocket::bind(&args[2]).unwrap();
    let mut ep = Endpoint::new(EndpointConfig::default(), Instant::now());
    let mut cfg = ConnConfig::new(Mode::File);
    let mut buf = vec![0u8; 65536];
    let mut rbuf = vec![0u8; 1 << 20];
    let mut out = Vec::new();
    let mut data = Vec::new();
    let mut sent = 0;
    let id = if args[1] == "recv" {
        ep.listen(Some(cfg));
        None
    } else {
        data = std::fs::read(&args[4]).unwrap();
        cfg.set_stream_id(Some(b"x.bin".to_vec()));
        Some(
            ep.connect(Instant::now(), args[3].parse().unwrap(), cfg)
                .unwrap(),
        )
    };
    let mut conn = id;
    let mut closed = false;
    let start = Instant::now();
    loop {
        let now = Instant::now();
        while let Some(t) = ep.poll_transmit(now, &mut buf) {
            sock.send_to(&buf[..t.len], t.dst).unwrap();
        }
        while let Some((cid, ev)) = ep.poll_event() {
            eprintln!("{:?} event {cid:?} {ev:?}", now - start);
            if ev == Event::Accepted {
                conn = Some(cid);
            }
            if let Event::Closed(_) = ev {
                if let Some(c) = ep.conn(cid) {
                    eprintln!("stats {:?}", c.stats(now));
                }
                closed = true;
            }
        }
        if let Some(cid) = conn {
            let c = ep.conn(cid).unwrap();
            while sent < data.len() {
                match c.send(now, &data[sent..]) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            if id.is_some() && sent == data.len() && !data.is_empty() {
                c.close(now);
            }
            while let Ok(n) = c.recv(&mut rbuf) {
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&rbuf[..n]);
            }
        }
        if closed {
            break;
        }
        let wait = ep
            .poll_timeout()
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(100));
        sock.set_read_timeout(Some(wait.max(Duration::from_micros(50))))
            .unwrap();
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            ep.handle(Instant::now(), from, &buf[..n]);
        }
        ep.handle_timeout(Instant::now());
    }
    if args[1] == "recv" {
        std::fs::write(&args[3], &out).unwrap();
        eprintln!("wrote {} bytes; endpoint {:?}", out.len(), ep.stats());
    }
}
