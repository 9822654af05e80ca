//! IPC frame decoder: arbitrary bytes in arbitrary chunks never panic, and
//! every decoded frame survives a re-encode/decode round trip.
use tracebox::ipc::frame::{decode_payload, encode_frame, FrameDecoder, HEADER_SIZE};

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let Some((&chunk, stream)) = data.split_first() else {
        return;
    };
    let mut decoder = FrameDecoder::new();
    for piece in stream.chunks(chunk.max(1) as usize) {
        decoder.push(piece);
        while let Ok(Some(frame)) = decoder.next_frame() {
            if let Ok(bytes) = encode_frame(&frame) {
                assert_eq!(decode_payload(&bytes[HEADER_SIZE..]).unwrap(), frame);
            }
        }
    }
}
