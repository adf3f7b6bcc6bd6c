//! Children of the control plane die with it (`PR_SET_PDEATHSIG`). A leaf module:
//! the launcher and the backends' probe both use it.

use nix::sys::signal::Signal;
use tokio::process::Command;

/// The child is killed when the control plane dies (any process it starts: a
/// worker, or `chorus-worker backends`).
#[allow(unsafe_code)]
pub(super) fn set_parent_death_signal(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // system calls (prctl, getppid); it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The parent may have died before prctl took effect; then nobody would
            // deliver the signal, so give up now.
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(std::io::Error::other("control plane exited during launch"));
            }
            Ok(())
        });
    }
}
