//! Helpers for the traced end-to-end tests: spawn the daemon, talk raw
//! ProducerPort/ConsumerPort messages, write through the real TraceWriter.

#![allow(dead_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};

use quick_protobuf::{MessageWrite, Writer};
use tracebox::base::shm::{AttachOptions, Shm};
use tracebox::base::sock_addr::SockAddr;
use tracebox::ipc::client::{BlockingClient, BoundService};
use tracebox::pb::protos::mod_CommitDataRequest::mod_ChunkToPatch::Patch as PbPatch;
use tracebox::pb::protos::mod_CommitDataRequest::{ChunkToPatch as PbChunkToPatch, ChunksToMove};
use tracebox::pb::protos::mod_GetAsyncCommandResponse::OneOfcmd;
use tracebox::pb::protos::*;
use tracebox::protozero::decode::decode_message;
use tracebox::protozero::{put_bytes, put_str, put_varint, Stream, VecStream};
use tracebox::tracing::core::arbiter::{
    Arbiter, ArbiterConfig, BufferExhaustedPolicy, CommitBatch, ProducerTransport,
};
use tracebox::tracing::core::smb_abi::SmbAbi;
use tracebox::tracing::core::trace_writer::TraceWriter;

pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `tracebox traced` and waits for its "1" on TRACED_NOTIFY_FD.
pub fn start_traced(producer_sock: &str, consumer_sock: &str) -> Daemon {
    start_traced_with(producer_sock, consumer_sock, &[])
}

/// Starts `tracebox traced ARGS` and waits for its "1" on TRACED_NOTIFY_FD.
pub fn start_traced_with(producer_sock: &str, consumer_sock: &str, args: &[&str]) -> Daemon {
    let (rd, wr) = nix::unistd::pipe().unwrap();
    // The write end must survive exec in the child.
    let no_cloexec = nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty());
    nix::fcntl::fcntl(wr.as_raw_fd(), no_cloexec).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced")
        .args(args)
        .env("PERFETTO_PRODUCER_SOCK_NAME", producer_sock)
        .env("PERFETTO_CONSUMER_SOCK_NAME", consumer_sock)
        .env("TRACED_NOTIFY_FD", wr.as_raw_fd().to_string())
        .spawn()
        .unwrap();
    drop(wr);
    let mut f = std::fs::File::from(rd);
    let mut b = [0u8; 1];
    std::io::Read::read_exact(&mut f, &mut b).expect("traced did not signal readiness");
    assert_eq!(&b, b"1");
    Daemon(child)
}

pub fn encode<M: MessageWrite>(m: &M) -> Vec<u8> {
    let mut out = Vec::new();
    m.write_message(&mut Writer::new(&mut out)).unwrap();
    out
}

pub fn connect(sock: &str, service: &str) -> (BlockingClient, BoundService) {
    let mut c = BlockingClient::connect(&SockAddr::parse(sock).unwrap()).unwrap();
    c.set_timeout(Some(std::time::Duration::from_secs(20)));
    let s = c.bind_service(service).unwrap();
    (c, s)
}

pub fn call(c: &mut BlockingClient, s: &BoundService, method: &str, args: &[u8]) -> Vec<u8> {
    let replies = c.invoke(s, method, args, None).unwrap();
    let last = replies.into_iter().last().expect("a reply");
    assert!(last.success, "{method} failed");
    last.payload
}

/// Collects the arbiter's commit batches; the test sends them over IPC.
#[derive(Default)]
pub struct Collect(pub Mutex<Vec<CommitBatch>>);

impl ProducerTransport for Collect {
    fn commit_data(&self, batch: CommitBatch) {
        self.0.lock().unwrap().push(batch);
    }
    fn register_trace_writer(&self, _: u16, _: u16) {}
    fn unregister_trace_writer(&self, _: u16) {}
}

