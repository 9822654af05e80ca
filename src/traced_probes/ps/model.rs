//! Plain data for the two packets `linux.process_stats` writes. Built by the
//! poller, written by `super::encode`.

/// One `ProcessTree.Process`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TreeProcess {
    pub pid: i32,
    pub ppid: i32,
    pub uid: i32,
    /// argv, or `[comm]` when `cmdline_is_comm`.
    pub cmdline: Argv,
    /// `cmdline` was empty (zombies, kernel threads) and holds comm instead.
    pub cmdline_is_comm: bool,
    /// Pids in nested pid namespaces (outermost first), if any.
    pub nspid: Vec<i32>,
    /// Only with `record_process_age`.
    pub start_from_boot_ns: Option<u64>,
    /// Only on kernels that report `Kthread:` (6.4+).
    pub is_kthread: Option<bool>,
}

/// A process's arguments in one string, each followed by a NUL: one
/// allocation per process (a full scan describes every process, and a
/// `String` per argument was most of what it allocated).
#[derive(Default, Clone, PartialEq, Eq)]
pub struct Argv(String);

impl Argv {
    /// The arguments of `/proc/<pid>/cmdline`, split at NUL, a missing
    /// final NUL tolerated, each lossily decoded as UTF-8. Empty input
    /// gives no arguments.
    pub fn from_cmdline(buf: &[u8]) -> Argv {
        if buf.is_empty() {
            return Argv::default();
        }
        let body = buf.strip_suffix(b"\0").unwrap_or(buf);
        // Decoding the whole: a NUL ends any invalid sequence, so each
        // argument decodes as it would alone.
        let mut text = String::with_capacity(body.len() + 1);
        match std::str::from_utf8(body) {
            Ok(t) => text.push_str(t),
            Err(_) => text.push_str(&String::from_utf8_lossy(body)),
        }
        text.push('\0');
        Argv(text)
    }

    /// `args`, each holding no NUL (a NUL would split it in two).
    pub fn from_args<S: AsRef<str>>(args: impl IntoIterator<Item = S>) -> Argv {
        let mut text = String::new();
        for a in args {
            text.push_str(a.as_ref());
            text.push('\0');
        }
        Argv(text)
    }

    pub fn args(&self) -> std::str::SplitTerminator<'_, char> {
        self.0.split_terminator('\0')
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn to_vec(&self) -> Vec<&str> {
        self.args().collect()
    }
}

impl std::fmt::Debug for Argv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.args()).finish()
    }
}

/// One `ProcessTree.Thread`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TreeThread {
    pub tid: i32,
    pub tgid: i32,
    /// comm; only with `record_thread_names`.
    pub name: Option<String>,
    pub nstid: Vec<i32>,
}

/// A `process_tree` packet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessTreePacket {
    /// Start of the /proc scan (packet timestamp).
    pub timestamp: u64,
    pub collection_end_timestamp: u64,
    /// First packet after `clear_incremental_state`.
    pub incremental_state_cleared: bool,
    pub processes: Vec<TreeProcess>,
    pub threads: Vec<TreeThread>,
}

/// One `ProcessStats.Process`: only values that changed since they were
/// last emitted (within the cache TTL) are `Some`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcStatsSample {
    pub pid: i32,
    pub vm_size_kb: Option<u64>,
    pub vm_rss_kb: Option<u64>,
    pub rss_anon_kb: Option<u64>,
    pub rss_file_kb: Option<u64>,
    pub rss_shmem_kb: Option<u64>,
    pub vm_swap_kb: Option<u64>,
    pub vm_locked_kb: Option<u64>,
    pub vm_hwm_kb: Option<u64>,
    pub oom_score_adj: Option<i64>,
    pub smr_rss_kb: Option<u64>,
    pub smr_pss_kb: Option<u64>,
    pub smr_pss_anon_kb: Option<u64>,
    pub smr_pss_file_kb: Option<u64>,
    pub smr_pss_shmem_kb: Option<u64>,
    pub smr_swap_pss_kb: Option<u64>,
    pub runtime_user_mode_ns: Option<u64>,
    pub runtime_kernel_mode_ns: Option<u64>,
    pub dmabuf_rss_kb: Option<u64>,
    /// Newly seen open fds with their paths (`resolve_process_fds`).
    pub fds: Vec<(u64, String)>,
}

impl ProcStatsSample {
    /// True if the sample carries nothing but the pid.
    pub fn is_empty(&self) -> bool {
        *self
            == ProcStatsSample {
                pid: self.pid,
                ..Default::default()
            }
    }
}

/// A `process_stats` packet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessStatsPacket {
    pub timestamp: u64,
    pub collection_end_timestamp: u64,
    pub incremental_state_cleared: bool,
    pub processes: Vec<ProcStatsSample>,
}

#[cfg(test)]
mod tests {
    use super::Argv;

    /// What the scan kept before `Argv`: a `String` per argument.
    fn split_each(buf: &[u8]) -> Vec<String> {
        if buf.is_empty() {
            return Vec::new();
        }
        let body = buf.strip_suffix(b"\0").unwrap_or(buf);
        body.split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn argv_splits_as_each_argument_alone_would() {
        let mut inputs: Vec<Vec<u8>> = [
            &b"/bin/sh\0-c\0echo hi\0"[..],
            b"/bin/sh\0-c",
            b"a\0\0b\0",
            b"",
            b"\0",
            b"\0\0",
            b"x\0\0",
            b"\xff\0\xe2\x82\0\xe2\x82\xac\0\xf0\x9f\0\x80abc",
            b"\xe2\0\x82\xac\0\xc3",
        ]
        .iter()
        .map(|b| b.to_vec())
        .collect();
        // Every pair of bytes from a set that mixes NULs with lead and
        // continuation bytes, three of them long.
        let alphabet = [0u8, b'a', 0x80, 0xbf, 0xc3, 0xe2, 0xf0, 0xff];
        for &a in &alphabet {
            for &b in &alphabet {
                for &c in &alphabet {
                    inputs.push(vec![a, b, c]);
                }
            }
        }
        for input in &inputs {
            let argv = Argv::from_cmdline(input);
            let want = split_each(input);
            assert_eq!(argv.to_vec(), want, "{input:?}");
            assert_eq!(argv.is_empty(), want.is_empty());
            assert_eq!(Argv::from_args(&want), argv);
        }
    }
}
