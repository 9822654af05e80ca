//! The tracefs instances in use (the root is `""`) and how many data
//! sources use each: the first user opens and takes over an instance, the
//! last one restores it. Every instance in use is claimed (see
//! [`ownership`]): an instance a live process owns is refused, never reset.
//! Every change of the set is recorded in the crash state file before
//! kernel state changes, so a crash is undone later.

use crate::mem::small_map::SmallMap;
use std::path::PathBuf;

use super::crash_state::{self, Touched};
use super::instance::KInstance;
use super::kprobes::{Installed, Kprobes};
use super::ownership::{self, Claim};
use crate::pb::protos::FtraceConfig;
use crate::traced_probes::ftrace::Tracefs;

/// Distinct tracefs instances one traced_probes uses at once (each costs
/// kernel buffers on every cpu and a reader thread per cpu).
pub const MAX_INSTANCES: usize = 8;

pub struct Instances {
    root: Option<Tracefs>,
    map: SmallMap<String, KInstance>,
    /// Held for as long as the instance is in `map` (and a bit longer:
    /// until it is restored).
    claims: SmallMap<String, Claim>,
    /// Instances we created and could not remove when their last user
    /// left (a file of theirs open elsewhere): still claimed and in the
    /// state file, removed at a later release or by the next start.
    left_behind: SmallMap<String, Claim>,
    state_file: PathBuf,
    /// The kprobe events we made, and which instances use them.
    kprobes: Kprobes,
}

impl Instances {
    pub fn new(state_file: PathBuf) -> Instances {
        Instances {
            root: None,
            map: SmallMap::new(),
            claims: SmallMap::new(),
            left_behind: SmallMap::new(),
            state_file,
            kprobes: Kprobes::default(),
        }
    }

    fn root(&mut self) -> Result<Tracefs, String> {
        if self.root.is_none() {
            self.root = Some(Tracefs::discover().map_err(|e| format!("no tracefs: {e}"))?);
        }
        Ok(self.root.clone().expect("set above"))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.map.keys()
    }

    pub fn get(&self, key: &str) -> Option<&KInstance> {
        self.map.get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut KInstance> {
        self.map.get_mut(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &KInstance)> {
        self.map.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut KInstance)> {
        self.map.iter_mut()
    }

    /// One more user of instance `key`: the first one opens it, records it
    /// in the state file, then takes it over with its config.
    pub fn acquire(&mut self, key: &str, cfg: &FtraceConfig) -> Result<&mut KInstance, String> {
        if !self.map.contains_key(key) {
            if self.map.len() >= MAX_INSTANCES {
                return Err(format!(
                    "too many ftrace instances: this traced_probes already uses \
                     {MAX_INSTANCES}"
                ));
            }
            let root = self.root()?;
            // One we left behind is still ours (and still ours to remove).
            let (claim, ours) = match self.left_behind.remove(key) {
                Some(c) => (c, true),
                None => (ownership::claim(key)?, false),
            };
            let mut inst = match KInstance::open(&root, key, cfg) {
                Ok(i) => i,
                Err(e) => {
                    if ours {
                        self.left_behind.insert(key.to_string(), claim);
                    }
                    return Err(e);
                }
            };
            inst.created |= ours;
            self.claims.insert(key.to_string(), claim);
            self.map.insert(key.to_string(), inst);
            // Recorded before changing anything, so a crash from here on
            // is undone.
            self.store_marker();
            // Kernel memory: the other instances' buffers, every cpu.
            let others_kb: u64 = self
                .map
                .iter()
                .filter(|(k, _)| k.as_str() != key)
                .map(|(_, i)| {
                    let ncpu = i.tracefs.num_cpus().unwrap_or(1) as u64;
                    i.buffer_kb.unwrap_or(0) * ncpu
                })
                .sum();
            let inst = self.map.get_mut(key).expect("inserted");
            inst.take_over(cfg, others_kb);
        }
        let inst = self.map.get_mut(key).expect("opened above");
        inst.users += 1;
        Ok(inst)
    }

    /// Whether the kernel can make kprobe events (checked before a config
    /// that wants some takes an instance).
    pub fn kprobes_supported(&mut self) -> Result<(), String> {
        if self.root()?.has_kprobe_events() {
            Ok(())
        } else {
            Err(
                "kprobe_events: this kernel has no kprobe_events in tracefs \
                 (CONFIG_KPROBE_EVENTS)"
                    .into(),
            )
        }
    }

    /// Creates the kprobes `cfg` wants (those not made yet) for instance
    /// `key`, which is in use; refused ones go to `failed`.
    pub fn setup_kprobes(
        &mut self,
        key: &str,
        cfg: &FtraceConfig,
        failed: &mut Vec<String>,
    ) -> Vec<Installed> {
        let planned = self.kprobes.plan(key, cfg, failed);
        if planned.is_empty() {
            return Vec::new();
        }
        // Recorded before the kernel has them: a crash from here on is
        // undone by the successor.
        self.store_marker();
        let Ok(root) = self.root() else {
            return Vec::new();
        };
        let inst = self.map.get_mut(key).expect("instance in use");
        let made = self.kprobes.create(&root, key, inst, planned, failed);
        self.store_marker();
        made
    }

    /// `kprobe_profile` (hits and misses of every kprobe on the machine).
    pub fn kprobe_profile(&self) -> Option<String> {
        self.root.as_ref()?.read_kprobe_profile().ok()
    }

    /// The tag of our kprobe groups.
    pub fn kprobe_tag(&self) -> &str {
        self.kprobes.tag()
    }

    /// One user less; the last one restores the instance (removes it if
    /// we created it).
    pub fn release(&mut self, key: &str) {
        let Some(inst) = self.map.get_mut(key) else {
            return;
        };
        inst.users -= 1;
        if inst.users > 0 {
            return;
        }
        let inst = self.map.remove(key).expect("present");
        let claim = self.claims.remove(key);
        if let Some(root) = &self.root {
            // Gone, or removed by someone else: either way not ours now.
            self.left_behind.retain(|k, _| {
                root.remove_instance(k)
                    .is_err_and(|e| e.kind() != std::io::ErrorKind::NotFound)
            });
            if let (false, Some(c)) = (inst.release(root, key), claim) {
                self.left_behind.insert(key.to_string(), c);
            }
            // Only now: removing a probe empties the buffers it was on.
            self.kprobes.release(root, key);
        }
        self.store_marker();
    }

    fn store_marker(&self) {
        let entries: Vec<Touched> = self
            .map
            .iter()
            .map(|(k, i)| {
                if k.is_empty() {
                    Touched::Root
                } else {
                    Touched::Instance {
                        name: k.clone(),
                        created: i.created,
                    }
                }
            })
            .chain(self.left_behind.keys().map(|k| Touched::Instance {
                name: k.clone(),
                created: true,
            }))
            .chain(self.kprobes.names().map(|(group, event)| Touched::Kprobe {
                group: group.clone(),
                event: event.clone(),
            }))
            .collect();
        if let Err(e) = crash_state::store(&self.state_file, &entries) {
            crate::log_warn!("cannot write {}: {e}", self.state_file.display());
        }
    }
}
