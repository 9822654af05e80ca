//! Perfetto's relay protocol, as `traced_relay` and traced's relay
//! endpoint speak it. Pure: no sockets, no clocks.
//!
//! * Every producer connection the relay forwards starts with one
//!   `IPCFrame { request_id: 0, set_peer_identity { pid, uid,
//!   machine_id_hint, machine_name } }` before the producer's own frames;
//!   the host takes it only as the first frame, once ([`IdentityGate`]).
//! * A separate connection binds `RelayPort` and calls `InitRelay` (the
//!   remote's SystemInfo) once, then `SyncClock` in rounds of a `PING` and
//!   an `UPDATE`, each carrying a snapshot of the remote's clocks; a round
//!   repeats every [`CLOCK_SYNC_INTERVAL`] ([`ClockSync`]).
//! * Relay addresses use upstream's socket-name syntax ([`RelayAddr`]).

use std::time::Duration;

use crate::ipc::frame::{encode_frame, FrameTooLarge};
use crate::pb::protos::mod_IPCFrame::{OneOfmsg, SetPeerIdentity};
use crate::pb::protos::IPCFrame;
use crate::protozero::{begin_nested, end_nested, put_bytes, put_varint, VecStream};

/// Time between two clock-sync rounds (upstream's value).
pub const CLOCK_SYNC_INTERVAL: Duration = Duration::from_secs(30);
/// Longest machine name or id hint the host keeps.
pub const MAX_MACHINE_STRING: usize = 256;
/// The host's bounds (traced's RelayPort), kept by both sides.
pub use crate::tracing::ipc::relay_port::{MAX_SYNC_CLOCKS, MAX_SYSTEM_INFO};

/// Where a relay connects (or a host listens), in upstream's syntax:
/// `vsock://CID:PORT`, `HOST:PORT` or `[V6]:PORT` (TCP), anything else a
/// Unix socket (`@name` abstract).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayAddr {
    Vsock { cid: u32, port: u32 },
    Tcp(String),
    Unix(String),
}

impl RelayAddr {
    pub fn parse(text: &str) -> Result<RelayAddr, String> {
        if text.is_empty() {
            return Err("empty relay socket name".into());
        }
        if text.starts_with('@') {
            return Ok(RelayAddr::Unix(text.into()));
        }
        if let Some(rest) = text.strip_prefix("vsock://") {
            let bad = || format!("{text:?}: want vsock://CID:PORT");
            let (cid, port) = rest.split_once(':').ok_or_else(bad)?;
            let cid = cid.parse().map_err(|_| bad())?;
            let port = port.parse().map_err(|_| bad())?;
            return Ok(RelayAddr::Vsock { cid, port });
        }
        match text.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() && !host.is_empty() => {
                Ok(RelayAddr::Tcp(text.into()))
            }
            _ => Ok(RelayAddr::Unix(text.into())),
        }
    }
}

/// Who a forwarded producer is, as the relay tells the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    pub pid: i32,
    pub uid: i32,
    pub machine_id_hint: String,
    pub machine_name: String,
}

impl PeerIdentity {
    /// The frame the relay sends first on each forwarded connection.
    pub fn to_frame(&self) -> Result<Vec<u8>, FrameTooLarge> {
        encode_frame(&IPCFrame {
            request_id: Some(0),
            msg: OneOfmsg::set_peer_identity(SetPeerIdentity {
                pid: Some(self.pid),
                uid: Some(self.uid),
                machine_id_hint: Some(self.machine_id_hint.clone()),
                machine_name: Some(self.machine_name.clone()),
            }),
            ..Default::default()
        })
    }

    /// Checks an identity the host received: strings bounded, a hint
    /// present (it is what tells machines apart).
    pub fn from_untrusted(m: &SetPeerIdentity) -> Result<PeerIdentity, &'static str> {
        let hint_untrusted = m.machine_id_hint.clone().unwrap_or_default();
        let name_untrusted = m.machine_name.clone().unwrap_or_default();
        if hint_untrusted.is_empty() {
            return Err("SetPeerIdentity without a machine_id_hint");
        }
        if hint_untrusted.len() > MAX_MACHINE_STRING || name_untrusted.len() > MAX_MACHINE_STRING {
            return Err("SetPeerIdentity string too long");
        }
        Ok(PeerIdentity {
            pid: m.pid.unwrap_or(-1),
            uid: m.uid.unwrap_or(-1),
            machine_id_hint: hint_untrusted,
            machine_name: name_untrusted,
        })
    }
}

