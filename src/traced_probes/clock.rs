//! CLOCK_BOOTTIME, the clock of every TracePacket.timestamp we write.

use nix::time::{clock_gettime, ClockId};

/// Nanoseconds since boot, including suspend.
pub fn boot_time_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Milliseconds since boot (the sys_stats scheduler's time base).
pub fn boot_time_ms() -> u64 {
    boot_time_ns() / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_is_monotonic_and_nonzero() {
        let a = boot_time_ns();
        let b = boot_time_ns();
        assert!(a > 0 && b >= a);
    }
}
