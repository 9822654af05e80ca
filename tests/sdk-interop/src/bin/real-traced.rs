//! real-traced: the real Perfetto tracing service (from the vendored
//! amalgamation) listening only on the sockets it is given.
//!
//! Usage: real-traced [--producer-socket NAME[,NAME..]] [--consumer-socket NAME]
//!                    [--notify-fd FD] [--enable-relay-endpoint]
//! Defaults: $PERFETTO_PRODUCER_SOCK_NAME, $PERFETTO_CONSUMER_SOCK_NAME,
//! $TRACED_NOTIFY_FD. Refuses to start without explicit socket names so it
//! never takes over the system sockets. Stops on SIGINT/SIGTERM and prints its
//! own resource usage as one `key=value` line on stdout.
//! `--enable-relay-endpoint` (upstream traced's flag) also serves the
//! RelayPort service (traced_relay's InitRelay and SyncClock) on every
//! producer socket.

// Links libperfetto_c, which holds tbx_real_traced_run (see build.rs).
extern crate perfetto_sdk_sys;

use std::ffi::{c_char, c_int, CString};
use tracebox_sdk_interop::args::Args;
use tracebox_sdk_interop::procstat::self_usage;

extern "C" {
    fn tbx_real_traced_run(
        producer_sockets: *const c_char,
        consumer_socket: *const c_char,
        notify_fd: c_int,
        expose_relay: c_int,
    ) -> c_int;
}

fn main() {
    let mut args = Args::from_env(
        "real-traced [--producer-socket NAME[,NAME..]] [--consumer-socket NAME] [--notify-fd FD] \
         [--enable-relay-endpoint]",
    );
    let producer = args
        .opt_str("--producer-socket")
        .or_else(|| std::env::var("PERFETTO_PRODUCER_SOCK_NAME").ok());
    let consumer = args
        .opt_str("--consumer-socket")
        .or_else(|| std::env::var("PERFETTO_CONSUMER_SOCK_NAME").ok());
    let notify_fd: i32 = args
        .opt_parse("--notify-fd")
        .or_else(|| std::env::var("TRACED_NOTIFY_FD").ok()?.parse().ok())
        .unwrap_or(-1);
    let expose_relay = args.flag("--enable-relay-endpoint");
    args.finish();
    let (Some(producer), Some(consumer)) = (producer, consumer) else {
        args.usage_error("both producer and consumer socket names are required");
    };
    let producer_c = CString::new(producer).expect("socket name has a NUL byte");
    let consumer_c = CString::new(consumer).expect("socket name has a NUL byte");
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the
    // call; the function only reads them.
    let rc = unsafe {
        tbx_real_traced_run(
            producer_c.as_ptr(),
            consumer_c.as_ptr(),
            notify_fd,
            c_int::from(expose_relay),
        )
    };
    let usage = self_usage();
    println!(
        "real-traced: exit rc={rc} cpu_user_s={:.3} cpu_sys_s={:.3} maxrss_kb={}",
        usage.user_s, usage.sys_s, usage.maxrss_kb
    );
    std::process::exit(rc);
}