pub fn to_request(b: &CommitBatch) -> CommitDataRequest {
    CommitDataRequest {
        chunks_to_move: b
            .chunks_to_move
            .iter()
            .map(|c| ChunksToMove {
                page: Some(c.page),
                chunk: Some(c.chunk),
                target_buffer: Some(c.target_buffer as u32),
                ..Default::default()
            })
            .collect(),
        chunks_to_patch: b
            .chunks_to_patch
            .iter()
            .map(|p| PbChunkToPatch {
                target_buffer: Some(p.target_buffer as u32),
                writer_id: Some(p.writer_id as u32),
                chunk_id: Some(p.chunk_id),
                patches: p
                    .patches
                    .iter()
                    .map(|x| PbPatch {
                        offset: Some(x.offset),
                        data: Some(x.data.to_vec()),
                    })
                    .collect(),
                has_more_patches: Some(p.has_more_patches),
            })
            .collect(),
        flush_request_id: b.flush_request_id,
    }
}

pub fn next_cmd(c: &mut BlockingClient, stream: u64) -> (OneOfcmd, Option<OwnedFd>) {
    let r = c.next_reply(stream).unwrap().expect("async command");
    assert!(r.success && r.has_more);
    let cmd: GetAsyncCommandResponse = decode_message(&r.payload).unwrap();
    (cmd.cmd, r.fd)
}

/// A TraceConfig with one buffer and one data source whose config carries
/// a field this build does not know (7777) and a raw ftrace_config.
pub fn trace_config() -> Vec<u8> {
    trace_config_with(4096, &[])
}

/// Like [`trace_config`] with another buffer size and extra raw
/// TraceConfig fields appended.
pub fn trace_config_with(size_kb: u64, extra: &[u8]) -> Vec<u8> {
    let mut dsc = VecStream::new();
    put_str(&mut dsc, 1, "test.ds");
    put_bytes(
        &mut dsc,
        100,
        &[
            0x0a, 0x0c, b's', b'c', b'h', b'e', b'd', b'_', b's', b'w', b'i', b't', b'c', b'h',
        ],
    );
    put_varint(&mut dsc, 7777, 42);
    let mut ds = VecStream::new();
    put_bytes(&mut ds, 1, dsc.as_bytes());
    let mut buf = VecStream::new();
    put_varint(&mut buf, 1, size_kb);
    let mut tc = VecStream::new();
    put_bytes(&mut tc, 1, buf.as_bytes());
    put_bytes(&mut tc, 2, ds.as_bytes());
    let mut v = tc.into_bytes();
    v.extend_from_slice(extra);
    v
}

/// Producer packet `i`: timestamp, a string, and if `big` a payload large
/// enough to span chunks (exercising fragments and patches).
pub fn write_packet(w: &mut TraceWriter, i: u64, big: bool) -> Vec<u8> {
    let mut expected = VecStream::new();
    let mut p = w.new_packet();
    for s in [&mut expected as &mut dyn Stream, &mut p as &mut dyn Stream] {
        put_varint(s, 8, 1000 + i);
        let n = tracebox::protozero::begin_nested(s, 900);
        put_str(s, 1, &format!("packet {i}"));
        if big {
            put_bytes(s, 2, &vec![(i % 251) as u8; 9000]);
        }
        tracebox::protozero::end_nested(s, n);
    }
    drop(p);
    expected.into_bytes()
}

/// Validates the trace with PyPI perfetto's descriptors ($TRACEBOX_PYTHON
/// or .venv; a missing venv fails the test, see scripts/setup-python.sh).
pub fn check_with_python(packets: &[Vec<u8>], producer_packets: usize) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let py = super::probes::python().expect("no Python venv: run scripts/setup-python.sh");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.pftrace");
    let mut file = Vec::new();
    for p in packets {
        file.push(0x0a);
        let mut v = [0u8; 10];
        let n = tracebox::protozero::encode_varint(p.len() as u64, &mut v);
        file.extend_from_slice(&v[..n]);
        file.extend_from_slice(p);
    }
    std::fs::write(&path, file).unwrap();
    let out = Command::new(py)
        .arg(root.join("tests/py/check_trace.py"))
        .arg(&path)
        .arg(producer_packets.to_string())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "check_trace.py failed:\n{text}");
    eprintln!("{text}");
}