/// What the host does with a frame on a relay-endpoint connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// The identity frame: record it.
    Identify,
    /// A normal frame after the identity.
    Pass,
    /// Anything before the identity, or a second identity: drop the
    /// connection.
    Drop(&'static str),
}

/// Enforces "identity first, exactly once" on one connection.
#[derive(Debug, Default)]
pub struct IdentityGate {
    identified: bool,
}

impl IdentityGate {
    pub fn on_frame(&mut self, is_identity: bool) -> Gate {
        match (self.identified, is_identity) {
            (false, true) => {
                self.identified = true;
                Gate::Identify
            }
            (false, false) => Gate::Drop("frame before SetPeerIdentity"),
            (true, true) => Gate::Drop("second SetPeerIdentity"),
            (true, false) => Gate::Pass,
        }
    }
}

/// `SyncClockRequest.Phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPhase {
    Ping = 1,
    Update = 2,
}

/// `InitRelayRequest` args carrying a serialized SystemInfo.
pub fn init_relay_args(system_info: &[u8]) -> Vec<u8> {
    let mut s = VecStream::new();
    put_bytes(&mut s, 1, system_info);
    s.into_bytes()
}

/// `SyncClockRequest` args: the phase and `(builtin clock id, ns)` pairs.
pub fn sync_clock_args(phase: SyncPhase, clocks: &[(u32, u64)]) -> Vec<u8> {
    let mut s = VecStream::new();
    put_varint(&mut s, 1, phase as u64);
    for &(id, ts) in clocks {
        let n = begin_nested(&mut s, 2);
        put_varint(&mut s, 1, u64::from(id));
        put_varint(&mut s, 2, ts);
        end_nested(&mut s, n);
    }
    s.into_bytes()
}

/// What the relay's clock sync does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncStep {
    /// Snapshot the clocks now and send them with this phase.
    Send(SyncPhase),
    /// Wait, then call [`ClockSync::on_timer`].
    WaitThen(Duration),
}

/// The relay side of clock sync: PING, UPDATE on its reply, then a pause.
#[derive(Debug, Default)]
pub struct ClockSync {
    waiting_for: Option<SyncPhase>,
}

impl ClockSync {
    /// The RelayPort is bound: start a round.
    pub fn on_connected(&mut self) -> SyncStep {
        self.waiting_for = Some(SyncPhase::Ping);
        SyncStep::Send(SyncPhase::Ping)
    }

    /// The host answered the outstanding request.
    pub fn on_response(&mut self) -> SyncStep {
        match self.waiting_for.take() {
            Some(SyncPhase::Ping) => {
                self.waiting_for = Some(SyncPhase::Update);
                SyncStep::Send(SyncPhase::Update)
            }
            _ => SyncStep::WaitThen(CLOCK_SYNC_INTERVAL),
        }
    }

