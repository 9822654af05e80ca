//! IPC framing: `[u32 LE payload length][serialized IPCFrame]`.
//!
//! A frame, header included, may be at most [`IPC_BUFFER_SIZE`] bytes
//! (Perfetto's `kIPCBufferSize`). The decoder accepts arbitrary chunks of
//! a byte stream and yields whole frames:
//!
//! * a zero-length frame is skipped;
//! * a frame whose payload does not parse is discarded and counted, and the
//!   stream goes on (the length prefix still tells where the next starts);
//! * a header announcing more than the limit is [`FrameTooLarge`]: the
//!   stream cannot be resynchronised, so the caller drops the connection.
//!
//! Pure code: no I/O.

use quick_protobuf::{BytesReader, MessageRead, MessageWrite, Writer};

use crate::pb::protos::IPCFrame;

/// Largest frame including its 4-byte header.
pub const IPC_BUFFER_SIZE: usize = 128 * 1024;
/// Receive buffer capacity a connection keeps between frames.
const IDLE_BUFFER_KEPT: usize = 4096;
/// Size of the length prefix.
pub const HEADER_SIZE: usize = 4;
/// Largest serialized `IPCFrame`.
pub const MAX_PAYLOAD: usize = IPC_BUFFER_SIZE - HEADER_SIZE;

/// A frame header announced more bytes than [`IPC_BUFFER_SIZE`] allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameTooLarge {
    /// The announced payload length.
    pub len_untrusted: u64,
}

impl std::fmt::Display for FrameTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IPC frame too large: {} + {HEADER_SIZE} header bytes > {IPC_BUFFER_SIZE}",
            self.len_untrusted
        )
    }
}

impl std::error::Error for FrameTooLarge {}

/// Serializes `frame` with its length prefix. Fails if the result would
/// exceed [`IPC_BUFFER_SIZE`] (the peer would drop us).
pub fn encode_frame(frame: &IPCFrame) -> Result<Vec<u8>, FrameTooLarge> {
    let size = frame.get_size();
    if size > MAX_PAYLOAD {
        return Err(FrameTooLarge {
            len_untrusted: size as u64,
        });
    }
    let mut out = Vec::with_capacity(HEADER_SIZE + size);
    out.extend_from_slice(&(size as u32).to_le_bytes());
    let mut w = Writer::new(&mut out);
    // Writing into a Vec cannot fail.
    frame.write_message(&mut w).expect("serializing into a Vec");
    debug_assert_eq!(out.len(), HEADER_SIZE + size);
    Ok(out)
}

/// Most bytes [`put_reply_header`] writes in front of a payload.
pub const REPLY_HEADER_MAX: usize = HEADER_SIZE + 11 + 4 + 2 + 2 + 4;

/// Frames a successful `InvokeMethodReply` in place: `buf[payload_start..]`
/// holds the serialized reply message; the length prefix, `IPCFrame` and
/// `InvokeMethodReply` header go into the bytes just before it (at least
/// [`REPLY_HEADER_MAX`] of them must be free). Returns where the frame
/// starts: `buf[start..]` is byte for byte what [`encode_frame`] makes of
/// `IPCFrame { request_id, msg_invoke_method_reply { success: true,
/// has_more, reply_proto } }`, without copying the payload.
pub fn put_reply_header(
    buf: &mut [u8],
    payload_start: usize,
    request_id: u64,
    has_more: bool,
) -> Result<usize, FrameTooLarge> {
    use crate::protozero::encode_varint;
    assert!(payload_start >= REPLY_HEADER_MAX && payload_start <= buf.len());
    let payload = buf.len() - payload_start;
    let vlen = |v: u64| encode_varint(v, &mut [0u8; 10]);
    // success (2 bytes) + has_more (2) + reply_proto tag, length, bytes.
    let reply = 4 + 1 + vlen(payload as u64) + payload;
    let frame = 1 + vlen(request_id) + 1 + vlen(reply as u64) + reply;
    if frame > MAX_PAYLOAD {
        return Err(FrameTooLarge {
            len_untrusted: frame as u64,
        });
    }
    let mut h = [0u8; REPLY_HEADER_MAX];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        h[n..n + bytes.len()].copy_from_slice(bytes);
        n += bytes.len();
    };
    let varint = |v: u64| {
        let mut tmp = [0u8; 10];
        let len = encode_varint(v, &mut tmp);
        (tmp, len)
    };
    let (rid, rid_len) = varint(request_id);
    let (rlen, rlen_len) = varint(reply as u64);
    let (plen, plen_len) = varint(payload as u64);
    put(&(frame as u32).to_le_bytes());
    put(&[0x10]); // request_id = 2
    put(&rid[..rid_len]);
    put(&[0x32]); // msg_invoke_method_reply = 6
    put(&rlen[..rlen_len]);
    put(&[0x08, 1, 0x10, has_more as u8, 0x1a]); // success, has_more, reply_proto
    put(&plen[..plen_len]);
    let start = payload_start - n;
    buf[start..payload_start].copy_from_slice(&h[..n]);
    Ok(start)
}

