//! linux.system_info and linux.sysfs_power: fixtures, the real system and
//! pb-rs decoding.

use std::path::Path;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::{
    mod_CpuInfo::mod_Cpu::OneOfidentifier, mod_TracePacket::OneOfdata, TracePacket,
};
use tracebox::protozero::VecStream;
use tracebox::traced_probes::fs_root::{FsRoot, ReadErrors};
use tracebox::traced_probes::power::{write_battery_packet, PowerSupplies};
use tracebox::traced_probes::system_info::{read_cpu_info, write_cpu_info_packet};

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn decode(bytes: &[u8]) -> TracePacket {
    TracePacket::from_reader(&mut BytesReader::from_bytes(bytes), bytes).unwrap()
}

#[test]
fn cpu_info_from_fixture_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "proc/cpuinfo", "processor\t: 0\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x2\nCPU part\t: 0xd44\nCPU revision\t: 1\nFeatures\t: fp mte\n\nprocessor\t: 1\n\n");
    write(
        r,
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_available_frequencies",
        "300000 1800000 900000 \n",
    );
    write(
        r,
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_boost_frequencies",
        "2400000 bogus\n",
    );
    write(r, "sys/devices/system/cpu/cpu0/cpu_capacity", "1024\n");
    let mut e = ReadErrors::default();
    let info = read_cpu_info(&FsRoot::new(r), 77, &mut e);
    assert_eq!(e.malformed, 1, "bogus frequency counted");
    assert_eq!(info.cpus.len(), 2);
    assert_eq!(
        info.cpus[0].frequencies,
        vec![300_000, 900_000, 1_800_000, 2_400_000]
    );
    assert!(info.cpus[1].frequencies.is_empty() && info.cpus[1].capacity.is_none());

    let mut s = VecStream::new();
    write_cpu_info_packet(&mut s, &info);
    let p = decode(s.as_bytes());
    assert_eq!(p.timestamp, Some(77));
    let OneOfdata::cpu_info(ci) = p.data else {
        panic!("not cpu_info")
    };
    let c0 = &ci.cpus[0];
    assert_eq!(c0.processor.as_deref(), Some("unknown"));
    assert_eq!(c0.frequencies, vec![300_000, 900_000, 1_800_000, 2_400_000]);
    assert_eq!(c0.capacity, Some(1024));
    assert_eq!(c0.features, Some(1));
    let OneOfidentifier::arm_identifier(id) = &c0.identifier else {
        panic!("no arm id")
    };
    assert_eq!(
        (
            id.implementer,
            id.architecture,
            id.variant,
            id.part,
            id.revision
        ),
        (Some(0x41), Some(8), Some(2), Some(0xd44), Some(1))
    );
    assert!(matches!(ci.cpus[1].identifier, OneOfidentifier::None));
}

#[test]
fn cpu_info_of_this_machine() {
    let mut e = ReadErrors::default();
    let info = read_cpu_info(&FsRoot::host(), 1, &mut e);
    let online = std::thread::available_parallelism().unwrap().get();
    assert!(
        info.cpus.len() >= online,
        "{} cpus in cpuinfo, {online} usable",
        info.cpus.len()
    );
    assert_eq!(e.total(), 0, "{e:?}");

    // IRQ names from the real /proc/interrupts decode too.
    let irqs = tracebox::traced_probes::system_info::parse_interrupts(
        &std::fs::read_to_string("/proc/interrupts").unwrap(),
    );
    assert!(!irqs.is_empty());
    let mut s = VecStream::new();
    tracebox::traced_probes::system_info::write_interrupt_info_packet(&mut s, 3, &irqs);
    let OneOfdata::interrupt_info(ii) = decode(s.as_bytes()).data else {
        panic!("not interrupt_info")
    };
    assert_eq!(ii.irq_mapping.len(), irqs.len());
    assert_eq!(ii.irq_mapping[0].irq_id, Some(irqs[0].0));
    assert_eq!(ii.irq_mapping[0].name.as_deref(), Some(irqs[0].1.as_str()));
}

#[test]
fn batteries_from_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let ps = "sys/class/power_supply";
    write(r, &format!("{ps}/BAT0/type"), "Battery\n");
    write(r, &format!("{ps}/BAT0/present"), "1\n");
    write(r, &format!("{ps}/BAT0/capacity"), "87\n");
    write(r, &format!("{ps}/BAT0/charge_now"), "3000000\n");
    write(r, &format!("{ps}/BAT0/current_now"), "-250000\n");
    write(r, &format!("{ps}/BAT0/voltage_now"), "12000000\n");
    write(r, &format!("{ps}/BAT0/energy_now"), "oops\n");
    write(r, &format!("{ps}/BAT1/type"), "Battery\n");
    write(r, &format!("{ps}/BAT1/present"), "1\n");
    write(r, &format!("{ps}/BAT2/type"), "Battery\n");
    write(r, &format!("{ps}/BAT2/present"), "0\n");
    write(r, &format!("{ps}/AC/type"), "Mains\n");
    let mut e = ReadErrors::default();
    let supplies = PowerSupplies::discover(&FsRoot::new(r), &mut e);
    assert_eq!(supplies.battery_names(), ["BAT0", "BAT1"]);
    let packets = supplies.read(9, &mut e);
    assert_eq!(e.malformed, 1, "energy_now");
    let b0 = &packets[0];
    assert_eq!(
        (b0.capacity_percent, b0.charge_counter_uah, b0.current_ua),
        (Some(87.0), Some(3_000_000), Some(-250_000))
    );
    assert_eq!(
        (b0.voltage_uv, b0.energy_counter_uwh, b0.name.as_deref()),
        (Some(12_000_000), None, Some("BAT0"))
    );
    assert_eq!(packets[1].capacity_percent, None);

    let mut s = VecStream::new();
    write_battery_packet(&mut s, b0);
    let p = decode(s.as_bytes());
    assert_eq!(p.timestamp, Some(9));
    let OneOfdata::battery(b) = p.data else {
        panic!("not battery")
    };
    assert_eq!(
        (b.capacity_percent, b.current_ua, b.charge_counter_uah),
        (Some(87.0), Some(-250_000), Some(3_000_000))
    );
    assert_eq!(
        (b.voltage_uv, b.energy_counter_uwh, b.name.as_deref()),
        (Some(12_000_000), None, Some("BAT0"))
    );

    // No power_supply class at all: nothing, counted as missing.
    let mut e = ReadErrors::default();
    let none = PowerSupplies::discover(&FsRoot::new(dir.path().join("nowhere")), &mut e);
    assert!(none.battery_names().is_empty() && none.read(1, &mut e).is_empty());
    assert_eq!(e.missing, 1);
}
