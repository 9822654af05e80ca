//! Hostile and malformed input against a running host over real sockets:
//! every case gets a clean outcome and the host keeps serving.

use crate::support::ipc_peer;

use std::io;
use std::os::fd::AsFd;

use ipc_peer::*;
use tracebox::base::sock_addr::SockAddr;
use tracebox::base::unix_socket::{wait_ready, UnixStream};
use tracebox::ipc::frame::{encode_frame, FrameDecoder, MAX_PAYLOAD};
use tracebox::pb::protos::mod_IPCFrame::{
    BindService, InvokeMethod, InvokeMethodReply, OneOfmsg, SetPeerIdentity,
};
use tracebox::pb::protos::IPCFrame;

/// A client speaking raw bytes.
struct Raw {
    sock: UnixStream,
    decoder: FrameDecoder,
}

impl Raw {
    fn connect(addr: &str) -> Self {
        Raw {
            sock: UnixStream::connect(&SockAddr::parse(addr).unwrap()).unwrap(),
            decoder: FrameDecoder::new(),
        }
    }

    fn send_bytes(&self, mut data: &[u8]) {
        while !data.is_empty() {
            match self.sock.send(data, None) {
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_ready(self.sock.as_fd(), false, true, None).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn send(&self, request_id: u64, msg: OneOfmsg) {
        let frame = IPCFrame {
            request_id: Some(request_id),
            msg,
            ..Default::default()
        };
        self.send_bytes(&encode_frame(&frame).unwrap());
    }

    /// Next frame, or None at EOF.
    fn recv(&mut self) -> Option<IPCFrame> {
        loop {
            if let Some(f) = self.decoder.next_frame().unwrap() {
                return Some(f);
            }
            wait_ready(self.sock.as_fd(), true, false, None).unwrap();
            let mut buf = [0u8; 4096];
            match self.sock.recv(&mut buf) {
                Ok((0, _)) => return None,
                Ok((n, _)) => self.decoder.push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Binds the test service; returns its id (method 1 is Echo).
    fn bind(&mut self, request_id: u64) -> u32 {
        self.send(
            request_id,
            OneOfmsg::msg_bind_service(BindService {
                service_name: Some(SERVICE.into()),
            }),
        );
        match self.recv().unwrap().msg {
            OneOfmsg::msg_bind_service_reply(r) => r.service_id.unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn echo(&self, request_id: u64, service_id: u32, args: &[u8], drop_reply: bool) {
        self.send(
            request_id,
            OneOfmsg::msg_invoke_method(InvokeMethod {
                service_id: Some(service_id),
                method_id: Some(1),
                args_proto: Some(args.to_vec()),
                drop_reply: Some(drop_reply),
            }),
        );
    }
}

fn assert_echo_reply(frame: IPCFrame, request_id: u64, args: &[u8]) {
    assert_eq!(frame.request_id, Some(request_id));
    match frame.msg {
        OneOfmsg::msg_invoke_method_reply(r) => {
            assert_eq!(r.success, Some(true));
            assert_eq!(r.reply_proto.as_deref(), Some(args));
        }
        other => panic!("{other:?}"),
    }
}

/// A well-behaved client still gets served.
fn assert_host_alive(addr: &str) {
    let (mut c, svc) = connect_bound(addr);
    assert_eq!(
        c.invoke(&svc, "Echo", b"alive", None).unwrap()[0].payload,
        b"alive"
    );
}

#[test]
fn unparsable_and_empty_frames_are_skipped_and_the_stream_continues() {
    let addr = unique_abstract("skip");
    let _host = ThreadHost::start(vec![addr.clone()]);
    let mut raw = Raw::connect(&addr);
    let sid = raw.bind(1);
    raw.send_bytes(&0u32.to_le_bytes()); // empty frame
    raw.send_bytes(&[4, 0, 0, 0, 0x0f, 0xff, 0xff, 0xff]); // invalid wire type
    raw.send_bytes(&[2, 0, 0, 0, 0x2a, 0x05]); // sub-message overruns the frame
    raw.echo(2, sid, b"after garbage", false);
    assert_echo_reply(raw.recv().unwrap(), 2, b"after garbage");
    assert_host_alive(&addr);
}

#[test]
fn oversized_frame_drops_only_that_client() {
    let addr = unique_abstract("big");
    let _host = ThreadHost::start(vec![addr.clone()]);
    let mut raw = Raw::connect(&addr);
    raw.bind(1);
    raw.send_bytes(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
    assert!(raw.recv().is_none(), "host must close the connection");
    assert_host_alive(&addr);
}

#[test]
fn truncated_frame_then_hangup_leaves_the_host_alive() {
    let addr = unique_abstract("trunc");
    let _host = ThreadHost::start(vec![addr.clone()]);
    {
        let raw = Raw::connect(&addr);
        raw.send_bytes(&[100, 0, 0, 0, 0x10, 0x01]); // announces 100, sends 2
    }
    assert_host_alive(&addr);
}

#[test]
fn random_garbage_never_kills_the_host() {
    let addr = unique_abstract("noise");
    let _host = ThreadHost::start(vec![addr.clone()]);
    // Deterministic xorshift noise; small lengths keep many frames parseable-ish.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for round in 0..20 {
        let raw = Raw::connect(&addr);
        let mut bytes = Vec::new();
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(x as u8);
        }
        if round % 2 == 0 {
            // Keep length prefixes small so payload garbage reaches the parser.
            for chunk in bytes.chunks_mut(40) {
                chunk[..4].copy_from_slice(&36u32.to_le_bytes());
            }
        }
        raw.send_bytes(&bytes);
    }
    assert_host_alive(&addr);
}

#[test]
fn unknown_frame_types_get_request_error_and_drop_reply_is_silent() {
    let addr = unique_abstract("unknown");
    let _host = ThreadHost::start(vec![addr.clone()]);
    let mut raw = Raw::connect(&addr);
    let sid = raw.bind(1);
    // A reply-type frame sent to the host is not a request.
    raw.send(
        2,
        OneOfmsg::msg_invoke_method_reply(InvokeMethodReply::default()),
    );
    let f = raw.recv().unwrap();
    assert_eq!(f.request_id, Some(2));
    match f.msg {
        OneOfmsg::msg_request_error(e) => assert_eq!(e.error.as_deref(), Some("unknown request")),
        other => panic!("{other:?}"),
    }
    // No oneof at all: also unknown.
    raw.send(3, OneOfmsg::None);
    assert!(matches!(
        raw.recv().unwrap().msg,
        OneOfmsg::msg_request_error(_)
    ));
    // drop_reply and SetPeerIdentity (ignored on UNIX sockets) produce
    // nothing; an invalid method id is rejected even with drop_reply (as
    // Perfetto does): the next frames answer requests 6 and 7.
    raw.echo(4, sid, b"silent", true);
    raw.send(
        5,
        OneOfmsg::set_peer_identity(SetPeerIdentity {
            pid: Some(1),
            ..Default::default()
        }),
    );
    raw.send(
        6,
        OneOfmsg::msg_invoke_method(InvokeMethod {
            service_id: Some(77),
            drop_reply: Some(true),
            ..Default::default()
        }),
    );
    raw.echo(7, sid, b"loud", false);
    let f = raw.recv().unwrap();
    assert_eq!(f.request_id, Some(6));
    assert!(matches!(
        f.msg,
        OneOfmsg::msg_invoke_method_reply(InvokeMethodReply {
            success: Some(false),
            ..
        })
    ));
    assert_echo_reply(raw.recv().unwrap(), 7, b"loud");
}
