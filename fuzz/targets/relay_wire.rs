//! What traced's relay endpoint reads from a remote machine: the first
//! byte picks InitRelay args, SyncClock args (traced's RelayPort parser),
//! or a whole IPC frame whose
//! SetPeerIdentity is checked. Errors are fine; panics are not.

use tracebox::ipc::frame::decode_payload;
use tracebox::pb::protos::mod_IPCFrame::OneOfmsg;
use tracebox::traced_relay::wire::{PeerIdentity, MAX_SYNC_CLOCKS, MAX_SYSTEM_INFO};
use tracebox::tracing::ipc::relay_port::{parse_untrusted, RelayRequest};

pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 3 {
        0 => {
            if let Ok(RelayRequest::SystemInfo(info)) = parse_untrusted("InitRelay", rest) {
                assert!(info.len() <= MAX_SYSTEM_INFO);
            }
        }
        1 => {
            if let Ok(RelayRequest::Clocks(c)) = parse_untrusted("SyncClock", rest) {
                assert!(c.len() <= MAX_SYNC_CLOCKS);
            }
        }
        _ => {
            if let Ok(f) = decode_payload(rest) {
                if let OneOfmsg::set_peer_identity(m) = f.msg {
                    let _ = PeerIdentity::from_untrusted(&m);
                }
            }
        }
    }
}
