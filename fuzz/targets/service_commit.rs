//! A hostile producer against the service core: arbitrary SMB contents and
//! CommitData requests (moves, patches, flush acks), then a full read; plus
//! the raw config walker and the name matcher on the same bytes.

use std::sync::Arc;

use tracebox::mem::shared_mem::SharedMem;
use tracebox::pb::protos::{CommitDataRequest, DataSourceDescriptor};
use tracebox::protozero::decode::decode_message;
use tracebox::tracing::service::ds_config_bytes::*;
use tracebox::tracing::service::name_matcher::NameMatcher;
use tracebox::tracing::service::*;

struct Env;
impl ServiceEnv for Env {
    fn clock_snapshot(&mut self) -> Vec<(u32, u64)> {
        vec![(CLOCK_BOOTTIME, 1)]
    }
    fn system_info(&mut self) -> Option<Vec<u8>> {
        None
    }
    fn random_u64(&mut self) -> u64 {
        4
    }
    fn create_smb(&mut self, _: ProducerId, size: usize, _: usize) -> Option<Arc<SharedMem>> {
        SharedMem::new_heap(size).map(Arc::new)
    }
}

// TraceConfig { buffers { size_kb: 64 } data_sources { config { name: "ds" } } }
const CONFIG: &[u8] = &[
    0x0a, 0x02, 0x08, 0x40, 0x12, 0x06, 0x0a, 0x04, 0x0a, 0x02, b'd', b's',
];

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let mut svc = TracingService::new(Box::new(Env), 0);
    let info = ProducerInfo {
        name: "p".into(),
        shm_size_hint_bytes: 16384,
        ..Default::default()
    };
    let p = svc.connect_producer(info, None).unwrap();
    let desc = DataSourceDescriptor {
        name: Some("ds".into()),
        ..Default::default()
    };
    svc.register_data_source(0, p, desc).unwrap();
    let c = svc.connect_consumer(0);
    svc.enable_tracing(0, c, CONFIG, false).unwrap();
    let (smb_bytes, mut rest) = data.split_at(data.len().min(16384));
    svc.producer_smb(p).unwrap().mem().write(0, smb_bytes);
    while let Some((&n, tail)) = rest.split_first() {
        let (msg, tail) = tail.split_at(tail.len().min(n as usize * 4));
        if let Ok(req) = decode_message::<CommitDataRequest>(msg) {
            svc.commit_data(1, p, &req);
        }
        rest = tail;
    }
    svc.disable_tracing(2, c).unwrap();
    let _ = svc.read_buffers(3, c).unwrap();
    let _ = raw_data_source_configs(data);
    let _ = rewrite_data_source_config(
        data,
        &OwnedDsFields {
            target_buffer: 1,
            trace_duration_ms: 0,
            stop_timeout_ms: 0,
            enable_extra_guardrails: false,
            session_initiator: 0,
            tracing_session_id: 1,
            prefer_suspend_clock_for_duration: false,
        },
    );
    let text = String::from_utf8_lossy(&data[..data.len().min(64)]);
    if let Some(m) = NameMatcher::new(&text) {
        let _ = m.full_match(&text);
    }
}
