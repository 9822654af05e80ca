//! TraceWriter -> SMB chunks -> commit batches (+ patches) -> reassembled
//! packets, compared byte for byte with the same messages encoded into a
//! plain Vec.

use crate::support::common;

use std::sync::Arc;

use common::fake_service::TestTransport;
use common::gen::{gen_message, packet_budget, Rng};
use tracebox::mem::shared_mem::SharedMem;
use tracebox::protozero::{begin_nested, end_nested, put_bytes, Stream, VecStream};
use tracebox::tracing::core::arbiter::{Arbiter, ArbiterConfig, BufferExhaustedPolicy};
use tracebox::tracing::core::chunk_reader::{Fragment, FragmentIter};
use tracebox::tracing::core::smb_abi::{ChunkState, PageLayout, SmbAbi};

fn make_abi(smb_size: usize, page_size: usize) -> SmbAbi {
    SmbAbi::new(Arc::new(SharedMem::new_heap(smb_size).unwrap()), page_size).unwrap()
}

/// Expected bytes of one random packet and the rng state to replay it.
fn expected_packet(rng: &mut Rng) -> (Rng, Vec<u8>) {
    let replay = rng.clone();
    let budget = packet_budget(rng);
    let mut v = VecStream::new();
    gen_message(rng, &mut v, budget, 0);
    (replay, v.into_bytes())
}

struct Case {
    page_size: usize,
    smb_size: usize,
    layout: PageLayout,
    batch_commits: bool,
    direct_patching: bool,
    seed: u64,
    packets: usize,
}

fn run_roundtrip(c: &Case) -> tracebox::tracing::core::arbiter::ArbiterStats {
    let abi = make_abi(c.smb_size, c.page_size);
    let transport = TestTransport::new(abi.clone(), true);
    let cfg = ArbiterConfig {
        page_layout: c.layout,
        batch_commits: c.batch_commits,
        ..Default::default()
    };
    let arbiter = Arbiter::new(abi.clone(), cfg, transport.clone());
    arbiter.set_direct_smb_patching(c.direct_patching);
    let mut w = arbiter
        .create_trace_writer(7, BufferExhaustedPolicy::Stall)
        .unwrap();
    w.set_emit_sequence_markers(false);
    let id = w.writer_id();

    let mut rng = Rng::new(c.seed);
    let mut expected = Vec::new();
    for _ in 0..c.packets {
        let (mut replay, bytes) = expected_packet(&mut rng);
        let budget = packet_budget(&mut replay);
        let mut p = w.new_packet();
        gen_message(&mut replay, &mut p, budget, 0);
        assert_eq!(p.position(), bytes.len() as u64);
        drop(p);
        if !bytes.is_empty() {
            expected.push(bytes);
        }
    }
    w.flush();
    let stats = w.stats();
    assert_eq!(stats.drop_episodes, 0);
    assert_eq!(stats.packets_written, c.packets as u64);
    drop(w);

    let svc = transport.service.lock().unwrap();
    assert_eq!(svc.move_errors, 0);
    assert_eq!(svc.patch_misses, 0);
    assert_eq!((svc.packets_lost, svc.corrupt_chunks), (0, 0));
    assert_eq!(svc.chunks_pending(), 0, "every chunk read");
    let got = svc.packets(id);
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            g == e,
            "packet {i} differs: {} vs {} bytes",
            g.len(),
            e.len()
        );
    }
    assert_eq!(svc.registered, vec![(id, 7)]);
    assert_eq!(svc.unregistered, vec![id]);
    let s = abi.stats();
    assert_eq!(s.pages_free, abi.num_pages(), "SMB fully free again: {s:?}");
    arbiter.stats()
}

#[test]
fn roundtrip_4k_pages_every_layout() {
    for (i, layout) in PageLayout::ALL.into_iter().enumerate() {
        let st = run_roundtrip(&Case {
            page_size: 4096,
            smb_size: 64 * 1024,
            layout,
            batch_commits: false,
            direct_patching: false,
            seed: 100 + i as u64,
            packets: 120,
        });
        assert!(
            st.patches_sent > 0,
            "nested sizes across chunks were patched: {st:?}"
        );
    }
}

