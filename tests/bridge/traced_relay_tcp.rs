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
    // The first relayed machine hint gets machine id 1.
    assert_eq!(relayed.machine_id, Some(1), "{relayed:?}");
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

/// A relayed producer is told to use shared-memory emulation, gets its
/// commands without an fd, and its chunks, sent inline in CommitData,
/// reach the consumer.
#[test]
fn relayed_producer_commits_inline_chunks() {
    use tracebox::pb::protos::mod_CommitDataRequest::ChunksToMove;
    use tracebox::pb::protos::mod_GetAsyncCommandResponse::OneOfcmd;
    use tracebox::pb::protos::mod_IPCFrame::InvokeMethod;

    let id = std::process::id();
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    let consumer = format!("@tracebox-test-emu-c-{id}");
    let _traced = start_traced(&format!("@tracebox-test-emu-p-{id},{tcp}"), &consumer);

    let mut p = TcpIpc::connect(&tcp, Some(&remote(5151)));
    let (sid, methods) = p.bind("ProducerPort");
    let invoke = |p: &mut TcpIpc, method: &str, args: Vec<u8>| {
        p.send(OneOfmsg::msg_invoke_method(InvokeMethod {
            service_id: Some(sid),
            method_id: Some(methods[method]),
            args_proto: Some(args),
            drop_reply: None,
        }))
    };
    let reply = |p: &mut TcpIpc, rid: u64| match p.recv(rid).msg {
        OneOfmsg::msg_invoke_method_reply(r) => {
            assert_eq!(r.success, Some(true));
            r.reply_proto.unwrap_or_default()
        }
        other => panic!("{other:?}"),
    };
    let init = InitializeConnectionRequest {
        producer_name: Some("emulated.producer".into()),
        ..Default::default()
    };
    let rid = invoke(
        &mut p,
        "InitializeConnection",
        crate::support::traced::encode(&init),
    );
    let resp: InitializeConnectionResponse = decode_message(&reply(&mut p, rid)).unwrap();
    assert_eq!(resp.use_shmem_emulation, Some(true), "{resp:?}");

    let reg = RegisterDataSourceRequest {
        data_source_descriptor: Some(DataSourceDescriptor {
            name: Some("test.ds".into()),
            ..Default::default()
        }),
    };
    let rid = invoke(
        &mut p,
        "RegisterDataSource",
        crate::support::traced::encode(&reg),
    );
    reply(&mut p, rid);
    let stream = invoke(&mut p, "GetAsyncCommand", Vec::new());

    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let mut req = tracebox::protozero::VecStream::new();
    // trace_all_machines (43): remote data sources start only when asked.
    let config = crate::support::traced::trace_config_with(4096, &[0xd8, 0x02, 0x01]);
    tracebox::protozero::put_bytes(&mut req, 1, &config);
    let enable = cons
        .start_invoke(&cport, "EnableTracing", req.as_bytes(), None)
        .unwrap();

    let target = loop {
        let cmd: GetAsyncCommandResponse = decode_message(&reply(&mut p, stream)).unwrap();
        if let OneOfcmd::start_data_source(s) = cmd.cmd {
            break s.config.unwrap().target_buffer.unwrap();
        }
    };
    // One complete chunk: header (chunk id, writer id, 1 packet, no
    // fragment flags), then the packet with its size prefix.
    let packet = [0x40, 0xe7, 0x8a, 0x8d, 0x09]; // TracePacket.timestamp = 19088743
    let mut chunk = Vec::new();
    chunk.extend_from_slice(&0u32.to_le_bytes());
    chunk.extend_from_slice(&1u16.to_le_bytes());
    chunk.extend_from_slice(&1u16.to_le_bytes());
    chunk.push(packet.len() as u8);
    chunk.extend_from_slice(&packet);
    let commit = CommitDataRequest {
        chunks_to_move: vec![ChunksToMove {
            target_buffer: Some(target),
            data: Some(chunk),
            ..Default::default()
        }],
        ..Default::default()
    };
    let rid = invoke(
        &mut p,
        "CommitData",
        crate::support::traced::encode(&commit),
    );
    reply(&mut p, rid);

    crate::support::traced::call(&mut cons, &cport, "DisableTracing", &[]);
    cons.next_reply(enable).unwrap().unwrap();
    let packets = crate::support::traced::packets_from_replies(
        &cons.invoke(&cport, "ReadBuffers", &[], None).unwrap(),
    );
    let ours = packets
        .iter()
        .find(|p| p.starts_with(&packet))
        .expect("the inline chunk's packet is in the trace");
    // Stamped with its machine's id (TracePacket.machine_id = 98).
    let machine = tracebox::protozero::decode::FieldIter::new(ours)
        .filter(|f| f.number == 98)
        .filter_map(|f| tracebox::protozero::decode::read_varint(f.value))
        .map(|v| v.0)
        .last();
    assert_eq!(machine, Some(1), "{ours:?}");
}

