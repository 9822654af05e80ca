//! atrace categories as ftrace event sets.
//!
//! On Linux there is no atrace binary: a category such as `sched` or
//! `freq` simply turns on the kernel events Android's atrace would, and
//! userspace annotations arrive as `ftrace/print` events (writes to
//! `trace_marker`, e.g. `B|pid|name` / `E|pid`), which any atrace
//! category or app enables. The category table is data:
//! `atrace_categories.txt`.

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

    /// The live kernel's events: `sched` and `idle` resolve to real events.
    #[test]
    fn live_kernel_categories() {
        let t = super::super::Tracefs::discover().unwrap();
        let k = t.all_events().unwrap();
        let sched = category_events("sched", &k).unwrap();
        assert!(sched.contains(&("sched".into(), "sched_switch".into())));
        assert!(sched.contains(&("task".into(), "task_newtask".into())));
        assert_eq!(
            category_events("idle", &k).unwrap(),
            avail(&["power/cpu_idle"])
        );
    }
}
