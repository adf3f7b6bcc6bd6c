//! Dropping every capability in a tool process before it runs, so a worker running as
//! root starts tool processes that are uid 0 but powerless: no routes, addresses,
//! host name, device nodes, raw I/O, or reading non-dumpable processes' `/proc` files.
//!
//! In the child, between fork and exec (`CapDrop::apply`, no allocation):
//! 1. securebits `NOROOT`, `NO_CAP_AMBIENT_RAISE` and `KEEP_CAPS` off, all locked: an
//!    exec as uid 0 (or of a setuid-root program) grants nothing;
//! 2. the bounding set emptied (`PR_CAPBSET_DROP` for 0..=`cap_last_cap`, read before
//!    the fork): no exec can bring a capability back;
//! 3. the ambient set cleared, then effective, permitted and inheritable set to
//!    nothing (`capset`);
//! 4. `no_new_privs`.
//!
//! Steps 1 and 2 need `CAP_SETPCAP`. A worker without it (not root) has nothing to drop
//! there, so their `EPERM` is accepted; with it (root), every step must succeed or the
//! command does not start. Securebits are best effort even then (a container may have
//! locked them otherwise): the empty bounding and inheritable sets are what make an
//! exec grant nothing.

use nix::libc;

/// `CAP_SETPCAP`: may change the bounding set and securebits.
const CAP_SETPCAP: u32 = 8;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// The securebits every tool process gets.
const SECUREBITS: libc::c_int = libc::SECBIT_NOROOT
    | libc::SECBIT_NOROOT_LOCKED
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE
    | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
    | libc::SECBIT_KEEP_CAPS_LOCKED;

/// What the child needs, read before the fork.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapDrop {
    /// The highest capability this kernel knows.
    last_cap: u32,
    /// Whether this process may change the bounding set (`CAP_SETPCAP`): then every
    /// drop must succeed.
    privileged: bool,
}

impl CapDrop {
    /// Reads `/proc/sys/kernel/cap_last_cap` and this process's effective set (once:
    /// neither changes while the worker runs).
    pub fn prepare() -> Self {
        static PREPARED: std::sync::OnceLock<CapDrop> = std::sync::OnceLock::new();
        *PREPARED.get_or_init(|| {
            let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
                .ok()
                .and_then(|text| parse_last_cap(&text))
                // Every capability number up to 63 fits the kernel's 64-bit sets;
                // numbers the kernel does not know end the loop with EINVAL.
                .unwrap_or(63);
            let privileged = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|status| effective_caps(&status))
                .is_some_and(|caps| caps & (1 << CAP_SETPCAP) != 0);
            CapDrop {
                last_cap,
                privileged,
            }
        })
    }

    /// Drops everything (see the module docs). Async-signal-safe: only system calls on
    /// values on the stack.
    #[allow(unsafe_code)]
    pub fn apply(&self) -> std::io::Result<()> {
        // SAFETY: prctl and capset with integer arguments and a pointer to locals.
        unsafe {
            let bits = libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0);
            if bits >= 0 {
                let _ = libc::prctl(libc::PR_SET_SECUREBITS, bits | SECUREBITS, 0, 0, 0);
            }
            for cap in 0..=self.last_cap {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                    let error = std::io::Error::last_os_error();
                    match error.raw_os_error() {
                        // Past the kernel's last capability.
                        Some(libc::EINVAL) => break,
                        Some(libc::EPERM) if !self.privileged => break,
                        _ => return Err(error),
                    }
                }
            }
            if libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                let error = std::io::Error::last_os_error();
                // EINVAL: a kernel before 4.3, which has no ambient set.
                if error.raw_os_error() != Some(libc::EINVAL) {
                    return Err(error);
                }
            }
            let header = CapHeader {
                version: CAPABILITY_VERSION_3,
                pid: 0,
            };
            let none = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capset, &header, none.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `/proc/sys/kernel/cap_last_cap`'s number. Pure.
pub fn parse_last_cap(text: &str) -> Option<u32> {
    text.trim().parse().ok().filter(|n| *n < 64)
}

/// The `CapEff:` mask of a `/proc/<pid>/status`. Pure.
pub fn effective_caps(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_last_capability_and_the_effective_set_are_read() {
        assert_eq!(parse_last_cap("40\n"), Some(40));
        assert_eq!(parse_last_cap("64"), None);
        assert_eq!(parse_last_cap("x"), None);
        let status = "Name:\tbash\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n";
        assert_eq!(effective_caps(status), Some(0x1fffeffffff));
        assert_eq!(effective_caps("Name:\tbash\n"), None);
    }

    /// Runs `grep Cap|NoNewPrivs` as `nobody` (dropped to by std before the hook), with
    /// `drop` applied in the hook: what a worker that is not root sees.
    #[allow(unsafe_code)]
    fn as_nobody(drop: CapDrop) -> std::io::Result<std::process::Output> {
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new("grep");
        command
            .args(["-E", "^(CapEff|CapBnd|NoNewPrivs):", "/proc/self/status"])
            .uid(65534)
            .gid(65534);
        // SAFETY: CapDrop::apply is async-signal-safe (system calls on locals only).
        unsafe {
            command.pre_exec(move || drop.apply());
        }
        command.output()
    }

    #[test]
    fn a_worker_that_is_not_root_drops_what_it_can_and_root_must_drop_everything() {
        if !nix::unistd::geteuid().is_root() {
            return; // switching to nobody needs root; CI runs as root.
        }
        let last_cap = CapDrop::prepare().last_cap;
        let out = as_nobody(CapDrop {
            last_cap,
            privileged: false,
        })
        .expect("an unprivileged worker's drop is not an error");
        let status = String::from_utf8_lossy(&out.stdout);
        assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
        assert!(status.contains("NoNewPrivs:\t1"), "{status}");
        // The same EPERM from a process that should have been able to drop is an error.
        let refused = as_nobody(CapDrop {
            last_cap,
            privileged: true,
        })
        .expect_err("a privileged worker's failed drop is an error");
        assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "{refused}");
    }
}
