//! Encoding ReadBuffers responses straight from packet bytes.
//!
//! [`FrameWriter`] appends each packet's pieces as `ReadBuffersResponse.Slice`
//! messages to one reused buffer and hands every full response to a
//! [`FrameSink`]. The response starts [`FRAME_HEAD_ROOM`] bytes into the
//! buffer so the transport can put its own header (the IPC frame) right in
//! front of it and send header and payload as one contiguous write: packet
//! bytes are copied exactly once, from the trace buffer to this buffer.
//!
//! Packing matches what the service always did: pieces (non-empty packet
//! slices, those over a frame cut up) go into a response while the running
//! estimate `sum(piece + 16)` stays within [`MAX_READ_FRAME`];
//! `last_slice_for_packet` is set on a packet's last piece only.

use crate::protozero::encode_varint;

use super::trace_buffer::TracePacket;

/// Largest ReadBuffersResponse payload we build (IPC frames are < 128 KiB).
pub const MAX_READ_FRAME: usize = 128 * 1024 - 64;

/// Bytes left free before each response for the transport's header.
pub const FRAME_HEAD_ROOM: usize = 32;

/// Estimated encoding overhead of one slice (tags, lengths, flag).
const SLICE_OVERHEAD: usize = 16;

/// Largest piece of a packet put in one slice.
const MAX_PIECE: usize = MAX_READ_FRAME - SLICE_OVERHEAD;

/// ReadBuffersResponse.slices = 2; Slice.data = 1, last_slice_for_packet = 2.
const TAG_SLICES: u8 = 0x12;
const TAG_DATA: u8 = 0x0a;
const TAG_LAST: u8 = 0x10;

/// Receives finished responses.
pub trait FrameSink {
    /// `buf[FRAME_HEAD_ROOM..]` is one serialized `ReadBuffersResponse`
    /// (the first `FRAME_HEAD_ROOM` bytes are free for a header);
    /// `has_more` is false on the last response of a ReadBuffers. Returns
    /// false to ask the reader to pause (e.g. the socket is full); the
    /// response itself was taken either way.
    fn frame(&mut self, buf: &mut [u8], has_more: bool) -> bool;
}

/// Builds responses; reused across passes (and across pauses: a response
/// in progress holds copied bytes only, never references into a buffer).
#[derive(Debug)]
pub struct FrameWriter {
    buf: Vec<u8>,
    /// The packing estimate of the response in progress.
    estimate: usize,
    slices: usize,
    /// The sink asked to pause since the last [`take_pause`](Self::take_pause).
    paused: bool,
}

impl Default for FrameWriter {
    fn default() -> Self {
        FrameWriter {
            buf: vec![0; FRAME_HEAD_ROOM],
            estimate: 0,
            slices: 0,
            paused: false,
        }
    }
}

