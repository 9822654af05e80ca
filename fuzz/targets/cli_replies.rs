//! The perfetto client's decoding of service replies (first byte picks the
//! method). A hostile or broken service gets an error, never a panic.

use tracebox::cmd::rpc::decode;
use tracebox::pb::protos as p;

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let Some((&sel, reply)) = data.split_first() else {
        return;
    };
    match sel % 10 {
        0 => drop(decode::<p::EnableTracingResponse>("EnableTracing", reply)),
        1 => drop(decode::<p::ObserveEventsResponse>("ObserveEvents", reply)),
        2 => drop(decode::<p::ReadBuffersResponse>("ReadBuffers", reply)),
        3 => drop(decode::<p::QueryServiceStateResponse>(
            "QueryServiceState",
            reply,
        )),
        4 => drop(decode::<p::GetTraceStatsResponse>("GetTraceStats", reply)),
        5 => drop(decode::<p::FlushResponse>("Flush", reply)),
        6 => drop(decode::<p::CloneSessionResponse>("CloneSession", reply)),
        7 => drop(decode::<p::DetachResponse>("Detach", reply)),
        8 => drop(decode::<p::RotateOutputFileResponse>(
            "RotateOutputFile",
            reply,
        )),
        _ => drop(decode::<p::AttachResponse>("Attach", reply)),
    }
}