/// traced_probes behind traced_relay: told to emulate shared memory, it
/// sends its chunks inline, and its packets reach the central trace with
/// its own pid (taken by the relay from SO_PEERCRED).
#[test]
fn traced_probes_through_the_relay_records() {
    use crate::support::probes::{registered_data_sources, start_probes, wait_until};
    use std::time::Duration;
    use tracebox::protozero::decode::FieldIter;
    use tracebox::protozero::{put_bytes, put_str, put_varint, VecStream};

    let id = std::process::id();
    let dir = tempfile::tempdir().unwrap();
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    let consumer = format!("@tracebox-test-e2e-c-{id}");
    let relay_local = format!("@tracebox-test-e2e-local-{id}");
    let _traced = start_traced(&format!("@tracebox-test-e2e-p-{id},{tcp}"), &consumer);
    let _relay = Relay(
        std::process::Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("traced_relay")
            .env("PERFETTO_PRODUCER_SOCK_NAME", &relay_local)
            .env("PERFETTO_RELAY_SOCK_NAME", &tcp)
            .spawn()
            .unwrap(),
    );
    let log = dir.path().join("probes.log");
    let probes = start_probes(&relay_local, &dir.path().join("state"), &[], &log, true);
    wait_until(Duration::from_secs(20), "registration", || {
        registered_data_sources(&consumer)
            .iter()
            .any(|d| d == "linux.system_info")
    });

    let mut dsc = VecStream::new();
    put_str(&mut dsc, 1, "linux.system_info");
    let mut ds = VecStream::new();
    put_bytes(&mut ds, 1, dsc.as_bytes());
    let mut buf = VecStream::new();
    put_varint(&mut buf, 1, 1024);
    let mut tc = VecStream::new();
    put_bytes(&mut tc, 1, buf.as_bytes());
    put_bytes(&mut tc, 2, ds.as_bytes());
    put_varint(&mut tc, 43, 1); // trace_all_machines
    let mut req = VecStream::new();
    put_bytes(&mut req, 1, tc.as_bytes());
    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let enable = cons
        .start_invoke(&cport, "EnableTracing", req.as_bytes(), None)
        .unwrap();
    let from_probes = |packets: &[Vec<u8>]| {
        packets.iter().any(|p| {
            FieldIter::new(p).any(|f| {
                f.number == 79
                    && tracebox::protozero::decode::read_varint(f.value).map(|v| v.0)
                        == Some(probes.pid() as u64)
            })
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    crate::support::traced::call(&mut cons, &cport, "DisableTracing", &[]);
    cons.next_reply(enable).unwrap().unwrap();
    let packets = crate::support::traced::packets_from_replies(
        &cons.invoke(&cport, "ReadBuffers", &[], None).unwrap(),
    );
    assert!(
        from_probes(&packets),
        "no packet of traced_probes (pid {}) in {} packets; log:\n{}",
        probes.pid(),
        packets.len(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// The real Perfetto SDK producer behind traced_relay: it emulates shared
/// memory itself when told, and all its packets reach the central trace
/// stamped with machine id 1.
#[test]
fn sdk_producer_through_the_relay_records() {
    use crate::support::probes::{interop_bin, registered_data_sources, wait_until};
    use std::time::Duration;
    use tracebox::protozero::decode::{read_varint, FieldIter};
    use tracebox::protozero::{put_bytes, put_str, put_varint, VecStream};

    let Some(sdk_producer) = interop_bin("sdk-producer") else {
        return;
    };
    let id = std::process::id();
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    let consumer = format!("@tracebox-test-sdk-c-{id}");
    let relay_local = format!("@tracebox-test-sdk-local-{id}");
    let ds_name = format!("tbx.relay.{id}");
    let _traced = start_traced(&format!("@tracebox-test-sdk-p-{id},{tcp}"), &consumer);
    let _relay = Relay(
        std::process::Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("traced_relay")
            .env("PERFETTO_PRODUCER_SOCK_NAME", &relay_local)
            .env("PERFETTO_RELAY_SOCK_NAME", &tcp)
            .spawn()
            .unwrap(),
    );
    let _producer = Relay(
        std::process::Command::new(sdk_producer)
            .args([
                "--data-source",
                &ds_name,
                "--packets",
                "200",
                "--size",
                "100",
            ])
            .args(["--threads", "1", "--timeout-s", "30"])
            .env("PERFETTO_PRODUCER_SOCK_NAME", &relay_local)
            .spawn()
            .unwrap(),
    );
    wait_until(Duration::from_secs(20), "sdk registration", || {
        registered_data_sources(&consumer).contains(&ds_name)
    });

    let mut dsc = VecStream::new();
    put_str(&mut dsc, 1, &ds_name);
    let mut ds = VecStream::new();
    put_bytes(&mut ds, 1, dsc.as_bytes());
    let mut buf = VecStream::new();
    put_varint(&mut buf, 1, 4096);
    let mut tc = VecStream::new();
    put_bytes(&mut tc, 1, buf.as_bytes());
    put_bytes(&mut tc, 2, ds.as_bytes());
    put_varint(&mut tc, 43, 1); // trace_all_machines
    let mut req = VecStream::new();
    put_bytes(&mut req, 1, tc.as_bytes());
    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let enable = cons
        .start_invoke(&cport, "EnableTracing", req.as_bytes(), None)
        .unwrap();
    // The producer writes and flushes its packets as soon as it starts.
    std::thread::sleep(Duration::from_millis(1000));
    crate::support::traced::call(&mut cons, &cport, "DisableTracing", &[]);
    cons.next_reply(enable).unwrap().unwrap();
    let packets = crate::support::traced::packets_from_replies(
        &cons.invoke(&cport, "ReadBuffers", &[], None).unwrap(),
    );
    let on_machine_1 = packets
        .iter()
        .filter(|p| {
            FieldIter::new(p)
                .filter(|f| f.number == 98)
                .filter_map(|f| read_varint(f.value))
                .map(|v| v.0)
                .last()
                == Some(1)
        })
        .count();
    assert!(on_machine_1 >= 200, "{on_machine_1} packets on machine 1");
    // The SDK's emulated chunks came in id order: no gap was reported
    // (TracingServiceEvent 69, chunks_never_arrived 1006).
    let gaps = packets.iter().any(|p| {
        FieldIter::new(p)
            .filter(|f| f.number == 69)
            .any(|f| FieldIter::new(f.value).any(|g| g.number == 1006))
    });
    assert!(!gaps, "a chunk gap was reported for the SDK producer");
}

#[test]
fn identity_drops_are_in_the_trace_and_on_the_end_line() {
    use std::process::Stdio;
    let mut env = crate::support::cli::Env::new("iddrop");
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    env.producer = format!("{},{tcp}", env.producer);
    let _traced = env.start_traced();
    let cfg = env.write(
        "iddrop.pbtx",
        "buffers { size_kb: 1024 }\n\
         data_sources { config { name: \"linux.system_info\" } }\n\
         duration_ms: 120000\nunique_session_name: \"iddrop\"\n",
    );
    let out = env.path("iddrop.pftrace");
    let mut client = crate::support::cli::Killed(
        env.perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    env.wait_query("iddrop", true);

    // A frame before the identity: the connection is dropped, and counted.
    let mut early = TcpIpc::connect(&tcp, None);
    early.send(OneOfmsg::msg_bind_service(BindService {
        service_name: Some("ProducerPort".into()),
    }));
    assert!(closed_by_peer(&mut early));

    let pid = nix::unistd::Pid::from_raw(client.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(client.0.wait().unwrap().success());
    let mut err = String::new();
    client
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let line = err
        .lines()
        .find(|l| l.contains("Trace stats:"))
        .unwrap_or("");
    assert!(
        line.contains(
            "1 relay connections dropped for a missing, repeated or invalid SetPeerIdentity"
        ),
        "{err}"
    );
    // The data: TracingServiceEvent (69) field 1005 = 1.
    let trace = std::fs::read(&out).unwrap();
    let packets = crate::support::traced::packets_from_file(&trace);
    let counted = packets.iter().any(|p| {
        tracebox::protozero::decode::FieldIter::new(p)
            .filter(|f| f.number == 69)
            .any(|f| f.value == [0xe8, 0x3e, 0x01])
    });
    assert!(counted, "no relay_connections_dropped event");
}

/// A network connection that never identifies itself is dropped at the
/// identity deadline (5 s), not held forever; one that opens with an empty
/// frame, or an unparsable one, is dropped like one that opens with any
/// other frame. Each is counted as a dropped relay connection.
#[test]
fn tcp_peers_must_identify_first_and_in_time() {
    use std::time::{Duration, Instant};
    use tracebox::ipc::host::IDENTITY_DEADLINE;
    let id = std::process::id();
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    let consumer = format!("@tracebox-test-tcp-deadline-c-{id}");
    let _traced = start_traced(
        &format!("@tracebox-test-tcp-deadline-p-{id},{tcp}"),
        &consumer,
    );

    // Silent: closed once the deadline passed.
    let t0 = Instant::now();
    let mut silent = TcpIpc::connect(&tcp, None);
    assert!(closed_by_peer(&mut silent));
    let waited = t0.elapsed();
    assert!(
        waited >= IDENTITY_DEADLINE - Duration::from_millis(500),
        "closed after {waited:?}, before the deadline"
    );

    // An empty frame, then a valid identity: the empty frame already
    // broke the rule.
    let mut empty = TcpIpc::connect(&tcp, None);
    let mut bytes = vec![0u8; 4];
    bytes.extend_from_slice(&remote(11).to_frame().unwrap());
    empty.s.write_all(&bytes).unwrap();
    assert!(closed_by_peer(&mut empty));

    // Bytes that are no IPCFrame (field 1 as a 6-byte string), then the identity.
    let mut junk = TcpIpc::connect(&tcp, None);
    let mut bytes = vec![8, 0, 0, 0, 0x0a, 0x06, b'x', b'x', b'x', b'x', b'x', b'x'];
    bytes.extend_from_slice(&remote(12).to_frame().unwrap());
    junk.s.write_all(&bytes).unwrap();
    assert!(closed_by_peer(&mut junk));

    // A prompt identity still registers (and stays past the deadline).
    let mut ok = register_producer(&tcp, "prompt.producer", Some(&remote(13)));
    std::thread::sleep(IDENTITY_DEADLINE + Duration::from_secs(1));
    ok.bind("ProducerPort");
    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let names: Vec<String> = cons
        .invoke(&cport, "QueryServiceState", &[], None)
        .unwrap()
        .iter()
        .flat_map(|r| {
            let resp: QueryServiceStateResponse = decode_message(&r.payload).unwrap();
            resp.service_state.unwrap_or_default().producers
        })
        .filter_map(|p| p.name)
        .collect();
    assert!(names.contains(&"prompt.producer".to_string()), "{names:?}");
}

/// traced's end of a relay's TCP link runs keepalive (30 s idle, then
/// probes), so a link whose far end vanished without a FIN or RST is
/// closed instead of held: `ss` shows the keepalive timer on it.
#[test]
fn relay_links_run_tcp_keepalive() {
    let id = std::process::id();
    let port = free_tcp_port();
    let tcp = format!("127.0.0.1:{port}");
    let consumer = format!("@tracebox-test-tcp-keepalive-c-{id}");
    let _traced = start_traced(
        &format!("@tracebox-test-tcp-keepalive-p-{id},{tcp}"),
        &consumer,
    );
    let _link = register_producer(&tcp, "kept.producer", Some(&remote(21)));
    // The retransmit timer shows instead while a reply is in flight.
    let ss = || {
        let out = std::process::Command::new("ss")
            .args(["-tnoH", "state", "established"])
            .arg(format!("( sport = :{port} )"))
            .output()
            .expect("ss (iproute2)");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let mut text = String::new();
    for _ in 0..100 {
        text = ss();
        if text.contains("timer:(keepalive,") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        text.lines().count() == 1 && text.contains("timer:(keepalive,"),
        "{text}"
    );
}
