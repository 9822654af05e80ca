//! Reading a session: service packets first, then validated buffer
//! contents with the trusted trailer, then trace stats; delivered as
//! ReadBuffers slices or as `Trace`-framed bytes for write_into_file.

use crate::pb::protos::mod_ReadBuffersResponse::Slice;
use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::pb::protos::ReadBuffersResponse;
use crate::protozero::encode_varint;

use super::config_validation::trigger_mode;
use super::packet_validator::validate_packet;
use super::service::TracingService;
use super::service_packets as sp;
use super::session::{event, SessionState};
use super::timers::{ms, Timer};
use super::trusted_trailer::TrustedTrailer;
use super::types::*;

/// A packet as slices (buffer fragments + trailer, or one service packet).
pub type Packet = Vec<Vec<u8>>;

/// Packet bytes per pass before yielding (IPC / file), as upstream.
const IPC_PASS_BYTES: usize = 32 * 1024;
const FILE_PASS_BYTES: usize = 1024 * 1024;
/// Largest ReadBuffersResponse payload we build (IPC frames are < 128 KiB).
pub const MAX_READ_FRAME: usize = 128 * 1024 - 64;
const MAX_PENDING_SNAPSHOTS: usize = 16;

impl TracingService {
    /// ReadBuffers: everything readable now, packed in responses to send in
    /// order (`has_more` on all but the last). Never empty.
    pub fn read_buffers(
        &mut self,
        now: u64,
        consumer: ConsumerId,
    ) -> Result<Vec<ReadBuffersResponse>, String> {
        let mut frames = Vec::new();
        loop {
            let (mut f, more) = self.read_buffers_step(now, consumer, usize::MAX)?;
            frames.append(&mut f);
            if !more {
                return Ok(frames);
            }
        }
    }

