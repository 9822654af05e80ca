//! `perfetto`: the consumer command-line client. Reached through
//! `tracebox` (perfetto flags or `tracebox perfetto ...`) it autostarts
//! traced and traced_probes when no service answers.

use std::io::Read;
use std::time::Duration;

use super::Via;
use crate::base::daemonize::{self, Side};
use crate::cmd::flags::{normalize, RawFlags};
use crate::cmd::options::{self, Action, Background, ConfigInput};
use crate::cmd::session::ReadyNotifier;
use crate::cmd::signals::{self, StopSignals};
use crate::cmd::{attach, autostart, output, pbtx, query, session, triggers};
use crate::ipc::default_sockets::{consumer_socket_name, producer_socket_name};

const BACKGROUND_WAIT: Duration = Duration::from_secs(30);

fn usage() -> String {
    let mut refs = vec!["perfetto"];
    refs.push("--help");
    match <RawFlags as argh::FromArgs>::from_args(&["perfetto"], &refs[1..]) {
        Err(e) => e.output,
        Ok(_) => String::new(),
    }
}

fn read_config(path: &str) -> Result<ConfigInput, String> {
    let bytes = if path == ":test" {
        options::test_config()
    } else if path == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .map_err(|e| format!("Could not read stdin: {e}"))?;
        b
    } else {
        std::fs::read(path).map_err(|e| format!("Could not open {path}: {e}"))?
    };
    Ok(ConfigInput {
        name: path.to_owned(),
        bytes,
    })
}

fn text_config(name: &str, bytes: &[u8], lossy: bool) -> Result<Vec<u8>, String> {
    let opts = pbtx::ParseOptions {
        allow_unknown: lossy,
    };
    pbtx::bytes_to_proto(pbtx::TRACE_CONFIG, name, bytes, opts).map_err(|e| e.to_string())
}

/// A version-4 UUID from the kernel's random pool.
fn random_uuid() -> (i64, i64) {
    let mut b = [0u8; 16];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let msb = i64::from_be_bytes(b[..8].try_into().unwrap());
    let lsb = i64::from_be_bytes(b[8..].try_into().unwrap());
    (msb, lsb)
}

pub fn main(args: &[String], via: Via) -> i32 {
    // From the first instruction: under load `timeout -s INT` can fire
    // while the flags and config are still being read, and a trace must
    // say what became of it. Commands that do not trace release them.
    signals::hold();
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        eprint!("{}", usage());
        return 1;
    }
    let norm = normalize(args);
    let refs: Vec<&str> = norm.iter().map(String::as_str).collect();
    let flags = match <RawFlags as argh::FromArgs>::from_args(&["perfetto"], &refs) {
        Ok(f) => f,
        Err(e) => {
            eprint!("{}", e.output);
            return 1;
        }
    };
    let config = match flags.config.as_deref().map(read_config).transpose() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let lossy = flags.txt_lossy;
    let parser = move |name: &str, bytes: &[u8]| text_config(name, bytes, lossy);
    let action = match options::plan(&flags, config, &parser, random_uuid()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if via == Via::Multicall && flags.private_sockets {
        autostart::use_private_sockets();
    }
    let consumer = consumer_socket_name();
    if !matches!(action, Action::Trace(_) | Action::Attach { .. }) {
        signals::release();
    }
    match action {
        Action::Version => {
            println!("{}", crate::VERSION);
            0
        }
        Action::ListCategories => crate::cmd::list::list_categories(),
        Action::ListEvents => crate::cmd::list::list_events(),
        Action::Query { raw, long } => query::run(&consumer, raw, long),
        Action::IsDetached { key } => attach::is_detached(&consumer, &key),
        Action::Attach { key, stop } => match StopSignals::install() {
            Ok(mut s) => attach::attach_and_wait(&consumer, &key, stop, &mut s),
            Err(e) => {
                eprintln!("signal setup failed: {e}");
                1
            }
        },
        Action::Clone {
            target,
            for_bugreport,
            output,
        } => attach::clone(&consumer, &target, for_bugreport, &output),
        Action::Triggers(names) => triggers::activate(&producer_socket_name(), &names),
        Action::Trace(plan) => {
            // Light-mode typos and output-path errors before any daemon
            // starts (or -d forks).
            if let Err(e) = crate::cmd::list::check_light_tokens(&flags.categories) {
                eprintln!("{e}");
                return 1;
            }
            if let Err(e) = plan.output.as_ref().map_or(Ok(()), output::precheck) {
                eprintln!("{e}");
                return 1;
            }
            let mut ready = ReadyNotifier(None);
            if plan.background != Background::No {
                match daemonize::background() {
                    Ok(Side::Parent { child_pid, status }) => {
                        // The child traces; Ctrl-C ends this waiting parent.
                        signals::release();
                        println!("{child_pid}");
                        if plan.background == Background::Detach {
                            return 0;
                        }
                        return match daemonize::wait_status(status, BACKGROUND_WAIT) {
                            Ok(Some(code)) => code as i32,
                            Ok(None) => 2,
                            Err(_) => 1,
                        };
                    }
                    Ok(Side::Child { status }) => {
                        if plan.background == Background::Wait {
                            ready = ReadyNotifier(Some(status));
                        }
                    }
                    Err(e) => {
                        eprintln!("Could not go to the background: {e}");
                        return 1;
                    }
                }
            } else if let Some(fd) = plan.notify_fd {
                ready = ReadyNotifier(take_fd(fd));
            }
            // Before autostart, so an interrupt from here on is seen (and
            // said) rather than killing the client silently.
            let mut signals = match StopSignals::install() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("signal setup failed: {e}");
                    return 1;
                }
            };
            let _service = if via == Via::Multicall {
                match autostart::ensure_daemons(&consumer) {
                    Ok(d) => {
                        eprintln!("{}", d.first_line);
                        Some(d)
                    }
                    Err(e) => {
                        eprintln!("tracebox: could not start the daemons: {e}");
                        return 1;
                    }
                }
            } else {
                None
            };
            crate::cmd::status_line::set_limits(crate::cmd::status_line::Limits {
                max_file_bytes: plan.config.max_file_size_bytes.unwrap_or(0),
                trigger_timeout_ms: plan
                    .config
                    .trigger_config
                    .as_ref()
                    .and_then(|t| t.trigger_timeout_ms)
                    .unwrap_or(0) as u64,
            });
            if let Some(delay) = options::start_delay(&plan.config, random_uuid().0 as u64) {
                eprintln!(
                    "Delaying the trace start by {} ms (cmd_trace_start_delay)",
                    delay.as_millis()
                );
                if signals.sleep_unless_interrupted(delay) {
                    eprintln!("{}", crate::cmd::signals::BEFORE_START);
                    return 1;
                }
            }
            session::run(&plan, &consumer, &mut signals, ready)
        }
    }
}

/// Adopts `--notify-fd N`. Only fds above stdio are accepted.
fn take_fd(fd: i32) -> Option<std::os::fd::OwnedFd> {
    if fd <= 2 {
        eprintln!("--notify-fd must name an fd above 2");
        return None;
    }
    // SAFETY: the user handed us this fd number on the command line for
    // our exclusive use; it is adopted once.
    Some(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}