#[test]
fn roundtrip_32k_pages() {
    for (i, layout) in [PageLayout::Div1, PageLayout::Div4].into_iter().enumerate() {
        run_roundtrip(&Case {
            page_size: 32 * 1024,
            smb_size: 256 * 1024,
            layout,
            batch_commits: false,
            direct_patching: false,
            seed: 200 + i as u64,
            packets: 120,
        });
    }
}

#[test]
fn roundtrip_batched_with_direct_patching() {
    for (i, (page_size, layout)) in [
        (4096, PageLayout::Div1),
        (4096, PageLayout::Div7),
        (32768, PageLayout::Div2),
    ]
    .into_iter()
    .enumerate()
    {
        let st = run_roundtrip(&Case {
            page_size,
            smb_size: 128 * 1024,
            layout,
            batch_commits: true,
            direct_patching: true,
            seed: 300 + i as u64,
            packets: 120,
        });
        assert!(st.patches_applied_in_smb > 0, "{st:?}");
    }
}

#[test]
fn roundtrip_batched_without_direct_patching() {
    let st = run_roundtrip(&Case {
        page_size: 4096,
        smb_size: 64 * 1024,
        layout: PageLayout::Div2,
        batch_commits: true,
        direct_patching: false,
        seed: 400,
        packets: 150,
    });
    assert_eq!(st.patches_applied_in_smb, 0);
    assert!(st.patches_sent > 0);
}

/// A nested message opened in one chunk and closed several chunks later,
/// inside another nested message: patches for two chunks at once.
#[test]
fn nested_sizes_patched_across_several_chunks() {
    let abi = make_abi(16 * 4096, 4096);
    let transport = TestTransport::new(abi.clone(), true);
    let arbiter = Arbiter::new(abi, ArbiterConfig::default(), transport.clone());
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Stall)
        .unwrap();
    w.set_emit_sequence_markers(false);
    fn write<S: Stream>(s: &mut S) {
        let outer = begin_nested(s, 1);
        put_bytes(s, 2, &[0xab; 3000]);
        let inner = begin_nested(s, 3);
        put_bytes(s, 4, &[0xcd; 9000]);
        end_nested(s, inner);
        end_nested(s, outer);
        put_bytes(s, 5, b"tail");
    }
    let mut v = VecStream::new();
    write(&mut v);
    write(&mut w.new_packet());
    w.write_packet(b"\x08\x01");
    w.flush();
    let st = arbiter.stats();
    assert_eq!(st.patches_sent, 2);
    let svc = transport.service.lock().unwrap();
    assert_eq!(
        svc.packets(w.writer_id()),
        &[v.into_bytes(), b"\x08\x01".to_vec()]
    );
}

#[test]
fn first_packet_carries_sequence_marker() {
    let abi = make_abi(8 * 4096, 4096);
    let transport = TestTransport::new(abi.clone(), true);
    let arbiter = Arbiter::new(abi, ArbiterConfig::default(), transport.clone());
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Drop)
        .unwrap();
    w.write_packet(b"\x08\x05");
    w.write_packet(b"\x08\x06");
    w.flush();
    let svc = transport.service.lock().unwrap();
    // first_packet_on_sequence (87) = true, only on the first packet.
    assert_eq!(
        svc.packets(w.writer_id()),
        &[b"\xb8\x05\x01\x08\x05".to_vec(), b"\x08\x06".to_vec()]
    );
}

