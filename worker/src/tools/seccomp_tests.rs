use super::*;

/// Runs `program` on one `seccomp_data` (`nr`, `arch`, the low words of the first two
/// arguments), as the kernel would for the instructions the filter uses.
fn run(program: &[sock_filter], nr: libc::c_long, arch: u32, args: [u32; 2]) -> u32 {
    let word = |offset: u32| match offset {
        NR => nr as u32,
        ARCH_OFFSET => arch,
        o if o == arg_low(0) => args[0],
        o if o == arg_low(1) => args[1],
        o => panic!("the filter read offset {o}"),
    };
    let (mut pc, mut a) = (0usize, 0u32);
    loop {
        let insn = program[pc];
        let code = u32::from(insn.code);
        pc += 1;
        match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => a = word(insn.k),
            c if c == libc::BPF_RET | libc::BPF_K => return insn.k,
            c if c & 0x07 == libc::BPF_JMP => {
                let taken = match c & 0xf0 {
                    op if op == libc::BPF_JEQ => a == insn.k,
                    op if op == libc::BPF_JGE => a >= insn.k,
                    op if op == libc::BPF_JSET => a & insn.k != 0,
                    op => panic!("unexpected jump {op:#x}"),
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            c => panic!("unexpected instruction {c:#x}"),
        }
    }
}

fn native(nr: libc::c_long, args: [u32; 2]) -> u32 {
    run(&program(), nr, ARCH, args)
}

#[test]
fn what_landlock_cannot_see_is_refused_and_ordinary_calls_pass() {
    let eperm = errno(libc::EPERM);
    for (syscall, why) in DENIED {
        assert_eq!(native(*syscall, [0, 0]), eperm, "{syscall} ({why})");
    }
    assert_eq!(native(libc::SYS_bpf, [0, 0]), eperm);
    assert_eq!(native(libc::SYS_mount, [0, 0]), eperm);
    for ordinary in [
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_openat,
        libc::SYS_execve,
        libc::SYS_ptrace,
        libc::SYS_wait4,
        libc::SYS_socket,
    ] {
        assert_eq!(native(ordinary, [0, 0]), ALLOW, "{ordinary}");
    }
    // clone3's flags are out of a filter's reach: ENOSYS makes libc fall back to clone.
    assert_eq!(native(libc::SYS_clone3, [0, 0]), errno(libc::ENOSYS));
}

#[test]
fn terminal_injection_ioctls_are_refused_and_other_ioctls_pass() {
    let eperm = errno(libc::EPERM);
    assert_eq!(native(libc::SYS_ioctl, [0, libc::TIOCSTI as u32]), eperm);
    assert_eq!(native(libc::SYS_ioctl, [0, libc::TIOCLINUX as u32]), eperm);
    for other in [libc::TCGETS, libc::TIOCGWINSZ, libc::FIONREAD] {
        assert_eq!(
            native(libc::SYS_ioctl, [3, other as u32]),
            ALLOW,
            "{other:#x}"
        );
    }
}

#[test]
fn new_namespaces_are_refused_and_plain_forks_and_threads_pass() {
    let eperm = errno(libc::EPERM);
    let fork = libc::SIGCHLD as u32;
    let thread = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u32;
    assert_eq!(native(libc::SYS_clone, [fork, 0]), ALLOW);
    assert_eq!(native(libc::SYS_clone, [thread, 0]), ALLOW);
    for flag in [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ] {
        assert_eq!(native(libc::SYS_clone, [fork | flag as u32, 0]), eperm);
        assert_eq!(native(libc::SYS_unshare, [flag as u32, 0]), eperm);
    }
    // CLONE_NEWTIME is an exit signal's bit for clone, a namespace for unshare.
    assert_eq!(
        native(libc::SYS_unshare, [libc::CLONE_NEWTIME as u32, 0]),
        eperm
    );
    assert_eq!(
        native(libc::SYS_unshare, [libc::CLONE_FILES as u32, 0]),
        ALLOW
    );
}

#[test]
fn another_calling_convention_cannot_go_around_the_list() {
    // i386 (`int 0x80` on x86_64) or arm32 numbers mean other calls: killed.
    assert_eq!(run(&program(), libc::SYS_read, 0x4000_0003, [0, 0]), KILL);
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        native(libc::SYS_bpf | X32_SYSCALL_BIT as libc::c_long, [0, 0]),
        errno(libc::ENOSYS)
    );
}

