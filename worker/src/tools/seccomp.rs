//! The seccomp filter of tool processes: the system calls Landlock cannot see (none of
//! them is a file access) that reach the kernel or the host rather than the workspace.
//!
//! A classic BPF program, built once before any fork (`program`) and installed last
//! in the child, after Landlock (`install`: one system call, no allocation). It is a
//! deny list, default allow:
//!
//! - another architecture's calling convention (a 32-bit `int 0x80` on x86_64, whose
//!   numbers mean other calls) kills the process; x32 calls (x86_64's arch value with
//!   bit 30 set in the number) get `ENOSYS`, so they cannot bypass the list;
//! - `ioctl` `TIOCSTI` and `TIOCLINUX` (typing into a terminal) → `EPERM`;
//! - new namespaces: `unshare` and `clone` with any `CLONE_NEW*` flag, and `setns` →
//!   `EPERM`; `clone3` (whose flags live in memory a filter cannot read) → `ENOSYS`,
//!   so libc falls back to `clone`, as container runtimes do;
//! - `DENIED` (eBPF, perf events, the keyring, kernel modules, kexec, reboot, mounts,
//!   swap, host name and clock, the kernel log, `io_uring`, `userfaultfd`, file
//!   handles) → `EPERM`.
//!
//! Most of these also need a capability the sandbox has dropped (`caps`); the filter
//! holds even where a kernel lets an unprivileged process in (unprivileged user
//! namespaces, eBPF or `userfaultfd` allowed by sysctl, legacy `TIOCSTI`).

use nix::libc::{self, sock_filter};

/// `AUDIT_ARCH_*` of the architecture this worker was built for (`<linux/audit.h>`):
/// EM_X86_64 / EM_AARCH64 with the 64-bit and little-endian flags.
#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7;

/// x32 system calls carry this bit in their number (x86_64 only).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// System calls refused outright, with why.
const DENIED: &[(libc::c_long, &str)] = &[
    (libc::SYS_bpf, "eBPF programs and maps"),
    (libc::SYS_perf_event_open, "kernel performance events"),
    (libc::SYS_keyctl, "the kernel keyring"),
    (libc::SYS_add_key, "the kernel keyring"),
    (libc::SYS_request_key, "the kernel keyring"),
    (libc::SYS_init_module, "kernel modules"),
    (libc::SYS_finit_module, "kernel modules"),
    (libc::SYS_delete_module, "kernel modules"),
    (libc::SYS_kexec_load, "booting another kernel"),
    (libc::SYS_kexec_file_load, "booting another kernel"),
    (libc::SYS_reboot, "rebooting"),
    (libc::SYS_setns, "entering another namespace"),
    (libc::SYS_mount, "mounts"),
    (libc::SYS_umount2, "mounts"),
    (libc::SYS_pivot_root, "mounts"),
    (libc::SYS_fsopen, "mounts"),
    (libc::SYS_fsconfig, "mounts"),
    (libc::SYS_fsmount, "mounts"),
    (libc::SYS_fspick, "mounts"),
    (libc::SYS_move_mount, "mounts"),
    (libc::SYS_open_tree, "mounts"),
    (libc::SYS_mount_setattr, "mounts"),
    (libc::SYS_swapon, "swap"),
    (libc::SYS_swapoff, "swap"),
    (libc::SYS_sethostname, "the host name"),
    (libc::SYS_setdomainname, "the host name"),
    (libc::SYS_settimeofday, "the clock"),
    (libc::SYS_clock_settime, "the clock"),
    (libc::SYS_acct, "process accounting"),
    (libc::SYS_syslog, "the kernel log"),
    (libc::SYS_userfaultfd, "a kernel exploit primitive"),
    (libc::SYS_io_uring_setup, "io_uring (kernel attack surface)"),
    (libc::SYS_io_uring_enter, "io_uring (kernel attack surface)"),
    (
        libc::SYS_io_uring_register,
        "io_uring (kernel attack surface)",
    ),
    (
        libc::SYS_open_by_handle_at,
        "opening files by handle, around paths",
    ),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_iopl, "I/O ports"),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_ioperm, "I/O ports"),
];

/// `ioctl` requests refused: typing into a terminal, and the console's equivalent.
const DENIED_IOCTLS: &[libc::Ioctl] = &[libc::TIOCSTI, libc::TIOCLINUX];

