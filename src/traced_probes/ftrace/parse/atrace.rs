//! atrace categories as ftrace event sets, and what to tell Android's
//! atrace binary.
//!
//! A category such as `sched` or `freq` turns on the kernel events
//! Android's atrace would, and userspace annotations arrive as
//! `ftrace/print` events (writes to `trace_marker`, e.g. `B|pid|name` /
//! `E|pid`), which any atrace category or app enables. The category table
//! is data: `atrace_categories.txt`. On Android the atrace binary is also
//! told the union of every session's categories and apps
//! ([`AtraceMux`]); on Linux there is none.

use std::collections::BTreeMap;

const TABLE: &str = include_str!("atrace_categories.txt");

/// The `ftrace/print` event every atrace request needs.
pub const PRINT: (&str, &str) = ("ftrace", "print");

/// Known category names.
pub fn categories() -> impl Iterator<Item = &'static str> {
    lines().map(|(c, _)| c)
}

fn lines() -> impl Iterator<Item = (&'static str, &'static str)> {
    TABLE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
}

/// Kernel events for `category`, restricted to `available` (the kernel's
/// `(group, event)` list). `None` for an unknown category.
pub fn category_events(
    category: &str,
    available: &[(String, String)],
) -> Option<Vec<(String, String)>> {
    let (_, spec) = lines().find(|(c, _)| *c == category)?;
    let has = |g: &str, e: &str| available.iter().any(|(ag, ae)| ag == g && ae == e);
    let mut out: Vec<(String, String)> = Vec::new();
    for item in spec.split_whitespace() {
        let Some((group, event)) = item.split_once('/') else {
            continue;
        };
        let matches: Vec<&(String, String)> = if event == "*" {
            available.iter().filter(|(g, _)| g == group).collect()
        } else {
            available
                .iter()
                .filter(|(g, e)| g == group && e == event)
                .collect()
        };
        for m in matches {
            if !out.contains(m) {
                out.push(m.clone());
            }
        }
    }
    // Prefer the throttled rss_stat when the kernel has it.
    if has("synthetic", "rss_stat_throttled") {
        out.retain(|(g, e)| !(g == "kmem" && e == "rss_stat"));
    }
    Some(out)
}

/// Everything an atrace request turns on: `ftrace/print` plus the events of
/// each known category (unless `userspace_only`). Unknown categories are
/// returned separately (they may be app tags handled elsewhere).
pub fn expand(
    categories: &[String],
    userspace_only: bool,
    available: &[(String, String)],
) -> (Vec<(String, String)>, Vec<String>) {
    let mut events = vec![(PRINT.0.to_string(), PRINT.1.to_string())];
    let mut unknown = Vec::new();
    for c in categories {
        match category_events(c, available) {
            Some(evs) if !userspace_only => {
                for e in evs {
                    if !events.contains(&e) {
                        events.push(e);
                    }
                }
            }
            Some(_) => {}
            None => unknown.push(c.clone()),
        }
    }
    (events, unknown)
}

/// One data source's atrace request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtraceRequest {
    pub categories: Vec<String>,
    pub apps: Vec<String>,
    /// `atrace_categories_prefer_sdk`.
    pub prefer_sdk: Vec<String>,
}

impl AtraceRequest {
    /// Whether atrace is involved at all (any category or app).
    pub fn wanted(&self) -> bool {
        !self.categories.is_empty() || !self.apps.is_empty()
    }
}

