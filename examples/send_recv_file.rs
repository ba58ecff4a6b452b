//! Sends a file to a receiver in the same process over loopback, as two programs would over
//! a network: the receiver verifies the digest, commits the file and tells the sender,
//! whose `Ok` means the file is there.
//!
//! `cargo run --release --example send_recv_file -- FILE [OUT]` (OUT defaults to
//! FILE.copy). Run it again after interrupting it and the transfer resumes.

use slipstream::transfer;
use slipstream::{ConnConfig, Endpoint, EndpointOptions, Mode};
use std::path::PathBuf;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let file = PathBuf::from(args.next().ok_or("usage: send_recv_file FILE [OUT]")?);
    let out = args.next().map(PathBuf::from).unwrap_or_else(|| {
        let mut o = file.clone().into_os_string();
        o.push(".copy");
        PathBuf::from(o)
    });
    // Regular files are sent from a mapping; a truncation meanwhile then ends the process
    // with a message instead of a SIGBUS.
    slipstream::exit_on_sigbus_in_mappings()?;

    // The receiver: one endpoint (one UDP socket and its I/O thread), listening.
    let rx_ep = Endpoint::bind("127.0.0.1:0".parse()?, EndpointOptions::default())?;
    let mut cfg = ConnConfig::new(Mode::File);
    // The digest, the verdict and resume are offered to slipstream peers; a plain SRT peer
    // gets plain SRT.
    cfg.set_file_digest(true);
    rx_ep.listen(cfg.clone())?;
    let addr = rx_ep.local_addr();
    let receiver = std::thread::spawn(move || -> std::io::Result<transfer::Verdict> {
        let conn = rx_ep.accept_timeout(Duration::from_secs(10))?;
        transfer::recv_file(&conn, &out, true, |_| {})
    });

    // The sender: another endpoint, calling.
    let tx_ep = Endpoint::bind("127.0.0.1:0".parse()?, EndpointOptions::default())?;
    let conn = tx_ep.connect(addr, cfg)?;
    let sent = transfer::send_file(&conn, &file, |_| {})?;
    let received = receiver.join().map_err(|_| "the receiver panicked")??;
    println!(
        "sent {} bytes ({} resumed), XXH3-128 {}; the receiver {}",
        sent.bytes,
        sent.resumed_from,
        sent.digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        if sent.committed {
            "verified and committed it"
        } else {
            "acknowledged it"
        }
    );
    assert_eq!(received.bytes(), sent.bytes);
    Ok(())
}
