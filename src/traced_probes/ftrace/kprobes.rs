//! The kprobe events this traced_probes made (`FtraceConfig.kprobe_events`)
//! and which of its instances use each.
//!
//! `kprobe_events` is one list for the machine, while events are enabled
//! per instance: a probe is created once at the top level, enabled in each
//! instance that wants it, and removed when the last of those instances is
//! released (removing a probe that was ever enabled empties the buffer of
//! every instance that had it, so never while one still reads). Our groups
//! carry our tag (the pid), claimed through [`ownership`](super::ownership)
//! while we hold probes: no other daemon touches them, and the crash state
//! lists them so a successor removes them if we die.

use crate::mem::small_map::SmallMap;
use std::collections::BTreeSet;
use std::io;

use super::instance::KInstance;
use super::ownership::{self, Claim};
use super::parse::kprobes::{self, Probe, TraceType, KRETPROBE_MAXACTIVE};
use super::Tracefs;
use crate::pb::protos::FtraceConfig;

/// (group, event) of one probe.
pub type ProbeName = (String, String);

/// Kernel probes one traced_probes holds at once.
pub const MAX_PROBES: usize = 256;

#[derive(Debug)]
pub struct Kprobes {
    tag: String,
    claim: Option<Claim>,
    /// Each probe and the instances (keys) using it; a probe with no users
    /// is one the kernel would not remove yet (tried again later).
    installed: SmallMap<ProbeName, BTreeSet<String>>,
}

impl Default for Kprobes {
    fn default() -> Self {
        Kprobes {
            tag: std::process::id().to_string(),
            claim: None,
            installed: SmallMap::new(),
        }
    }
}

/// One probe a data source records, with its ftrace id and trace type.
#[derive(Debug, Clone)]
pub struct Installed {
    pub name: ProbeName,
    pub ftrace_id: u32,
    pub trace_type: TraceType,
}

impl Kprobes {
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Every probe we may have in the kernel (for the crash state).
    pub fn names(&self) -> impl Iterator<Item = &ProbeName> {
        self.installed.keys()
    }

    /// Step 1 of setting up `cfg` on instance `key`: the probes it wants,
    /// recorded as ours before any exists (so a crash from here on is
    /// undone). Refused entries go to `failed`.
    pub fn plan(&mut self, key: &str, cfg: &FtraceConfig, failed: &mut Vec<String>) -> Vec<Probe> {
        let (mut probes, refused) = kprobes::wanted(cfg, &self.tag);
        failed.extend(refused);
        if probes.is_empty() {
            return probes;
        }
        if self.claim.is_none() {
            match ownership::claim_kprobes(&self.tag) {
                Ok(c) => self.claim = Some(c),
                Err(why) => {
                    for p in probes.drain(..) {
                        failed.push(format!("{}/{} ({why})", p.group(&self.tag), p.function));
                    }
                    return probes;
                }
            }
        }
        probes.retain(|p| {
            let name = (p.group(&self.tag), p.function.clone());
            if !self.installed.contains_key(&name) && self.installed.len() >= MAX_PROBES {
                failed.push(format!(
                    "{}/{} (this traced_probes already holds {MAX_PROBES} kprobes)",
                    name.0, name.1
                ));
                return false;
            }
            self.installed
                .get_or_insert_with(name, BTreeSet::new)
                .insert(key.to_string());
            true
        });
        probes
    }

    /// Step 2: creates the planned probes the kernel does not have yet and
    /// adds them to the instance's table. Returns those usable; the others
    /// are forgotten (removed again if this made them) and go to `failed`.
    pub fn create(
        &mut self,
        root: &Tracefs,
        key: &str,
        inst: &mut KInstance,
        planned: Vec<Probe>,
        failed: &mut Vec<String>,
    ) -> Vec<Installed> {
        let mut out = Vec::new();
        for p in planned {
            let name = (p.group(&self.tag), p.function.clone());
            let shown = format!("{}/{}", name.0, name.1);
            let made = match create_probe(root, &name.0, &p) {
                Ok(()) => inst
                    .tracefs
                    .read_format(&name.0, &name.1)
                    .map_err(|e| format!("no format: {e}"))
                    .and_then(|text| {
                        inst.table
                            .add_kprobe(&name.0, &name.1, &text)
                            .map_err(|e| format!("bad format: {e}"))
                    }),
                Err(e) => Err(e.to_string()),
            };
            match made {
                Ok(ftrace_id) => out.push(Installed {
                    name,
                    ftrace_id,
                    trace_type: p.trace_type,
                }),
                Err(why) => {
                    crate::log_warn!("ftrace: cannot create kprobe {shown}: {why}");
                    failed.push(format!("{shown} ({why})"));
                    self.drop_user(root, &name, key);
                }
            }
        }
        out
    }

    /// Instance `key` was released (its events off, its readers closed):
    /// removes the probes no instance uses any more, and retries those the
    /// kernel refused before.
    pub fn release(&mut self, root: &Tracefs, key: &str) {
        let names: Vec<ProbeName> = self.installed.keys().cloned().collect();
        for name in names {
            self.drop_user(root, &name, key);
        }
    }

    fn drop_user(&mut self, root: &Tracefs, name: &ProbeName, key: &str) {
        let Some(users) = self.installed.get_mut(name) else {
            return;
        };
        users.remove(key);
        if !users.is_empty() {
            return;
        }
        match remove_probe(root, &name.0, &name.1) {
            Ok(()) => {
                self.installed.remove(name);
            }
            Err(e) => crate::log_warn!(
                "ftrace: cannot remove kprobe {}/{} yet: {e} (tried again at the next \
                 release, and by the next start)",
                name.0,
                name.1
            ),
        }
        if self.installed.is_empty() {
            self.claim = None;
        }
    }
}

/// Creates one probe. One that exists already is ours (our group, which no
/// live process but us may hold): a crash of a process with our pid left
/// it, and it is used as is. A kernel that refuses `maxactive` on return
/// probes gets none.
fn create_probe(root: &Tracefs, group: &str, p: &Probe) -> io::Result<()> {
    let write = |maxactive| {
        let line = kprobes::create_line(group, &p.function, p.retprobe, maxactive);
        match root.kprobe_events_line(&line) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            r => r,
        }
    };
    match write(Some(KRETPROBE_MAXACTIVE)) {
        Err(e) if p.retprobe && e.kind() == io::ErrorKind::InvalidInput => write(None),
        r => r,
    }
}

/// Removes one probe; one already gone counts as removed.
pub fn remove_probe(root: &Tracefs, group: &str, event: &str) -> io::Result<()> {
    match root.kprobe_events_line(&kprobes::remove_line(group, event)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
