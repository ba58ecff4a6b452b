//! `slipstream caps`: what this kernel supports and which datapath endpoints will use.

use super::CliResult;
use slipstream::datapath::{self, Caps};

fn yn(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Prints the probed capabilities (as JSON with `json`).
pub(super) fn run(json: bool) -> CliResult {
    let c: &Caps = datapath::probe();
    let auto = c.auto();
    if json {
        let v = serde_json::json!({
            "caps": c,
            "endpoint_datapath": auto,
            "datapaths": datapath::NAMES
                .iter()
                .filter(|n| **n != "auto")
                .map(|n| (n.to_string(), serde_json::Value::Bool(c.supports(n))))
                .collect::<serde_json::Map<_, _>>(),
        });
        println!("{v}");
        return Ok(());
    }
    println!("kernel                       {}", c.kernel);
    println!("sendmmsg/recvmmsg            {}", yn(c.sendmmsg));
    println!(
        "UDP GSO (UDP_SEGMENT)        {}{}",
        yn(c.gso),
        if c.gso {
            format!(" (up to {} segments)", c.gso_max_segments)
        } else {
            String::new()
        }
    );
    println!("UDP GRO                      {}", yn(c.gro));
    println!("MSG_ZEROCOPY                 {}", yn(c.msg_zerocopy));
    println!("io_uring                     {}", yn(c.io_uring));
    if c.io_uring {
        println!(
            "  SEND_ZC / SENDMSG_ZC       {} / {}",
            yn(c.uring_send_zc),
            yn(c.uring_sendmsg_zc)
        );
        println!(
            "  multishot RECVMSG          {}",
            yn(c.uring_recvmsg_multishot)
        );
        println!("  provided-buffer rings      {}", yn(c.uring_buf_ring));
        println!("  registered buffers         {}", yn(c.uring_fixed_buffers));
    }
    println!();
    for n in datapath::NAMES
        .iter()
        .filter(|n| **n != "auto" && **n != "plain")
    {
        println!(
            "datapath {:<10}          {}",
            n,
            if c.supports(n) {
                "available"
            } else {
                "not supported here"
            }
        );
    }
    println!();
    println!("endpoints use: {auto} (auto; force another with --datapath NAME)");
    Ok(())
}
