//! Deterministic test harness for the service core: fake clocks, heap
//! SMBs, a producer-side chunk writer per the SMB ABI, trace decoding.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use quick_protobuf::{MessageWrite, Writer};

use crate::mem::shared_mem::SharedMem;
use crate::pb::protos::mod_CommitDataRequest::ChunksToMove;
use crate::pb::protos::mod_TracePacket::{
    OneOfoptional_trusted_packet_sequence_id as Seq, OneOfoptional_trusted_uid as Uid,
};
use crate::pb::protos::{CommitDataRequest, DataSourceDescriptor, TraceConfig, TracePacket};
use crate::protozero::{put_varint, VecStream};
use crate::tracing::core::smb_abi::{ChunkHeader, PageLayout};

use super::*;
use crate::protozero::decode::decode_message;

#[derive(Default)]
pub struct EnvLog {
    pub smb_requests: Vec<(ProducerId, usize, usize)>,
    pub clock_reads: u64,
}

pub struct FakeEnv {
    pub log: Rc<RefCell<EnvLog>>,
    rng: u64,
}

impl ServiceEnv for FakeEnv {
    fn clock_snapshot(&mut self) -> Vec<(u32, u64)> {
        let mut l = self.log.borrow_mut();
        l.clock_reads += 1;
        let t = l.clock_reads * 1000;
        vec![
            (CLOCK_BOOTTIME, t),
            (CLOCK_REALTIME, 1_700_000_000_000_000_000 + t),
            (CLOCK_MONOTONIC, t),
        ]
    }
    fn system_info(&mut self) -> Option<Vec<u8>> {
        Some(vec![0x3a, 0x02, b'4', b'2']) // field 7 (some string) = "42"
    }
    fn random_u64(&mut self) -> u64 {
        self.rng = self
            .rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.rng
    }
    fn create_smb(
        &mut self,
        producer: ProducerId,
        size: usize,
        page_size: usize,
    ) -> Option<Arc<SharedMem>> {
        self.log
            .borrow_mut()
            .smb_requests
            .push((producer, size, page_size));
        SharedMem::new_heap(size).map(Arc::new)
    }
}

pub const SERVICE_UID: u32 = 9999;

pub struct H {
    pub svc: TracingService,
    pub log: Rc<RefCell<EnvLog>>,
    pub now: u64,
    /// Next chunk id per (producer, writer).
    chunk_ids: std::collections::BTreeMap<(ProducerId, u16), u32>,
}

pub fn ms(v: u64) -> u64 {
    v * 1_000_000
}

pub fn encode<M: MessageWrite>(m: &M) -> Vec<u8> {
    let mut out = Vec::new();
    m.write_message(&mut Writer::new(&mut out)).unwrap();
    out
}

/// A producer packet: `timestamp` = `marker` plus some padding bytes.
pub fn test_packet(marker: u64, pad: usize) -> Vec<u8> {
    let mut s = VecStream::new();
    put_varint(&mut s, 8, marker);
    if pad > 0 {
        crate::protozero::put_bytes(&mut s, 900, &vec![0xab; pad]);
    }
    s.into_bytes()
}

/// Fragments for one whole packet: varint size + bytes.
pub fn fragment(p: &[u8]) -> Vec<u8> {
    let mut v = [0u8; 10];
    let n = crate::protozero::encode_varint(p.len() as u64, &mut v);
    let mut out = v[..n].to_vec();
    out.extend_from_slice(p);
    out
}