    /// One step of a streamed ReadBuffers: read passes until about
    /// `max_bytes` of packets were collected. Returns the responses (never
    /// empty) and whether more data may follow (then call again; the last
    /// response of the final step is the one without `has_more`).
    pub fn read_buffers_step(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        max_bytes: usize,
    ) -> Result<(Vec<ReadBuffersResponse>, bool), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        if self.sessions[&sid].write_into_file {
            return Err("ReadBuffers() is not supported with write_into_file".into());
        }
        // Pack each pass right away, moving its slices into the frames:
        // holding the packets until the end costs another copy of the data.
        let mut packer = FramePacker::default();
        let mut bytes = 0usize;
        loop {
            let (p, more) = self.read_pass(now, sid, IPC_PASS_BYTES);
            bytes += p.iter().flatten().map(Vec::len).sum::<usize>();
            p.into_iter().for_each(|pkt| packer.push(pkt));
            if !more {
                return Ok((packer.finish(), false));
            }
            if bytes >= max_bytes {
                return Ok((packer.finish(), true));
            }
        }
    }

    /// One read pass; returns the packets and whether more data is left.
    pub(super) fn read_pass(
        &mut self,
        now: u64,
        sid: SessionId,
        max_bytes: usize,
    ) -> (Vec<Packet>, bool) {
        let uid = self.service_uid;
        let mut out: Vec<Packet> = Vec::new();
        let Some(s) = self.sessions.get_mut(&sid) else {
            return (out, false);
        };
        // Trigger sessions that never triggered produce an empty trace;
        // CLONE_SNAPSHOT sessions are read only through their clones.
        let mode = trigger_mode(&s.config);
        let untriggered = matches!(mode, TriggerMode::START_TRACING | TriggerMode::STOP_TRACING)
            && s.triggers.is_empty();
        let clone_only = mode == TriggerMode::CLONE_SNAPSHOT;
        if s.state != SessionState::ClonedReadOnly && (untriggered || clone_only) {
            return (out, false);
        }
        let builtin = s.config.builtin_data_sources.clone().unwrap_or_default();
        let primary = builtin
            .primary_trace_clock
            .map(|c| c as u32)
            .filter(|&c| c != 0);
        if !s.read.did_emit_initial_clock_snapshot && !s.initial_clock_snapshot.is_empty() {
            s.read.did_emit_initial_clock_snapshot = true;
            out.push(vec![sp::clock_snapshot(
                uid,
                &s.initial_clock_snapshot,
                primary,
            )]);
        }
        for snap in s.read.pending_clock_snapshots.drain(..) {
            out.push(vec![sp::clock_snapshot(uid, &snap, primary)]);
        }
        let first = !s.read.did_emit_initial_packets;
        if first || s.read.sync_marker_due {
            s.read.sync_marker_due = false;
            out.push(vec![sp::sync_marker(uid)]);
        }
        if first && !builtin.disable_trace_config.unwrap_or(false) {
            out.push(vec![sp::trace_config(uid, now, &s.config_raw)]);
        }
        for t in &s.triggers[s.read.triggers_emitted..] {
            out.push(vec![sp::trigger(uid, t)]);
        }
        s.read.triggers_emitted = s.triggers.len();
        if first {
            s.read.did_emit_initial_packets = true;
            out.push(vec![sp::trace_uuid(uid, now, s.uuid.0, s.uuid.1)]);
            if !builtin.disable_system_info.unwrap_or(false) {
                if let Some(info) = self.env.system_info() {
                    out.push(vec![sp::system_info(uid, now, &info)]);
                }
            }
        }
        let s = self.sessions.get_mut(&sid).expect("checked above");
        s.read.pending_events.sort_by_key(|e| e.1);
        for (f, ts) in s.read.pending_events.drain(..) {
            out.push(vec![sp::service_event(uid, f, ts)]);
        }

        let mut bytes: usize = out.iter().flatten().map(Vec::len).sum();
        let mut has_more = false;
        'buffers: for bid in s.buffers.clone() {
            let Some(buf) = self.buffers.get_mut(&bid) else {
                continue;
            };
            buf.begin_read();
            while let Some((pkt, info)) = buf.read_next_trace_packet() {
                if validate_packet(pkt.slices().iter().copied()).is_err() {
                    s.stats.invalid_packets += 1;
                    continue;
                }
                let seq = s.seq_ids.get_or_assign(
                    info.client.machine_id,
                    info.producer_id,
                    info.writer_id,
                );
                let trailer = TrustedTrailer::new(&info.client, seq, info.previous_packet_dropped);
                let mut slices: Packet = pkt.slices().iter().map(|x| x.to_vec()).collect();
                slices.push(trailer.as_bytes().to_vec());
                bytes += slices.iter().map(Vec::len).sum::<usize>();
                out.push(slices);
                if bytes >= max_bytes {
                    has_more = true;
                    break 'buffers;
                }
            }
        }
        if !has_more {
            s.add_event(event::READ_TRACING_BUFFERS_COMPLETED, now);
            for (f, ts) in s.read.pending_events.drain(..) {
                out.push(vec![sp::service_event(uid, f, ts)]);
            }
            if s.read.stats_due {
                s.read.stats_due = false;
                let stats = self.trace_stats_for(sid);
                out.push(vec![sp::trace_stats(uid, now, &stats)]);
            }
        }
        (out, has_more)
    }

    /// Drains the session into its output file (write_into_file).
    pub(super) fn write_into_file_pass(&mut self, now: u64, sid: SessionId) {
        loop {
            let Some(s) = self.sessions.get(&sid) else {
                return;
            };
            if s.file_closed {
                return;
            }
            let max = s.config.max_file_size_bytes.unwrap_or(0);
            let mut written = s.file_bytes_written;
            let (packets, more) = self.read_pass(now, sid, FILE_PASS_BYTES);
            let mut data = Vec::new();
            let mut crossed = false;
            for p in &packets {
                let framed = frame_packet(p);
                if max > 0 && written + framed.len() as u64 > max {
                    crossed = true;
                    break;
                }
                written += framed.len() as u64;
                data.extend_from_slice(&framed);
            }
            let s = self.sessions.get_mut(&sid).expect("checked above");
            s.file_bytes_written = written;
            s.file_closed |= crossed;
            if !data.is_empty() {
                self.emit(Output::WriteToFile { session: sid, data });
            }
            if crossed {
                self.emit(Output::CloseFile { session: sid });
                self.stop_session(now, sid);
                return;
            }
            if !more {
                return;
            }
        }
    }

    pub(super) fn on_file_write_timer(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if s.state != SessionState::Started || s.file_closed {
            return;
        }
        let period = super::enable::file_write_period_ms(&s.config);
        self.write_into_file_pass(now, sid);
        if self
            .sessions
            .get(&sid)
            .is_some_and(|s| s.state == SessionState::Started && !s.file_closed)
        {
            self.timers.add(now + ms(period), Timer::FileWrite(sid));
        }
    }

    pub(super) fn on_snapshot_tick(&mut self, now: u64, sid: SessionId) {
        let snapshot = self.env.clock_snapshot();
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if !s.is_active() {
            return;
        }
        if s.read.pending_clock_snapshots.len() < MAX_PENDING_SNAPSHOTS && !snapshot.is_empty() {
            s.read.pending_clock_snapshots.push(snapshot);
        }
        s.read.sync_marker_due = true;
        s.read.stats_due = true;
        let period = s
            .config
            .builtin_data_sources
            .as_ref()
            .and_then(|b| b.snapshot_interval_ms)
            .filter(|&v| v > 0)
            .unwrap_or(10_000);
        self.timers.add(now + ms(period), Timer::SnapshotTick(sid));
    }
}

