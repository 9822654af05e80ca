//! `FtraceConfig.kprobe_events`: which probes a config asks for, the
//! lines written to tracefs' `kprobe_events`, and `kprobe_profile`.
//!
//! As upstream, a probe on function F is the event F in one group for
//! entry probes and another for return probes, recorded as
//! `FtraceEvent.kprobe_event {name, type}`. Unlike upstream, the groups
//! carry a tag of the traced_probes that made them
//! (`perfetto_kprobes_TAG`, `perfetto_kretprobes_TAG`): `kprobe_events`
//! is one list for the whole machine, and each daemon creates and removes
//! only its own.

use crate::pb::protos::mod_FtraceConfig::mod_KprobeEvent::KprobeType as ConfigType;
use crate::pb::protos::FtraceConfig;

/// Upstream's group names, the prefix of ours.
pub const KPROBE_GROUP: &str = "perfetto_kprobes";
pub const KRETPROBE_GROUP: &str = "perfetto_kretprobes";

/// Return probe instances the kernel keeps per probe (upstream's value).
pub const KRETPROBE_MAXACTIVE: u32 = 1024;

/// The kernel's limit on event and group names (`MAX_EVENT_NAME_LEN`,
/// with its NUL).
const MAX_NAME_LEN: usize = 63;

/// Probes one data source may ask for (each costs a kernel probe).
pub const MAX_PER_CONFIG: usize = 64;

/// `KprobeEvent.type` in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceType {
    Begin = 1,
    End = 2,
    Instant = 3,
}

/// `FtraceEvent.kprobe_event`.
pub const FTRACE_EVENT_KPROBE: u32 = 542;

/// One kernel probe a config wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The function, also the event's name.
    pub function: String,
    pub retprobe: bool,
    pub trace_type: TraceType,
}

impl Probe {
    /// Its group for the daemon tagged `tag`.
    pub fn group(&self, tag: &str) -> String {
        group_name(self.retprobe, tag)
    }
}

pub fn group_name(retprobe: bool, tag: &str) -> String {
    let base = if retprobe {
        KRETPROBE_GROUP
    } else {
        KPROBE_GROUP
    };
    format!("{base}_{tag}")
}

/// Whether `group` is a kprobe group of ours (any tag): never enabled
/// through `ftrace_events`.
pub fn is_reserved_group(group: &str) -> bool {
    [KPROBE_GROUP, KRETPROBE_GROUP]
        .iter()
        .any(|g| group == *g || group.strip_prefix(g).is_some_and(|t| t.starts_with('_')))
}

/// The tag of one of our groups (`perfetto_kprobes_TAG` or
/// `perfetto_kretprobes_TAG`, TAG a pid: digits only, so it can name a
/// lock file), e.g. from a crash state file.
pub fn group_tag(group: &str) -> Option<&str> {
    let tag = [KPROBE_GROUP, KRETPROBE_GROUP]
        .iter()
        .find_map(|g| group.strip_prefix(g)?.strip_prefix('_'))?;
    let digits = !tag.is_empty() && tag.len() <= 10 && tag.bytes().all(|c| c.is_ascii_digit());
    digits.then_some(tag)
}

/// A kernel function name usable as a probe point and as an event name:
/// `[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes. Everything else (offsets,
/// `module:` prefixes, fetch args, newlines that would add more lines to
/// `kprobe_events`) is refused.
pub fn valid_function_untrusted(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// The probes of `cfg` (upstream's mapping: a kprobe or a kretprobe alone
/// is an instant, both are a begin and an end), and the entries refused,
/// as `failed_ftrace_events` names them.
pub fn wanted(cfg: &FtraceConfig, tag: &str) -> (Vec<Probe>, Vec<String>) {
    let mut probes: Vec<Probe> = Vec::new();
    let mut refused = Vec::new();
    for ev in &cfg.kprobe_events {
        let function = ev.probe.clone().unwrap_or_default();
        let kinds: &[(bool, TraceType)] = match ev.type_pb.unwrap_or_default() {
            ConfigType::KPROBE_TYPE_KPROBE => &[(false, TraceType::Instant)],
            ConfigType::KPROBE_TYPE_KRETPROBE => &[(true, TraceType::Instant)],
            ConfigType::KPROBE_TYPE_BOTH => &[(false, TraceType::Begin), (true, TraceType::End)],
            ConfigType::KPROBE_TYPE_UNKNOWN => {
                refused.push(format!(
                    "{}/{} (no type)",
                    group_name(false, tag),
                    printable(&function)
                ));
                continue;
            }
        };
        for &(retprobe, trace_type) in kinds {
            let p = Probe {
                function: function.clone(),
                retprobe,
                trace_type,
            };
            let name = format!("{}/{}", p.group(tag), printable(&function));
            if !valid_function_untrusted(&function) {
                refused.push(format!("{name} (not a function name)"));
            } else if probes.len() >= MAX_PER_CONFIG {
                refused.push(format!("{name} (more than {MAX_PER_CONFIG} kprobes)"));
            } else if !probes
                .iter()
                .any(|q| q.function == p.function && q.retprobe == p.retprobe)
            {
                probes.push(p);
            }
        }
    }
    (probes, refused)
}

/// An untrusted name as it may appear in a message: at most 64
/// characters, control characters escaped.
fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(64).flat_map(char::escape_default).collect();
    if s.chars().count() > 64 {
        out.push_str("...");
    }
    out
}