/// The sorted, duplicate-free union of `a` and `b`.
fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut v: Vec<String> = a.iter().chain(b).cloned().collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The sorted members of `a` that are in `b`.
fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    let mut v: Vec<String> = a.iter().filter(|x| b.contains(x)).cloned().collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The sorted members of `a` that are not in `b`.
fn subtract(a: &[String], b: &[String]) -> Vec<String> {
    let mut v: Vec<String> = a.iter().filter(|x| !b.contains(x)).cloned().collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `atrace` arguments (after argv[0]) turning userspace tracing on for
/// `categories` and `apps`. We assume an atrace of Android P or later,
/// which knows `--only_userspace` (kernel events are ours to enable).
pub fn start_args(categories: &[String], apps: &[String]) -> Vec<String> {
    let mut a = vec!["--async_start".to_string(), "--only_userspace".to_string()];
    a.extend(categories.iter().cloned());
    if !apps.is_empty() {
        a.push("-a".to_string());
        a.push(apps.join(","));
    }
    a
}

/// `atrace` arguments turning userspace tracing off.
pub fn stop_args() -> Vec<String> {
    vec!["--async_stop".to_string(), "--only_userspace".to_string()]
}

/// `atrace` arguments naming the categories the SDK should serve.
pub fn prefer_sdk_args(categories: &[String]) -> Vec<String> {
    let mut a = vec!["--prefer_sdk".to_string()];
    a.extend(categories.iter().cloned());
    a
}

/// What a data source asked for, as remembered until it is removed.
#[derive(Debug, Clone)]
struct Active {
    categories: Vec<String>,
    apps: Vec<String>,
    /// Its categories not in `prefer_sdk`: opting out wins when merging.
    sdk_optout: Vec<String>,
}

/// The atrace state shared by all sessions (upstream's muxer rules):
/// atrace is told the union of what the active sessions want; the state
/// changes only when a command succeeds, so a bad request does not poison
/// it. Commands are handed to a runner (argv after argv[0] → success).
#[derive(Debug, Default)]
pub struct AtraceMux {
    active: BTreeMap<u64, Active>,
    on: bool,
    categories: Vec<String>,
    apps: Vec<String>,
    prefer_sdk: Vec<String>,
}

impl AtraceMux {
    /// Data source `id` starts wanting `req`.
    pub fn add(&mut self, id: u64, req: &AtraceRequest, run: &mut dyn FnMut(&[String]) -> bool) {
        let categories = union(&req.categories, &self.categories);
        let apps = union(&req.apps, &self.apps);
        let optout = union(
            &subtract(&self.categories, &self.prefer_sdk),
            &subtract(&req.categories, &req.prefer_sdk),
        );
        let prefer_sdk = subtract(&categories, &optout);
        if prefer_sdk != self.prefer_sdk && run(&prefer_sdk_args(&prefer_sdk)) {
            self.prefer_sdk = prefer_sdk;
        }
        let grows = categories.len() != self.categories.len() || apps.len() != self.apps.len();
        if (!self.on || grows) && run(&start_args(&categories, &apps)) {
            self.categories = categories;
            self.apps = apps;
            self.on = true;
        }
        self.active.insert(
            id,
            Active {
                categories: req.categories.clone(),
                apps: req.apps.clone(),
                sdk_optout: subtract(&req.categories, &req.prefer_sdk),
            },
        );
    }

    /// Data source `id` is gone: atrace narrows to what the others still
    /// want (of what it really has on), or stops when nothing is left.
    pub fn remove(&mut self, id: u64, run: &mut dyn FnMut(&[String]) -> bool) {
        if self.active.remove(&id).is_none() {
            return;
        }
        let (mut categories, mut apps, mut optout) = (Vec::new(), Vec::new(), Vec::new());
        for a in self.active.values() {
            categories = union(&categories, &a.categories);
            apps = union(&apps, &a.apps);
            optout = union(&optout, &a.sdk_optout);
        }
        let prefer_sdk = subtract(&categories, &optout);
        let categories = intersect(&self.categories, &categories);
        let apps = intersect(&self.apps, &apps);
        let shrinks = categories.len() != self.categories.len() || apps.len() != self.apps.len();
        if self.on {
            if categories.is_empty() && apps.is_empty() {
                if run(&stop_args()) {
                    self.categories.clear();
                    self.apps.clear();
                    self.on = false;
                }
            } else if shrinks && run(&start_args(&categories, &apps)) {
                self.categories = categories;
                self.apps = apps;
            }
        }
        if prefer_sdk != self.prefer_sdk && run(&prefer_sdk_args(&prefer_sdk)) {
            self.prefer_sdk = prefer_sdk;
        }
    }

    /// Whether atrace is on (as far as we know).
    pub fn is_on(&self) -> bool {
        self.on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avail(list: &[&str]) -> Vec<(String, String)> {
        list.iter()
            .map(|s| {
                let (g, e) = s.split_once('/').unwrap();
                (g.to_string(), e.to_string())
            })
            .collect()
    }

    #[test]
    fn table_parses() {
        let cats: Vec<_> = categories().collect();
        for c in [
            "sched", "freq", "idle", "irq", "workq", "memory", "gfx", "disk",
        ] {
            assert!(cats.contains(&c), "{c}");
        }
        assert_eq!(cats.len(), 23);
    }

    #[test]
    fn expansion_filters_to_the_kernel() {
        let k = avail(&[
            "sched/sched_switch",
            "sched/sched_waking",
            "sched/sched_wakeup",
            "irq/irq_handler_entry",
            "irq/softirq_raise",
            "ipi/ipi_raise",
            "power/cpu_idle",
            "kmem/rss_stat",
            "ftrace/print",
        ]);
        let sched = category_events("sched", &k).unwrap();
        // sched_wakeup is deliberately not part of the category.
        assert_eq!(sched, avail(&["sched/sched_switch", "sched/sched_waking"]));
        let irq = category_events("irq", &k).unwrap();
        assert_eq!(
            irq,
            avail(&[
                "irq/irq_handler_entry",
                "irq/softirq_raise",
                "ipi/ipi_raise"
            ])
        );
        assert!(category_events("nope", &k).is_none());
        assert_eq!(
            category_events("memory", &k).unwrap(),
            avail(&["kmem/rss_stat"])
        );
        let mut k2 = k.clone();
        k2.push(("synthetic".into(), "rss_stat_throttled".into()));
        assert_eq!(
            category_events("memory", &k2).unwrap(),
            avail(&["synthetic/rss_stat_throttled"])
        );

        let cats = vec![
            "sched".to_string(),
            "idle".to_string(),
            "com.example.app".to_string(),
        ];
        let (events, unknown) = expand(&cats, false, &k);
        assert_eq!(events[0], ("ftrace".to_string(), "print".to_string()));
        assert_eq!(events.len(), 4);
        assert_eq!(unknown, ["com.example.app"]);
        let (events, _) = expand(&cats, true, &k);
        assert_eq!(events, avail(&["ftrace/print"]));
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn req(categories: &[&str], apps: &[&str]) -> AtraceRequest {
        AtraceRequest {
            categories: strings(categories),
            apps: strings(apps),
            prefer_sdk: vec![],
        }
    }

    /// Runs `f` against a runner that records each argv and answers `ok`.
    fn recorded(
        mux: &mut AtraceMux,
        ok: bool,
        f: impl FnOnce(&mut AtraceMux, &mut dyn FnMut(&[String]) -> bool),
    ) -> Vec<String> {
        let mut calls = Vec::new();
        let mut run = |a: &[String]| {
            calls.push(a.join(" "));
            ok
        };
        f(mux, &mut run);
        calls
    }

    #[test]
    fn sessions_share_the_union() {
        let mut m = AtraceMux::default();
        let c = recorded(&mut m, true, |m, r| {
            m.add(1, &req(&["view", "gfx"], &["com.b", "com.a"]), r)
        });
        assert_eq!(
            c,
            ["--async_start --only_userspace gfx view -a com.a,com.b"]
        );
        // A subset changes nothing.
        let c = recorded(&mut m, true, |m, r| m.add(2, &req(&["gfx"], &["com.a"]), r));
        assert!(c.is_empty(), "{c:?}");
        let c = recorded(&mut m, true, |m, r| m.add(3, &req(&["am"], &["com.c"]), r));
        assert_eq!(
            c,
            ["--async_start --only_userspace am gfx view -a com.a,com.b,com.c"]
        );
        // Removing 1 drops only what nobody else wants.
        let c = recorded(&mut m, true, |m, r| m.remove(1, r));
        assert_eq!(c, ["--async_start --only_userspace am gfx -a com.a,com.c"]);
        let c = recorded(&mut m, true, |m, r| m.remove(3, r));
        assert_eq!(c, ["--async_start --only_userspace gfx -a com.a"]);
        let c = recorded(&mut m, true, |m, r| m.remove(2, r));
        assert_eq!(c, ["--async_stop --only_userspace"]);
        assert!(!m.is_on());
        // Unknown ids are ignored.
        assert!(recorded(&mut m, true, |m, r| m.remove(9, r)).is_empty());
    }

    #[test]
    fn failures_do_not_poison_the_state() {
        let mut m = AtraceMux::default();
        let c = recorded(&mut m, false, |m, r| m.add(1, &req(&["bogus"], &[]), r));
        assert_eq!(c, ["--async_start --only_userspace bogus"]);
        assert!(!m.is_on());
        // Still off: the next session retries with the union of what is on
        // (nothing) and its own request.
        let c = recorded(&mut m, true, |m, r| m.add(2, &req(&["gfx"], &[]), r));
        assert_eq!(c, ["--async_start --only_userspace gfx"]);
        // Removing 1 (which never got on) changes nothing; removing 2 stops.
        assert!(recorded(&mut m, true, |m, r| m.remove(1, r)).is_empty());
        let c = recorded(&mut m, true, |m, r| m.remove(2, r));
        assert_eq!(c, ["--async_stop --only_userspace"]);
        // A failed stop leaves atrace on.
        let c = recorded(&mut m, true, |m, r| m.add(3, &req(&[], &["com.x"]), r));
        assert_eq!(c, ["--async_start --only_userspace -a com.x"]);
        let c = recorded(&mut m, false, |m, r| m.remove(3, r));
        assert_eq!(c, ["--async_stop --only_userspace"]);
        assert!(m.is_on());
    }

    #[test]
    fn prefer_sdk_is_merged_with_opt_outs_winning() {
        let mut m = AtraceMux::default();
        let mut r1 = req(&["gfx", "view"], &[]);
        r1.prefer_sdk = strings(&["gfx", "view"]);
        let c = recorded(&mut m, true, |m, r| m.add(1, &r1, r));
        assert_eq!(
            c,
            [
                "--prefer_sdk gfx view",
                "--async_start --only_userspace gfx view"
            ]
        );
        // Session 2 wants view without the SDK: view leaves prefer_sdk.
        let c = recorded(&mut m, true, |m, r| m.add(2, &req(&["view"], &[]), r));
        assert_eq!(c, ["--prefer_sdk gfx"]);
        let c = recorded(&mut m, true, |m, r| m.remove(2, r));
        assert_eq!(c, ["--prefer_sdk gfx view"]);
        let c = recorded(&mut m, true, |m, r| m.remove(1, r));
        assert_eq!(c, ["--async_stop --only_userspace", "--prefer_sdk"]);
    }
}
