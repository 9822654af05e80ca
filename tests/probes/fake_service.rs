//! traced_probes against a scripted (partly hostile) ProducerPort built on
//! our ipc host: the handshake it sends, and what it does with bad
//! commands (setup before any SMB, unknown data source, out-of-range
//! buffer, garbage, start of a failed setup) before a good session on a
//! real memfd SMB.

use crate::support::probes as traced_probes_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tracebox::base::event_loop::EventLoop;
use tracebox::base::shm::Shm;
use tracebox::base::sock_addr::SockAddr;
use tracebox::ipc::host::{Call, Host, HostApp, Reply, ReplySink, ReplyTo, Services};
use tracebox::pb::protos::mod_GetAsyncCommandResponse::{
    Flush, OneOfcmd, SetupDataSource, SetupTracing, StartDataSource, StopDataSource,
};
use tracebox::pb::protos::{
    CommitDataRequest, DataSourceConfig, GetAsyncCommandResponse, InitializeConnectionRequest,
    NotifyDataSourceStartedRequest, NotifyDataSourceStoppedRequest, RegisterDataSourceRequest,
};
use tracebox::schema::services::PRODUCER_PORT_METHODS;
use tracebox::traced_probes::wire::{decode, encode};
use tracebox::tracing::core::chunk_reader::{Fragment, FragmentIter};
use tracebox::tracing::core::smb_abi::SmbAbi;
use traced_probes_common::*;

const SMB_SIZE: usize = 256 * 1024;

type CallLog = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

struct Script {
    log: CallLog,
    smb: Arc<Shm>,
    async_to: Option<ReplyTo>,
}

fn cmd(c: OneOfcmd) -> Vec<u8> {
    encode(&GetAsyncCommandResponse { cmd: c })
}

fn config(name: &str, buffer: u32) -> Option<DataSourceConfig> {
    Some(DataSourceConfig {
        name: Some(name.into()),
        target_buffer: Some(buffer),
        tracing_session_id: Some(1),
        ..Default::default()
    })
}

fn setup(id: u64, name: &str, buffer: u32) -> Vec<u8> {
    cmd(OneOfcmd::setup_data_source(SetupDataSource {
        new_instance_id: Some(id),
        config: config(name, buffer),
    }))
}

fn start(id: u64) -> Vec<u8> {
    cmd(OneOfcmd::start_data_source(StartDataSource {
        new_instance_id: Some(id),
        config: None,
    }))
}

impl Services for Script {
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
        let to = call.reply_to;
        self.log
            .lock()
            .unwrap()
            .push((call.method_name.to_string(), call.args.clone()));
        match call.method_name {
            "GetAsyncCommand" => self.async_to = Some(to),
            "Sync" => {
                out.reply(&to, Reply::ok(vec![]));
                let Some(a) = self.async_to else { return };
                let tracing = |kb| {
                    cmd(OneOfcmd::setup_tracing(SetupTracing {
                        shared_buffer_page_size_kb: Some(kb),
                        shm_key_windows: None,
                    }))
                };
                // Hostile or premature first.
                out.reply(&a, Reply::more(vec![0xff, 0xff, 0xff]));
                // (No fd-less SetupTracing here: one recvmsg may carry
                // several frames, and the fd waits for whichever SetupTracing
                // comes first, as in Perfetto.)
                out.reply(&a, Reply::more(setup(1, "linux.sys_stats", 1))); // no SMB yet
                out.reply(&a, Reply::more(start(1)));
                let fd = self.smb.fd().try_clone_to_owned().unwrap();
                out.reply(&a, Reply::more(tracing(4)).with_fd(fd));
                out.reply(&a, Reply::more(setup(2, "bogus.source", 1)));
                out.reply(&a, Reply::more(setup(3, "linux.system_info", 70000)));
                // A good instance.
                out.reply(&a, Reply::more(setup(4, "linux.system_info", 1)));
                out.reply(&a, Reply::more(start(4)));
                let flush = cmd(OneOfcmd::flush(Flush {
                    data_source_ids: vec![4, 99],
                    request_id: Some(7),
                    flags: None,
                }));
                out.reply(&a, Reply::more(flush));
                let stop = cmd(OneOfcmd::stop_data_source(StopDataSource {
                    instance_id: Some(4),
                }));
                out.reply(&a, Reply::more(stop));
            }
            // Everything else gets an empty ack (dropped for drop_reply).
            _ => {
                out.reply(&to, Reply::ok(vec![]));
            }
        }
    }
}

fn calls(log: &CallLog, method: &str) -> Vec<Vec<u8>> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == method)
        .map(|(_, a)| a.clone())
        .collect()
}

