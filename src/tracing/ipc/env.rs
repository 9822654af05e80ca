//! The real [`ServiceEnv`]: OS clocks, randomness, uname, sealed memfd SMBs.

use crate::mem::small_map::SmallMap;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use nix::time::{clock_gettime, ClockId};

use crate::base::shm::Shm;
use crate::log_warn;
use crate::mem::shared_mem::SharedMem;
use crate::protozero::{begin_nested, end_nested, put_str, put_varint, VecStream};
use crate::tracing::service::types::*;

/// SMBs the service created, by producer; the adapter sends their fds.
pub type SmbTable = Rc<RefCell<SmallMap<ProducerId, Shm>>>;

pub struct RealEnv {
    pub smbs: SmbTable,
    rng_state: u64,
}

/// Nanoseconds of `clock`, 0 if unreadable.
pub fn clock_ns(clock: ClockId) -> u64 {
    clock_gettime(clock).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// This machine's name for multi-machine tracing, as upstream names it:
/// `PERFETTO_MACHINE_NAME`, else the kernel's sysname.
pub fn machine_name() -> String {
    match std::env::var("PERFETTO_MACHINE_NAME") {
        Ok(n) if !n.is_empty() => n,
        _ => nix::sys::utsname::uname()
            .map(|u| u.sysname().to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// The service's notion of `now`.
pub fn boot_time_ns() -> u64 {
    clock_ns(ClockId::CLOCK_BOOTTIME)
}

impl RealEnv {
    pub fn new(smbs: SmbTable) -> RealEnv {
        let mut seed = [0u8; 8];
        let ok = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed))
            .is_ok();
        let mut s = u64::from_le_bytes(seed);
        if !ok || s == 0 {
            s = boot_time_ns() ^ ((std::process::id() as u64) << 32) | 1;
        }
        RealEnv { smbs, rng_state: s }
    }
}

impl ServiceEnv for RealEnv {
    fn clock_snapshot(&mut self) -> Vec<(u32, u64)> {
        vec![
            (CLOCK_BOOTTIME, clock_ns(ClockId::CLOCK_BOOTTIME)),
            (CLOCK_REALTIME, clock_ns(ClockId::CLOCK_REALTIME)),
            (2, clock_ns(ClockId::CLOCK_REALTIME_COARSE)),
            (CLOCK_MONOTONIC, clock_ns(ClockId::CLOCK_MONOTONIC)),
            (4, clock_ns(ClockId::CLOCK_MONOTONIC_COARSE)),
            (5, clock_ns(ClockId::CLOCK_MONOTONIC_RAW)),
        ]
    }

    fn system_info(&mut self) -> Option<Vec<u8>> {
        let u = nix::sys::utsname::uname().ok()?;
        let mut s = VecStream::new();
        // SystemInfo.utsname (1) { sysname 1, version 2, release 3, machine 4 }
        let n = begin_nested(&mut s, 1);
        put_str(&mut s, 1, &u.sysname().to_string_lossy());
        put_str(&mut s, 2, &u.version().to_string_lossy());
        put_str(&mut s, 3, &u.release().to_string_lossy());
        put_str(&mut s, 4, &u.machine().to_string_lossy());
        end_nested(&mut s, n);
        // tracing_service_version (4)
        put_str(&mut s, 4, crate::SERVICE_VERSION);
        if let Ok(ps) = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
            // page_size (6)
            put_varint(&mut s, 6, ps.unwrap_or(4096) as u64);
        }
        use crate::base::sys;
        // hz (3), timezone_off_mins (7, int32: negative as 64-bit), num_cpus (8)
        if let Some(hz) = sys::clock_ticks_per_second() {
            put_varint(&mut s, 3, hz as u64);
        }
        if let Some(tz) = sys::utc_offset_minutes() {
            put_varint(&mut s, 7, tz as i64 as u64);
        }
        if let Some(n) = sys::cpus_configured() {
            put_varint(&mut s, 8, n as u64);
        }
        // system_ram_bytes (16)
        if let Some(ram) = sys::system_ram_bytes() {
            put_varint(&mut s, 16, ram);
        }
        Some(s.into_bytes())
    }

    fn random_u64(&mut self) -> u64 {
        // xorshift64*: only trace UUIDs depend on it.
        let mut x = self.rng_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng_state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn create_smb(
        &mut self,
        producer: ProducerId,
        size: usize,
        _page_size: usize,
    ) -> Option<Arc<SharedMem>> {
        match Shm::create(size) {
            Ok(shm) => {
                let mem = Arc::clone(shm.mem());
                self.smbs.borrow_mut().insert(producer, shm);
                Some(mem)
            }
            Err(e) => {
                log_warn!("traced: could not create the SMB for producer {producer}: {e}");
                None
            }
        }
    }
}
