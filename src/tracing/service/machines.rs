//! Remote machines (those behind a `traced_relay`): their ids, names, the
//! SystemInfo their relay sent (InitRelay) and the latest clock-sync
//! exchanges (SyncClock), written into traces stamped with the machine's
//! id, as upstream's RelayPort does.

use crate::mem::small_map::SmallMap;
use std::collections::VecDeque;

use crate::protozero::{begin_nested, end_nested, put_bytes, put_varint, VecStream};

use super::service::TracingService;
use super::service_packets::SERVICE_SEQUENCE_ID;

/// Distinct relayed machines one traced accepts.
pub const MAX_MACHINES: usize = 64;
/// Clock-sync exchanges kept per machine (upstream keeps 5).
const SYNCS_KEPT: usize = 5;

/// `(BuiltinClock id, ns)` readings taken back to back.
pub type Clocks = Vec<(u32, u64)>;

/// One relayed machine.
#[derive(Debug, Default)]
pub struct Machine {
    pub id: u32,
    pub name: String,
    /// Encoded SystemInfo from InitRelay (empty until it came).
    pub system_info: Vec<u8>,
    /// `(relay's clocks, ours)` per SyncClock, oldest first.
    pub synced: VecDeque<(Clocks, Clocks)>,
    /// SyncClock requests ever taken (tells sessions what is new).
    pub syncs: u64,
}

/// Machines by hint (the relay's boot id).
#[derive(Debug, Default)]
pub struct Machines {
    by_hint: SmallMap<String, Machine>,
}

impl Machines {
    /// The machine of `hint` (ids 1.., 0 is the host), added on first
    /// sight; its name follows the latest connection.
    pub fn id_for(&mut self, hint: &str, name: &str) -> Result<u32, String> {
        let next = self.by_hint.len() as u32 + 1;
        if !self.by_hint.contains_key(hint) && self.by_hint.len() >= MAX_MACHINES {
            return Err(format!("more than {MAX_MACHINES} machines"));
        }
        let m = self
            .by_hint
            .get_or_insert_with(hint.to_string(), || Machine {
                id: next,
                ..Default::default()
            });
        if !name.is_empty() {
            m.name = name.to_string();
        }
        Ok(m.id)
    }

    pub fn get(&self, id: u32) -> Option<&Machine> {
        self.by_hint.values().find(|m| m.id == id)
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut Machine> {
        self.by_hint.values_mut().find(|m| m.id == id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Machine> {
        self.by_hint.values()
    }
}

impl TracingService {
    /// The IPC host dropped `n` more relay connections for their identity
    /// frame; every running session names them (nothing they sent was
    /// recorded).
    pub fn note_relay_connections_dropped(&mut self, now: u64, n: u64) {
        use crate::schema::service_events::field::RELAY_CONNECTIONS_DROPPED;
        self.relay_drops += n;
        for s in self.sessions.values_mut().filter(|s| s.is_active()) {
            let delta = self.relay_drops - s.read.relay_drops_seen;
            if delta > 0 {
                s.read.relay_drops_seen = self.relay_drops;
                let mut e = VecStream::new();
                put_varint(&mut e, RELAY_CONNECTIONS_DROPPED, delta);
                s.read.faults.pending.push((now, e.into_bytes()));
            }
        }
    }

    /// The machine id of a relayed peer (see [`Machines::id_for`]).
    pub fn machine_id_for(&mut self, hint: &str, name: &str) -> Result<u32, String> {
        self.machines.id_for(hint, name)
    }

    /// InitRelay: the machine's SystemInfo (already bounded by the caller).
    pub fn set_machine_system_info(&mut self, machine: u32, system_info: Vec<u8>) {
        if let Some(m) = self.machines.get_mut(machine) {
            m.system_info = system_info;
        }
    }

    /// SyncClock: the relay's clock readings, paired with ours taken now.
    pub fn sync_machine_clocks(&mut self, machine: u32, remote: Clocks) {
        let host = self.env.clock_snapshot();
        if let Some(m) = self.machines.get_mut(machine) {
            if m.synced.len() == SYNCS_KEPT {
                m.synced.pop_front();
            }
            m.synced.push_back((remote, host));
            m.syncs += 1;
        }
    }

    /// Packets a session has not seen yet: each machine's SystemInfo once,
    /// and its clock syncs whenever new exchanges came since the last.
    pub(super) fn machine_packets(
        &self,
        seen: &mut MachinesSeen,
        uid: u32,
        system_info: bool,
        clocks: bool,
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for m in self.machines.iter() {
            let seen = seen.by_id.get_or_insert_with(m.id, Seen::default);
            if system_info && !seen.system_info && !m.system_info.is_empty() {
                seen.system_info = true;
                out.push(machine_packet(uid, m.id, |s| {
                    put_bytes(s, field::SYSTEM_INFO, &m.system_info)
                }));
            }
            if clocks && m.syncs > seen.syncs && !m.synced.is_empty() {
                seen.syncs = m.syncs;
                out.push(machine_packet(uid, m.id, |s| remote_clock_sync(s, m)));
            }
        }
        out
    }
}

/// What one session already wrote about each machine.
#[derive(Debug, Default, Clone)]
pub struct MachinesSeen {
    by_id: SmallMap<u32, Seen>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    system_info: bool,
    syncs: u64,
}

mod field {
    pub const TRUSTED_UID: u32 = 3;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const SYSTEM_INFO: u32 = 45;
    pub const MACHINE_ID: u32 = 98;
    pub const REMOTE_CLOCK_SYNC: u32 = 107;
}

/// A service packet about a remote machine: stamped with its id, not the
/// host's (no timestamp: the readings inside are the point).
fn machine_packet(uid: u32, machine: u32, body: impl FnOnce(&mut VecStream)) -> Vec<u8> {
    let mut s = VecStream::new();
    body(&mut s);
    put_varint(&mut s, field::TRUSTED_UID, u64::from(uid));
    put_varint(
        &mut s,
        field::TRUSTED_PACKET_SEQUENCE_ID,
        SERVICE_SEQUENCE_ID,
    );
    put_varint(&mut s, field::MACHINE_ID, u64::from(machine));
    s.into_bytes()
}

/// `RemoteClockSync { synced_clocks { client_clocks (2), host_clocks (3) } }`,
/// each a ClockSnapshot `{ clocks { clock_id, timestamp } }`.
fn remote_clock_sync(s: &mut VecStream, m: &Machine) {
    let sync = begin_nested(s, field::REMOTE_CLOCK_SYNC);
    for (remote, host) in &m.synced {
        let pair = begin_nested(s, 1);
        for (f, clocks) in [(2, remote), (3, host)] {
            let snap = begin_nested(s, f);
            for &(id, ts) in clocks {
                let c = begin_nested(s, 1);
                put_varint(s, 1, u64::from(id));
                put_varint(s, 2, ts);
                end_nested(s, c);
            }
            end_nested(s, snap);
        }
        end_nested(s, pair);
    }
    end_nested(s, sync);
}