#[test]
fn handshake_bad_commands_and_a_good_session() {
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("p.sock");
    let sock_s = sock.to_str().unwrap().to_string();
    let log: CallLog = Arc::default();
    let smb = Arc::new(Shm::create(SMB_SIZE).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let (log2, smb2, sock2) = (log.clone(), smb.clone(), sock_s.clone());
    let host_thread = std::thread::spawn(move || {
        let mut el = EventLoop::<()>::new().unwrap();
        let mut host = Host::new();
        host.expose_service("ProducerPort", PRODUCER_PORT_METHODS);
        host.listen(&mut el.ctl(), &SockAddr::parse(&sock2).unwrap())
            .unwrap();
        tx.send(el.remote()).unwrap();
        el.run(&mut HostApp {
            host,
            services: Script {
                log: log2,
                smb: smb2,
                async_to: None,
            },
        })
        .unwrap();
    });
    let quit = rx.recv().unwrap();
    let state = tmp.path().join("state");
    let mut probes = start_probes(&sock_s, &state, &[], &tmp.path().join("probes.log"), true);
    wait_until(Duration::from_secs(20), "NotifyDataSourceStopped", || {
        !calls(&log, "NotifyDataSourceStopped").is_empty()
    });

    // Handshake.
    let init: InitializeConnectionRequest =
        decode(&calls(&log, "InitializeConnection")[0]).unwrap();
    assert_eq!(
        init.producer_name.as_deref(),
        Some("perfetto.traced_probes")
    );
    assert_eq!(init.shared_memory_size_hint_bytes, Some(2 * 1024 * 1024));
    assert_eq!(init.shared_memory_page_size_hint_bytes, Some(32 * 1024));
    assert_eq!(init.smb_scraping_mode.map(|m| m as i32), Some(2));
    let names: Vec<String> = calls(&log, "RegisterDataSource")
        .iter()
        .map(|a| {
            let r: RegisterDataSourceRequest = decode(a).unwrap();
            let d = r.data_source_descriptor.unwrap();
            assert_eq!(
                (d.will_notify_on_start, d.will_notify_on_stop),
                (Some(true), Some(true))
            );
            d.name.unwrap()
        })
        .collect();
    assert_eq!(
        names,
        [
            "linux.ftrace",
            "linux.process_stats",
            "linux.sys_stats",
            "linux.system_info",
            "linux.sysfs_power"
        ]
    );
    let order: Vec<String> = log.lock().unwrap().iter().map(|c| c.0.clone()).collect();
    assert_eq!(order[0], "InitializeConnection");
    assert_eq!(order[1], "GetAsyncCommand");

    // Only the good instance was started and stopped.
    let started: Vec<u64> = calls(&log, "NotifyDataSourceStarted")
        .iter()
        .map(|a| {
            decode::<NotifyDataSourceStartedRequest>(a)
                .unwrap()
                .data_source_id
                .unwrap()
        })
        .collect();
    assert_eq!(started, [4]);
    let stopped: Vec<u64> = calls(&log, "NotifyDataSourceStopped")
        .iter()
        .map(|a| {
            decode::<NotifyDataSourceStoppedRequest>(a)
                .unwrap()
                .data_source_id
                .unwrap()
        })
        .collect();
    assert_eq!(stopped, [4]);
    assert_eq!(calls(&log, "RegisterTraceWriter").len(), 1);

    // The flush was acked after the cpu_info packet's chunk was committed.
    let commits: Vec<CommitDataRequest> = calls(&log, "CommitData")
        .iter()
        .map(|a| decode(a).unwrap())
        .collect();
    let ack = commits
        .iter()
        .position(|c| c.flush_request_id == Some(7))
        .expect("flush 7 acked");
    let moved: Vec<_> = commits[..=ack]
        .iter()
        .flat_map(|c| c.chunks_to_move.iter())
        .collect();
    assert!(!moved.is_empty());
    assert!(moved.iter().all(|c| c.target_buffer == Some(1)));
    let abi = SmbAbi::new(smb.mem().clone(), 4096).unwrap();
    let c = moved[0];
    let (_, chunk) = abi
        .chunk_at(c.page.unwrap() as usize, c.chunk.unwrap() as usize)
        .unwrap();
    let mut payload = Vec::new();
    let header = abi.read_chunk(&chunk, &mut payload);
    let first = FragmentIter::new(&payload, header.packet_count)
        .next()
        .unwrap()
        .unwrap();
    let Fragment::Data(packet) = first else {
        panic!("dropped packet")
    };
    // timestamp (field 8, varint) and cpu_info (field 67, bytes).
    assert!(packet.windows(2).any(|w| w == [0x9a, 0x04]), "{packet:?}");
    assert!(packet.contains(&0x40));

    probes.signal(Signal::SIGTERM);
    assert_eq!(
        probes
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0)
    );
    quit.post(()).unwrap();
    host_thread.join().unwrap();
}
