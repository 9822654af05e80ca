//! Our relay protocol pieces against the real Perfetto traced (from
//! tests/sdk-interop) listening on a TCP producer socket: a connection
//! that opens with our SetPeerIdentity frame registers a producer that
//! the service puts on a machine of its own with the pid we sent, and a
//! connection without the frame stays on the host machine. The whole
//! relay (forwarding, InitRelay, SyncClock) against the real service is in
//! traced_relay_real_traced.rs.

use crate::support::traced as traced_support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use tracebox::ipc::frame::{encode_frame, FrameDecoder};
use tracebox::pb::protos::mod_IPCFrame::{BindService, InvokeMethod, OneOfmsg};
use tracebox::pb::protos::*;
use tracebox::protozero::decode::decode_message;
use tracebox::traced_relay::wire::PeerIdentity;
use traced_support::{connect, encode};

fn real_traced_bin() -> PathBuf {
    let dir = std::env::var_os("TRACEBOX_SDK_INTEROP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk-interop/target/release")
        });
    let p = dir.join("real-traced");
    assert!(
        p.exists(),
        "{} missing: run scripts/sdk-interop.sh build",
        p.display()
    );
    p
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_real_traced(producer: &str, consumer: &str) -> Daemon {
    let (rd, wr) = nix::unistd::pipe().unwrap();
    let no_cloexec = nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty());
    nix::fcntl::fcntl(wr.as_raw_fd(), no_cloexec).unwrap();
    let child = Command::new(real_traced_bin())
        .args(["--producer-socket", producer, "--consumer-socket", consumer])
        .args(["--notify-fd", &wr.as_raw_fd().to_string()])
        .spawn()
        .unwrap();
    drop(wr);
    let mut b = [0u8; 1];
    std::fs::File::from(rd)
        .read_exact(&mut b)
        .expect("real traced did not start");
    Daemon(child)
}

/// IPC client over TCP (no fds cross this link).
pub(crate) struct TcpIpc {
    pub(crate) s: TcpStream,
    dec: FrameDecoder,
    next_id: u64,
}

impl TcpIpc {
    pub(crate) fn connect(addr: &str, identity: Option<&PeerIdentity>) -> TcpIpc {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        if let Some(id) = identity {
            s.write_all(&id.to_frame().unwrap()).unwrap();
        }
        TcpIpc {
            s,
            dec: FrameDecoder::new(),
            next_id: 1,
        }
    }

    pub(crate) fn send(&mut self, msg: OneOfmsg) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let f = IPCFrame {
            request_id: Some(id),
            msg,
            ..Default::default()
        };
        self.s.write_all(&encode_frame(&f).unwrap()).unwrap();
        id
    }

    pub(crate) fn recv(&mut self, id: u64) -> IPCFrame {
        loop {
            if let Some(f) = self.dec.next_frame().unwrap() {
                if f.request_id == Some(id) {
                    return f;
                }
                continue;
            }
            let mut buf = [0u8; 4096];
            let n = self.s.read(&mut buf).unwrap();
            assert!(n > 0, "real traced closed the connection");
            self.dec.push(&buf[..n]);
        }
    }

    pub(crate) fn bind(&mut self, service: &str) -> (u32, HashMap<String, u32>) {
        let id = self.send(OneOfmsg::msg_bind_service(BindService {
            service_name: Some(service.into()),
        }));
        let OneOfmsg::msg_bind_service_reply(r) = self.recv(id).msg else {
            panic!("no BindServiceReply")
        };
        assert_eq!(r.success, Some(true), "bind {service}");
        let methods = r
            .methods
            .into_iter()
            .map(|m| (m.name.unwrap(), m.id.unwrap()))
            .collect();
        (r.service_id.unwrap(), methods)
    }

    pub(crate) fn call(
        &mut self,
        service: (u32, &HashMap<String, u32>),
        method: &str,
        args: &[u8],
    ) -> bool {
        let id = self.send(OneOfmsg::msg_invoke_method(InvokeMethod {
            service_id: Some(service.0),
            method_id: Some(service.1[method]),
            args_proto: Some(args.to_vec()),
            drop_reply: None,
        }));
        match self.recv(id).msg {
            OneOfmsg::msg_invoke_method_reply(r) => r.success == Some(true),
            other => panic!("{method}: {other:?}"),
        }
    }
}

pub(crate) fn register_producer(addr: &str, name: &str, identity: Option<&PeerIdentity>) -> TcpIpc {
    let mut c = TcpIpc::connect(addr, identity);
    let (sid, methods) = c.bind("ProducerPort");
    let init = InitializeConnectionRequest {
        producer_name: Some(name.into()),
        ..Default::default()
    };
    assert!(c.call((sid, &methods), "InitializeConnection", &encode(&init)));
    c
}

pub(crate) fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn real_traced_accepts_our_identity_and_relay_port_calls() {
    let producer_addr = format!("127.0.0.1:{}", free_tcp_port());
    let consumer = format!("@tracebox-test-relay-c-{}", std::process::id());
    let _traced = start_real_traced(&producer_addr, &consumer);

    let remote = PeerIdentity {
        pid: 4242,
        uid: 1234,
        machine_id_hint: "tracebox-test-remote-machine".into(),
        machine_name: "remote-board".into(),
    };
    let _remote = register_producer(&producer_addr, "relayed.producer", Some(&remote));
    let _local = register_producer(&producer_addr, "local.producer", None);

    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let mut producers = HashMap::new();
    for r in cons.invoke(&cport, "QueryServiceState", &[], None).unwrap() {
        let resp: QueryServiceStateResponse = decode_message(&r.payload).unwrap();
        for p in resp.service_state.unwrap_or_default().producers {
            producers.insert(p.name.clone().unwrap_or_default(), p);
        }
    }
    let relayed = &producers["relayed.producer"];
    let local = &producers["local.producer"];
    assert_ne!(relayed.machine_id.unwrap_or(0), 0, "{relayed:?}");
    assert_eq!(local.machine_id.unwrap_or(0), 0, "{local:?}");
    assert_eq!(
        relayed.pid,
        Some(4242),
        "the service took the pid from our frame"
    );
}