impl FrameWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one packet: its fragments, then `trailer`. Empty pieces are
    /// skipped (a packet with no bytes at all adds nothing).
    pub fn push(&mut self, body: &TracePacket<'_>, trailer: &[u8], sink: &mut dyn FrameSink) {
        let mut pieces = body
            .slices()
            .chain(std::iter::once(trailer))
            .filter(|s| !s.is_empty())
            .flat_map(|s| s.chunks(MAX_PIECE))
            .peekable();
        while let Some(piece) = pieces.next() {
            let last = pieces.peek().is_none();
            self.push_piece(piece, last, sink);
        }
    }

    fn push_piece(&mut self, piece: &[u8], last: bool, sink: &mut dyn FrameSink) {
        if self.estimate + piece.len() + SLICE_OVERHEAD > MAX_READ_FRAME && self.slices > 0 {
            self.emit(true, sink);
        }
        self.estimate += piece.len() + SLICE_OVERHEAD;
        self.slices += 1;
        let mut v = [0u8; 10];
        let n = encode_varint(piece.len() as u64, &mut v);
        // Slice = data tag + length + bytes + last_slice_for_packet (2 bytes).
        let slice_len = 1 + n + piece.len() + 2;
        let mut s = [0u8; 10];
        let sn = encode_varint(slice_len as u64, &mut s);
        self.buf.reserve(1 + sn + slice_len);
        self.buf.push(TAG_SLICES);
        self.buf.extend_from_slice(&s[..sn]);
        self.buf.push(TAG_DATA);
        self.buf.extend_from_slice(&v[..n]);
        self.buf.extend_from_slice(piece);
        self.buf.extend_from_slice(&[TAG_LAST, last as u8]);
    }

    /// Emits the response in progress as the last one (`has_more` false),
    /// even if empty: a ReadBuffers always ends with one.
    pub fn finish(&mut self, sink: &mut dyn FrameSink) {
        self.emit(false, sink);
    }

    /// True (once) if the sink asked to pause since the last call.
    pub fn take_pause(&mut self) -> bool {
        std::mem::take(&mut self.paused)
    }

    /// True if the sink asked to pause (not reset).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Drops a response in progress (the ReadBuffers failed).
    pub fn reset(&mut self) {
        self.buf.truncate(FRAME_HEAD_ROOM);
        self.estimate = 0;
        self.slices = 0;
        self.paused = false;
    }

    fn emit(&mut self, has_more: bool, sink: &mut dyn FrameSink) {
        if !sink.frame(&mut self.buf, has_more) {
            self.paused = true;
        }
        self.buf.truncate(FRAME_HEAD_ROOM);
        self.estimate = 0;
        self.slices = 0;
    }
}

/// A sink that keeps every response (decoded), for in-process readers and
/// tests.
#[derive(Debug, Default)]
pub struct CollectFrames {
    pub frames: Vec<crate::pb::protos::ReadBuffersResponse>,
    pub last_has_more: bool,
}

