//! The committed seed corpus of the `ipc_frame` fuzz target is generated
//! here; this test fails if a seed drifts from what the codec produces.
//! Regenerate with `TRACEBOX_WRITE_CORPUS=1 cargo test --test ipc_fuzz_corpus`.
//!
//! Seed layout (as the target reads it): one byte of chunk size, then the stream.

use std::path::PathBuf;

use tracebox::ipc::frame::{encode_frame, FrameDecoder, MAX_PAYLOAD};
use tracebox::pb::protos::mod_IPCFrame::mod_BindServiceReply::MethodInfo;
use tracebox::pb::protos::mod_IPCFrame::{
    BindService, BindServiceReply, InvokeMethod, InvokeMethodReply, OneOfmsg, RequestError,
};
use tracebox::pb::protos::IPCFrame;

fn frame(request_id: u64, msg: OneOfmsg) -> Vec<u8> {
    encode_frame(&IPCFrame {
        request_id: Some(request_id),
        msg,
        ..Default::default()
    })
    .unwrap()
}

/// (file name, chunk size, stream, frames the decoder must yield, must fail)
fn seeds() -> Vec<(&'static str, u8, Vec<u8>, usize, bool)> {
    let bind = frame(
        1,
        OneOfmsg::msg_bind_service(BindService {
            service_name: Some("ConsumerPort".into()),
        }),
    );
    let bind_reply = frame(
        1,
        OneOfmsg::msg_bind_service_reply(BindServiceReply {
            success: Some(true),
            service_id: Some(1),
            methods: vec![
                MethodInfo {
                    id: Some(1),
                    name: Some("EnableTracing".into()),
                },
                MethodInfo {
                    id: Some(2),
                    name: Some("ReadBuffers".into()),
                },
            ],
        }),
    );
    let invoke = frame(
        2,
        OneOfmsg::msg_invoke_method(InvokeMethod {
            service_id: Some(1),
            method_id: Some(2),
            args_proto: Some(vec![0x0a, 0x02, 0x08, 0x01]),
            drop_reply: Some(true),
        }),
    );
    let mut stream = Vec::new();
    for i in 0..3 {
        stream.extend(frame(
            3,
            OneOfmsg::msg_invoke_method_reply(InvokeMethodReply {
                success: Some(true),
                has_more: Some(i < 2),
                reply_proto: Some(vec![i; 10]),
            }),
        ));
    }
    let err = frame(
        4,
        OneOfmsg::msg_request_error(RequestError {
            error: Some("unknown request".into()),
        }),
    );
    let mut garbage = Vec::new();
    garbage.extend(0u32.to_le_bytes());
    garbage.extend([3, 0, 0, 0, 0x0f, 0xff, 0xff]);
    garbage.extend(&bind);
    let mut too_large = bind.clone();
    too_large.extend((MAX_PAYLOAD as u32 + 1).to_le_bytes());
    // Found by fuzzing: a nested string overrunning its sub-message.
    // The tail ("Port") then reads as an oversized header.
    let mut nested_overrun = vec![0x19, 0, 0, 0, 0x10, 0x01, 0x1a, 0x0e, 0x0a, 0x0d];
    nested_overrun.extend([0u8; 11]);
    nested_overrun.extend(b"eomuCnsrPort");
    vec![
        ("nested_overrun", 0, nested_overrun, 0, true),
        ("bind", 255, bind, 1, false),
        ("bind_reply_split", 3, bind_reply, 1, false),
        ("invoke_drop_reply", 1, invoke, 1, false),
        ("stream_3_replies", 7, stream, 3, false),
        ("request_error", 255, err, 1, false),
        ("garbage_then_valid", 5, garbage, 1, false),
        ("too_large", 255, too_large, 1, true),
    ]
}

#[test]
fn fuzz_seeds_match_the_codec() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/ipc_frame");
    let write = std::env::var_os("TRACEBOX_WRITE_CORPUS").is_some();
    for (name, chunk, stream, want_frames, want_error) in seeds() {
        let mut decoder = FrameDecoder::new();
        let (mut frames, mut failed) = (0, false);
        for piece in stream.chunks(chunk.max(1) as usize) {
            decoder.push(piece);
            loop {
                match decoder.next_frame() {
                    Ok(Some(_)) => frames += 1,
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        assert_eq!((frames, failed), (want_frames, want_error), "{name}");
        let mut seed = vec![chunk];
        seed.extend(&stream);
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &seed).unwrap();
        }
        assert_eq!(
            std::fs::read(&path).unwrap_or_default(),
            seed,
            "{name} is stale; regenerate (see module docs)"
        );
    }
}