    /// The pause after a round ended: start the next round.
    pub fn on_timer(&mut self) -> SyncStep {
        self.on_connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::frame::FrameDecoder;

    #[test]
    fn addresses_follow_upstream_syntax() {
        let cases = [
            (
                "vsock://2:20001",
                RelayAddr::Vsock {
                    cid: 2,
                    port: 20001,
                },
            ),
            (
                "192.168.0.1:20001",
                RelayAddr::Tcp("192.168.0.1:20001".into()),
            ),
            ("[::1]:20001", RelayAddr::Tcp("[::1]:20001".into())),
            ("board.local:9", RelayAddr::Tcp("board.local:9".into())),
            ("@traced-relay", RelayAddr::Unix("@traced-relay".into())),
            ("@a:1", RelayAddr::Unix("@a:1".into())),
            (
                "/run/perfetto/x.sock",
                RelayAddr::Unix("/run/perfetto/x.sock".into()),
            ),
            ("/tmp/a:b", RelayAddr::Unix("/tmp/a:b".into())),
        ];
        for (text, want) in cases {
            assert_eq!(RelayAddr::parse(text).unwrap(), want, "{text}");
        }
        for bad in ["", "vsock://2", "vsock://x:1", "vsock://2:99999999999"] {
            assert!(RelayAddr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn identity_frame_bytes_and_round_trip() {
        let id = PeerIdentity {
            pid: 42,
            uid: 1000,
            machine_id_hint: "b00t".into(),
            machine_name: "vm".into(),
        };
        let frame = id.to_frame().unwrap();
        // [len LE] request_id(2)=0, set_peer_identity(8){pid 1, uid 2, hint 3, name 4}
        let body = [
            0x10, 0x00, 0x42, 0x0f, 0x08, 42, 0x10, 0xe8, 0x07, 0x1a, 4, b'b', b'0', b'0', b't',
            0x22, 2, b'v', b'm',
        ];
        assert_eq!(&frame[..4], &(body.len() as u32).to_le_bytes());
        assert_eq!(&frame[4..], &body);
        let mut dec = FrameDecoder::new();
        dec.push(&frame);
        let f = dec.next_frame().unwrap().unwrap();
        let OneOfmsg::set_peer_identity(m) = f.msg else {
            panic!("{f:?}")
        };
        assert_eq!(PeerIdentity::from_untrusted(&m).unwrap(), id);
    }

    #[test]
    fn host_checks_identities() {
        let ok = SetPeerIdentity {
            machine_id_hint: Some("h".into()),
            ..Default::default()
        };
        assert_eq!(PeerIdentity::from_untrusted(&ok).unwrap().pid, -1);
        let none = SetPeerIdentity::default();
        assert!(PeerIdentity::from_untrusted(&none).is_err());
        let long = SetPeerIdentity {
            machine_id_hint: Some("h".into()),
            machine_name: Some("n".repeat(MAX_MACHINE_STRING + 1)),
            ..Default::default()
        };
        assert!(PeerIdentity::from_untrusted(&long).is_err());

        let mut g = IdentityGate::default();
        assert!(matches!(g.on_frame(false), Gate::Drop(_)));
        let mut g = IdentityGate::default();
        assert_eq!(g.on_frame(true), Gate::Identify);
        assert_eq!(g.on_frame(false), Gate::Pass);
        assert!(matches!(g.on_frame(true), Gate::Drop(_)));
    }

    #[test]
    fn relay_port_messages_round_trip() {
        // What we send is read back by traced's one RelayPort parser.
        use crate::tracing::ipc::relay_port::{parse_untrusted, RelayRequest};
        let info = [0x0a, 0x02, 0x0a, 0x00];
        let args = init_relay_args(&info);
        assert_eq!(args, [0x0a, 4, 0x0a, 0x02, 0x0a, 0x00]);
        assert_eq!(
            parse_untrusted("InitRelay", &args).unwrap(),
            RelayRequest::SystemInfo(info.to_vec())
        );

        let clocks = [(6, 123_456_789_000), (1, u64::MAX), (3, 0)];
        let args = sync_clock_args(SyncPhase::Update, &clocks);
        assert_eq!(&args[..3], &[0x08, 2, 0x12]);
        assert_eq!(
            parse_untrusted("SyncClock", &args).unwrap(),
            RelayRequest::Clocks(clocks.to_vec())
        );
        let pb: crate::pb::protos::SyncClockRequest =
            crate::protozero::decode::decode_message(&args).unwrap();
        assert_eq!(pb.phase.map(|p| p as i32), Some(SyncPhase::Update as i32));
        let many = sync_clock_args(SyncPhase::Ping, &vec![(1, 1); MAX_SYNC_CLOCKS + 1]);
        assert!(parse_untrusted("SyncClock", &many).is_err());
    }

    #[test]
    fn clock_sync_rounds() {
        let mut s = ClockSync::default();
        assert_eq!(s.on_connected(), SyncStep::Send(SyncPhase::Ping));
        assert_eq!(s.on_response(), SyncStep::Send(SyncPhase::Update));
        assert_eq!(s.on_response(), SyncStep::WaitThen(CLOCK_SYNC_INTERVAL));
        assert_eq!(s.on_response(), SyncStep::WaitThen(CLOCK_SYNC_INTERVAL));
        assert_eq!(s.on_timer(), SyncStep::Send(SyncPhase::Ping));
    }
}
