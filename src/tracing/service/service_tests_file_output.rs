//! write_into_file through the adapter's [`FileOutput`]: the service
//! writes each pass itself, straight from the buffer, and the file gets
//! exactly the bytes the queued `WriteToFile`s would have carried.

use super::test_env::*;
use super::*;

/// Every `WriteToFile` of `outs` for `sid`, concatenated.
fn queued(outs: &[Output], sid: SessionId) -> Vec<u8> {
    let mut data = Vec::new();
    for o in outs {
        if let Output::WriteToFile { session, data: d } = o {
            if *session == sid {
                data.extend_from_slice(d);
            }
        }
    }
    data
}

/// Packets of 10 B to 2 KB from two writers, written periodically, then the
/// session stopped; returns (everything queued, session id).
fn record(h: &mut H, open: Option<&std::cell::RefCell<FileLog>>) -> (Vec<Output>, SessionId) {
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 256);
    cfg.write_into_file = Some(true);
    cfg.file_write_period_ms = Some(100);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    if let Some(f) = open {
        f.borrow_mut().open.insert(sid);
    }
    let mut outs = h.outputs();
    let global = global_buffer(&outs, p);
    for round in 0..4u64 {
        for i in 0..9 {
            let packet = test_packet(round * 10 + i, [10, 300, 2000][i as usize % 3]);
            h.commit_packets(p, 1 + i as u16 % 2, global, &[packet]);
        }
        h.advance(ms(100));
        outs.extend(h.outputs());
    }
    h.svc.disable_tracing(h.now, c).unwrap();
    h.advance(ms(1000));
    outs.extend(h.outputs());
    (outs, sid)
}

#[test]
fn a_file_written_from_the_buffer_holds_what_the_queued_writes_hold() {
    let mut queued_h = H::new();
    let (outs, sid) = record(&mut queued_h, None);
    let want = queued(&outs, sid);
    assert!(want.len() > 20_000);

    let (mut h, files) = H::with_files();
    let (outs, sid) = record(&mut h, Some(&files));
    assert!(queued(&outs, sid).is_empty(), "nothing left to the adapter");
    let log = files.borrow();
    assert_eq!(log.bytes[&sid], want);
    // The larger packets went as parts of their own.
    assert!(log.parts > log.appends * 4, "{} parts", log.parts);
    let closes = outs
        .iter()
        .filter(|o| matches!(o, Output::CloseFile { .. }));
    assert_eq!(closes.count(), 1);
}

#[test]
fn a_failed_write_from_the_buffer_is_handed_to_the_adapter() {
    let (mut h, files) = H::with_files();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    files.borrow_mut().open.insert(sid);
    files.borrow_mut().fail = Some("Writing the trace file failed: EIO".into());
    let global = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, global, &[test_packet(1, 500)]);
    h.svc.disable_tracing(h.now, c).unwrap();
    let outs = h.outputs();
    let failed: Vec<_> = outs
        .iter()
        .filter_map(|o| match o {
            Output::FileWriteFailed { session, error } => Some((*session, error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [(sid, "Writing the trace file failed: EIO".into())]);
    assert!(queued(&outs, sid).is_empty());
    // The adapter reports it as for a failed WriteToFile: the error goes
    // on the TracingDisabled already queued with it.
    assert!(outs
        .iter()
        .any(|o| matches!(o, Output::TracingDisabled { error: None, .. })));
    let late = h.svc.file_write_failed(h.now, sid, failed[0].1.clone());
    assert_eq!(late, Some(c));
}

#[test]
fn writes_queue_behind_a_queued_file_output() {
    // A clone copies the source's file (CopyFileForClone, queued) before
    // its own pass: that pass must queue too, or it would land first.
    let (mut h, files) = H::with_files();
    let p = h.producer("prod", 0, &["ds"]);
    let c = h.svc.connect_consumer(0);
    let mut cfg = basic_config("ds", 64);
    cfg.write_into_file = Some(true);
    let sid = h.svc.enable_tracing(h.now, c, &encode(&cfg), true).unwrap();
    files.borrow_mut().open.insert(sid);
    let global = global_buffer(&h.outputs(), p);
    h.commit_packets(p, 1, global, &[test_packet(1, 500)]);
    h.svc.emit(Output::SyncFile { session: sid });
    h.advance(ms(5000));
    let outs = h.outputs();
    assert!(!queued(&outs, sid).is_empty());
    assert!(!files.borrow().bytes.contains_key(&sid));
    // With the queue drained, passes write directly again.
    h.commit_packets(p, 1, global, &[test_packet(2, 500)]);
    h.advance(ms(5000));
    assert!(queued(&h.outputs(), sid).is_empty());
    assert!(files.borrow().bytes.contains_key(&sid));
}