#[test]
fn the_kernel_takes_the_filter() {
    assert_eq!(probe(&program()), Ok(()));
}

/// Runs `program` with `args` as this (root, in CI) test process's child, with only
/// the filter installed (`filter`) or nothing at all: the filter's own effect, apart
/// from the capabilities and Landlock that also stand in the way in a tool process.
#[allow(unsafe_code)]
fn spawn(filter: bool, program: &str, args: &[&str], stdin: std::process::Stdio) -> (bool, String) {
    let mut command = std::process::Command::new(program);
    command.args(args).stdin(stdin);
    if filter {
        let filter = super::program();
        // SAFETY: prctl and seccomp between fork and exec; the program was built
        // before the fork.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                install(&filter)
            });
        }
    }
    let out = command.output().expect("the test program starts");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_filter_alone_stops_terminal_injection_ebpf_and_user_namespaces() {
    // A terminal the child holds open as stdin: what Landlock cannot take away.
    let pty = nix::pty::openpty(None, None).expect("a pty");
    let tiocsti = "import fcntl, termios\nfcntl.ioctl(0, termios.TIOCSTI, b'x')\nprint('injected')";
    let bpf = format!(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         attr = (ctypes.c_uint32 * 12)(2, 4, 4, 1)\n\
         fd = libc.syscall({}, 0, attr, ctypes.sizeof(attr))\n\
         print('map' if fd >= 0 else f'errno {{ctypes.get_errno()}}')",
        libc::SYS_bpf
    );
    let slave = || std::process::Stdio::from(pty.slave.try_clone().expect("dup"));
    let root = nix::unistd::geteuid().is_root();
    // Without the filter, as root, each works: the attacks are real.
    if root {
        let (_, out) = spawn(false, "python3", &["-c", tiocsti], slave());
        assert!(out.contains("injected"), "{out}");
        let (_, out) = spawn(false, "python3", &["-c", &bpf], std::process::Stdio::null());
        assert!(out.contains("map"), "{out}");
    }
    let (ok, out) = spawn(
        false,
        "unshare",
        &["-U", "true"],
        std::process::Stdio::null(),
    );
    let userns_allowed = ok;
    eprintln!("unshare -U unfiltered: {ok} {out}");

    let (ok, out) = spawn(true, "python3", &["-c", tiocsti], slave());
    assert!(!ok && out.contains("Operation not permitted"), "{out}");
    let (_, out) = spawn(true, "python3", &["-c", &bpf], std::process::Stdio::null());
    assert!(out.contains(&format!("errno {}", libc::EPERM)), "{out}");
    let (ok, out) = spawn(
        true,
        "unshare",
        &["-U", "true"],
        std::process::Stdio::null(),
    );
    assert!(!ok && out.contains("Operation not permitted"), "{out}");
    assert!(root || userns_allowed || !ok);
    // Ordinary work (threads and forks through clone3's fallback) still runs.
    let (ok, out) = spawn(
        true,
        "python3",
        &[
            "-c",
            "import threading, subprocess\nt = threading.Thread(target=print, args=('thread',))\n\
             t.start(); t.join()\nprint(subprocess.run(['echo', 'forked'], capture_output=True, text=True).stdout)",
        ],
        std::process::Stdio::null(),
    );
    assert!(
        ok && out.contains("thread") && out.contains("forked"),
        "{out}"
    );
}
