//! From raw flags to a validated plan of what the client will do.
//!
//! The rules and their messages follow upstream's client, so scripts that
//! relied on them keep working. Nothing here touches the OS: the applet
//! reads the config file, generates the UUID and hands them in.

use super::flags::RawFlags;
use super::light_config::{self, LightOptions};
use super::rotate_plan::{self, RotatePlan};
use crate::pb::protos::{
    mod_TraceAttributes::{mod_Attribute::OneOfvalue, Attribute},
    TraceAttributes, TraceConfig,
};
use crate::protozero::{put_varint, VecStream};
use quick_protobuf::{BytesReader, MessageRead, MessageWrite, Writer};

/// Where the trace goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stdout,
    File { path: String, no_clobber: bool },
}

/// How the client detaches from the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Background {
    No,
    /// `-d`: print the child's pid and exit at once.
    Detach,
    /// `-D`: exit once all data sources have started.
    Wait,
}

/// A tracing session to run.
#[derive(Debug, Clone)]
pub struct TracePlan {
    /// The config as sent to the service. Kept as bytes so that fields this
    /// build does not know pass through; our edits are appended (protobuf
    /// takes the last value of a scalar and concatenates repeated fields).
    pub config_bytes: Vec<u8>,
    /// The same config decoded, for the fields the client acts on.
    pub config: TraceConfig,
    /// None when the service writes the file itself (`output_path`).
    pub output: Option<Output>,
    pub background: Background,
    pub notify_fd: Option<i32>,
    pub detach_key: Option<String>,
    pub uuid: String,
    /// `--rotate-*`: cut the streamed file into numbered files.
    pub rotate: Option<RotatePlan>,
    /// `--strict`: a problem named at the start stops the trace (exit 1).
    pub strict: bool,
}

/// What to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloneTarget {
    Id(u64),
    Name(String),
}

// One per run: its size does not matter, boxing the plan would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Action {
    Version,
    ListCategories,
    ListEvents,
    Query {
        raw: bool,
        long: bool,
    },
    Attach {
        key: String,
        stop: bool,
    },
    IsDetached {
        key: String,
    },
    Clone {
        target: CloneTarget,
        for_bugreport: bool,
        output: Output,
    },
    /// The config held only `activate_triggers`: send them, do not trace.
    Triggers(Vec<String>),
    Trace(TracePlan),
}