/// Every `CLONE_NEW*` flag `clone` takes (`CLONE_NEWTIME` shares its bit with the
/// exit signal there, so only `unshare` checks it).
const CLONE_NAMESPACES: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;
const UNSHARE_NAMESPACES: u32 = CLONE_NAMESPACES | libc::CLONE_NEWTIME as u32;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH_OFFSET: u32 = 4;
/// The low 32 bits of argument `i` (the flags and `ioctl` requests we check fit there;
/// the kernel reads an `ioctl` request as 32 bits).
const fn arg_low(i: u32) -> u32 {
    if cfg!(target_endian = "little") {
        16 + 8 * i
    } else {
        16 + 8 * i + 4
    }
}

pub const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
pub const fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

const fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

fn load(offset: u32) -> sock_filter {
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset)
}

fn ret(action: u32) -> sock_filter {
    stmt(libc::BPF_RET | libc::BPF_K, action)
}

/// `if A == k { return action }`.
fn refuse_if_eq(program: &mut Vec<sock_filter>, k: u32, action: u32) {
    program.push(jump(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, k, 0, 1));
    program.push(ret(action));
}

/// `if nr == syscall { A = arg; <body>; return ALLOW }` where `body` refuses.
fn on_syscall(
    program: &mut Vec<sock_filter>,
    syscall: libc::c_long,
    arg: u32,
    body: impl FnOnce(&mut Vec<sock_filter>),
) {
    let mut block = vec![load(arg_low(arg))];
    body(&mut block);
    block.push(ret(ALLOW));
    #[allow(
        clippy::expect_used,
        reason = "the blocks are this file's constants, a few checks each"
    )]
    let skip = u8::try_from(block.len()).expect("a syscall's checks fit a BPF jump");
    program.push(jump(
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        syscall as u32,
        0,
        skip,
    ));
    program.extend(block);
}

/// The filter (see the module docs). Pure; built once per worker.
pub fn program() -> Vec<sock_filter> {
    let mut p = vec![
        load(ARCH_OFFSET),
        jump(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, ARCH, 1, 0),
        ret(KILL),
        load(NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        p.push(jump(
            libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
            X32_SYSCALL_BIT,
            0,
            1,
        ));
        p.push(ret(errno(libc::ENOSYS)));
    }
    for (syscall, _why) in DENIED {
        refuse_if_eq(&mut p, *syscall as u32, errno(libc::EPERM));
    }
    refuse_if_eq(&mut p, libc::SYS_clone3 as u32, errno(libc::ENOSYS));
    on_syscall(&mut p, libc::SYS_ioctl, 1, |b| {
        for request in DENIED_IOCTLS {
            refuse_if_eq(b, *request as u32, errno(libc::EPERM));
        }
    });
    for (syscall, namespaces) in [
        (libc::SYS_clone, CLONE_NAMESPACES),
        (libc::SYS_unshare, UNSHARE_NAMESPACES),
    ] {
        on_syscall(&mut p, syscall, 0, |b| {
            b.push(jump(
                libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
                namespaces,
                0,
                1,
            ));
            b.push(ret(errno(libc::EPERM)));
        });
    }
    p.push(ret(ALLOW));
    p
}

/// Installs `program` on the calling thread. Async-signal-safe (no allocation): for
/// the child between fork and exec, which must have set `no_new_privs` first.
#[allow(unsafe_code)]
pub fn install(program: &[sock_filter]) -> std::io::Result<()> {
    let Ok(len) = u16::try_from(program.len()) else {
        return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
    };
    let fprog = libc::sock_fprog {
        len,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at `program`, which outlives the call; the kernel copies
    // the program and does not keep the pointer.
    let done = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_ulong,
            &fprog as *const libc::sock_fprog,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether the kernel takes the filter: installed on a throwaway thread (a filter
/// without `TSYNC` binds only the calling thread, as `no_new_privs` does). `Err` says
/// why not.
#[allow(unsafe_code)]
pub fn probe(program: &[sock_filter]) -> Result<(), String> {
    let program = program.to_vec();
    std::thread::spawn(move || {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(format!(
                "setting no_new_privs failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        install(&program).map_err(|e| {
            format!("the kernel refused a seccomp filter ({e}; CONFIG_SECCOMP_FILTER needed)")
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the seccomp probe crashed".into()))
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
mod tests;
