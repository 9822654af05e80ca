//! `perfetto --query` and `--query-raw`: what the service knows.

use std::io::{IsTerminal, Write};

use super::rpc::{decode, Port};
use crate::pb::protos::{QueryServiceStateRequest, TracingServiceState};

const TRUNCATE_AT: usize = 40;

/// Fetches the service state. Its stream may be split across replies;
/// the chunks concatenate into one message.
pub fn fetch(socket: &str) -> Result<Vec<u8>, String> {
    let mut port = Port::connect(socket, "ConsumerPort")?;
    port.client
        .set_timeout(Some(std::time::Duration::from_secs(10)));
    let replies = port
        .client
        .invoke(
            &port.service,
            "QueryServiceState",
            &super::rpc::encode(&QueryServiceStateRequest::default()),
            None,
        )
        .map_err(|e| format!("Failed to query the service state: {e}"))?;
    let mut state = Vec::new();
    for r in replies {
        if !r.success {
            return Err("Failed to query the service state".into());
        }
        // Each reply is a QueryServiceStateResponse whose field 1 holds a
        // piece of the TracingServiceState; concatenating the replies'
        // field-1 payloads yields the whole message.
        let resp: crate::pb::protos::QueryServiceStateResponse =
            decode("QueryServiceState", &r.payload)?;
        if let Some(s) = resp.service_state {
            state.extend_from_slice(&super::rpc::encode(&s));
        }
    }
    Ok(state)
}

fn cut(s: String, long: bool) -> String {
    if long || s.chars().count() <= TRUNCATE_AT {
        s
    } else {
        s.chars().take(TRUNCATE_AT - 3).collect::<String>() + "..."
    }
}

/// Colour on a terminal only, and never with `NO_COLOR` set (non-empty),
/// as no-color.org asks.
pub fn use_colour(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Human-readable report, upstream-style (not for machines). `colour`:
/// the warning line in red.
pub fn render(state: &TracingServiceState, long: bool, colour: bool) -> String {
    let mut o = String::new();
    let warning = "Not meant for machine consumption. Use --query-raw for scripts.";
    if colour {
        o.push_str(&format!("\x1b[31m{warning}\x1b[0m\n\n"));
    } else {
        o.push_str(&format!("{warning}\n\n"));
    }
    o.push_str(&format!(
        "Service: {}\nTracing sessions: {} (started: {})\n\n",
        state.tracing_service_version.clone().unwrap_or_default(),
        state.num_sessions.unwrap_or(0),
        state.num_sessions_started.unwrap_or(0)
    ));
    o.push_str("PRODUCER PROCESSES CONNECTED:\n\nID     PID      UID      NAME\n");
    for p in &state.producers {
        o.push_str(&format!(
            "{:<6} {:<8} {:<8} {}\n",
            p.id.unwrap_or(0),
            p.pid.unwrap_or(0),
            p.uid.unwrap_or(0),
            cut(p.name.clone().unwrap_or_default(), long)
        ));
    }
    o.push_str("\nDATA SOURCES REGISTERED:\n\nNAME                                     PRODUCER\n");
    for d in &state.data_sources {
        let name = d
            .ds_descriptor
            .as_ref()
            .and_then(|x| x.name.clone())
            .unwrap_or_default();
        o.push_str(&format!(
            "{:<40} {}\n",
            cut(name, long),
            d.producer_id.unwrap_or(0)
        ));
    }
    o.push_str(
        "\nTRACING SESSIONS:\n\nID      UID     STATE      BUF (#) KB   DUR (s)   #DS  NAME\n",
    );
    for s in &state.tracing_sessions {
        let bufs: Vec<u32> = s.buffer_size_kb.clone();
        o.push_str(&format!(
            "{:<7} {:<7} {:<10} ({}) {:<8} {:<9} {:<4} {}\n",
            s.id.unwrap_or(0),
            s.consumer_uid.unwrap_or(0),
            s.state.clone().unwrap_or_default(),
            bufs.len(),
            bufs.iter().sum::<u32>(),
            s.duration_ms.unwrap_or(0) / 1000,
            s.num_data_sources.unwrap_or(0),
            s.unique_session_name.clone().unwrap_or_default()
        ));
    }
    o
}

/// Runs `--query` / `--query-raw`; returns the exit status.
pub fn run(socket: &str, raw: bool, long: bool) -> i32 {
    let bytes = match fetch(socket) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if raw {
        return match std::io::stdout().write_all(&bytes) {
            Ok(()) => 0,
            Err(_) => 1,
        };
    }
    // Our own re-encoding of the replies' checked pieces (see `fetch`).
    match crate::protozero::decode::decode_message::<TracingServiceState>(&bytes) {
        Ok(state) => {
            let colour = use_colour(
                std::io::stdout().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            );
            print!("{}", render(&state, long, colour));
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let st = TracingServiceState::default();
        assert!(!render(&st, false, false).contains('\x1b'));
        assert!(render(&st, false, true).starts_with("\x1b[31m"));
        assert!(use_colour(true, None));
        assert!(!use_colour(false, None));
        assert!(!use_colour(true, Some("1".as_ref())));
        assert!(use_colour(true, Some("".as_ref())));
    }
}