#[test]
fn two_writer_threads_share_one_smb() {
    let abi = make_abi(32 * 4096, 4096);
    let transport = TestTransport::new(abi.clone(), true);
    let cfg = ArbiterConfig {
        page_layout: PageLayout::Div4,
        ..Default::default()
    };
    let arbiter = Arbiter::new(abi, cfg, transport.clone());
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let arbiter = arbiter.clone();
            std::thread::spawn(move || {
                let mut w = arbiter
                    .create_trace_writer(1 + t as u16, BufferExhaustedPolicy::Stall)
                    .unwrap();
                w.set_emit_sequence_markers(false);
                let mut rng = Rng::new(500 + t);
                let mut expected = Vec::new();
                for _ in 0..150 {
                    let (mut replay, bytes) = expected_packet(&mut rng);
                    let budget = packet_budget(&mut replay);
                    gen_message(&mut replay, &mut w.new_packet(), budget, 0);
                    if !bytes.is_empty() {
                        expected.push(bytes);
                    }
                }
                w.flush();
                (w.writer_id(), expected)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let svc = transport.service.lock().unwrap();
    assert_ne!(results[0].0, results[1].0);
    for (id, expected) in results {
        assert!(svc.packets(id) == expected.as_slice(), "writer {id}");
    }
    assert_eq!(
        (svc.packets_lost, svc.corrupt_chunks, svc.move_errors),
        (0, 0, 0)
    );
}

#[test]
fn full_smb_stalls_until_the_service_catches_up() {
    let abi = make_abi(4 * 4096, 4096);
    let transport = TestTransport::new(abi.clone(), false);
    let arbiter = Arbiter::new(abi.clone(), ArbiterConfig::default(), transport.clone());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer = {
        let (t, abi, done) = (transport.clone(), abi.clone(), done.clone());
        std::thread::spawn(move || {
            // Start consuming only once the writer has filled every chunk.
            loop {
                let s = abi.stats();
                if (s.pages_free == 0 && s.chunks_free == 0)
                    || done.load(std::sync::atomic::Ordering::SeqCst)
                {
                    break;
                }
                std::thread::yield_now();
            }
            while !done.load(std::sync::atomic::Ordering::SeqCst) || t.queued() > 0 {
                if t.deliver_one(5) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        })
    };
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Stall)
        .unwrap();
    w.set_emit_sequence_markers(false);
    let mut rng = Rng::new(600);
    let mut expected = Vec::new();
    for i in 0..200usize {
        let data = rng.bytes(1 + (i * 37) % 3000);
        w.write_packet(&data);
        expected.push(data);
    }
    w.flush();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    consumer.join().unwrap();
    transport.deliver_queued();
    let st = arbiter.stats();
    assert!(st.stalls > 0, "{st:?}");
    assert_eq!((st.stall_give_ups, st.chunk_requests_failed), (0, 0));
    assert_eq!(w.stats().drop_episodes, 0);
    let svc = transport.service.lock().unwrap();
    assert!(svc.packets(w.writer_id()) == expected.as_slice());
    assert_eq!(svc.packets_lost, 0);
}

#[test]
fn full_smb_drops_then_recovers_with_loss_marker() {
    let abi = make_abi(4 * 4096, 4096);
    let transport = TestTransport::new(abi.clone(), false);
    let arbiter = Arbiter::new(abi.clone(), ArbiterConfig::default(), transport.clone());
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Drop)
        .unwrap();
    let payload = |i: u32| -> Vec<u8> {
        let mut v = VecStream::new();
        tracebox::protozero::put_varint(&mut v, 8, u64::from(i));
        put_bytes(&mut v, 2, &vec![i as u8; 700 + (i as usize % 5) * 300]);
        v.into_bytes()
    };
    // Nobody reads: the 4 chunks fill up and later packets are discarded.
    for i in 0..40 {
        w.write_packet(&payload(i));
    }
    let before = w.stats();
    assert!(
        before.drop_episodes >= 1 && before.packets_dropped > 0,
        "{before:?}"
    );
    assert!(arbiter.stats().chunk_requests_failed > 0);
    // A big packet while dropping: discarded without trouble.
    let mut p = w.new_packet();
    let n = begin_nested(&mut p, 9);
    p.write(&[1; 20000]);
    end_nested(&mut p, n);
    assert!(p.is_dropped());
    drop(p);

    // The service catches up; the writer keeps going and gets chunks again.
    transport.deliver_queued();
    for i in 60..100 {
        w.write_packet(&payload(i));
        transport.deliver_queued();
    }
    w.flush();
    transport.deliver_queued();
    let svc = transport.service.lock().unwrap();
    let got = svc.packets(w.writer_id());
    // Strip the writer's markers: first_packet_on_sequence (87) and
    // previous_packet_dropped (42) = DATA_LOSS_PRESENT | DATA_LOSS_SMB_FULL.
    let first_marker = b"\xb8\x05\x01";
    let loss_marker = b"\xd0\x02\x81\x02";
    assert!(got[0].starts_with(first_marker));
    let mut ids = Vec::new();
    let mut marked = Vec::new();
    for (k, pkt) in got.iter().enumerate() {
        let mut body = pkt.as_slice();
        if k == 0 {
            body = &body[first_marker.len()..];
        }
        if body.starts_with(loss_marker) {
            marked.push(k);
            body = &body[loss_marker.len()..];
        }
        assert_eq!(body[0], 0x40, "field 8 varint");
        let i = u32::from(body[1]);
        assert_eq!(body, payload(i).as_slice());
        ids.push(i);
    }
    // The first packets made it, then a gap, then the tail after recovery.
    assert_eq!(ids[0], 0);
    assert!(ids.windows(2).all(|p| p[0] < p[1]));
    assert!(ids.iter().any(|&i| i >= 60));
    assert!(ids.contains(&99), "last packet after recovery arrives");
    let first_after_gap = ids.iter().position(|&i| i >= 60).unwrap();
    assert!(
        marked.contains(&first_after_gap),
        "loss flagged on {first_after_gap}: {marked:?}"
    );
    assert_eq!(svc.move_errors, 0);
}

#[test]
fn tiny_packets_respect_the_per_chunk_packet_limit() {
    let abi = make_abi(4 * 32768, 32768);
    let transport = TestTransport::new(abi.clone(), true);
    let arbiter = Arbiter::new(abi, ArbiterConfig::default(), transport.clone());
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Stall)
        .unwrap();
    w.set_emit_sequence_markers(false);
    let expected: Vec<Vec<u8>> = (0..5000u32).map(|i| vec![0x08, (i % 128) as u8]).collect();
    for p in &expected {
        w.write_packet(p);
        w.new_packet(); // empty packets in between: skipped by readers
    }
    w.flush();
    let svc = transport.service.lock().unwrap();
    assert!(svc.packets(w.writer_id()) == expected.as_slice());
    // 1022 started packets plus the empty one closing the chunk.
    assert_eq!(svc.max_packet_count, 1023);
}