/// Bytes an `InvokeMethod` frame takes around `args_len` bytes of
/// arguments (length prefix, `IPCFrame` and `InvokeMethod` headers).
pub fn invoke_overhead(request_id: u64, service_id: u32, method_id: u32, args_len: usize) -> usize {
    use crate::protozero::varint_len;
    let inv = invoke_body_len(service_id, method_id, args_len);
    let frame = 1 + varint_len(request_id) + 1 + varint_len(inv as u64) + inv;
    HEADER_SIZE + frame - args_len
}

fn invoke_body_len(service_id: u32, method_id: u32, args_len: usize) -> usize {
    use crate::protozero::varint_len;
    // service_id, method_id, args_proto, drop_reply (always sent here).
    1 + varint_len(service_id.into())
        + 1
        + varint_len(method_id.into())
        + 1
        + varint_len(args_len as u64)
        + args_len
        + 2
}

/// Appends the head of an `InvokeMethod` frame with `drop_reply` set whose
/// `args_len` bytes of arguments the caller appends next: byte for byte
/// what [`encode_frame`] makes of the same `IPCFrame` (fields in another
/// order), without building the arguments apart first.
pub fn put_invoke_header(
    out: &mut Vec<u8>,
    request_id: u64,
    service_id: u32,
    method_id: u32,
    args_len: usize,
) -> Result<(), FrameTooLarge> {
    let inv = invoke_body_len(service_id, method_id, args_len);
    let frame = invoke_overhead(request_id, service_id, method_id, args_len) + args_len;
    if frame > IPC_BUFFER_SIZE {
        return Err(FrameTooLarge {
            len_untrusted: (frame - HEADER_SIZE) as u64,
        });
    }
    out.extend_from_slice(&((frame - HEADER_SIZE) as u32).to_le_bytes());
    out.push(0x10); // request_id = 2
    push_varint(out, request_id);
    out.push(0x2a); // msg_invoke_method = 5
    push_varint(out, inv as u64);
    out.push(0x08); // service_id = 1
    push_varint(out, service_id.into());
    out.push(0x10); // method_id = 2
    push_varint(out, method_id.into());
    out.extend_from_slice(&[0x20, 1]); // drop_reply = 4
    out.push(0x1a); // args_proto = 3
    push_varint(out, args_len as u64);
    Ok(())
}

/// Appends `v` as a varint.
pub fn push_varint(out: &mut Vec<u8>, v: u64) {
    let mut tmp = [0u8; 10];
    let n = crate::protozero::encode_varint(v, &mut tmp);
    out.extend_from_slice(&tmp[..n]);
}

/// Parses one payload (no length prefix). The bytes are first checked
/// with [`wire_check`](crate::schema::wire_check) (quick-protobuf trusts nested
/// lengths).
pub fn decode_payload(payload: &[u8]) -> quick_protobuf::Result<IPCFrame> {
    crate::schema::wire_check::check_message(payload, &crate::schema::wire_check::IPC_FRAME)
        .map_err(|e| quick_protobuf::Error::Message(e.to_string()))?;
    let mut r = BytesReader::from_bytes(payload);
    IPCFrame::from_reader(&mut r, payload)
}

/// Incremental decoder; see the module docs for the rules.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed by returned or skipped frames.
    start: usize,
    /// Stream offset of `buf[start]`: bytes consumed since the beginning.
    consumed: u64,
    /// Stream offsets `[start, end)` of the frame last returned.
    last_span: (u64, u64),
    discarded: u64,
    failed: bool,
}

