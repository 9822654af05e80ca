//! Rotation of a write_into_file session's output (a tracebox extension of
//! the consumer port, `RotateOutputFile`): the client sends a new file and
//! the session goes on in it. Every packet is read out exactly once, so the
//! files together hold what one unrotated file would; each file starts
//! with its own trace config, clock snapshot and system info, and the data
//! sources are asked (once, before the cut's flush) to clear their
//! incremental state so that interned data and the process tree are
//! emitted again into the new file.

use super::flush::FlushOrigin;
use super::service::TracingService;
use super::session::SessionState;
use super::types::*;

/// Why a cut is refused before the session started (deferred start, or a
/// START_TRACING trigger not yet hit): the client (`cmd/rotate.rs`) tries
/// again later.
const NOT_STARTED: &str = "The session has not started yet";

/// Failed cuts named per session (a client stops rotating at its first;
/// more come only from a misbehaving one), and bytes kept of each reason.
const MAX_ROTATION_STOPS: u32 = 4;
const MAX_REASON_LEN: usize = 512;

impl TracingService {
    /// Starts a rotation: a flush, then [`Self::finish_rotate`]. Answered
    /// with [`Output::RotateResult`]; the adapter holds the new file under
    /// `token` until [`Output::SwitchFile`] names it.
    pub fn rotate_file(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        token: RequestToken,
    ) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        let s = &self.sessions[&sid];
        if !s.write_into_file {
            return Err("Rotation needs a write_into_file session".into());
        }
        if s.state == SessionState::Configured {
            return Err(NOT_STARTED.into());
        }
        if s.state != SessionState::Started || s.file_closed {
            return Err("The session is no longer writing its file".into());
        }
        // One at a time: each parks a file descriptor in the adapter.
        let rotating = self
            .flushes
            .values()
            .any(|f| f.session == sid && matches!(f.origin, FlushOrigin::Rotate { .. }));
        if rotating {
            return Err("A rotation of this session is already in progress".into());
        }
        let timeout = s.flush_timeout_ms();
        let flags = flush_flags::REASON_PERIODIC | flush_flags::INITIATOR_TRACED;
        let origin = FlushOrigin::Rotate { consumer, token };
        // Sequences that clear now start afresh in the new file (see
        // rotate_divert); the flush brings their first packets in. They are
        // held from now on: a periodic write during the flush (a slow
        // ftrace read pass) must not put them into the old file.
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.read.divert = Some(Default::default());
        }
        self.clear_incremental_state_now(sid);
        self.start_flush(now, sid, timeout, flags, origin);
        Ok(())
    }

    /// The flush is over (acked or timed out: what came late goes into the
    /// new file, nothing is lost): drain into the old file, switch, and
    /// start the new file's header afresh.
    pub(super) fn finish_rotate(
        &mut self,
        now: u64,
        sid: SessionId,
        consumer: ConsumerId,
        token: RequestToken,
    ) {
        let writing =
            |s: &super::session::Session| s.state == SessionState::Started && !s.file_closed;
        let Some(s) = self.sessions.get_mut(&sid).filter(|s| writing(s)) else {
            let result = Err("The session stopped before the rotation".into());
            self.emit(Output::RotateResult {
                consumer,
                token,
                result,
            });
            return;
        };
        // The old file ends with the session's stats as they are now.
        s.read.stats_due = true;
        s.read.divert.get_or_insert_with(Default::default);
        self.write_into_file_pass(now, sid);
        if let Some(s) = self.sessions.get_mut(&sid) {
            let held = s
                .read
                .divert
                .take()
                .map(|d| d.into_held())
                .unwrap_or_default();
            s.read.held_for_new_file = held;
        }
        if !self.sessions.get(&sid).is_some_and(writing) {
            // The drain reached max_file_size_bytes and ended the session.
            let result = Err("The session stopped at max_file_size_bytes".into());
            self.emit(Output::RotateResult {
                consumer,
                token,
                result,
            });
            return;
        }
        self.emit(Output::SwitchFile {
            session: sid,
            token,
        });
        let snapshot = self.env.clock_snapshot();
        let s = self.sessions.get_mut(&sid).expect("checked above");
        s.file_bytes_written = 0;
        if !snapshot.is_empty() {
            s.initial_clock_snapshot = snapshot;
        }
        s.read.did_emit_initial_clock_snapshot = false;
        s.read.did_emit_initial_packets = false;
        s.read.pending_clock_snapshots.clear();
        // No second ClearIncrementalState: the one before the flush already
        // made every honouring sequence start afresh in the new file (held
        // back above), and another would make process_stats scan /proc
        // twice per cut.
        self.emit(Output::RotateResult {
            consumer,
            token,
            result: Ok(()),
        });
    }

    /// A session that ends while a cut is pending writes what the cut held
    /// back for the new file into the file it has (nothing is lost).
    pub(super) fn release_rotation_hold(&mut self, sid: SessionId) {
        if let Some(s) = self.sessions.get_mut(&sid) {
            if let Some(d) = s.read.divert.take() {
                // After an earlier cut's lead, if still unwritten.
                s.read.held_for_new_file.extend(d.into_held());
            }
        }
    }

    /// The client could not cut (`RotateOutputFile` with `cut_failed`): the
    /// trace names it (`rotation_stopped`), the session goes on in its
    /// file.
    pub fn note_rotation_stopped(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        reason_untrusted: &str,
    ) -> Result<(), String> {
        use crate::protozero::{put_str, VecStream};
        use crate::schema::service_events::field;
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        let s = self.sessions.get_mut(&sid).expect("the consumer's session");
        if !s.write_into_file {
            return Err("Rotation needs a write_into_file session".into());
        }
        let faults = &mut s.read.faults;
        if faults.rotation_stops >= MAX_ROTATION_STOPS {
            return Err("This session's failed cuts were named already".into());
        }
        faults.rotation_stops += 1;
        let mut end = reason_untrusted.len().min(MAX_REASON_LEN);
        while !reason_untrusted.is_char_boundary(end) {
            end -= 1;
        }
        let mut e = VecStream::new();
        put_str(&mut e, field::ROTATION_STOPPED, &reason_untrusted[..end]);
        faults.pending.push((now, e.into_bytes()));
        Ok(())
    }

    /// Whether the session asked for its file to be synced to storage
    /// after writes (`fflush_post_write`).
    pub fn session_syncs_file(&self, sid: SessionId) -> bool {
        use crate::pb::protos::mod_TraceConfig::FFlushMode;
        self.sessions
            .get(&sid)
            .is_some_and(|s| s.config.fflush_post_write == Some(FFlushMode::FFLUSH_ENABLED))
    }
}
