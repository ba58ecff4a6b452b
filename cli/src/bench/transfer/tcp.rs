//! The kernel-TCP peer of `bench transfer`: one file over one TCP connection, file to file,
//! as a careful user would move it with kernel TCP (no application protocol, no hashing).
//!
//! iperf3's `-F` cannot serve here: its server stops reading when the client reports the end of
//! the test, so the data still in flight is never written (the output came out megabytes short
//! in every trial), and its client mishandles partial socket writes. These two functions are
//! the whole transfer instead; `bench transfer` runs them as its own subprocesses
//! (`--tcp-peer`), so that each side is a process of its own, in its own network namespace.
//!
//! - [`recv`] listens on a port, accepts one connection, writes everything it reads to the
//!   output file with 1 MiB reads, and exits 0 at the sender's end of stream.
//! - [`send`] connects with the named congestion control (`TCP_CONGESTION`), sends the file
//!   with `std::io::copy` (which uses `sendfile(2)` on Linux), shuts down its sending side and
//!   waits for the receiver to close, so that it exits once everything arrived. Buffers are left
//!   to the kernel's autotuning (bounded by the namespace's `tcp_rmem`/`tcp_wmem`).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::Instant;

/// Runs one side, from the `--tcp-peer` arguments: `recv PORT FILE` or `send HOST:PORT FILE CC`.
pub fn run_peer(args: &[String]) -> Result<(), String> {
    match args {
        [role, port, file] if role == "recv" => {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("--tcp-peer recv: bad port '{port}'"))?;
            recv(port, Path::new(file))
        }
        [role, addr, file, cc] if role == "send" => {
            let addr: SocketAddr = addr
                .parse()
                .map_err(|_| format!("--tcp-peer send: bad address '{addr}'"))?;
            send(addr, Path::new(file), cc)
        }
        _ => Err("--tcp-peer: expected 'recv PORT FILE' or 'send HOST:PORT FILE CC'".into()),
    }
}

/// Accepts one connection on `port` and writes what arrives to `out` until end of stream.
pub fn recv(port: u16, out: &Path) -> Result<(), String> {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
        .map_err(|e| format!("binding TCP port {port}: {e}"))?;
    let (mut conn, _) = listener
        .accept()
        .map_err(|e| format!("accepting on TCP port {port}: {e}"))?;
    drop(listener);
    let mut f = File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("receiving: {e}")),
        };
        f.write_all(&buf[..n])
            .map_err(|e| format!("{}: {e}", out.display()))?;
    }
    Ok(())
}

/// Sends `file` to `addr` over TCP with congestion control `cc`, and prints one JSON line.
pub fn send(addr: SocketAddr, file: &Path, cc: &str) -> Result<(), String> {
    use socket2::{Domain, Protocol, Socket, Type};
    let mut f = File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("TCP socket: {e}"))?;
    rustix::net::sockopt::set_tcp_congestion(&sock, cc)
        .map_err(|e| format!("TCP_CONGESTION {cc}: {e} (is tcp_{cc} available?)"))?;
    let t0 = Instant::now();
    sock.connect(&addr.into())
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let mut conn: TcpStream = sock.into();
    let bytes = std::io::copy(&mut f, &mut conn).map_err(|e| format!("sending: {e}"))?;
    conn.shutdown(Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    // The receiver closes after its last write: then everything has arrived.
    let mut rest = [0u8; 64];
    while conn.read(&mut rest).map_err(|e| format!("closing: {e}"))? > 0 {}
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"bytes": bytes, "seconds": secs, "cc": cc})
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_a_file_over_loopback() {
        let dir = std::env::temp_dir().join(format!("slipstream-bt-tcp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (input, output) = (dir.join("in"), dir.join("out"));
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        std::fs::write(&input, &data).unwrap();
        // A free port: bind, read it back, release.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = output.clone();
        let rx = std::thread::spawn(move || recv(port, &out));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut sent = Err(String::new());
        for _ in 0..200 {
            sent = send(addr, &input, "cubic");
            if sent.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        sent.unwrap();
        rx.join().unwrap().unwrap();
        assert!(std::fs::read(&output).unwrap() == data);
        assert!(run_peer(&["send".into(), "nonsense".into()]).is_err());
        assert!(send(addr, &input, "no-such-cc").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
