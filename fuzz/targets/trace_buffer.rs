//! A hostile producer driving one TraceBuffer: each op is
//! `[kind, producer, writer, chunk_id, num_fragments, flags, len]` + `len`
//! payload bytes; reads also run the packet validator.

use tracebox::tracing::service::packet_validator::validate_packet;
use tracebox::tracing::service::trace_buffer::{
    ClientIdentity, OverwritePolicy, Patch, TraceBuffer,
};

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let policy = if data.first().is_some_and(|b| b & 1 == 1) {
        OverwritePolicy::Discard
    } else {
        OverwritePolicy::Overwrite
    };
    let mut buf = TraceBuffer::new(4096, policy).unwrap();
    let mut ops = data.get(1..).unwrap_or_default();
    while let [kind, p, w, id, nf, flags, len, rest @ ..] = ops {
        let (payload, tail) = rest.split_at((*len as usize).min(rest.len()));
        ops = tail;
        let (p, w, id) = (
            u16::from(p & 3),
            u16::from(w & 3),
            u32::from(*id).wrapping_sub(2),
        );
        match kind % 4 {
            0 | 1 => buf.copy_chunk_untrusted(
                p,
                ClientIdentity::default(),
                w,
                id,
                u16::from(*nf),
                *flags,
                kind & 4 == 0,
                payload,
            ),
            2 => {
                let patch = Patch {
                    offset_untrusted: u32::from(*nf),
                    data: [*flags, *len, 0xff, 0x7f],
                };
                buf.try_patch_chunk_contents(p, w, id, &[patch], kind & 4 != 0);
            }
            _ => {
                buf.begin_read();
                while let Some((pkt, _)) = buf.read_next_trace_packet() {
                    let _ = validate_packet(pkt.slices());
                }
            }
        }
    }
    buf.begin_read();
    while buf.read_next_trace_packet().is_some() {}
}