impl FrameDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the stream.
    pub fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Frames dropped because their payload did not parse.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// Bytes held that do not yet form a whole frame (or are not yet read).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Stream offset just past the last frame returned or skipped.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Stream offsets `[start, end)` (header included) of the frame last
    /// returned by [`next_frame`](Self::next_frame).
    pub fn last_span(&self) -> (u64, u64) {
        self.last_span
    }

    /// Returns the next complete frame, `Ok(None)` if more bytes are needed.
    /// After an error every later call fails too.
    pub fn next_frame(&mut self) -> Result<Option<IPCFrame>, FrameTooLarge> {
        loop {
            let avail = &self.buf[self.start..];
            if avail.len() < HEADER_SIZE {
                break;
            }
            let len_untrusted =
                u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
            if self.failed || len_untrusted > MAX_PAYLOAD {
                self.failed = true;
                return Err(FrameTooLarge {
                    len_untrusted: len_untrusted as u64,
                });
            }
            let total = HEADER_SIZE + len_untrusted;
            if avail.len() < total {
                break;
            }
            let payload = &avail[HEADER_SIZE..total];
            let frame_start = self.consumed;
            self.start += total;
            self.consumed += total as u64;
            if payload.is_empty() {
                continue;
            }
            match decode_payload(payload) {
                Ok(frame) => {
                    self.last_span = (frame_start, self.consumed);
                    return Ok(Some(frame));
                }
                Err(_) => self.discarded += 1,
            }
        }
        self.compact();
        Ok(None)
    }

    /// Moves a trailing partial frame to the front so the buffer never
    /// grows beyond one frame plus one read.
    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        // An idle connection keeps no large buffer from its last big frame.
        if self.buf.is_empty() && self.buf.capacity() > IDLE_BUFFER_KEPT {
            self.buf = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_IPCFrame::{BindService, InvokeMethod, OneOfmsg};

    fn invoke(id: u64, args: Vec<u8>) -> IPCFrame {
        IPCFrame {
            request_id: Some(id),
            msg: OneOfmsg::msg_invoke_method(InvokeMethod {
                service_id: Some(1),
                method_id: Some(2),
                args_proto: Some(args),
                drop_reply: None,
            }),
            ..Default::default()
        }
    }

    fn drain(d: &mut FrameDecoder) -> Vec<IPCFrame> {
        let mut out = vec![];
        while let Some(f) = d.next_frame().unwrap() {
            out.push(f);
        }
        out
    }

    #[test]
    fn in_place_invoke_header_decodes_as_the_same_invoke() {
        for (request_id, service_id, method_id, len) in [
            (1, 1, 2, 0),
            (300, 7, 12, 127),
            (u64::MAX, u32::MAX, 3, 16_384),
            (9, 2, 3, MAX_PAYLOAD - 40),
        ] {
            let args: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = Vec::new();
            put_invoke_header(&mut out, request_id, service_id, method_id, len).unwrap();
            assert_eq!(
                out.len(),
                invoke_overhead(request_id, service_id, method_id, len)
            );
            out.extend_from_slice(&args);
            let mut d = FrameDecoder::default();
            d.push(&out);
            let frames = drain(&mut d);
            assert_eq!(frames.len(), 1);
            assert_eq!(frames[0].request_id, Some(request_id));
            let OneOfmsg::msg_invoke_method(inv) = &frames[0].msg else {
                panic!("{:?}", frames[0].msg);
            };
            assert_eq!(
                (inv.service_id, inv.method_id, inv.drop_reply),
                (Some(service_id), Some(method_id), Some(true))
            );
            assert_eq!(inv.args_proto.as_deref(), Some(&args[..]));
        }
        let mut out = Vec::new();
        assert!(put_invoke_header(&mut out, 1, 1, 1, MAX_PAYLOAD).is_err());
    }

    #[test]
    fn in_place_reply_header_matches_the_message_encoder() {
        use crate::pb::protos::mod_IPCFrame::InvokeMethodReply;
        for (request_id, has_more, len) in [
            (1, true, 0),
            (7, false, 1),
            (300, true, 127),
            (u64::MAX, false, 128),
            (42, true, 16_383),
            (42, true, 16_384),
            (5, false, MAX_PAYLOAD - 40),
        ] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let want = encode_frame(&IPCFrame {
                request_id: Some(request_id),
                msg: OneOfmsg::msg_invoke_method_reply(InvokeMethodReply {
                    success: Some(true),
                    has_more: Some(has_more),
                    reply_proto: Some(payload.clone()),
                }),
                ..Default::default()
            })
            .unwrap();
            let mut buf = vec![0xee; 40];
            buf.extend(&payload);
            let start = put_reply_header(&mut buf, 40, request_id, has_more).unwrap();
            assert_eq!(&buf[start..], &want[..], "len {len}");
        }
        let mut big = vec![0u8; 40 + MAX_PAYLOAD];
        assert!(put_reply_header(&mut big, 40, 1, true).is_err());
    }

    #[test]
    fn round_trips_in_any_chunking() {
        let frames = vec![
            invoke(1, b"abc".to_vec()),
            IPCFrame {
                request_id: Some(2),
                msg: OneOfmsg::msg_bind_service(BindService {
                    service_name: Some("ConsumerPort".into()),
                }),
                ..Default::default()
            },
            invoke(3, vec![7u8; 5000]),
        ];
        let mut stream = Vec::new();
        for f in &frames {
            stream.extend(encode_frame(f).unwrap());
        }
        for chunk in [1, 3, 4, 5, 17, 4096, stream.len()] {
            let mut d = FrameDecoder::new();
            let mut got = vec![];
            for c in stream.chunks(chunk) {
                d.push(c);
                got.extend(drain(&mut d));
            }
            assert_eq!(got, frames, "chunk size {chunk}");
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn skips_empty_and_discards_garbage_but_continues() {
        let mut d = FrameDecoder::new();
        d.push(&0u32.to_le_bytes());
        // 3 bytes: field 1 with wire type 7 (invalid).
        d.push(&3u32.to_le_bytes());
        d.push(&[0x0f, 0xff, 0xff]);
        d.push(&encode_frame(&invoke(9, vec![])).unwrap());
        assert_eq!(drain(&mut d), vec![invoke(9, vec![])]);
        assert_eq!(d.discarded(), 1);
    }

    #[test]
    fn nested_length_overrun_is_discarded_not_a_panic() {
        // Found by the fuzzer: BindService (14 bytes) whose service_name
        // claims 13 bytes starting 2 bytes in, i.e. past its end.
        let mut payload = vec![0x10, 0x01, 0x1a, 0x0e, 0x0a, 0x0d];
        payload.extend([0u8; 12]);
        payload.extend(b"Port");
        let mut d = FrameDecoder::new();
        d.push(&(payload.len() as u32).to_le_bytes());
        d.push(&payload);
        d.push(&encode_frame(&invoke(2, vec![])).unwrap());
        assert_eq!(drain(&mut d), vec![invoke(2, vec![])]);
        assert_eq!(d.discarded(), 1);
    }

    #[test]
    fn truncated_frame_waits_for_more() {
        let bytes = encode_frame(&invoke(4, b"xyz".to_vec())).unwrap();
        let mut d = FrameDecoder::new();
        d.push(&bytes[..bytes.len() - 1]);
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(d.buffered(), bytes.len() - 1);
        d.push(&bytes[bytes.len() - 1..]);
        assert_eq!(d.next_frame(), Ok(Some(invoke(4, b"xyz".to_vec()))));
    }

    #[test]
    fn oversized_header_is_fatal() {
        let mut d = FrameDecoder::new();
        d.push(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        let err = d.next_frame().unwrap_err();
        assert_eq!(err.len_untrusted, MAX_PAYLOAD as u64 + 1);
        assert!(err.to_string().contains("too large"));
        d.push(&encode_frame(&invoke(1, vec![])).unwrap());
        assert!(d.next_frame().is_err(), "decoder must stay failed");
    }

    #[test]
    fn largest_frame_fits_exactly_and_encoder_refuses_more() {
        // args of n bytes cost n + overhead; find the n that lands on the limit.
        let overhead = encode_frame(&invoke(1, vec![])).unwrap().len() - HEADER_SIZE;
        let mut n = MAX_PAYLOAD - overhead - 4;
        while encode_frame(&invoke(1, vec![0; n + 1])).is_ok() {
            n += 1;
        }
        let max = encode_frame(&invoke(1, vec![0; n])).unwrap();
        assert_eq!(max.len(), IPC_BUFFER_SIZE);
        let mut d = FrameDecoder::new();
        d.push(&max);
        assert!(d.next_frame().unwrap().is_some());
        assert!(encode_frame(&invoke(1, vec![0; n + 1])).is_err());
    }
}
