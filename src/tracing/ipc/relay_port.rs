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
    let request = parse_untrusted(call.method_name, &call.args)?;
    let machine = st
        .core
        .machine_id_for(&m.machine_id_hint, &m.machine_name)?;
    match request {
        RelayRequest::SystemInfo(info) => st.core.set_machine_system_info(machine, info),
        RelayRequest::Clocks(clocks) => st.core.sync_machine_clocks(machine, clocks),
    }
    Ok(())
}

/// What a RelayPort call asks of the core.
#[derive(Debug, PartialEq, Eq)]
pub enum RelayRequest {
    /// InitRelay's SystemInfo, kept as sent (fields our schema lacks too).
    SystemInfo(Vec<u8>),
    /// SyncClock's `(clock id, ns)` readings (incomplete ones dropped).
    Clocks(Vec<(u32, u64)>),
}

/// Checks and decodes one RelayPort call's arguments.
pub fn parse_untrusted(method: &str, args_untrusted: &[u8]) -> Result<RelayRequest, String> {
    match RelayPortCall::decode(method, args_untrusted).map_err(|e| e.to_string())? {
        RelayPortCall::InitRelay(_) => {
            let info_untrusted = FieldIter::new(args_untrusted)
                .filter(|f| f.number == 1 && f.wire_type == 2)
                .last()
                .map_or(&[][..], |f| f.value);
            if info_untrusted.len() > MAX_SYSTEM_INFO {
                return Err(format!("system_info over {MAX_SYSTEM_INFO} bytes"));
            }
            Ok(RelayRequest::SystemInfo(info_untrusted.to_vec()))
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
            Ok(RelayRequest::Clocks(clocks))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_port_calls_parse_and_are_bounded() {
        // InitRelayRequest { system_info { utsname { sysname: "B" } } }
        let init = [0x0a, 0x05, 0x0a, 0x03, 0x0a, 0x01, b'B'];
        assert_eq!(
            parse_untrusted("InitRelay", &init).unwrap(),
            RelayRequest::SystemInfo(init[2..].to_vec())
        );
        // SyncClockRequest { phase: PING, clocks { 6, 100 }, clocks { 3 } }
        let sync = [
            0x08, 0x01, 0x12, 0x04, 0x08, 0x06, 0x10, 0x64, 0x12, 0x02, 0x08, 0x03,
        ];
        assert_eq!(
            parse_untrusted("SyncClock", &sync).unwrap(),
            RelayRequest::Clocks(vec![(6, 100)])
        );
        let many: Vec<u8> = [0x12, 0x02, 0x08, 0x01].repeat(MAX_SYNC_CLOCKS + 1);
        assert!(parse_untrusted("SyncClock", &many).is_err());
        let mut big = vec![0x0a, 0x84, 0x80, 0x01, 0x0a, 0x80, 0x80, 0x01];
        big.resize(big.len() + (1 << 14), b'x');
        let e = parse_untrusted("InitRelay", &big).unwrap_err();
        assert!(e.contains("over"), "{e}");
        assert!(parse_untrusted("InitRelay", &[0x0a, 0x05, 0x00]).is_err());
        assert!(parse_untrusted("Nope", &[]).is_err());
    }
}
