//! `linux.system_info`: one `cpu_info` packet at start, from /proc/cpuinfo
//! and cpufreq sysfs (protos/perfetto/trace/system_info/cpu_info.proto).

pub mod data_source;

use std::collections::BTreeSet;

use crate::protozero::{begin_nested, end_nested, put_str, put_varint, Stream};
use crate::traced_probes::fs_root::{FsRoot, ReadErrors};

/// cpuinfo feature flags recorded as bits of `Cpu.features`. Append-only:
/// the bit index is what trace processors decode.
pub const CPU_FEATURE_BITS: [&str; 2] = ["mte", "mte3"];

/// Arm MIDR fields from /proc/cpuinfo (only when all five are present).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ArmCpuId {
    pub implementer: u32,
    pub architecture: u32,
    pub variant: u32,
    pub part: u32,
    pub revision: u32,
}

/// One cpu as parsed from /proc/cpuinfo.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ParsedCpu {
    pub index: u32,
    /// The `Processor` line (older Arm kernels), else "unknown".
    pub processor: String,
    pub arm: Option<ArmCpuId>,
    pub features: u64,
}

fn parse_radix(v: &str, radix: u32) -> Option<u32> {
    let v = v.trim();
    let v = if radix == 16 {
        v.strip_prefix("0x")
            .or_else(|| v.strip_prefix("0X"))
            .unwrap_or(v)
    } else {
        v
    };
    u32::from_str_radix(v, radix).ok()
}

/// Parses /proc/cpuinfo: one block per `processor : N`, blocks separated by
/// blank lines. The `Processor` (or `model name`) carries over to later
/// blocks (older Arm kernels print it once, at the top).
pub fn parse_cpuinfo(text: &str) -> Vec<ParsedCpu> {
    let mut cpus = Vec::new();
    let mut processor = "unknown".to_string();
    let mut index: Option<u32> = None;
    let mut arm: [Option<u32>; 5] = [None; 5];
    let mut features = 0u64;
    let mut flush = |index: &mut Option<u32>,
                     arm: &mut [Option<u32>; 5],
                     features: &mut u64,
                     processor: &str| {
        if let Some(i) = index.take() {
            let id = match *arm {
                [Some(implementer), Some(architecture), Some(variant), Some(part), Some(revision)] => {
                    Some(ArmCpuId {
                        implementer,
                        architecture,
                        variant,
                        part,
                        revision,
                    })
                }
                _ => None,
            };
            cpus.push(ParsedCpu {
                index: i,
                processor: processor.to_string(),
                arm: id,
                features: *features,
            });
        }
        *arm = [None; 5];
        *features = 0;
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            if index.is_some() {
                flush(&mut index, &mut arm, &mut features, &processor);
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim_matches(|c| c == ' ' || c == '\t');
        let value = value.strip_prefix(' ').unwrap_or(value);
        match key {
            // Arm's name line, or the model other architectures print
            // per cpu (x86, arm32), so a trace names its cpus anywhere.
            "Processor" | "model name" => processor = value.to_string(),
            "processor" => index = value.trim().parse().ok(),
            "CPU implementer" => arm[0] = parse_radix(value, 16),
            "CPU architecture" => arm[1] = parse_radix(value, 10),
            "CPU variant" => arm[2] = parse_radix(value, 16),
            "CPU part" => arm[3] = parse_radix(value, 16),
            "CPU revision" => arm[4] = parse_radix(value, 10),
            "Features" | "Flags" => {
                for word in value.split_ascii_whitespace() {
                    if let Some(bit) = CPU_FEATURE_BITS.iter().position(|f| *f == word) {
                        features |= 1 << bit;
                    }
                }
            }
            _ => {}
        }
    }
    flush(&mut index, &mut arm, &mut features, &processor);
    cpus
}

/// One `CpuInfo.Cpu`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CpuEntry {
    pub processor: String,
    /// Available (and boost) frequencies in kHz, ascending.
    pub frequencies: Vec<u32>,
    pub capacity: Option<u32>,
    pub arm: Option<ArmCpuId>,
    pub features: u64,
}

/// A `cpu_info` packet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CpuInfoPacket {
    pub timestamp: u64,
    pub cpus: Vec<CpuEntry>,
}