#[test]
fn stall_gives_up_after_the_bound_and_drops() {
    let abi = make_abi(2 * 4096, 4096);
    let transport = TestTransport::new(abi.clone(), false);
    let cfg = ArbiterConfig {
        max_stall_attempts: 3,
        ..Default::default()
    };
    let arbiter = Arbiter::new(abi, cfg, transport.clone());
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Stall)
        .unwrap();
    for _ in 0..10 {
        w.write_packet(&[0x0a, 0x82, 0x0f]); // header of a 1922-byte field
        let mut p = w.new_packet();
        p.write(&[7; 2000]);
    }
    let st = arbiter.stats();
    assert_eq!(st.stalls, 3 * st.stall_give_ups, "{st:?}");
    assert!(st.stall_give_ups > 0);
    assert!(w.stats().packets_dropped > 0);
    assert!(transport.queued() > 0, "commits were sent while stalling");
}

/// A service scraping a chunk still being written sees the finished packets
/// as complete: the writer counts one packet ahead ("count - 1" rule).
#[test]
fn chunk_being_written_is_scrapable() {
    let abi = make_abi(4 * 4096, 4096);
    let transport = TestTransport::new(abi.clone(), true);
    let arbiter = Arbiter::new(abi.clone(), ArbiterConfig::default(), transport);
    let mut w = arbiter
        .create_trace_writer(1, BufferExhaustedPolicy::Stall)
        .unwrap();
    w.set_emit_sequence_markers(false);
    for i in 0..3u8 {
        w.write_packet(&[0x08, i]);
    }
    let (page, chunk) = (0..abi.num_pages())
        .find_map(|p| {
            let (state, c) = abi.chunk_at(p, 0).ok()?;
            (state == ChunkState::BeingWritten).then_some((p, c))
        })
        .unwrap();
    let mut payload = Vec::new();
    let h = abi.read_chunk(&chunk, &mut payload);
    assert_eq!(
        (h.writer_id, h.chunk_id, h.packet_count),
        (w.writer_id(), 0, 4)
    );
    let frags: Vec<_> = FragmentIter::new(&payload, h.packet_count - 1).collect();
    assert_eq!(
        frags,
        vec![
            Ok(Fragment::Data(&[8, 0])),
            Ok(Fragment::Data(&[8, 1])),
            Ok(Fragment::Data(&[8, 2]))
        ]
    );
    assert!(
        abi.try_acquire_chunk_for_reading(page, 0).is_err(),
        "not committed yet"
    );
}