pub fn basic_config(ds: &str, size_kb: u32) -> TraceConfig {
    use crate::pb::protos::mod_TraceConfig::{BufferConfig, DataSource};
    TraceConfig {
        buffers: vec![BufferConfig {
            size_kb: Some(size_kb),
            ..Default::default()
        }],
        data_sources: vec![DataSource {
            config: Some(crate::pb::protos::DataSourceConfig {
                name: Some(ds.into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

impl H {
    pub fn new() -> H {
        let log = Rc::new(RefCell::new(EnvLog::default()));
        let env = FakeEnv {
            log: Rc::clone(&log),
            rng: 1,
        };
        H {
            svc: TracingService::new(Box::new(env), SERVICE_UID),
            log,
            now: ms(1000),
            chunk_ids: Default::default(),
        }
    }

    pub fn producer(&mut self, name: &str, uid: u32, data_sources: &[&str]) -> ProducerId {
        let descriptors = data_sources.iter().map(|ds| DataSourceDescriptor {
            name: Some(ds.to_string()),
            ..Default::default()
        });
        self.producer_with(name, uid, descriptors)
    }

    /// A producer registering data sources as `descriptors` say (e.g.
    /// `will_notify_on_stop`).
    pub fn producer_with(
        &mut self,
        name: &str,
        uid: u32,
        descriptors: impl IntoIterator<Item = DataSourceDescriptor>,
    ) -> ProducerId {
        let info = ProducerInfo {
            uid,
            pid: Some(uid as i32 + 1),
            name: name.into(),
            ..Default::default()
        };
        let id = self.svc.connect_producer(info, None).unwrap();
        for d in descriptors {
            self.svc.register_data_source(self.now, id, d).unwrap();
        }
        id
    }

    pub fn enable(&mut self, consumer: ConsumerId, cfg: &TraceConfig) -> Result<SessionId, String> {
        self.svc
            .enable_tracing(self.now, consumer, &encode(cfg), false)
    }

    pub fn advance(&mut self, d: u64) {
        self.now += d;
        self.svc.on_timer(self.now);
    }

    pub fn outputs(&mut self) -> Vec<Output> {
        self.svc.take_outputs()
    }

    /// Writes one chunk with the given fragments into the producer's SMB
    /// and returns the commit entry for it.
    pub fn write_chunk(
        &mut self,
        producer: ProducerId,
        writer: u16,
        target_buffer: u32,
        frags: &[u8],
        count: u16,
        flags: u8,
    ) -> ChunksToMove {
        let smb = self
            .svc
            .producer_smb(producer)
            .expect("producer has an SMB")
            .clone();
        let cid = self.chunk_ids.entry((producer, writer)).or_insert(0);
        let chunk_id = *cid;
        *cid += 1;
        for page in 0..smb.num_pages() {
            if !smb.try_partition_page(page, PageLayout::Div1) {
                continue;
            }
            let h = ChunkHeader {
                chunk_id,
                writer_id: writer,
                packet_count: count,
                flags,
            };
            let c = smb.try_acquire_chunk_for_writing(page, 0, &h).unwrap();
            assert!(frags.len() <= c.payload_size());
            smb.mem().write(c.payload_offset(), frags);
            smb.release_chunk_as_complete(c).unwrap();
            return ChunksToMove {
                page: Some(page as u32),
                chunk: Some(0),
                target_buffer: Some(target_buffer),
                ..Default::default()
            };
        }
        panic!("SMB full");
    }

    /// Writes the packets (one chunk) and commits them.
    pub fn commit_packets(
        &mut self,
        producer: ProducerId,
        writer: u16,
        target: u32,
        packets: &[Vec<u8>],
    ) {
        let frags: Vec<u8> = packets.iter().flat_map(|p| fragment(p)).collect();
        let mv = self.write_chunk(producer, writer, target, &frags, packets.len() as u16, 0);
        let req = CommitDataRequest {
            chunks_to_move: vec![mv],
            ..Default::default()
        };
        self.svc.commit_data(self.now, producer, &req);
    }

    pub fn read(&mut self, consumer: ConsumerId) -> Vec<Vec<u8>> {
        let frames = self.svc.read_buffers(self.now, consumer).unwrap();
        let mut out = vec![Vec::new()];
        for f in frames {
            for s in f.slices {
                out.last_mut().unwrap().extend_from_slice(&s.data.unwrap());
                if s.last_slice_for_packet == Some(true) {
                    out.push(Vec::new());
                }
            }
        }
        assert!(out.pop().unwrap().is_empty());
        out
    }
}

pub fn decode_packet(b: &[u8]) -> TracePacket {
    decode_message(b).unwrap()
}

pub fn trusted_uid(p: &TracePacket) -> Option<i32> {
    match p.optional_trusted_uid {
        Uid::trusted_uid(u) => Some(u),
        _ => None,
    }
}

pub fn seq_id(p: &TracePacket) -> Option<u32> {
    match p.optional_trusted_packet_sequence_id {
        Seq::trusted_packet_sequence_id(u) => Some(u),
        _ => None,
    }
}

/// Markers (timestamps) of the producer packets (sequence id >= 2).
pub fn producer_markers(packets: &[Vec<u8>]) -> Vec<u64> {
    packets
        .iter()
        .map(|p| decode_packet(p))
        .filter(|p| seq_id(p).unwrap_or(0) >= 2)
        .map(|p| p.timestamp.unwrap_or(0))
        .collect()
}

/// The target buffer of the first data source set up on `p`.
pub fn global_buffer(outs: &[Output], p: ProducerId) -> u32 {
    cmds_for(outs, p)
        .into_iter()
        .find_map(|c| match c {
            ProducerCommand::SetupDataSource { config, .. } => {
                crate::protozero::decode::decode_message::<crate::pb::protos::DataSourceConfig>(
                    &config,
                )
                .unwrap()
                .target_buffer
            }
            _ => None,
        })
        .unwrap()
}

/// Producer commands sent to `producer` in `outs`.
pub fn cmds_for(outs: &[Output], producer: ProducerId) -> Vec<ProducerCommand> {
    outs.iter()
        .filter_map(|o| match o {
            Output::ProducerCommand { producer: p, cmd } if *p == producer => Some(cmd.clone()),
            _ => None,
        })
        .collect()
}

/// The request id of the first Flush sent to producer `p` in `outs`.
pub fn flush_request(outs: &[Output], p: ProducerId) -> Option<u64> {
    cmds_for(outs, p).into_iter().find_map(|c| match c {
        ProducerCommand::Flush { request_id, .. } => Some(request_id),
        _ => None,
    })
}
