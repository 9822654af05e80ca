//! What a relay tells the host about its machine: the id hint (the boot
//! id, so a reboot is a new machine, as upstream), the name
//! (`PERFETTO_MACHINE_NAME`, else the kernel's sysname, as upstream), its
//! SystemInfo and a snapshot of its clocks.

pub use crate::tracing::ipc::env::machine_name;
use crate::tracing::ipc::env::{clock_ns, RealEnv};
use nix::time::ClockId;

/// `/proc/sys/kernel/random/boot_id` without its newline; `None` if
/// unreadable or empty.
pub fn machine_id_hint() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hint = text.trim();
    (!hint.is_empty()).then(|| hint.to_string())
}

/// The serialized SystemInfo traced would write for this machine.
pub fn system_info() -> Vec<u8> {
    use crate::tracing::service::types::ServiceEnv;
    RealEnv::new(Default::default())
        .system_info()
        .unwrap_or_default()
}

/// `(builtin clock id, ns)` for the clocks a SyncClock carries, read back
/// to back.
pub fn clock_snapshot() -> Vec<(u32, u64)> {
    vec![
        (6, clock_ns(ClockId::CLOCK_BOOTTIME)),
        (1, clock_ns(ClockId::CLOCK_REALTIME)),
        (2, clock_ns(ClockId::CLOCK_REALTIME_COARSE)),
        (3, clock_ns(ClockId::CLOCK_MONOTONIC)),
        (4, clock_ns(ClockId::CLOCK_MONOTONIC_COARSE)),
        (5, clock_ns(ClockId::CLOCK_MONOTONIC_RAW)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_describes_itself() {
        let hint = machine_id_hint().expect("boot_id on Linux");
        assert_eq!(hint.len(), 36, "{hint}");
        assert_eq!(hint, machine_id_hint().unwrap(), "stable within a boot");
        assert!(!machine_name().is_empty());
        let snap = clock_snapshot();
        assert!(snap.iter().all(|&(_, ns)| ns > 0));
        // SystemInfo.utsname (1) comes first.
        assert_eq!(system_info().first(), Some(&0x0a));
        let args = super::super::wire::sync_clock_args(super::super::wire::SyncPhase::Ping, &snap);
        use crate::tracing::ipc::relay_port::{parse_untrusted, RelayRequest};
        let back = parse_untrusted("SyncClock", &args).unwrap();
        assert_eq!(back, RelayRequest::Clocks(snap));
    }
}
