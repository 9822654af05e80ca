//! vsock, upstream's link between a VM and its host: traced listens on
//! `vsock://CID:PORT` next to its UNIX socket, and a relayed producer over
//! vsock is identified like one over TCP. The round trip needs a vsock
//! transport that reaches this machine itself (the `vsock_loopback`
//! module, CID 1); without one only the listening side is checked, and
//! the test says so on stderr.

use crate::support::traced::{call, connect, start_traced_with};
use tracebox::base::sock_addr::SockAddr;
use tracebox::ipc::client::BlockingClient;
use tracebox::pb::protos::*;
use tracebox::protozero::decode::decode_message;
use tracebox::traced_relay::wire::PeerIdentity;

/// VMADDR_CID_ANY: listen on every context id of this machine.
const CID_ANY: u32 = u32::MAX;
const CID_LOCAL: u32 = 1;

#[test]
fn traced_serves_a_relayed_producer_over_vsock() {
    let id = std::process::id();
    let port = 40000 + id % 20000;
    let listen = format!("vsock://{CID_ANY}:{port}");
    let consumer = format!("@tracebox-test-vsock-c-{id}");
    let unix = format!("@tracebox-test-vsock-p-{id}");
    // Ready means every producer socket, the vsock one included, is bound.
    let _traced = start_traced_with(
        &format!("{unix},{listen}"),
        &consumer,
        &["--enable-relay-endpoint"],
    );

    let to = SockAddr::parse(&format!("vsock://{CID_LOCAL}:{port}")).unwrap();
    let mut c = match BlockingClient::connect(&to) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vsock round trip skipped: no vsock loopback transport here ({e})");
            return;
        }
    };
    let frame = PeerIdentity {
        pid: 4242,
        uid: 0,
        machine_id_hint: "tracebox-test-vm".into(),
        machine_name: "vm".into(),
    }
    .to_frame()
    .unwrap();
    assert_eq!(c.socket().send(&frame, None).unwrap(), frame.len());
    let port_svc = c.bind_service("ProducerPort").unwrap();
    let init = InitializeConnectionRequest {
        producer_name: Some("vsock.producer".into()),
        ..Default::default()
    };
    let init = crate::support::traced::encode(&init);
    let r = c
        .invoke(&port_svc, "InitializeConnection", &init, None)
        .unwrap();
    assert!(r[0].success);

    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let resp: QueryServiceStateResponse =
        decode_message(&call(&mut cons, &cport, "QueryServiceState", &[])).unwrap();
    let p = resp
        .service_state
        .unwrap_or_default()
        .producers
        .into_iter()
        .find(|p| p.name.as_deref() == Some("vsock.producer"))
        .expect("the vsock producer registered");
    assert_eq!(p.machine_id, Some(1));
    assert_eq!(p.pid, Some(4242));
}
