//! `perfetto --clone` / `--clone-by-name` of write_into_file sessions,
//! against our traced and Perfetto's real one: the clone holds what the
//! session wrote into its file so far plus what its buffers still hold,
//! each packet once, and its end line says nothing was lost.

use crate::support::cli as cli_support;

use cli_support::{sdk_bin, summary, wait_exit, Env, Killed};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SDK_DS: &str = "data_sources { config { name: \"tbx.sdk_test\" } }\n";
const LIMIT: Duration = Duration::from_secs(60);
const PACKETS: u32 = 40;

#[derive(Clone, Copy, Debug)]
enum Service {
    Ours,
    Real,
}

fn start(env: &Env, svc: Service) -> Killed {
    match svc {
        Service::Ours => env.start_traced(),
        Service::Real => env.start_real_traced(),
    }
}

/// Every packet of the SDK producer, exactly once (tests/sdk-interop's
/// checker), and the whole file parses with the official descriptors.
/// Ours writes the once-per-trace packets (config, uuid, system info)
/// once; upstream's clone repeats them after the copied file.
fn assert_complete(trace: &Path, svc: Service) {
    let out = Command::new(sdk_bin("trace-check"))
        .args(["--trace", trace.to_str().unwrap(), "--threads", "1"])
        .args(["--packets", &PACKETS.to_string(), "--size", "64"])
        .args(["--mode", "all"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(trace);
    assert_eq!(s.num("for_testing"), PACKETS as i64, "{s:?}");
    if let Service::Ours = svc {
        assert!(s.contains("\"trace_config\": 1"), "one config: {s:?}");
    }
}

/// The id `--query` shows for the session named `name`.
fn session_id(env: &Env, name: &str) -> String {
    let q = env.perfetto(&["--query"]);
    let q = String::from_utf8_lossy(&q.stdout);
    assert!(!q.contains('\x1b'), "colour into a pipe: {q:?}");
    q.lines()
        .filter(|l| l.split_whitespace().last() == Some(name))
        .find_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no session {name} in:\n{q}"))
        .to_string()
}

/// A write_into_file session writing every `period_ms`; the producer's
/// packets are in the file (`in_file`) or still in the buffer when the
/// clone is taken. The session keeps running and ends complete.
fn clone_wif(tag: &str, svc: Service, period_ms: u32, in_file: bool) {
    let env = Env::new(tag);
    let _traced = start(&env, svc);
    let _producer = env.start_sdk_producer(PACKETS);
    let cfg = env.write(
        "c.pbtx",
        &format!(
            "buffers {{ size_kb: 4096 }}\n{SDK_DS}write_into_file: true\n\
             file_write_period_ms: {period_ms}\nduration_ms: 120000\n\
             unique_session_name: \"wif\"\n"
        ),
    );
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_query("wif", true);
    env.wait_producer_written();
    if in_file {
        // The periodic write has moved the packets out of the buffer.
        let deadline = Instant::now() + Duration::from_secs(20);
        while summary(&out).num("for_testing") < PACKETS as i64 {
            assert!(
                Instant::now() < deadline,
                "the session never wrote its file"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let before = std::fs::metadata(&out).unwrap().len();
    let snap = env.path("snap.pftrace");
    // By id when the buffers hold the packets, by name when the file does.
    let id = session_id(&env, "wif");
    let by = match in_file {
        true => ["--clone-by-name", "wif"],
        false => ["--clone", id.as_str()],
    };
    let c = env.perfetto(&[by[0], by[1], "-o", snap.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(c.status.success(), "{err}");
    assert_complete(&snap, svc);
    // The clone's end line: everything the session held is in it.
    assert!(
        err.lines().any(|l| l == "Trace stats: nothing lost"),
        "{err}"
    );
    if !in_file {
        assert_eq!(
            before, 0,
            "nothing written yet: the clone came from the buffer"
        );
    }
    // The original keeps running and still finishes its own file.
    assert!(client.try_wait().unwrap().is_none());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
    assert_complete(&out, svc);
}

#[test]
fn clone_of_write_into_file_holds_the_written_file_ours() {
    clone_wif("wif-file", Service::Ours, 100, true);
}

#[test]
fn clone_of_write_into_file_holds_the_buffers_ours() {
    clone_wif("wif-buf", Service::Ours, 3_600_000, false);
}

#[test]
fn clone_of_write_into_file_holds_the_written_file_real_traced() {
    clone_wif("wif-file-real", Service::Real, 100, true);
}

#[test]
fn clone_of_write_into_file_holds_the_buffers_real_traced() {
    clone_wif("wif-buf-real", Service::Real, 3_600_000, false);
}

/// Without a file descriptor a write_into_file session cannot be cloned:
/// our traced refuses with upstream's words instead of an empty success.
#[test]
fn clone_of_write_into_file_to_stdout_is_refused() {
    let env = Env::new("wif-nofd");
    let _traced = env.start_traced();
    let cfg = env.write(
        "c.pbtx",
        &format!(
            "buffers {{ size_kb: 1024 }}\n{SDK_DS}write_into_file: true\n\
             duration_ms: 120000\nunique_session_name: \"wif\"\n"
        ),
    );
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_query("wif", true);
    let _ = &mut client;
    let mut port = tracebox::cmd::rpc::Port::connect(&env.consumer, "ConsumerPort").unwrap();
    let req = tracebox::pb::protos::CloneSessionRequest {
        selector: tracebox::pb::protos::mod_CloneSessionRequest::OneOfselector::unique_session_name(
            "wif".into(),
        ),
        ..Default::default()
    };
    let r: tracebox::pb::protos::CloneSessionResponse =
        port.call("CloneSession", &req, None).unwrap();
    assert_eq!(r.success, Some(false));
    assert!(
        r.error.unwrap().contains("a file descriptor is required"),
        "upstream's words"
    );
}

/// A session whose file traced opened itself (`output_path`) clones the
/// same way: traced reads back its own file.
#[test]
fn clone_of_a_session_writing_its_output_path() {
    let env = Env::new("wif-path");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(PACKETS);
    let out = env.path("t.pftrace");
    let cfg = env.write(
        "c.pbtx",
        &format!(
            "buffers {{ size_kb: 4096 }}\n{SDK_DS}write_into_file: true\n\
             file_write_period_ms: 100\nduration_ms: 120000\n\
             output_path: \"{}\"\nunique_session_name: \"wifpath\"\n",
            out.display()
        ),
    );
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_query("wifpath", true);
    env.wait_producer_written();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !out.exists() || summary(&out).num("for_testing") < PACKETS as i64 {
        assert!(
            Instant::now() < deadline,
            "the session never wrote its file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let snap = env.path("snap.pftrace");
    let c = env.perfetto(&["--clone-by-name", "wifpath", "-o", snap.to_str().unwrap()]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert_complete(&snap, Service::Ours);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
}

/// A `--clone` taken while a rotation cut is pending (the clone's flush
/// asked first, the cut's second, the clone's acked first) holds the
/// packets the cut holds back for the next file: the sequence that cleared
/// its incremental state for the cut. Its end line says nothing was lost.
#[test]
fn a_clone_during_a_pending_cut_holds_what_the_cut_held() {
    use crate::support::traced as ts;
    use tracebox::pb::protos::mod_GetAsyncCommandResponse::OneOfcmd;
    use tracebox::pb::protos::mod_TraceConfig::{BufferConfig, DataSource};
    use tracebox::pb::protos::{
        CommitDataRequest, DataSourceConfig, DataSourceDescriptor, EnableTracingRequest,
        RotateOutputFileRequest, TraceConfig,
    };
    use tracebox::protozero::put_varint;
    let env = Env::new("clone-cut");
    let _traced = env.start_traced();
    let desc = DataSourceDescriptor {
        name: Some("tbx.cut".into()),
        handles_incremental_state_clear: Some(true),
        ..Default::default()
    };
    let mut prod = ts::TestProducer::connect_with(&env.producer, "cut.producer", desc, 512);
    let (mut cons, port) = ts::connect(&env.consumer, "ConsumerPort");
    let cfg = TraceConfig {
        buffers: vec![BufferConfig {
            size_kb: Some(2048),
            ..Default::default()
        }],
        data_sources: vec![DataSource {
            config: Some(DataSourceConfig {
                name: Some("tbx.cut".into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        write_into_file: Some(true),
        file_write_period_ms: Some(3_600_000),
        unique_session_name: Some("cut".into()),
        ..Default::default()
    };
    let enable = EnableTracingRequest {
        trace_config: Some(cfg),
        ..Default::default()
    };
    let first = std::fs::File::create(env.path("t.000")).unwrap();
    let enabled = cons
        .start_invoke(
            &port,
            "EnableTracing",
            &ts::encode(&enable),
            Some(first.into()),
        )
        .unwrap();
    prod.start(512);
    // Ten packets, timestamps 1000..1009, one sequence.
    prod.write(10, 1000);
    let snap = env.path("snap.pftrace");
    let id = session_id(&env, "cut");
    let mut clone = env
        .perfetto_cmd(&["--clone", &id, "-o", snap.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let flush_id = |cmd: OneOfcmd| match cmd {
        OneOfcmd::flush(f) => f.request_id.unwrap(),
        other => panic!("expected a flush, got {other:?}"),
    };
    let clone_flush = flush_id(ts::next_cmd(&mut prod.client, prod.stream).0);
    let next = std::fs::File::create(env.path("t.001")).unwrap();
    let rotate = ts::encode(&RotateOutputFileRequest::default());
    let rotated = cons
        .start_invoke(&port, "RotateOutputFile", &rotate, Some(next.into()))
        .unwrap();
    let (cmd, _) = ts::next_cmd(&mut prod.client, prod.stream);
    assert!(
        matches!(cmd, OneOfcmd::clear_incremental_state(_)),
        "{cmd:?}"
    );
    let cut_flush = flush_id(ts::next_cmd(&mut prod.client, prod.stream).0);
    // The sequence starts afresh: 2000 clears, 2001 needs that state.
    for (ts_, flags) in [(2000u64, 1u64), (2001, 2)] {
        let w = prod.writer.as_mut().unwrap();
        let mut p = w.new_packet();
        put_varint(&mut p, 8, ts_);
        put_varint(&mut p, 13, flags);
    }
    prod.writer.as_mut().unwrap().flush();
    prod.commit_pending();
    let ack = |id| CommitDataRequest {
        flush_request_id: Some(id),
        ..Default::default()
    };
    ts::call(
        &mut prod.client,
        &prod.port,
        "CommitData",
        &ts::encode(&ack(clone_flush)),
    );
    assert_eq!(wait_exit(&mut clone, LIMIT), 0);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut clone.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.lines().any(|l| l == "Trace stats: nothing lost"),
        "{err}"
    );
    let stamps = |path: &Path| -> Vec<u64> {
        use tracebox::protozero::decode::{read_varint, FieldIter};
        let bytes = std::fs::read(path).unwrap();
        let packets: Vec<Vec<u8>> = FieldIter::new(&bytes)
            .filter(|f| f.number == 1)
            .map(|f| f.value.to_vec())
            .collect();
        ts::producer_payloads(&packets)
            .iter()
            .filter_map(|p| {
                let f = FieldIter::new(p).find(|f| f.number == 8)?;
                read_varint(f.value).map(|v| v.0)
            })
            .collect()
    };
    let mut want: Vec<u64> = (1000..1010).collect();
    want.extend([2000, 2001]);
    assert_eq!(stamps(&snap), want, "{err}");
    // The cut goes on: the held packets open the next file.
    ts::call(
        &mut prod.client,
        &prod.port,
        "CommitData",
        &ts::encode(&ack(cut_flush)),
    );
    let r = cons.next_reply(rotated).unwrap().unwrap();
    assert!(r.success);
    cons.invoke(&port, "DisableTracing", &[], None).unwrap();
    prod.serve_until_stop();
    assert!(cons.next_reply(enabled).unwrap().is_some());
    assert_eq!(stamps(&env.path("t.000")), (1000..1010).collect::<Vec<_>>());
    assert_eq!(stamps(&env.path("t.001")), [2000, 2001]);
}