/// Splits ReadBuffers replies into packets.
pub fn packets_from_replies(replies: &[tracebox::ipc::client::ClientReply]) -> Vec<Vec<u8>> {
    let mut packets = vec![Vec::new()];
    for r in replies {
        assert!(r.success);
        let rb: ReadBuffersResponse = decode_message(&r.payload).unwrap();
        for s in rb.slices {
            packets
                .last_mut()
                .unwrap()
                .extend_from_slice(&s.data.unwrap_or_default());
            if s.last_slice_for_packet == Some(true) {
                packets.push(Vec::new());
            }
        }
    }
    assert!(packets.pop().unwrap().is_empty());
    packets
}

/// Splits a `Trace` file into packets.
pub fn packets_from_file(mut b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        assert_eq!(b[0], 0x0a, "Trace.packet tag");
        let (len, n) = tracebox::protozero::decode::read_varint(&b[1..]).unwrap();
        let start = 1 + n;
        out.push(b[start..start + len as usize].to_vec());
        b = &b[start + len as usize..];
    }
    out
}

/// Producer packets (sequence id >= 2) with the trusted trailer removed,
/// after checking the trailer's uid.
pub fn producer_payloads(packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
    use tracebox::protozero::decode::{read_varint, FieldIter};
    let mut got = Vec::new();
    for p in packets {
        let fields: Vec<_> = FieldIter::new(p).collect();
        let seq = fields
            .iter()
            .rfind(|f| f.number == 10)
            .map(|f| read_varint(f.value).unwrap().0);
        if seq.unwrap_or(0) < 2 {
            continue;
        }
        let uid = fields.iter().rfind(|f| f.number == 3).expect("trusted_uid");
        assert_eq!(
            read_varint(uid.value).unwrap().0,
            nix::unistd::geteuid().as_raw() as u64
        );
        let trailer_start = fields.iter().position(|f| f.number == 3).unwrap();
        let body_len: usize = fields[..trailer_start].iter().map(|f| f.whole.len()).sum();
        got.push(p[..body_len].to_vec());
    }
    got
}

/// A producer connected over the ProducerPort with one data source.
pub struct TestProducer {
    pub client: BlockingClient,
    pub port: BoundService,
    pub stream: u64,
    pub shm: Option<Shm>,
    pub arbiter: Option<Arc<Arbiter>>,
    pub transport: Arc<Collect>,
    pub writer: Option<TraceWriter>,
    pub instance: u64,
}

impl TestProducer {
    pub fn connect(sock: &str, name: &str, data_source: &str, smb_kb: u32) -> TestProducer {
        let desc = DataSourceDescriptor {
            name: Some(data_source.into()),
            ..Default::default()
        };
        Self::connect_with(sock, name, desc, smb_kb)
    }

    /// [`Self::connect`] registering `desc`.
    pub fn connect_with(
        sock: &str,
        name: &str,
        desc: DataSourceDescriptor,
        smb_kb: u32,
    ) -> TestProducer {
        let (mut client, port) = connect(sock, "ProducerPort");
        let init = InitializeConnectionRequest {
            producer_name: Some(name.into()),
            shared_memory_size_hint_bytes: Some(smb_kb * 1024),
            shared_memory_page_size_hint_bytes: Some(4096),
            ..Default::default()
        };
        let r = call(&mut client, &port, "InitializeConnection", &encode(&init));
        let resp: InitializeConnectionResponse = decode_message(&r).unwrap();
        assert_eq!(resp.direct_smb_patching_supported, Some(true));
        let stream = client
            .start_invoke(&port, "GetAsyncCommand", &[], None)
            .unwrap();
        let reg = RegisterDataSourceRequest {
            data_source_descriptor: Some(desc),
        };
        call(&mut client, &port, "RegisterDataSource", &encode(&reg));
        call(&mut client, &port, "Sync", &[]);
        TestProducer {
            client,
            port,
            stream,
            shm: None,
            arbiter: None,
            transport: Arc::new(Collect::default()),
            writer: None,
            instance: 0,
        }
    }

