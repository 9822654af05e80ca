//! Which processes a `linux.perf` instance records (callstack_sampling's
//! scope): target pids and cmdlines, exclusions, and up to
//! `additional_cmdline_count` other processes, first come first served.
//! Samples of other processes are counted and dropped.

use std::collections::{HashMap, HashSet};

use super::config::Scope;

/// Decisions remembered at most for this many pids (then forgotten).
const MAX_DECISIONS: usize = 1 << 16;

pub struct ScopeFilter {
    scope: Scope,
    /// (count, chosen shard) of `process_shard_count`.
    pub shard: Option<(u32, u32)>,
    decided: HashMap<u32, bool>,
    additional_left: u32,
    /// Pids admitted by additional_cmdline_count (at most that many).
    additional: HashSet<u32>,
    /// Task names of pids seen exec'ing, for those gone before their
    /// samples are read.
    exec_comms: HashMap<u32, String>,
    open: bool,
}

/// Shell-style `*` and `?` matching.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Upstream matches a pattern against argv[0] without its directory and
/// without an `@...` suffix; the whole argv[0] also matches here.
pub fn cmdline_matches(pattern: &str, argv0: &str) -> bool {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    let base = base.split('@').next().unwrap_or(base);
    glob(pattern, base) || glob(pattern, argv0)
}

impl ScopeFilter {
    /// `seed` picks the shard when `process_shard_count` is set.
    pub fn new(scope: Scope, seed: u64) -> ScopeFilter {
        let shard = (scope.process_shard_count > 1).then(|| {
            let n = scope.process_shard_count;
            (n, (seed % n as u64) as u32)
        });
        let open = !scope.has_targets()
            && scope.exclude_pids.is_empty()
            && scope.exclude_cmdlines.is_empty()
            && shard.is_none();
        ScopeFilter {
            shard,
            additional_left: scope.additional_cmdline_count,
            scope,
            decided: HashMap::new(),
            additional: HashSet::new(),
            exec_comms: HashMap::new(),
            open,
        }
    }

    pub fn admits(&mut self, pid: u32) -> bool {
        if self.open {
            return true;
        }
        if let Some(&d) = self.decided.get(&pid) {
            return d;
        }
        let argv0 = super::resolver::cmdline(pid).or_else(|| self.exec_comms.get(&pid).cloned());
        // No /proc entry to read (the process is mid-exec, or gone) and no
        // exec seen: out for this sample, decided at the next one rather
        // than for good.
        if argv0.is_none() && self.needs_cmdline() {
            return false;
        }
        let d = self.decide(pid, argv0.as_deref());
        crate::log_debug!(
            "linux.perf scope: pid {pid} ({}) {}",
            argv0.as_deref().unwrap_or("no cmdline"),
            if d { "in" } else { "out" }
        );
        if self.decided.len() >= MAX_DECISIONS {
            self.decided.clear();
        }
        self.decided.insert(pid, d);
        d
    }

    /// `pid` exec'd `comm`: its decision is made again (a process sampled
    /// between fork and exec showed its parent's command line), from its
    /// command line or, if it is gone by the time its samples are read,
    /// from `comm`. A process admitted as one of the additional ones keeps
    /// its place unless its new command line is excluded.
    pub fn exec(&mut self, pid: u32, comm: &[u8]) {
        self.decided.remove(&pid);
        self.note_exec(pid, comm);
    }

    /// `pid` exec'd `comm`, seen ahead of the records read in order: the
    /// name judges it if it is gone when its first samples are read.
    pub fn note_exec(&mut self, pid: u32, comm: &[u8]) {
        if self.open {
            return;
        }
        if self.exec_comms.len() >= MAX_DECISIONS {
            self.exec_comms.clear();
        }
        let n = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
        self.exec_comms
            .insert(pid, String::from_utf8_lossy(&comm[..n]).into_owned());
    }

    /// Whether a decision can depend on the command line.
    pub fn needs_cmdline(&self) -> bool {
        let s = &self.scope;
        !s.target_cmdlines.is_empty()
            || !s.exclude_cmdlines.is_empty()
            || s.additional_cmdline_count > 0
    }

    /// The decision for a pid first seen, given its argv[0].
    pub fn decide(&mut self, pid: u32, argv0: Option<&str>) -> bool {
        let s = &self.scope;
        if s.exclude_pids.contains(&(pid as i32)) {
            return false;
        }
        if let Some((n, chosen)) = self.shard {
            if pid % n != chosen {
                return false;
            }
        }
        if let Some(a) = argv0 {
            if s.exclude_cmdlines.iter().any(|p| cmdline_matches(p, a)) {
                return false;
            }
        }
        if !s.has_targets() {
            return true;
        }
        if s.target_pids.contains(&(pid as i32)) {
            return true;
        }
        let Some(a) = argv0.filter(|a| !a.is_empty()) else {
            return false;
        };
        if s.target_cmdlines.iter().any(|p| cmdline_matches(p, a)) {
            return true;
        }
        if self.additional.contains(&pid) {
            return true;
        }
        if self.additional_left > 0 {
            self.additional_left -= 1;
            self.additional.insert(pid);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globbing() {
        assert!(glob("hot*", "hotloop"));
        assert!(glob("*loop", "hotloop"));
        assert!(glob("h?t*p", "hotloop"));
        assert!(!glob("cold*", "hotloop"));
        assert!(cmdline_matches("hotloop", "/tmp/x/hotloop"));
        assert!(cmdline_matches("com.app", "com.app@2"));
    }

    #[test]
    fn targets_exclusions_and_additional() {
        let mut f = ScopeFilter::new(
            Scope {
                target_pids: vec![10],
                target_cmdlines: vec!["hot*".into()],
                exclude_pids: vec![11],
                exclude_cmdlines: vec!["sshd".into()],
                additional_cmdline_count: 1,
                process_shard_count: 0,
            },
            0,
        );
        assert!(f.decide(10, Some("x")));
        assert!(!f.decide(11, Some("hotloop")));
        assert!(f.decide(12, Some("/bin/hotloop")));
        assert!(!f.decide(13, Some("/usr/sbin/sshd")));
        assert!(f.decide(14, Some("other")), "the one additional");
        assert!(!f.decide(15, Some("other2")));
        // Exec: decided again by the new command line; the additional
        // process keeps its place unless excluded now.
        f.exec(14, b"other3");
        assert!(f.decide(14, Some("other3")), "still the additional one");
        f.exec(14, b"sshd");
        assert!(!f.decide(14, Some("sshd")), "excluded after exec");
        // Gone before its samples are read: decided by the exec's name.
        f.exec(999_999, b"hotloop\0");
        assert!(f.admits(999_999), "by its exec'd task name");
        // Its exec seen ahead of the pass, in another ring: the same.
        assert!(!f.admits(999_998), "gone, no exec seen: out for now");
        f.note_exec(999_998, b"hotloop");
        assert!(f.admits(999_998), "by the exec noted ahead");
        assert!(!f.decide(0, None));
    }

    #[test]
    fn process_shards() {
        let scope = Scope {
            process_shard_count: 4,
            ..Default::default()
        };
        let mut f = ScopeFilter::new(scope, 6);
        assert_eq!(f.shard, Some((4, 2)));
        assert!(f.decide(102, Some("x")));
        assert!(!f.decide(103, Some("x")));
        assert!(!f.admits(101));
    }
}
