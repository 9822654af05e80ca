//! sdk-consumer: runs one tracing session through the Perfetto SDK's
//! consumer API (system backend, $PERFETTO_CONSUMER_SOCK_NAME) and writes the
//! trace it reads back to a file.
//!
//! The TraceConfig is either a binary file (--config) or built here with the
//! SDK's protobuf writer from the --buffer-kb/--fill-policy/--data-source
//! flags. The session runs until SIGINT/SIGTERM, --stop-file appears,
//! --duration-ms elapses or --timeout-s (failure) is hit; then it flushes,
//! stops, reads and writes --out.

use perfetto_sdk::heap_buffer::HeapBuffer;
use perfetto_sdk::pb_msg::{PbMsg, PbMsgWriter};
use perfetto_sdk::producer::{Backends, Producer, ProducerInitArgsBuilder};
use perfetto_sdk::protos::config::data_source_config::DataSourceConfig;
use perfetto_sdk::protos::config::trace_config::{
    TraceConfig, TraceConfigBufferConfig, TraceConfigDataSource,
};
use perfetto_sdk::tracing_session::TracingSession;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracebox_sdk_interop::args::Args;
use tracebox_sdk_interop::procstat::self_usage;
use tracebox_sdk_interop::quit::{self, wait_until, WaitEnd};

const USAGE: &str = "sdk-consumer --out FILE [--config TRACECONFIG.pb |
    [--data-source NAME] [--buffer-kb K] [--fill-policy ring|discard]]
    [--write-config FILE (alone: write the config and exit)] [--duration-ms D] [--stop-file PATH] [--timeout-s S]
    [--no-flush]";

const BUFFER_FILL_POLICY_FIELD: u32 = 4;

fn build_config(ds_name: &str, buffer_kb: u32, fill_policy: u64) -> Vec<u8> {
    let writer = PbMsgWriter::new();
    let hb = HeapBuffer::new(writer.stream_writer());
    let mut msg = PbMsg::new(&writer).expect("heap buffer writer");
    {
        let mut cfg = TraceConfig { msg: &mut msg };
        cfg.set_buffers(|b: &mut TraceConfigBufferConfig| {
            b.set_size_kb(buffer_kb);
            b.msg
                .append_type0_field(BUFFER_FILL_POLICY_FIELD, fill_policy);
        });
        cfg.set_data_sources(|d: &mut TraceConfigDataSource| {
            d.set_config(|c: &mut DataSourceConfig| {
                c.set_name(ds_name);
                c.set_target_buffer(0);
            });
        });
    }
    msg.finalize();
    let size = writer.stream_writer().get_written_size();
    let mut out = vec![0u8; size];
    hb.copy_into(&mut out);
    out
}

fn main() {
    let mut a = Args::from_env(USAGE);
    let out = a.opt_str("--out").map(PathBuf::from);
    let config_file = a.opt_str("--config");
    let ds_name = a
        .opt_str("--data-source")
        .unwrap_or_else(|| "tbx.sdk_test".into());
    let buffer_kb: u32 = a.opt_parse("--buffer-kb").unwrap_or(32 * 1024);
    let fill_policy = match a.opt_str("--fill-policy").as_deref().unwrap_or("ring") {
        "ring" => 1,
        "discard" => 2,
        p => a.usage_error(&format!("bad --fill-policy {p:?}")),
    };
    let write_config = a.opt_str("--write-config").map(PathBuf::from);
    let duration = a
        .opt_parse::<u64>("--duration-ms")
        .map(Duration::from_millis);
    let stop_file = a.opt_str("--stop-file").map(PathBuf::from);
    let timeout = Duration::from_secs_f64(a.opt_parse("--timeout-s").unwrap_or(120.0));
    let no_flush = a.flag("--no-flush");
    a.finish();
    let config = match &config_file {
        Some(p) => std::fs::read(p).unwrap_or_else(|e| {
            eprintln!("sdk-consumer: cannot read {p}: {e}");
            std::process::exit(1)
        }),
        None => build_config(&ds_name, buffer_kb, fill_policy),
    };
    if let Some(p) = &write_config {
        if let Err(e) = std::fs::write(p, &config) {
            eprintln!("sdk-consumer: cannot write {}: {e}", p.display());
            std::process::exit(1);
        }
    }
    // With only --write-config, the config file is all we were asked for.
    let Some(out) = out else {
        if write_config.is_some() {
            return;
        }
        a.usage_error("--out is required");
    };

    quit::install_signal_handlers();
    // The SDK's system consumer needs the system backend initialised.
    Producer::init(
        ProducerInitArgsBuilder::new()
            .backends(Backends::SYSTEM)
            .build(),
    );
    let mut session = match TracingSession::system() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sdk-consumer: {e}");
            std::process::exit(1);
        }
    };
    let t0 = Instant::now();
    session.setup(&config);
    session.start_blocking();
    println!("sdk-consumer: started config_bytes={}", config.len());

    let stop_at = duration.map(|d| Instant::now() + d);
    let deadline = t0 + timeout;
    let end = wait_until(
        stop_file.as_ref(),
        Some(stop_at.unwrap_or(deadline).min(deadline)),
        || false,
    );
    let timed_out = end == WaitEnd::Timeout && stop_at.is_none_or(|s| s > deadline);
    let reason = match end {
        WaitEnd::Timeout if !timed_out => "Duration".to_string(),
        other => format!("{other:?}"),
    };
    let mut phase = Instant::now();
    let mut lap = || {
        let s = phase.elapsed().as_secs_f64();
        phase = Instant::now();
        s
    };
    let wait_s = lap();
    if !no_flush {
        session.flush_blocking(Duration::from_secs(5));
    }
    let flush_s = lap();
    session.stop_blocking();
    let stop_s = lap();
    let data = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = Arc::clone(&data);
    session.read_trace_blocking(move |chunk, _more| {
        sink.lock().unwrap().extend_from_slice(chunk);
    });
    let read_s = lap();
    let data = std::mem::take(&mut *data.lock().unwrap());
    if let Err(e) = std::fs::write(&out, &data) {
        eprintln!("sdk-consumer: cannot write {}: {e}", out.display());
        std::process::exit(1);
    }
    let write_s = lap();
    let u = self_usage();
    println!(
        "sdk-consumer result={} reason={reason} trace_bytes={} out={} elapsed_s={:.3} \
         wait_s={wait_s:.3} flush_s={flush_s:.3} stop_s={stop_s:.3} read_s={read_s:.3} \
         write_s={write_s:.3} cpu_s={:.3}",
        if timed_out { "timeout" } else { "ok" },
        data.len(),
        out.display(),
        t0.elapsed().as_secs_f64(),
        u.user_s + u.sys_s
    );
    std::process::exit(if timed_out { 4 } else { 0 });
}
