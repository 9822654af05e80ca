//! The Android .rc files, checked statically (no Android init here): the
//! syntax init accepts (sections, known service options and commands),
//! no service or socket that the platform's own perfetto.rc declares, every
//! started service declared, SELinux documented, and the "beside" file's
//! socket names and ftrace lock dir agreeing with what the code does.

use std::collections::{HashMap, HashSet};

const RC_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/init");

/// The platform's perfetto.rc services and sockets (names init would
/// refuse twice, or that two daemons would fight over).
const PLATFORM_SERVICES: &[&str] = &["traced", "traced_probes", "traced_perf", "perfetto"];
const PLATFORM_SOCKETS: &[&str] = &["traced_producer", "traced_consumer"];

const SERVICE_OPTIONS: &[&str] = &[
    "class",
    "disabled",
    "user",
    "group",
    "seclabel",
    "setenv",
    "socket",
    "oneshot",
    "capabilities",
    "writepid",
    "task_profiles",
    "onrestart",
    "file",
    "priority",
];
const COMMANDS: &[&str] = &[
    "start", "stop", "setprop", "mkdir", "chmod", "chown", "write", "restart",
];

#[derive(Default, Debug)]
struct Service {
    argv: Vec<String>,
    options: Vec<Vec<String>>,
}

impl Service {
    fn option(&self, name: &str) -> Vec<&[String]> {
        self.options
            .iter()
            .filter(|o| o[0] == name)
            .map(|o| &o[1..])
            .collect()
    }
    fn env(&self) -> HashMap<&str, &str> {
        self.option("setenv")
            .into_iter()
            .map(|a| {
                assert_eq!(a.len(), 2, "setenv NAME VALUE: {a:?}");
                (a[0].as_str(), a[1].as_str())
            })
            .collect()
    }
}

struct Rc {
    text: String,
    services: HashMap<String, Service>,
    /// Commands of every `on` section.
    commands: Vec<Vec<String>>,
}

fn parse(file: &str) -> Rc {
    let text = std::fs::read_to_string(format!("{RC_DIR}/{file}")).unwrap();
    let mut services: HashMap<String, Service> = HashMap::new();
    let mut commands = Vec::new();
    let mut current: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let where_ = format!("{file}:{}", n + 1);
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        if words.is_empty() || words[0].starts_with('#') {
            continue;
        }
        let indented = line.starts_with(' ');
        match (indented, words[0].as_str()) {
            (false, "service") => {
                assert!(words.len() >= 3, "{where_}: service NAME PATH");
                let name = words[1].clone();
                assert!(
                    !services.contains_key(&name),
                    "{where_}: service {name} twice"
                );
                services.insert(
                    name.clone(),
                    Service {
                        argv: words[2..].to_vec(),
                        ..Default::default()
                    },
                );
                current = Some(name);
            }
            (false, "on") => {
                assert!(words.len() >= 2, "{where_}: on TRIGGER");
                current = None;
            }
            (false, other) => panic!("{where_}: unknown section {other}"),
            (true, word) => match &current {
                Some(s) => {
                    assert!(SERVICE_OPTIONS.contains(&word), "{where_}: option {word}");
                    services.get_mut(s).unwrap().options.push(words);
                }
                None => {
                    assert!(COMMANDS.contains(&word), "{where_}: command {word}");
                    commands.push(words);
                }
            },
        }
    }
    Rc {
        text,
        services,
        commands,
    }
}