/// The `kprobe_events` line that creates `group/function` (`maxactive`:
/// for return probes, `None` to let the kernel choose).
pub fn create_line(group: &str, function: &str, retprobe: bool, maxactive: Option<u32>) -> String {
    let kind = match (retprobe, maxactive) {
        (false, _) => "p".to_string(),
        (true, Some(n)) => format!("r{n}"),
        (true, None) => "r".to_string(),
    };
    format!("{kind}:{group}/{function} {function}")
}

/// The `kprobe_events` line that removes `group/event`.
pub fn remove_line(group: &str, event: &str) -> String {
    format!("-:{group}/{event}")
}

/// Hits and misses summed over the `kprobe_profile` lines of `names`
/// (the file names events without their group).
pub fn profile_totals(text: &str, names: &[&str]) -> (u64, u64) {
    let (mut hits, mut misses) = (0u64, 0u64);
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (Some(name), Some(h), Some(m)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        if !names.contains(&name) {
            continue;
        }
        hits = hits.saturating_add(h.parse().unwrap_or(0));
        misses = misses.saturating_add(m.parse().unwrap_or(0));
    }
    (hits, misses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_FtraceConfig::KprobeEvent;

    fn cfg(entries: &[(&str, ConfigType)]) -> FtraceConfig {
        FtraceConfig {
            kprobe_events: entries
                .iter()
                .map(|(p, t)| KprobeEvent {
                    probe: Some(p.to_string()),
                    type_pb: Some(*t),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn types_map_as_upstream() {
        let (p, refused) = wanted(
            &cfg(&[
                ("do_sys_openat2", ConfigType::KPROBE_TYPE_BOTH),
                ("vfs_read", ConfigType::KPROBE_TYPE_KPROBE),
                ("vfs_write", ConfigType::KPROBE_TYPE_KRETPROBE),
                ("vfs_read", ConfigType::KPROBE_TYPE_KPROBE),
            ]),
            "7",
        );
        assert!(refused.is_empty());
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.group("7"), p.function.as_str(), p.trace_type))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "perfetto_kprobes_7".to_string(),
                    "do_sys_openat2",
                    TraceType::Begin
                ),
                (
                    "perfetto_kretprobes_7".to_string(),
                    "do_sys_openat2",
                    TraceType::End
                ),
                (
                    "perfetto_kprobes_7".to_string(),
                    "vfs_read",
                    TraceType::Instant
                ),
                (
                    "perfetto_kretprobes_7".to_string(),
                    "vfs_write",
                    TraceType::Instant
                ),
            ]
        );
    }

    #[test]
    fn untrusted_names_are_refused() {
        for bad in [
            "",
            "vfs_read+4",
            "vfs_read\np:x/y vfs_write",
            "a b",
            "mod:func",
            "9abc",
            "-:perfetto_kprobes_1/x",
            &"x".repeat(64),
        ] {
            assert!(!valid_function_untrusted(bad), "{bad:?}");
        }
        for good in ["vfs_read", "_x", "__x64_sys_getpid", &"x".repeat(63)] {
            assert!(valid_function_untrusted(good), "{good:?}");
        }
        let (p, refused) = wanted(
            &cfg(&[
                ("bad\nname", ConfigType::KPROBE_TYPE_KPROBE),
                ("ok", ConfigType::KPROBE_TYPE_UNKNOWN),
            ]),
            "1",
        );
        assert!(p.is_empty());
        assert_eq!(
            refused,
            [
                "perfetto_kprobes_1/bad\\nname (not a function name)",
                "perfetto_kprobes_1/ok (no type)"
            ]
        );
        let many: Vec<_> = (0..70)
            .map(|i| (format!("f{i}"), ConfigType::KPROBE_TYPE_KPROBE))
            .collect();
        let many: Vec<_> = many.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let (p, refused) = wanted(&cfg(&many), "1");
        assert_eq!(p.len(), MAX_PER_CONFIG);
        assert_eq!(refused.len(), 70 - MAX_PER_CONFIG);
    }

    #[test]
    fn tracefs_lines() {
        assert_eq!(
            create_line("perfetto_kprobes_7", "vfs_read", false, Some(1024)),
            "p:perfetto_kprobes_7/vfs_read vfs_read"
        );
        assert_eq!(
            create_line("perfetto_kretprobes_7", "vfs_read", true, Some(1024)),
            "r1024:perfetto_kretprobes_7/vfs_read vfs_read"
        );
        assert_eq!(create_line("g", "f", true, None), "r:g/f f");
        assert_eq!(remove_line("g", "f"), "-:g/f");
        assert!(is_reserved_group("perfetto_kprobes"));
        assert!(is_reserved_group("perfetto_kretprobes_12"));
        assert!(!is_reserved_group("perfetto_kprobesx"));
        assert!(!is_reserved_group("sched"));
        assert_eq!(group_tag("perfetto_kretprobes_12"), Some("12"));
        assert_eq!(group_tag("perfetto_kprobes_7"), Some("7"));
        for bad in [
            "perfetto_kprobes",
            "perfetto_kprobes_",
            "perfetto_kprobes_../x",
            "sched_1",
        ] {
            assert_eq!(group_tag(bad), None, "{bad}");
        }
    }

    #[test]
    fn profile_of_our_events_only() {
        // As Debian's 6.1 prints it: event names without groups.
        let text = "  do_sys_openat2                                             7               1\n  \
                    vfs_read                                                  100               0\n  \
                    garbage\n";
        assert_eq!(profile_totals(text, &["do_sys_openat2"]), (7, 1));
        assert_eq!(
            profile_totals(text, &["do_sys_openat2", "vfs_read"]),
            (107, 1)
        );
        assert_eq!(profile_totals(text, &[]), (0, 0));
    }
}
