//! The `RelayPort` IPC service, as upstream's traced exposes it on producer
//! sockets when asked (`--enable-relay-endpoint`): a `traced_relay` sends
//! its machine's SystemInfo (`InitRelay`) and clock readings (`SyncClock`,
//! paired here with ours) on a connection that named its machine first
//! (SetPeerIdentity). Both are answered at once with an empty reply.

use crate::ipc::host::{Call, Reply, ReplySink};
use crate::protozero::decode::FieldIter;
use crate::schema::services::RelayPortCall;

use super::traced_state::TracedState;

/// Largest SystemInfo kept per machine.
pub const MAX_SYSTEM_INFO: usize = 16 * 1024;
/// Most clock readings taken from one SyncClock.
pub const MAX_SYNC_CLOCKS: usize = 32;

pub fn invoke(st: &mut TracedState, call: Call<'_>, out: &mut dyn ReplySink) {
    let to = call.reply_to;
    match handle(st, &call) {
        Ok(()) => out.reply(&to, Reply::ok(Vec::new())),
        Err(e) => {
            crate::log_warn!("traced: RelayPort.{} refused: {e}", call.method_name);
            out.reply(&to, Reply::fail())
        }
    };
}

fn handle(st: &mut TracedState, call: &Call<'_>) -> Result<(), String> {
    let m = call
        .remote
        .as_ref()
        .ok_or("only a relayed connection (SetPeerIdentity first) names a machine")?;
    let request = RelayPortCall::decode(call.method_name, &call.args).map_err(|e| e.to_string())?;
    let machine = st
        .core
        .machine_id_for(&m.machine_id_hint, &m.machine_name)?;
    match request {
        RelayPortCall::InitRelay(_) => {
            // Kept as sent (fields our schema lacks included).
            let info_untrusted = FieldIter::new(&call.args)
                .filter(|f| f.number == 1 && f.wire_type == 2)
                .last()
                .map_or(&[][..], |f| f.value);
            if info_untrusted.len() > MAX_SYSTEM_INFO {
                return Err(format!("system_info over {MAX_SYSTEM_INFO} bytes"));
            }
            st.core
                .set_machine_system_info(machine, info_untrusted.to_vec());
        }
        RelayPortCall::SyncClock(r) => {
            if r.clocks.len() > MAX_SYNC_CLOCKS {
                return Err(format!("more than {MAX_SYNC_CLOCKS} clocks"));
            }
            let clocks = r
                .clocks
                .iter()
                .filter_map(|c| Some((c.clock_id?, c.timestamp?)))
                .collect();
            st.core.sync_machine_clocks(machine, clocks);
        }
    }
    Ok(())
}
