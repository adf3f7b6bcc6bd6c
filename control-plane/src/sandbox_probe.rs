//! Whether agents' tool processes can be sandboxed on this host, for the start-up log
//! and `GET /api/agents/{name}`. The worker applies the sandbox and probes the same
//! way (`chorus_worker::tools::sandbox::support`); workers run on this host, so both
//! see the same kernel.

use landlock::{ABI, Access, AccessFs, LandlockStatus, Ruleset, RulesetAttr, RulesetStatus};

/// "landlock (abi N)" or "unavailable: <why>". Probed on a throwaway thread that
/// restricts itself: Landlock applies to the calling thread only.
pub fn describe() -> String {
    std::thread::spawn(probe)
        .join()
        .unwrap_or_else(|_| "unavailable: the Landlock probe crashed".into())
}

fn probe() -> String {
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(landlock::Ruleset::create)
        .and_then(landlock::RulesetCreated::restrict_self);
    match status {
        Ok(status) => match status.landlock {
            LandlockStatus::Available { effective_abi, .. }
                if status.ruleset != RulesetStatus::NotEnforced =>
            {
                format!("landlock (abi {})", effective_abi as i32)
            }
            LandlockStatus::NotEnabled => {
                "unavailable: Landlock is built into the kernel but not enabled (lsm=)".into()
            }
            LandlockStatus::NotImplemented => {
                "unavailable: the kernel has no Landlock (Linux 5.13 or later needed)".into()
            }
            LandlockStatus::Available { .. } => {
                "unavailable: the kernel did not enforce a Landlock ruleset".into()
            }
        },
        Err(_) => "unavailable: creating a Landlock ruleset failed".into(),
    }
}