/// Frequencies (kHz) a cpu can run at: `scaling_available_frequencies`
/// plus `scaling_boost_frequencies`, deduplicated and sorted.
pub fn read_cpu_frequencies(root: &FsRoot, cpu: u32, errors: &mut ReadErrors) -> Vec<u32> {
    let mut set = BTreeSet::new();
    // Many cpufreq drivers (e.g. intel_pstate) have neither file.
    let mut quiet = ReadErrors::default();
    for file in ["scaling_available_frequencies", "scaling_boost_frequencies"] {
        let rel = format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/{file}");
        if let Some(text) = root.read_trimmed(&rel, &mut quiet) {
            for w in text.split_ascii_whitespace() {
                match w.parse::<u32>() {
                    Ok(f) => {
                        set.insert(f);
                    }
                    Err(_) => errors.malformed += 1,
                }
            }
        }
    }
    errors.malformed += quiet.malformed;
    set.into_iter().collect()
}

/// Builds the `cpu_info` packet. Reading /proc/cpuinfo failing yields a
/// packet with no cpus (and a counted error).
pub fn read_cpu_info(root: &FsRoot, timestamp: u64, errors: &mut ReadErrors) -> CpuInfoPacket {
    let text = root
        .read_trimmed("proc/cpuinfo", errors)
        .unwrap_or_default();
    let cpus = parse_cpuinfo(&text)
        .into_iter()
        .map(|c| {
            let mut quiet = ReadErrors::default();
            let capacity = root
                .read_i64(
                    &format!("sys/devices/system/cpu/cpu{}/cpu_capacity", c.index),
                    &mut quiet,
                )
                .and_then(|v| u32::try_from(v).ok());
            errors.malformed += quiet.malformed;
            CpuEntry {
                processor: c.processor,
                frequencies: read_cpu_frequencies(root, c.index, errors),
                capacity,
                arm: c.arm,
                features: c.features,
            }
        })
        .collect();
    CpuInfoPacket { timestamp, cpus }
}

const PACKET_TIMESTAMP: u32 = 8;
const PACKET_CPU_INFO: u32 = 67;
const CPUS: u32 = 1;
const CPU_PROCESSOR: u32 = 1;
const CPU_FREQUENCIES: u32 = 2;
const CPU_CAPACITY: u32 = 3;
const CPU_ARM_IDENTIFIER: u32 = 4;
const CPU_FEATURES: u32 = 5;

/// Writes `timestamp` and `cpu_info` into an open TracePacket.
pub fn write_cpu_info_packet<S: Stream + ?Sized>(s: &mut S, p: &CpuInfoPacket) {
    put_varint(s, PACKET_TIMESTAMP, p.timestamp);
    let info = begin_nested(s, PACKET_CPU_INFO);
    for c in &p.cpus {
        let n = begin_nested(s, CPUS);
        put_str(s, CPU_PROCESSOR, &c.processor);
        for &f in &c.frequencies {
            put_varint(s, CPU_FREQUENCIES, f as u64);
        }
        if let Some(cap) = c.capacity {
            put_varint(s, CPU_CAPACITY, cap as u64);
        }
        if let Some(a) = c.arm {
            let id = begin_nested(s, CPU_ARM_IDENTIFIER);
            for (field, v) in [a.implementer, a.architecture, a.variant, a.part, a.revision]
                .into_iter()
                .enumerate()
            {
                put_varint(s, field as u32 + 1, v as u64);
            }
            end_nested(s, id);
        }
        if c.features != 0 {
            put_varint(s, CPU_FEATURES, c.features);
        }
        end_nested(s, n);
    }
    end_nested(s, info);
}