    /// Handles SetupTracing / SetupDataSource / StartDataSource and creates
    /// a TraceWriter for the target buffer. Returns the DataSourceConfig.
    pub fn start(&mut self, smb_kb: u32) -> DataSourceConfig {
        let (cmd, fd) = next_cmd(&mut self.client, self.stream);
        let OneOfcmd::setup_tracing(st) = cmd else {
            panic!("expected SetupTracing, got {cmd:?}")
        };
        let page_size = st.shared_buffer_page_size_kb.unwrap() as usize * 1024;
        let opts = AttachOptions {
            require_seals: true,
            expected_size: Some(smb_kb as usize * 1024),
        };
        let shm = Shm::attach(fd.expect("SMB fd"), opts).unwrap();
        let (cmd, _) = next_cmd(&mut self.client, self.stream);
        let OneOfcmd::setup_data_source(sds) = cmd else {
            panic!("expected SetupDataSource, got {cmd:?}")
        };
        self.instance = sds.new_instance_id.unwrap();
        let cfg = sds.config.unwrap();
        let (cmd, _) = next_cmd(&mut self.client, self.stream);
        assert!(
            matches!(cmd, OneOfcmd::start_data_source(ref s) if s.new_instance_id == Some(self.instance))
        );
        let target = cfg.target_buffer.unwrap() as u16;
        let abi = SmbAbi::new(Arc::clone(shm.mem()), page_size).unwrap();
        let arbiter = Arbiter::new(abi, ArbiterConfig::default(), self.transport.clone());
        arbiter.set_direct_smb_patching(true);
        let mut w = arbiter
            .create_trace_writer(target, BufferExhaustedPolicy::Stall)
            .unwrap();
        w.set_emit_sequence_markers(false);
        let wr = RegisterTraceWriterRequest {
            trace_writer_id: Some(w.writer_id() as u32),
            target_buffer: Some(target as u32),
        };
        call(
            &mut self.client,
            &self.port,
            "RegisterTraceWriter",
            &encode(&wr),
        );
        self.shm = Some(shm);
        self.arbiter = Some(arbiter);
        self.writer = Some(w);
        cfg
    }

    /// Sends every commit batch the arbiter produced.
    pub fn commit_pending(&mut self) {
        for b in std::mem::take(&mut *self.transport.0.lock().unwrap()) {
            call(
                &mut self.client,
                &self.port,
                "CommitData",
                &encode(&to_request(&b)),
            );
        }
    }

    /// Writes packets `0..n` (every `big_every`-th one large), committing
    /// every 10; returns their bytes.
    pub fn write(&mut self, n: u64, big_every: u64) -> Vec<Vec<u8>> {
        let mut expected = Vec::new();
        for i in 0..n {
            let big = i % big_every == big_every / 2;
            expected.push(write_packet(self.writer.as_mut().unwrap(), i, big));
            if i % 10 == 9 {
                self.commit_pending();
            }
        }
        self.writer.as_mut().unwrap().flush();
        self.commit_pending();
        expected
    }

    /// Answers flushes until StopDataSource arrives.
    pub fn serve_until_stop(&mut self) {
        loop {
            let (cmd, _) = next_cmd(&mut self.client, self.stream);
            match cmd {
                OneOfcmd::flush(f) => {
                    self.writer.as_mut().unwrap().flush();
                    self.commit_pending();
                    let req = CommitDataRequest {
                        flush_request_id: f.request_id,
                        ..Default::default()
                    };
                    call(&mut self.client, &self.port, "CommitData", &encode(&req));
                }
                OneOfcmd::stop_data_source(s) => {
                    assert_eq!(s.instance_id, Some(self.instance));
                    return;
                }
                other => panic!("unexpected command {other:?}"),
            }
        }
    }
}