impl FrameSink for CollectFrames {
    fn frame(&mut self, buf: &mut [u8], has_more: bool) -> bool {
        let payload = &buf[FRAME_HEAD_ROOM..];
        let r = crate::protozero::decode::decode_message(payload).expect("we encoded it");
        self.frames.push(r);
        self.last_has_more = has_more;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_ReadBuffersResponse::Slice;
    use crate::pb::protos::ReadBuffersResponse;
    use quick_protobuf::{MessageWrite, Writer};

    /// The packer the service used before: whole `Slice` messages, encoded
    /// by quick-protobuf. The new writer must produce the same bytes.
    fn reference_frames(packets: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        let mut cur = ReadBuffersResponse::default();
        let mut cur_size = 0;
        for p in packets {
            let mut pieces: Vec<Vec<u8>> = Vec::new();
            for s in p {
                pieces.extend(s.chunks(MAX_PIECE).map(<[u8]>::to_vec));
            }
            pieces.retain(|c| !c.is_empty());
            let n = pieces.len();
            for (i, piece) in pieces.into_iter().enumerate() {
                if cur_size + piece.len() + SLICE_OVERHEAD > MAX_READ_FRAME
                    && !cur.slices.is_empty()
                {
                    frames.push(std::mem::take(&mut cur));
                    cur_size = 0;
                }
                cur_size += piece.len() + SLICE_OVERHEAD;
                cur.slices.push(Slice {
                    data: Some(piece),
                    last_slice_for_packet: Some(i + 1 == n),
                });
            }
        }
        frames.push(cur);
        frames
            .iter()
            .map(|f| {
                let mut out = Vec::new();
                f.write_message(&mut Writer::new(&mut out)).unwrap();
                out
            })
            .collect()
    }

    #[derive(Default)]
    struct Raw {
        frames: Vec<(Vec<u8>, bool)>,
        pause_every: usize,
    }

    impl FrameSink for Raw {
        fn frame(&mut self, buf: &mut [u8], has_more: bool) -> bool {
            assert!(buf.len() >= FRAME_HEAD_ROOM);
            self.frames
                .push((buf[FRAME_HEAD_ROOM..].to_vec(), has_more));
            self.pause_every == 0 || !self.frames.len().is_multiple_of(self.pause_every)
        }
    }

    /// Packets given as fragment lists plus a trailer (the last element).
    fn write(packets: &[Vec<Vec<u8>>], pause_every: usize) -> Raw {
        let mut w = FrameWriter::new();
        let mut sink = Raw {
            pause_every,
            ..Default::default()
        };
        for p in packets {
            let (trailer, frags) = p.split_last().unwrap();
            let data: Vec<u8> = frags.concat();
            let mut ranges = Vec::new();
            let mut off = 0;
            for f in frags {
                ranges.push((off, f.len()));
                off += f.len();
            }
            w.push(
                &TracePacket::from_ranges(&data, &ranges),
                trailer,
                &mut sink,
            );
        }
        w.finish(&mut sink);
        sink
    }

    fn check_same(packets: &[Vec<Vec<u8>>]) {
        let got = write(packets, 0);
        let want = reference_frames(packets);
        assert_eq!(got.frames.len(), want.len());
        for (i, ((bytes, more), reference)) in got.frames.iter().zip(&want).enumerate() {
            assert_eq!(bytes, reference, "frame {i}");
            assert_eq!(*more, i + 1 < want.len());
            assert!(bytes.len() < MAX_READ_FRAME);
        }
    }

    #[test]
    fn same_bytes_as_the_message_encoder_for_small_packets() {
        let packets: Vec<Vec<Vec<u8>>> = (0..5000u32)
            .map(|i| {
                vec![
                    vec![i as u8; 100 + (i % 7) as usize],
                    vec![0x18, 1, 0x50, 2],
                ]
            })
            .collect();
        check_same(&packets);
    }

    #[test]
    fn packets_split_across_frames_and_oversized_slices() {
        let packets = vec![
            vec![vec![1u8; 10], vec![]],
            vec![vec![7u8; 300 * 1024], vec![2u8; 5], vec![9, 9]],
            vec![vec![3u8; 100_000], vec![4u8; 40_000], vec![8]],
            vec![vec![], vec![5u8; 131_000], vec![6]],
            // No bytes at all: adds nothing.
            vec![vec![], vec![]],
            vec![vec![0x55; 127 * 1024], vec![1]],
        ];
        check_same(&packets);
        // Reassembled, the packets come back whole.
        let got = write(&packets, 0);
        let mut joined = vec![Vec::new()];
        for (bytes, _) in &got.frames {
            let r: ReadBuffersResponse = crate::protozero::decode::decode_message(bytes).unwrap();
            for s in r.slices {
                joined.last_mut().unwrap().extend(s.data.unwrap());
                if s.last_slice_for_packet == Some(true) {
                    joined.push(Vec::new());
                }
            }
        }
        joined.pop();
        let want: Vec<Vec<u8>> = packets
            .iter()
            .map(|p| p.concat())
            .filter(|p| !p.is_empty())
            .collect();
        assert_eq!(joined, want);
    }

    #[test]
    fn nothing_written_still_gives_one_final_response() {
        let got = write(&[], 0);
        assert_eq!(got.frames, vec![(Vec::new(), false)]);
    }

    #[test]
    fn pausing_keeps_the_bytes_and_reports_once() {
        let packets: Vec<Vec<Vec<u8>>> = (0..3000u32)
            .map(|i| vec![vec![i as u8; 200], vec![1, 2]])
            .collect();
        let paused = write(&packets, 2);
        let plain = write(&packets, 0);
        assert_eq!(paused.frames, plain.frames);

        let mut w = FrameWriter::new();
        let mut sink = Raw {
            pause_every: 1,
            ..Default::default()
        };
        let data = vec![1u8; 70_000];
        let ranges = [(0, data.len())];
        let p = TracePacket::from_ranges(&data, &ranges);
        w.push(&p, &[], &mut sink);
        assert!(!w.take_pause());
        w.push(&p, &[], &mut sink);
        assert!(w.take_pause());
        assert!(!w.take_pause());
    }
}