/// `Trace.packet` framing: tag 0x0A, varint length, payload.
pub fn frame_packet(p: &Packet) -> Vec<u8> {
    let len: usize = p.iter().map(Vec::len).sum();
    let mut v = [0u8; 10];
    let n = encode_varint(len as u64, &mut v);
    let mut out = Vec::with_capacity(len + 1 + n);
    out.push(0x0a);
    out.extend_from_slice(&v[..n]);
    for s in p {
        out.extend_from_slice(s);
    }
    out
}

/// Packs packets into ReadBuffersResponses of at most [`MAX_READ_FRAME`]
/// bytes; oversized slices are split. Always returns at least one.
pub fn pack_into_frames(packets: &[Packet]) -> Vec<ReadBuffersResponse> {
    let mut packer = FramePacker::default();
    packets.iter().for_each(|p| packer.push(p.clone()));
    packer.finish()
}

/// Packs packets into ReadBuffersResponse frames under MAX_READ_FRAME.
#[derive(Default)]
struct FramePacker {
    frames: Vec<ReadBuffersResponse>,
    cur: ReadBuffersResponse,
    cur_size: usize,
}

impl FramePacker {
    const SLICE_OVERHEAD: usize = 16;

    /// Slices that fit a frame are moved, not copied (the common case).
    fn push(&mut self, p: Packet) {
        let limit = MAX_READ_FRAME - Self::SLICE_OVERHEAD;
        let mut pieces: Vec<Vec<u8>> = Vec::with_capacity(p.len());
        for s in p {
            if s.len() <= limit {
                pieces.push(s);
            } else {
                pieces.extend(s.chunks(limit).map(<[u8]>::to_vec));
            }
        }
        pieces.retain(|c| !c.is_empty());
        let n = pieces.len();
        for (i, piece) in pieces.into_iter().enumerate() {
            if self.cur_size + piece.len() + Self::SLICE_OVERHEAD > MAX_READ_FRAME
                && !self.cur.slices.is_empty()
            {
                self.frames.push(std::mem::take(&mut self.cur));
                self.cur_size = 0;
            }
            self.cur_size += piece.len() + Self::SLICE_OVERHEAD;
            self.cur.slices.push(Slice {
                data: Some(piece),
                last_slice_for_packet: Some(i + 1 == n),
            });
        }
    }

    fn finish(mut self) -> Vec<ReadBuffersResponse> {
        self.frames.push(self.cur);
        self.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_stay_under_limit_and_keep_packet_boundaries() {
        let big = vec![7u8; 300 * 1024];
        let packets = vec![
            vec![vec![1u8; 10]],
            vec![big.clone(), vec![2u8; 5]],
            vec![vec![3u8; 100_000]],
        ];
        let frames = pack_into_frames(&packets);
        let mut joined: Vec<Vec<u8>> = vec![Vec::new()];
        for f in &frames {
            let size: usize = f
                .slices
                .iter()
                .map(|s| s.data.as_ref().unwrap().len() + 16)
                .sum();
            assert!(size <= MAX_READ_FRAME);
            for s in &f.slices {
                joined
                    .last_mut()
                    .unwrap()
                    .extend_from_slice(s.data.as_ref().unwrap());
                if s.last_slice_for_packet == Some(true) {
                    joined.push(Vec::new());
                }
            }
        }
        joined.pop();
        let mut second = big;
        second.extend_from_slice(&[2u8; 5]);
        assert_eq!(joined, vec![vec![1u8; 10], second, vec![3u8; 100_000]]);
        assert_eq!(pack_into_frames(&[]).len(), 1);
    }

    #[test]
    fn frame_packet_is_a_trace_field() {
        let f = frame_packet(&vec![vec![1, 2], vec![3]]);
        assert_eq!(f, vec![0x0a, 3, 1, 2, 3]);
    }
}
