//! Clean-up that survives the benchmark being interrupted.
//!
//! The [`Drop`] guards (emulator, workspace, peer processes) cover every exit path that
//! unwinds; Ctrl-C, SIGTERM or SIGKILL do not unwind, and there is no safe way here to catch a
//! signal. So `bench transfer` starts a guardian: a copy of this binary (`bench transfer
//! --guard PID`) in a process group of its own, which Ctrl-C at the terminal does not reach,
//! and which every peer process joins. The guardian waits for the benchmark to exit (pidfd); if
//! it exits while the guardian is still there, the exit was abrupt: the guardian removes the
//! benchmark's emulators and /dev/shm workspace, then kills its process group (the peers still
//! running, and itself). After a normal exit the benchmark kills the guardian first, and
//! nothing else happens.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The running guardian of this process, killed on drop.
#[derive(Debug)]
pub struct Guardian {
    child: Child,
}

impl Guardian {
    /// Starts the guardian of this process (`exe` is this binary).
    pub fn spawn(exe: &Path) -> Result<Guardian, String> {
        let child = Command::new(exe)
            .args(["bench", "transfer", "--guard"])
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting the clean-up guardian: {e}"))?;
        Ok(Guardian { child })
    }

    /// The process group the peers join (the guardian's).
    pub fn process_group(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(0)
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The guardian's own work: waits for process `pid` to exit, then removes what it left and
/// kills this process group. Returns only on error.
pub fn watch(pid: &str) -> Result<(), String> {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::process::{kill_process_group, pidfd_open, Pid, PidfdFlags, Signal};
    let n: i32 = pid
        .parse()
        .map_err(|_| format!("--guard: bad process id '{pid}'"))?;
    let target = Pid::from_raw(n).ok_or_else(|| format!("--guard: bad process id {n}"))?;
    let fd = pidfd_open(target, PidfdFlags::empty()).map_err(|e| format!("pidfd_open {n}: {e}"))?;
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    loop {
        match poll(&mut fds, None) {
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("poll on a pidfd: {e}")),
        }
    }
    eprintln!("bench transfer (pid {n}) was interrupted: cleaning up after it");
    crate::bench::remove_stale_emulators();
    super::Workspace::remove_stale();
    let own = rustix::process::getpgrp();
    kill_process_group(own, Signal::KILL).map_err(|e| format!("killing the peers: {e}"))
}
