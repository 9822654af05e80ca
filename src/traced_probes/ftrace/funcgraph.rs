//! The function_graph tracer of one instance (`enable_function_graph`).
//!
//! As upstream: the first data source that wants it empties the function
//! filters and switches the tracer; later ones add their filters (the
//! kernel keeps the union, and every source with function_graph sees all
//! of it). The tracer cannot change while the instance is read, so it
//! stays until the instance is released ([`restore`]), and a source that
//! asks for it after another started on the instance is refused.

use std::io;

use super::instance::KInstance;
use super::ownership::describe;
use super::parse::funcgraph::FuncgraphRequest;
use super::Tracefs;

const TRACER: &str = "function_graph";
const FILTER: &str = "set_ftrace_filter";
const ROOTS: &str = "set_graph_function";
const MAX_DEPTH: &str = "max_graph_depth";

/// Sets up `req` on instance `key`. Patterns that match no function go
/// to `failed`; a list none of whose patterns matches is refused (an
/// empty list would trace every function of the kernel).
pub fn setup(
    inst: &mut KInstance,
    key: &str,
    req: &FuncgraphRequest,
    failed: &mut Vec<String>,
) -> Result<(), String> {
    let r = try_setup(inst, key, req, failed);
    if r.is_err() && !inst.funcgraph_on {
        // Nobody else uses the tracer here: leave no filters behind.
        restore(&inst.tracefs);
    }
    r
}

fn try_setup(
    inst: &mut KInstance,
    key: &str,
    req: &FuncgraphRequest,
    failed: &mut Vec<String>,
) -> Result<(), String> {
    let t = &inst.tracefs;
    if !has_tracer(t) {
        // instances/NAME is two levels below the top-level directory.
        let top = t.root().parent().and_then(|p| p.parent()).map(Tracefs::new);
        let why = if !key.is_empty() && top.is_some_and(|top| has_tracer(&top)) {
            "this kernel offers it only in the top-level instance (before 6.x)"
        } else {
            "this kernel was built without CONFIG_FUNCTION_GRAPH_TRACER"
        };
        return Err(format!(
            "enable_function_graph: {} has no function_graph tracer ({why})",
            describe(key)
        ));
    }
    let fail =
        |what: &str, e: io::Error| format!("enable_function_graph: cannot write {what}: {e}");
    if !inst.funcgraph_on {
        t.truncate_file(FILTER).map_err(|e| fail(FILTER, e))?;
        t.truncate_file(ROOTS).map_err(|e| fail(ROOTS, e))?;
        t.write_file(MAX_DEPTH, "0")
            .map_err(|e| fail(MAX_DEPTH, e))?;
    }
    append_patterns(t, FILTER, "function_filters", &req.filters, failed)?;
    append_patterns(t, ROOTS, "function_graph_roots", &req.roots, failed)?;
    if req.max_depth > 0 {
        t.write_file(MAX_DEPTH, &req.max_depth.to_string())
            .map_err(|e| fail(MAX_DEPTH, e))?;
    }
    if !inst.funcgraph_on {
        if let Err(e) = t.set_current_tracer(TRACER) {
            return Err(if e.kind() == io::ErrorKind::ResourceBusy {
                format!(
                    "enable_function_graph: {} is being read by another session that \
                     started first; the tracer cannot change under it",
                    describe(key)
                )
            } else {
                fail("current_tracer", e)
            });
        }
        inst.funcgraph_on = true;
    }
    Ok(())
}

fn has_tracer(t: &Tracefs) -> bool {
    let tracers = t.read_file("available_tracers").unwrap_or_default();
    tracers.split_whitespace().any(|x| x == TRACER)
}

/// Adds each pattern to `file`; the kernel refuses (EINVAL) one that
/// matches no traceable function. Each ends in a newline: the kernel
/// takes a word without one only when the file is closed, and an error
/// there reaches nobody.
fn append_patterns(
    t: &Tracefs,
    file: &str,
    what: &str,
    patterns: &[String],
    failed: &mut Vec<String>,
) -> Result<(), String> {
    let mut matched = 0;
    for p in patterns {
        match t.append_file(file, &format!("{p}\n")) {
            Ok(()) => matched += 1,
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                failed.push(format!("{what}: {p} (matches no traceable function)"));
            }
            Err(e) => return Err(format!("enable_function_graph: cannot write {file}: {e}")),
        }
    }
    if !patterns.is_empty() && matched == 0 {
        return Err(format!(
            "enable_function_graph: none of {what} ({}) matches a traceable function",
            patterns.join(", ")
        ));
    }
    Ok(())
}

/// The instance's last user left and its readers are closed: the nop
/// tracer and empty function filters again.
pub fn restore(t: &Tracefs) {
    let _ = t.set_current_tracer("nop");
    let _ = t.truncate_file(FILTER);
    let _ = t.truncate_file(ROOTS);
    let _ = t.write_file(MAX_DEPTH, "0");
}