fn check_common(rc: &Rc, file: &str) {
    assert!(rc.text.contains("SELinux"), "{file} documents no SELinux");
    for (name, s) in &rc.services {
        assert!(
            !PLATFORM_SERVICES.contains(&name.as_str()),
            "{file}: service {name} is the platform's"
        );
        assert!(
            !s.option("seclabel").is_empty(),
            "{file}: {name} has no seclabel"
        );
        let applet = s.argv.get(1).map(String::as_str).unwrap_or("");
        assert_eq!(s.argv[0], "/system/bin/tracebox", "{file}: {name}");
        assert!(
            ["traced", "traced_probes", "traced_perf"].contains(&applet),
            "{file}: {name} runs {applet}"
        );
    }
    // No socket declared (twice, or at all over the platform's).
    let mut sockets = HashSet::new();
    for s in rc.services.values() {
        for sock in s.option("socket") {
            assert!(
                !PLATFORM_SOCKETS.contains(&sock[0].as_str()),
                "{file}: declares the platform's socket {}",
                sock[0]
            );
            assert!(
                sockets.insert(sock[0].clone()),
                "{file}: socket {} twice",
                sock[0]
            );
        }
    }
    for c in &rc.commands {
        if c[0] == "start" || c[0] == "stop" {
            assert!(
                rc.services.contains_key(&c[1]),
                "{file}: {} of undeclared service {}",
                c[0],
                c[1]
            );
        }
    }
}

#[test]
fn replace_rc_declares_nothing_of_the_platforms() {
    let rc = parse("tracebox-replace.rc");
    check_common(&rc, "tracebox-replace.rc");
    // The platform's perfetto.rc declares traced, traced_probes and their
    // sockets; this file only switches them on.
    assert!(rc.services.is_empty(), "{:?}", rc.services.keys());
    assert!(
        rc.commands
            .iter()
            .any(|c| c == &["setprop", "persist.traced.enable", "1"]),
        "{:?}",
        rc.commands
    );
    // The platform's traced_probes runs as nobody: init makes its lock
    // dir, the one it picks on Android without TRACED_PROBES_LOCK_DIR.
    assert!(
        rc.commands.iter().any(|c| c
            == &[
                "mkdir",
                "/data/local/tmp/tracebox-ftrace",
                "0700",
                "nobody",
                "nobody"
            ]),
        "{:?}",
        rc.commands
    );
}

#[test]
fn beside_rc_uses_its_own_sockets_and_lock_dir() {
    let rc = parse("tracebox-beside.rc");
    check_common(&rc, "tracebox-beside.rc");
    let by_applet = |applet: &str| {
        rc.services
            .values()
            .find(|s| s.argv[1] == applet)
            .unwrap_or_else(|| panic!("no {applet} service"))
    };
    let traced = by_applet("traced").env();
    let producer = traced["PERFETTO_PRODUCER_SOCK_NAME"];
    let consumer = traced["PERFETTO_CONSUMER_SOCK_NAME"];
    for (sock, platform) in [(producer, "traced_producer"), (consumer, "traced_consumer")] {
        assert!(sock.starts_with("/dev/socket/tracebox_"), "{sock}");
        assert!(!sock.ends_with(platform), "{sock}");
        // Clients are told the same names in the header.
        assert!(
            rc.text.contains(&format!("={sock}\n")),
            "{sock} not in the header"
        );
    }
    for applet in ["traced_probes", "traced_perf"] {
        assert_eq!(
            by_applet(applet).env()["PERFETTO_PRODUCER_SOCK_NAME"],
            producer,
            "{applet}"
        );
    }
    // The lock dir it sets is the one a traced_probes without it picks on
    // Android, which has only /data/local/tmp of its bases (the unit test
    // the_lock_dir_is_the_override_else_the_first_existing_base), so a
    // replacing traced_probes and this one share their locks.
    let probes = by_applet("traced_probes").env();
    assert_eq!(
        probes[tracebox::traced_probes::ftrace::ownership::LOCK_DIR_ENV],
        "/data/local/tmp/tracebox-ftrace"
    );
    // Every started service is stopped again.
    for name in rc.services.keys() {
        for verb in ["start", "stop"] {
            assert!(
                rc.commands.iter().any(|c| c[0] == verb && &c[1] == name),
                "no {verb} {name}"
            );
        }
    }
}
