//! Our traced on a TCP producer socket (PERFETTO_PRODUCER_SOCK_NAME with
//! a `host:port` item next to its UNIX socket): a relayed connection must
//! open with SetPeerIdentity, whose pid and uid become the producer's; a
//! frame before it or a second identity drops the connection.

use std::collections::HashMap;
use std::io::{Read, Write};

use crate::support::traced::{connect, start_traced};
use crate::traced_relay_wire_real::{free_tcp_port, register_producer, TcpIpc};
use tracebox::ipc::frame::encode_frame;
use tracebox::pb::protos::mod_IPCFrame::{BindService, OneOfmsg};
use tracebox::pb::protos::*;
use tracebox::protozero::decode::decode_message;
use tracebox::traced_relay::wire::PeerIdentity;

fn remote(pid: i32) -> PeerIdentity {
    PeerIdentity {
        pid,
        uid: 1234,
        machine_id_hint: "tracebox-test-remote".into(),
        machine_name: "board-b".into(),
    }
}

/// True once the peer closed the connection (EOF or reset).
fn closed_by_peer(c: &mut TcpIpc) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match c.s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e) => panic!("no close from traced: {e}"),
        }
    }
}

#[test]
fn tcp_producer_socket_takes_identity_first() {
    let id = std::process::id();
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    let unix = format!("@tracebox-test-tcp-p-{id}");
    let consumer = format!("@tracebox-test-tcp-c-{id}");
    let _traced = start_traced(&format!("{unix},{tcp}"), &consumer);

    // Identity first: registers with the pid and uid it named.
    let _relayed = register_producer(&tcp, "relayed.producer", Some(&remote(4242)));
    // The UNIX socket still serves local producers.
    let (_local, _) = connect(&unix, "ProducerPort");

    // Anything before the identity: dropped.
    let mut early = TcpIpc::connect(&tcp, None);
    early.send(OneOfmsg::msg_bind_service(BindService {
        service_name: Some("ProducerPort".into()),
    }));
    assert!(closed_by_peer(&mut early));

    // A second identity: dropped.
    let mut twice = TcpIpc::connect(&tcp, Some(&remote(7)));
    twice.bind("ProducerPort");
    twice.s.write_all(&remote(8).to_frame().unwrap()).unwrap();
    assert!(closed_by_peer(&mut twice));

    // An identity without a machine hint: dropped.
    let mut bad = remote(9);
    bad.machine_id_hint.clear();
    let mut anon = TcpIpc::connect(&tcp, Some(&bad));
    anon.s
        .write_all(
            &encode_frame(&IPCFrame {
                request_id: Some(1),
                msg: OneOfmsg::msg_bind_service(BindService {
                    service_name: Some("ProducerPort".into()),
                }),
                ..Default::default()
            })
            .unwrap(),
        )
        .unwrap();
    assert!(closed_by_peer(&mut anon));

    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let mut producers = HashMap::new();
    for r in cons.invoke(&cport, "QueryServiceState", &[], None).unwrap() {
        let resp: QueryServiceStateResponse = decode_message(&r.payload).unwrap();
        for p in resp.service_state.unwrap_or_default().producers {
            producers.insert(p.name.clone().unwrap_or_default(), p);
        }
    }
    let relayed = &producers["relayed.producer"];
    assert_eq!(relayed.pid, Some(4242), "{relayed:?}");
    assert_eq!(relayed.uid, Some(1234), "{relayed:?}");
}

struct Relay(std::process::Child);

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn traced_relay_forwards_a_local_producer_with_its_identity() {
    let id = std::process::id();
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    let consumer = format!("@tracebox-test-relay2-c-{id}");
    let relay_local = format!("@tracebox-test-relay2-local-{id}");
    let _traced = start_traced(&format!("@tracebox-test-relay2-p-{id},{tcp}"), &consumer);
    let _relay = Relay(
        std::process::Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("traced_relay")
            .env("PERFETTO_PRODUCER_SOCK_NAME", &relay_local)
            .env("PERFETTO_RELAY_SOCK_NAME", &tcp)
            .env("PERFETTO_MACHINE_NAME", "board-b")
            .spawn()
            .unwrap(),
    );
    // The relay's socket appears once it listens.
    let (mut prod, pport) = (0..200)
        .find_map(|_| {
            let addr = tracebox::base::sock_addr::SockAddr::parse(&relay_local).unwrap();
            match tracebox::ipc::client::BlockingClient::connect(&addr) {
                Ok(mut c) => {
                    c.set_timeout(Some(std::time::Duration::from_secs(20)));
                    let s = c.bind_service("ProducerPort").unwrap();
                    Some((c, s))
                }
                Err(_) => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    None
                }
            }
        })
        .expect("traced_relay did not listen");
    let init = InitializeConnectionRequest {
        producer_name: Some("behind.relay".into()),
        ..Default::default()
    };
    crate::support::traced::call(
        &mut prod,
        &pport,
        "InitializeConnection",
        &crate::support::traced::encode(&init),
    );

    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let mut producers = HashMap::new();
    for r in cons.invoke(&cport, "QueryServiceState", &[], None).unwrap() {
        let resp: QueryServiceStateResponse = decode_message(&r.payload).unwrap();
        for p in resp.service_state.unwrap_or_default().producers {
            producers.insert(p.name.clone().unwrap_or_default(), p);
        }
    }
    let p = &producers["behind.relay"];
    // The relay read our pid/uid with SO_PEERCRED and named them upstream.
    assert_eq!(p.pid, Some(id as i32), "{p:?}");
    assert_eq!(p.uid, Some(nix::unistd::geteuid().as_raw() as i32), "{p:?}");
}
