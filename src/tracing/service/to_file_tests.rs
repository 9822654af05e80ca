use super::*;

fn file_sink(max: u64) -> ToFile {
    ToFile {
        data: Vec::new(),
        written: 0,
        max,
        crossed: false,
        divert: None,
        lead: Vec::new(),
        gather: None,
    }
}

#[test]
fn file_packets_are_trace_fields_up_to_the_limit() {
    let data = [1u8, 2, 9, 3];
    let ranges = [(0, 2), (3, 1)];
    let p = TracePacket::from_ranges(&data, &ranges);
    let mut f = file_sink(0);
    assert!(f.packet(&p, &[7]));
    assert_eq!(f.data, [0x0a, 4, 1, 2, 3, 7]);
    assert_eq!(f.written, 6);

    // 6 bytes per packet: the third crosses 15 and ends the file.
    let mut f = file_sink(15);
    for _ in 0..4 {
        assert!(f.packet(&p, &[7]));
    }
    assert!(f.crossed);
    assert_eq!((f.written, f.data.len()), (12, 12));
}

use super::super::trace_buffer::test_util::{commit, ring, RefWriter, Rng};
use super::super::trace_buffer::TraceBuffer;

/// A [`FileOutput`] that keeps what it was given, part by part.
#[derive(Default)]
struct Recorder {
    bytes: Vec<u8>,
    parts: Vec<usize>,
    fail: bool,
}

impl FileOutput for Recorder {
    fn has_file(&self, _: SessionId) -> bool {
        true
    }
    fn append(&mut self, _: SessionId, parts: &[&[u8]]) -> Result<(), String> {
        if self.fail {
            return Err("Writing the trace file failed: EIO".into());
        }
        parts.iter().for_each(|p| self.bytes.extend_from_slice(p));
        self.parts.extend(parts.iter().map(|p| p.len()));
        Ok(())
    }
}

/// Two writers' packets of 1..3000 bytes in 1 KiB chunks: most span
/// chunks, some are smaller than [`COPY_BELOW`].
fn filled_buffer(seed: u64) -> TraceBuffer {
    let mut rng = Rng::new(seed);
    let mut buf = ring(1 << 20);
    for writer in 1..=2u16 {
        let mut w = RefWriter::new(1008, 1);
        for i in 0..60u32 {
            let n = 1 + rng.below(if i % 3 == 0 { 200 } else { 3000 }) as usize;
            let mut p = rng.bytes(n);
            p[0] = i as u8;
            w.write_packet(&p);
        }
        for c in w.finish() {
            commit(&mut buf, 1, writer, &c);
        }
    }
    buf
}

/// One pass of `buf` into `sink` as the service reads it: held reads when
/// the sink gathers, the buffer handed over at the end.
fn pass(buf: &mut TraceBuffer, sink: &mut ToFile, files: &mut Recorder) {
    sink.set_buffer(Some(0));
    buf.begin_read();
    let held = sink.holds_buffer_bytes();
    loop {
        let next = if held {
            buf.read_next_trace_packet_held()
        } else {
            buf.read_next_trace_packet()
        };
        let Some((p, _)) = next else { break };
        if !sink.buffer_packet(&p, &[0x42, 0x01, 0x07]) {
            break;
        }
    }
    if held {
        sink.end_buffer(buf.bytes(), Some(files));
        buf.end_read();
    }
    sink.set_buffer(None);
}

fn gathering_sink(max: u64) -> ToFile {
    ToFile {
        gather: Some(Gather::new(7)),
        ..file_sink(max)
    }
}

#[test]
fn gathered_packets_are_the_bytes_a_copy_writes() {
    for seed in 1..6 {
        let mut copy = file_sink(0);
        pass(
            &mut filled_buffer(seed),
            &mut copy,
            &mut Recorder::default(),
        );
        let mut files = Recorder::default();
        let mut gather = gathering_sink(0);
        pass(&mut filled_buffer(seed), &mut gather, &mut files);
        assert!(gather.data.is_empty(), "the gathered pass wrote its copies");
        assert_eq!(files.bytes, copy.data, "seed {seed}");
        assert_eq!(gather.written, copy.written);
        // Packets split across chunks: one part per fragment of 256 B or
        // more, the framing and small fragments copied in between.
        let big = files.parts.iter().filter(|&&n| n >= COPY_BELOW).count();
        assert!(big > 120, "{big} parts from the buffer");
        assert!(files.parts.len() < 3 * big, "{} parts", files.parts.len());
    }
}

#[test]
fn service_packets_around_buffer_packets_keep_their_order() {
    let service = [9u8; 300];
    let ranges = [(0, service.len())];
    let head = TracePacket::from_ranges(&service, &ranges);
    let (mut copy, mut gather) = (file_sink(0), gathering_sink(0));
    let mut files = Recorder::default();
    for (sink, files) in [
        (&mut copy, &mut Recorder::default()),
        (&mut gather, &mut files),
    ] {
        assert!(sink.packet(&head, &[]));
        pass(&mut filled_buffer(3), sink, files);
        assert!(sink.packet(&head, &[1]));
        sink.write_gathered(&[], Some(files));
    }
    assert_eq!(files.bytes, copy.data);
    assert!(files.bytes.starts_with(&[0x0a, 0xac, 0x02, 9]));
}

#[test]
fn a_gathered_file_stops_at_its_size_limit_as_a_copied_one() {
    let (mut copy, mut gather) = (file_sink(20_000), gathering_sink(20_000));
    let mut files = Recorder::default();
    pass(&mut filled_buffer(4), &mut copy, &mut Recorder::default());
    pass(&mut filled_buffer(4), &mut gather, &mut files);
    assert!(copy.crossed && gather.crossed);
    assert_eq!(files.bytes, copy.data);
    assert!(files.bytes.len() <= 20_000);
}

#[test]
fn a_failed_gathered_write_ends_the_pass_with_its_error() {
    let mut gather = gathering_sink(0);
    let mut files = Recorder {
        fail: true,
        ..Default::default()
    };
    let mut buf = filled_buffer(5);
    pass(&mut buf, &mut gather, &mut files);
    let err = gather.gather.as_ref().unwrap().error.clone();
    assert_eq!(err.as_deref(), Some("Writing the trace file failed: EIO"));
    // Nothing more is taken: the next buffer's first packet ends the pass.
    let mut buf = filled_buffer(6);
    buf.begin_read();
    let (p, _) = buf.read_next_trace_packet_held().expect("a packet");
    assert!(!gather.buffer_packet(&p, &[]));
    files.fail = false;
    gather.write_gathered(buf.bytes(), Some(&mut files));
    assert!(files.bytes.is_empty());
}
