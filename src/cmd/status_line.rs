//! The one-line live status shown on a terminal while a trace records:
//! elapsed time out of the total, bytes in the buffers, data lost so far.

use crate::pb::protos::TraceStats;

/// Bytes and losses summed over all buffers of a session.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub bytes_written: u64,
    pub chunks_lost: u64,
    pub packets_lost: u64,
}

pub fn figures(stats: &TraceStats) -> Figures {
    let mut f = Figures::default();
    for b in &stats.buffer_stats {
        f.bytes_written += b.bytes_written.unwrap_or(0);
        f.chunks_lost += b.chunks_overwritten.unwrap_or(0)
            + b.chunks_discarded.unwrap_or(0)
            + b.abi_violations.unwrap_or(0);
        f.packets_lost += b.trace_writer_packet_loss.unwrap_or(0);
    }
    f.chunks_lost += stats.chunks_discarded.unwrap_or(0);
    f.packets_lost += stats.invalid_packets.unwrap_or(0);
    f
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Renders the line; `total_ms` is 0 for an open-ended trace.
pub fn render(elapsed_ms: u64, total_ms: u64, f: Figures) -> String {
    let time = if total_ms > 0 {
        format!(
            "{:.1}s / {:.1}s",
            elapsed_ms as f64 / 1000.0,
            total_ms as f64 / 1000.0
        )
    } else {
        format!("{:.1}s", elapsed_ms as f64 / 1000.0)
    };
    let lost = if f.chunks_lost == 0 && f.packets_lost == 0 {
        "nothing lost".to_owned()
    } else {
        format!("LOST {} chunks, {} packets", f.chunks_lost, f.packets_lost)
    };
    format!("[{time}] {} recorded, {lost}", human_bytes(f.bytes_written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_TraceStats::BufferStats;

    #[test]
    fn sums_buffers_and_reports_losses() {
        let stats = TraceStats {
            buffer_stats: vec![
                BufferStats {
                    bytes_written: Some(3 << 20),
                    chunks_overwritten: Some(2),
                    ..Default::default()
                },
                BufferStats {
                    bytes_written: Some(1 << 20),
                    trace_writer_packet_loss: Some(1),
                    ..Default::default()
                },
            ],
            invalid_packets: Some(4),
            ..Default::default()
        };
        let f = figures(&stats);
        assert_eq!(
            f,
            Figures {
                bytes_written: 4 << 20,
                chunks_lost: 2,
                packets_lost: 5
            }
        );
        assert_eq!(
            render(1500, 10_000, f),
            "[1.5s / 10.0s] 4.0 MB recorded, LOST 2 chunks, 5 packets"
        );
        assert_eq!(
            render(0, 0, Figures::default()),
            "[0.0s] 0 B recorded, nothing lost"
        );
    }
}