/// Parses /proc/interrupts into (irq number, handler name) for numeric
/// irqs (`irq_names: true`). The name follows the trigger column (`Edge`,
/// `Level` on Arm GIC; `N-edge`, `N-fasteoi`... on x86); without one, the
/// last column is taken. Summary rows (`NMI:`, `LOC:`...) are skipped.
pub fn parse_interrupts(text: &str) -> Vec<(u32, String)> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let num_cpus = header
        .split_ascii_whitespace()
        .filter(|t| t.starts_with("CPU"))
        .count();
    if num_cpus == 0 {
        return Vec::new();
    }
    let is_trigger = |t: &str| {
        t == "Level"
            || t == "Edge"
            || ["-edge", "-fasteoi", "-level"]
                .iter()
                .any(|s| t.ends_with(s))
    };
    let mut out = Vec::new();
    for line in lines {
        let tokens: Vec<&str> = line.split_ascii_whitespace().collect();
        if tokens.len() <= num_cpus {
            continue;
        }
        let Some(irq) = tokens[0]
            .strip_suffix(':')
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let trigger = (num_cpus + 1..tokens.len())
            .rev()
            .find(|&i| is_trigger(tokens[i]));
        let name_start = trigger.map_or(tokens.len() - 1, |i| i + 1);
        if name_start >= tokens.len() || name_start < num_cpus + 2 {
            continue;
        }
        out.push((irq, tokens[name_start..].join(" ")));
    }
    out
}

const PACKET_INTERRUPT_INFO: u32 = 130;

/// Writes `timestamp` and `interrupt_info` into an open TracePacket.
pub fn write_interrupt_info_packet<S: Stream + ?Sized>(
    s: &mut S,
    timestamp: u64,
    irqs: &[(u32, String)],
) {
    put_varint(s, PACKET_TIMESTAMP, timestamp);
    let info = begin_nested(s, PACKET_INTERRUPT_INFO);
    for (irq, name) in irqs {
        let m = begin_nested(s, 1);
        put_varint(s, 1, *irq as u64);
        put_str(s, 2, name);
        end_nested(s, m);
    }
    end_nested(s, info);
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARM: &str = "Processor\t: AArch64 Processor rev 1 (aarch64)\n\
processor\t: 0\nBogoMIPS\t: 38.40\nFeatures\t: fp asimd mte\nCPU implementer\t: 0x41\n\
CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd05\nCPU revision\t: 0\n\n\
processor\t: 1\nFeatures\t: fp mte3 mte\nCPU implementer\t: 0x41\nCPU part\t: 0xd41\n\n";

    #[test]
    fn arm_cpuinfo() {
        let cpus = parse_cpuinfo(ARM);
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[0].processor, "AArch64 Processor rev 1 (aarch64)");
        assert_eq!(
            cpus[0].arm,
            Some(ArmCpuId {
                implementer: 0x41,
                architecture: 8,
                variant: 1,
                part: 0xd05,
                revision: 0
            })
        );
        assert_eq!(cpus[0].features, 1);
        // Incomplete Arm fields: no identifier; name carried over.
        assert_eq!((cpus[1].index, cpus[1].arm, cpus[1].features), (1, None, 3));
        assert_eq!(cpus[1].processor, cpus[0].processor);
    }

    #[test]
    fn interrupts_x86_and_arm() {
        let x86 = "           CPU0       CPU1\n  0:         44          0   IO-APIC   2-edge      timer\n\
 28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config\n\
NMI:          0          0   Non-maskable interrupts\n  9:  1\n";
        assert_eq!(
            parse_interrupts(x86),
            vec![(0, "timer".to_string()), (28, "virtio0-config".to_string())]
        );
        let arm = "      CPU0  CPU1  CPU2\n 11:  5  6  7  GICv3  27 Level  arch_timer\n\
 40:  0  0  0  GICv3  72 Edge  cs40l26 IRQ1 Controller\n 41:  0  0  0  pinctrl  3  gpio-keys\n";
        assert_eq!(
            parse_interrupts(arm),
            vec![
                (11, "arch_timer".into()),
                (40, "cs40l26 IRQ1 Controller".into()),
                (41, "gpio-keys".into())
            ]
        );
        assert!(parse_interrupts("").is_empty());
        assert!(parse_interrupts("no cpus here\n1: 2 3\n").is_empty());
    }

    #[test]
    fn x86_cpuinfo_and_garbage() {
        let cpus = parse_cpuinfo(
            "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu mte\n\nprocessor\t: 1\n",
        );
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[1].index, 1, "last block flushed without a blank line");
        // x86 names its model per cpu: the trace (and report's `CPUs:`)
        // says it rather than "unknown".
        assert_eq!(
            (cpus[0].processor.as_str(), cpus[0].features),
            ("Some CPU", 0)
        );
        assert!(parse_cpuinfo("").is_empty());
        assert!(parse_cpuinfo("processor: x\n\n:::\n\u{0}").is_empty());
    }
}