/// A config file as read by the applet.
pub struct ConfigInput {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Parses text-format configs (the pbtx parser), returning binary bytes.
pub type TextParser<'a> = &'a dyn Fn(&str, &[u8]) -> Result<Vec<u8>, String>;

fn decode(bytes: &[u8]) -> Option<TraceConfig> {
    TraceConfig::from_reader(&mut BytesReader::from_bytes(bytes), bytes).ok()
}

fn encode(cfg: &TraceConfig) -> Vec<u8> {
    let mut out = Vec::new();
    cfg.write_message(&mut Writer::new(&mut out))
        .expect("writing to a Vec cannot fail");
    out
}

fn output_of(flags: &RawFlags) -> Option<Output> {
    flags.out.as_ref().map(|p| match p.as_str() {
        "-" => Output::Stdout,
        _ => Output::File {
            path: p.clone(),
            no_clobber: flags.no_clobber,
        },
    })
}

fn parse_attributes(raw: &[String]) -> Result<Vec<(String, String)>, String> {
    raw.iter()
        .map(|a| {
            let (k, v) = a.split_once('=').unwrap_or((a.as_str(), ""));
            if k.is_empty() {
                Err("add-attribute: key must be non-empty".to_owned())
            } else {
                Ok((k.to_owned(), v.to_owned()))
            }
        })
        .collect()
}

/// Formats a UUID from its two halves as upstream does (msb first).
pub fn uuid_string(msb: i64, lsb: i64) -> String {
    let b: Vec<u8> = (msb as u64)
        .to_be_bytes()
        .into_iter()
        .chain((lsb as u64).to_be_bytes())
        .collect();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `-c :test`: upstream's built-in smoke-test config; here 2 s of
/// scheduling, CPU frequency and idle with process names (binary).
pub fn test_config() -> Vec<u8> {
    let light = LightOptions {
        time: Some("2s".into()),
        buffer: Some("4mb".into()),
        categories: [
            "sched/sched_switch",
            "power/cpu_frequency",
            "power/cpu_idle",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    };
    encode(&light_config::build(&light).expect("built-in config"))
}

/// How long to wait before starting, per `cmd_trace_start_delay` (a
/// uniformly drawn delay in [min_delay_ms, max_delay_ms]), like upstream.
pub fn start_delay(cfg: &TraceConfig, random: u64) -> Option<std::time::Duration> {
    let d = cfg.cmd_trace_start_delay.as_ref()?;
    let (min, max) = (d.min_delay_ms?, d.max_delay_ms?);
    if max < min {
        return None;
    }
    let span = (max - min) as u64 + 1;
    Some(std::time::Duration::from_millis(min as u64 + random % span))
}

/// Checks flag combinations and builds the plan. Errors are the message
/// to print; the exit status for all of them is 1.
pub fn plan(
    flags: &RawFlags,
    config: Option<ConfigInput>,
    text_parser: TextParser,
    random_uuid: (i64, i64),
) -> Result<Action, String> {
    if flags.version {
        return Ok(Action::Version);
    }
    if flags.list_categories {
        return Ok(Action::ListCategories);
    }
    if flags.list_events {
        return Ok(Action::ListEvents);
    }
    let light = LightOptions {
        time: flags.time.clone(),
        buffer: flags.buffer.clone(),
        size: flags.size.clone(),
        apps: flags.app.clone(),
        categories: flags.categories.clone(),
        ftrace_instance: flags.ftrace_instance.clone(),
    };
    let background = match (flags.background, flags.background_wait) {
        (_, true) => Background::Wait,
        (true, false) => Background::Detach,
        _ => Background::No,
    };
    let is_attach = flags.attach.is_some() || flags.is_detached.is_some();
    let query = flags.query || flags.query_raw;
    let is_clone = flags.clone.is_some() || flags.clone_by_name.is_some();
    if query && (flags.detach.is_some() || is_attach || background != Background::No) {
        return Err("--query cannot be combined with any other argument".into());
    }
    if flags.long && !query {
        return Err("--long can only be used with --query".into());
    }
    if flags.detach.is_some() && is_attach {
        return Err("--attach and --detach are mutually exclusive".into());
    }
    if flags.detach.is_some() && background != Background::No {
        return Err("--detach and --background are mutually exclusive".into());
    }
    if flags.stop && flags.attach.is_none() {
        return Err("--stop is supported only in combination with --attach".into());
    }
    if flags.clone.is_some() && flags.clone_by_name.is_some() {
        return Err("--clone and --clone-by-name are mutually exclusive".into());
    }
    if flags.clone_for_bugreport && !is_clone {
        return Err("--clone-for-bugreport requires --clone or --clone-by-name".into());
    }
    if flags.system_sockets && flags.private_sockets {
        return Err("--system-sockets and --private-sockets are mutually exclusive".into());
    }
    let attributes = parse_attributes(&flags.add_attribute)?;

    let will_trace = !is_attach && !query;
    if !will_trace {
        if config.is_some() || light.any() {
            return Err("Cannot specify a trace config with this option".into());
        }
        if flags.out.is_some() {
            return Err("Can't pass an --out file with this option".into());
        }
        return Ok(if query {
            Action::Query {
                raw: flags.query_raw,
                long: flags.long,
            }
        } else if let Some(key) = &flags.is_detached {
            Action::IsDetached { key: key.clone() }
        } else {
            Action::Attach {
                key: flags.attach.clone().unwrap_or_default(),
                stop: flags.stop,
            }
        });
    }

    if is_clone {
        if config.is_some() || light.any() {
            return Err("Cannot specify a trace config with --clone".into());
        }
        let output = output_of(flags).ok_or("--out is required (-o FILE, or -o - for stdout)")?;
        let target = match (&flags.clone, &flags.clone_by_name) {
            (Some(id), _) => CloneTarget::Id(*id),
            (None, Some(name)) => CloneTarget::Name(name.clone()),
            (None, None) => unreachable!("is_clone"),
        };
        return Ok(Action::Clone {
            target,
            for_bugreport: flags.clone_for_bugreport,
            output,
        });
    }

    let mut config_bytes = match (config, light.any()) {
        (Some(_), true) => {
            return Err(
                "Cannot specify both -c/--config and any of --time, --size, --buffer, \
                        --app, ATRACE_CAT, FTRACE_EVENT"
                    .into(),
            )
        }
        (None, true) => encode(&light_config::build(&light)?),
        (None, false) => return Err("The TraceConfig is empty".into()),
        (Some(input), false) if (flags.txt || flags.txt_lossy) && input.name != ":test" => {
            text_parser(&input.name, &input.bytes)?
        }
        (Some(input), false) => {
            if decode(&input.bytes).is_none() || input.bytes.is_empty() {
                let mut msg = String::from("The trace config is invalid, bailing out.");
                if super::pbtx::looks_like_text(&input.bytes) {
                    msg.push_str(
                        "\nLooks like you are passing a textual config but I'm expecting a \
                         proto-encoded binary config.\nTry adding --txt to the cmdline.",
                    );
                }
                return Err(msg);
            }
            input.bytes
        }
    };
    let mut cfg = decode(&config_bytes).ok_or("The trace config is invalid, bailing out.")?;

    if !cfg.activate_triggers.is_empty() {
        return Ok(Action::Triggers(cfg.activate_triggers.clone()));
    }

    // Appended fields override earlier ones (last one wins in protobuf).
    let mut extra = VecStream::new();
    let (msb, lsb) = match (
        cfg.trace_uuid_msb.unwrap_or(0),
        cfg.trace_uuid_lsb.unwrap_or(0),
    ) {
        (0, 0) => {
            put_varint(&mut extra, 27, random_uuid.0 as u64);
            put_varint(&mut extra, 28, random_uuid.1 as u64);
            random_uuid
        }
        pair => pair,
    };
    cfg.trace_uuid_msb = Some(msb);
    cfg.trace_uuid_lsb = Some(lsb);
    if !attributes.is_empty() {
        let attrs = TraceAttributes {
            attribute: attributes
                .into_iter()
                .map(|(k, v)| Attribute {
                    key: Some(k),
                    value: OneOfvalue::string_value(v),
                })
                .collect(),
        };
        let bytes = {
            let mut b = Vec::new();
            attrs
                .write_message(&mut Writer::new(&mut b))
                .expect("Vec write");
            b
        };
        crate::protozero::put_bytes(&mut extra, 48, &bytes);
        cfg.trace_attributes
            .get_or_insert_with(Default::default)
            .attribute
            .extend(attrs.attribute);
    }
    config_bytes.extend_from_slice(extra.as_bytes());

    if let Some(cmd_delay) = &cfg.cmd_trace_start_delay {
        if cmd_delay.min_delay_ms.is_some() != cmd_delay.max_delay_ms.is_some() {
            return Err("cmd_trace_start_delay field is only partially specified.".into());
        }
    }

    let service_writes_file = cfg.write_into_file == Some(true)
        && cfg.output_path.as_deref().is_some_and(|p| !p.is_empty());
    let output = if cfg.output_path.as_deref().is_some_and(|p| !p.is_empty()) {
        if flags.out.is_some() {
            return Err("Can't pass --out if output_path is set in the trace config".into());
        }
        None
    } else {
        Some(output_of(flags).ok_or("--out is required (-o FILE, or -o - for stdout)")?)
    };
    if service_writes_file && output.is_some() {
        unreachable!("output_path excludes --out above");
    }
    if flags.detach.is_some() && cfg.write_into_file != Some(true) {
        return Err("TraceConfig's write_into_file must be true when using --detach".into());
    }

    let rotate = rotate_plan::from_flags(
        flags.rotate_size.as_deref(),
        flags.rotate_time.as_deref(),
        flags.rotate_keep,
        &cfg,
        output.as_ref(),
        flags.detach.is_some(),
    )?;
    if rotate.as_ref().is_some_and(|r| r.max_bytes.is_some()) && cfg.write_flush_mode.is_none() {
        // Each periodic write then holds what producers had up to it
        // (ftrace reads its kernel buffers to the end), so a file ends
        // within one write period's data of --rotate-size instead of
        // waiting for data still in the kernel or in producers.
        use crate::pb::protos::mod_TraceConfig::WriteFlushMode;
        let mut tail = VecStream::new();
        put_varint(&mut tail, 44, WriteFlushMode::WRITE_FLUSH_ENABLED as u64);
        config_bytes.extend_from_slice(tail.as_bytes());
        cfg.write_flush_mode = Some(WriteFlushMode::WRITE_FLUSH_ENABLED);
    }

    Ok(Action::Trace(TracePlan {
        rotate,
        config_bytes,
        config: cfg,
        output,
        background,
        notify_fd: flags.notify_fd,
        detach_key: flags.detach.clone(),
        uuid: uuid_string(msb, lsb),
        strict: flags.strict,
    }))
}

#[cfg(test)]
mod tests;
