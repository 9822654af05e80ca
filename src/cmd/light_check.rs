//! Light mode's tokens checked against this kernel before anything
//! starts: a misspelled event, group or category is refused at once,
//! with the nearest one, instead of recording without it.

use super::trace_faults::nearest;

/// Light-mode words that are instances, not categories.
const INSTANCE_WORDS: &[&str] = &["hyp", "hypervisor"];

/// Checks each token: `group/event` against `available`, `group/*`
/// against its groups, a bare word against `categories`. `available`
/// is `None` when tracefs cannot be read (events are then not checked).
pub fn check(
    tokens: &[String],
    available: Option<&[(String, String)]>,
    categories: &[&str],
) -> Result<(), String> {
    let mut refused = Vec::new();
    for t in tokens {
        let why = match t.split_once('/') {
            Some((g, n)) => {
                let Some(avail) = available else { continue };
                if n == "*" {
                    if avail.iter().any(|(ag, _)| ag == g) {
                        continue;
                    }
                    let mut groups: Vec<&str> = avail.iter().map(|(g, _)| g.as_str()).collect();
                    groups.dedup();
                    let near = nearest(g, groups.into_iter()).map(|g| format!("{g}/*"));
                    ("no ftrace event group", near)
                } else {
                    if avail.iter().any(|(ag, an)| ag == g && an == n) {
                        continue;
                    }
                    let names: Vec<String> =
                        avail.iter().map(|(g, n)| format!("{g}/{n}")).collect();
                    let near = nearest(t, names.iter().map(String::as_str)).map(str::to_owned);
                    ("no ftrace event", near)
                }
            }
            None => {
                if categories.contains(&t.as_str()) || INSTANCE_WORDS.contains(&t.as_str()) {
                    continue;
                }
                let near = nearest(t, categories.iter().copied()).map(str::to_owned);
                ("no atrace category", near)
            }
        };
        let hint = why
            .1
            .map_or(String::new(), |n| format!(" (did you mean {n}?)"));
        refused.push(format!("{}: {t}{hint}", why.0));
    }
    if refused.is_empty() {
        return Ok(());
    }
    Err(format!(
        "Refusing to record: this kernel has {}.\n\
         `tracebox --list-events` and `--list-categories` show what can be recorded here.",
        refused.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avail() -> Vec<(String, String)> {
        [
            ("sched", "sched_switch"),
            ("sched", "sched_wakeup"),
            ("irq", "irq_handler_entry"),
        ]
        .iter()
        .map(|(g, n)| (g.to_string(), n.to_string()))
        .collect()
    }

    fn toks(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn refuses_what_matches_nothing_with_the_nearest() {
        let a = avail();
        let err = check(
            &toks(&[
                "shed",
                "sched/sched_swich",
                "nosuchgroup/*",
                "irq/*",
                "sched",
            ]),
            Some(&a),
            &["sched", "freq"],
        )
        .unwrap_err();
        assert!(
            err.contains("no atrace category: shed (did you mean sched?)"),
            "{err}"
        );
        assert!(
            err.contains("no ftrace event: sched/sched_swich (did you mean sched/sched_switch?)"),
            "{err}"
        );
        assert!(
            err.contains("no ftrace event group: nosuchgroup/*"),
            "{err}"
        );
        assert!(!err.contains("irq/*"), "{err}");
    }

    #[test]
    fn accepts_known_tokens_and_skips_events_without_tracefs() {
        let a = avail();
        check(&toks(&["sched/*", "sched", "hyp"]), Some(&a), &["sched"]).unwrap();
        check(&toks(&["any/thing"]), None, &["sched"]).unwrap();
        assert!(check(&toks(&["shed"]), None, &["sched"]).is_err());
    }
}
