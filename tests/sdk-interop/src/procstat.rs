//! CPU time and peak memory of this process or of another one (by pid).

pub struct Usage {
    pub user_s: f64,
    pub sys_s: f64,
    pub maxrss_kb: u64,
}

pub fn self_usage() -> Usage {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    Usage {
        user_s: secs(ru.ru_utime),
        sys_s: secs(ru.ru_stime),
        maxrss_kb: ru.ru_maxrss as u64,
    }
}

/// Reads utime/stime from /proc/PID/stat and VmHWM from /proc/PID/status.
pub fn pid_usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised comm; utime/stime are fields 14/15.
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    Some(Usage {
        user_s: utime / hz,
        sys_s: stime / hz,
        maxrss_kb: hwm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pid_matches_proc() {
        let u = pid_usage(std::process::id()).expect("own /proc entry");
        assert!(u.maxrss_kb > 0);
        assert!(self_usage().maxrss_kb > 0);
    }
}
