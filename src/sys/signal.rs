//! SIGINT and SIGTERM as a request to stop: a handler that only sets a flag, installed
//! without SA_RESTART so that a thread blocked in `read(2)` (stdin) returns EINTR and looks
//! at the flag. A second signal of either kind while the first is being handled ends the
//! process at once (status 130), for a user whose orderly stop hangs.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(sig: libc::c_int) {
    if STOP.swap(true, Ordering::AcqRel) {
        // SAFETY: _exit(2) is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
    SIGNAL.store(sig, Ordering::Release);
}

/// Installs the handler for SIGINT and SIGTERM (replacing any other).
pub fn install_stop_handler() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sa is fully initialised (zeroed, the handler, no flags, an empty mask);
        // the handler only touches atomics and calls _exit.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as *const () as libc::sighandler_t;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since the handler was installed.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Acquire)
}

/// The name of the signal that asked to stop, if one did.
pub fn stop_signal() -> Option<&'static str> {
    match SIGNAL.load(Ordering::Acquire) {
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        _ => None,
    }
}
