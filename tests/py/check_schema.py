#!/usr/bin/env python3
"""Cross-checks tracebox's schemas against Perfetto's published descriptors.

Our side: every message and enum in proto/ (parsed here), plus the JSON
dump of the generated runtime schema table (tests/schema/schema_json.rs), which
must match proto/ exactly.
Reference: the descriptors shipped in PyPI's `perfetto` package
(perfetto.protos.perfetto.trace.perfetto_trace_pb2), which cover the trace
and config protos. IPC messages are not in that package; pass
--upstream-git DIR (a Perfetto git checkout or bare mirror) to check those
against the .proto sources too.

Every field we declare must exist in the reference with the same number,
type, label and message/enum type; every enum value must have the same
number. Fields the reference has and we omit are fine (they travel as
unknown fields). Exit status 1 on any mismatch.

Usage:
  python3 -m venv .venv && .venv/bin/pip install perfetto protobuf
  .venv/bin/python tests/py/check_schema.py [--json schema.json]
      [--upstream-git /path/to/perfetto] [-v]
Without --json the dump is produced with `cargo test --test schema schema_json`.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# descriptor.proto numbering, as used by our JSON dump.
TYPE_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32",
              6: "fixed64", 7: "fixed32", 8: "bool", 9: "string", 10: "group",
              11: "message", 12: "bytes", 13: "uint32", 14: "enum",
              15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
SCALAR_BY_NAME = {v: k for k, v in TYPE_NAMES.items() if v not in ("message", "enum", "group")}


def load_ours(path):
    if path is None:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        env = dict(os.environ, TRACEBOX_SCHEMA_JSON=path)
        subprocess.check_call(["cargo", "test", "-q", "--test", "schema", "schema_json"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def reference_from_pypi():
    """{full message name: {field name: (number, type, label, type_name, packed)}},
    {full enum name: {value name: number}} from the perfetto package."""
    from google.protobuf import descriptor_pb2
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    msgs, enums = {}, {}

    def add_enum(e):
        enums[e.full_name] = {v.name: v.number for v in e.values}

    def add_msg(m):
        # Via DescriptorProto: stable across protobuf runtime versions.
        proto = descriptor_pb2.DescriptorProto()
        m.CopyToProto(proto)
        fields = {}
        for f in proto.field:
            tn = f.type_name.lstrip(".")
            fields[f.name] = (f.number, f.type, f.label, tn, f.options.packed)
        msgs[m.full_name] = fields
        for n in m.nested_types:
            add_msg(n)
        for e in m.enum_types:
            add_enum(e)

    for m in pb.DESCRIPTOR.message_types_by_name.values():
        add_msg(m)
    for e in pb.DESCRIPTOR.enum_types_by_name.values():
        add_enum(e)
    return msgs, enums


# --- Optional second reference: Perfetto's .proto sources from git. --------

TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|"(?:[^"\\]|\\.)*"|[\w.]+|-?\d+|.', re.S)


def parse_proto_text(text, msgs, enums, package="perfetto.protos"):
    toks = [t for t in TOKEN.findall(text) if t.strip() and not t.startswith(("//", "/*"))]
    pos = 0

    def skip():
        nonlocal pos
        depth = 0
        while pos < len(toks):
            t = toks[pos]
            pos += 1
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if depth == 0:
                    return
            elif t == ";" and depth == 0:
                return

    def field(scope, label):
        nonlocal pos
        typ, name, num = toks[pos], toks[pos + 1], int(toks[pos + 3], 0)
        pos += 4
        packed = False
        if toks[pos] == "[":
            end = toks.index("]", pos)
            opts = toks[pos + 1:end]
            packed = any(opts[i:i + 3] == ["packed", "=", "true"] for i in range(len(opts)))
            pos = end + 1
        pos += 1  # ;
        msgs[scope][name] = (num, typ, label, typ, packed)

    def enum(scope):
        nonlocal pos
        full = scope + "." + toks[pos]
        pos += 2
        vals = {}
        while toks[pos] != "}":
            if toks[pos] in ("option", "reserved", ";"):
                skip()
                continue
            vals[toks[pos]] = int(toks[pos + 2], 0)
            pos += 3
            if toks[pos] == "[":
                pos = toks.index("]", pos) + 1
            pos += 1
        pos += 1
        enums[full] = vals

    def message(scope):
        nonlocal pos
        full = scope + "." + toks[pos]
        pos += 2
        msgs[full] = {}
        while toks[pos] != "}":
            t = toks[pos]
            if t == "message":
                pos += 1
                message(full)
            elif t == "enum":
                pos += 1
                enum(full)
            elif t == "oneof":
                pos += 3
                while toks[pos] != "}":
                    if toks[pos] == "option":
                        skip()
                    else:
                        field(full, 1)
                pos += 1
            elif t in ("option", "reserved", "extensions", "extend", ";") or t == "map":
                skip()
            elif t in ("optional", "required", "repeated"):
                pos += 1
                field(full, {"optional": 1, "required": 2, "repeated": 3}[t])
            else:
                field(full, 1)
        pos += 1

    while pos < len(toks):
        t = toks[pos]
        if t == "message":
            pos += 1
            message(package)
        elif t == "enum":
            pos += 1
            enum(package)
        else:
            skip()


def resolve_type(typ, scope, msgs, enums):
    """Full name of message/enum `typ` used inside message `scope`."""
    if typ.startswith("."):
        return typ[1:]
    parts = scope.split(".")
    while parts:
        cand = ".".join(parts + [typ])
        if cand in msgs or cand in enums:
            return cand
        parts.pop()
    raise SystemExit(f"check_schema: {scope}: unknown type {typ}")


def ours_from_sources(proto_dir):
    """Our .proto files in the JSON dump's shape (covers messages that the
    runtime table leaves out, such as TracePacket)."""
    msgs, enums = {}, {}
    for dirpath, _, files in os.walk(proto_dir):
        for name in sorted(files):
            if name.endswith(".proto"):
                with open(os.path.join(dirpath, name)) as f:
                    parse_proto_text(f.read(), msgs, enums)
    out = {"messages": {}, "enums": enums}
    for mname, fields in msgs.items():
        lst = []
        for fname, (num, typ, label, _, packed) in fields.items():
            if typ in SCALAR_BY_NAME:
                ty, tn = SCALAR_BY_NAME[typ], ""
            else:
                tn = resolve_type(typ, mname, msgs, enums)
                ty = 11 if tn in msgs else 14
            lst.append({"name": fname, "number": num, "type": ty, "label": label,
                        "packed": packed, "type_name": tn})
        out["messages"][mname] = sorted(lst, key=lambda f: f["number"])
    return out


def table_vs_sources(table, sources):
    """The generated table must be an exact subset of our .proto files."""
    errors = []
    for kind in ("messages", "enums"):
        for name, value in table[kind].items():
            if sources[kind].get(name) != value:
                errors.append(f"schema table differs from proto/ for {name}")
    return errors


def reference_from_git(repo):
    files = subprocess.check_output(
        ["git", "-C", repo, "ls-tree", "-r", "--name-only", "HEAD", "protos/perfetto/"]).decode().split()
    msgs, enums = {}, {}
    for f in files:
        if not f.endswith(".proto") or "/metrics/" in f or "trace_processor" in f:
            continue
        text = subprocess.check_output(["git", "-C", repo, "show", "HEAD:" + f]).decode()
        if "package perfetto.protos;" not in text:
            continue
        parse_proto_text(text, msgs, enums)
    return msgs, enums


def compare(ours, ref_msgs, ref_enums, from_source):
    """Returns (errors, checked_names). from_source: ref types are raw .proto
    spellings, so only scalar types and the last type component are checked."""
    errors, checked = [], set()
    for mname, fields in ours["messages"].items():
        ref = ref_msgs.get(mname)
        if ref is None:
            continue
        checked.add(mname)
        for f in fields:
            where = f"{mname}.{f['name']}"
            if f["name"].startswith("tracebox_") and f["number"] >= 1000:
                continue  # Our own extension, named and numbered apart.
            r = ref.get(f["name"])
            if r is None:
                by_num = [n for n, v in ref.items() if v[0] == f["number"]]
                errors.append(f"{where} = {f['number']}: no such field upstream"
                              + (f" (number used by {by_num[0]})" if by_num else ""))
                continue
            num, typ, label, tn, packed = r
            if num != f["number"]:
                errors.append(f"{where}: number {f['number']}, upstream {num}")
            if label != f["label"]:
                errors.append(f"{where}: label {f['label']}, upstream {label}")
            if f["packed"] != packed:
                errors.append(f"{where}: packed={f['packed']}, upstream packed={packed}")
            if from_source:
                want = SCALAR_BY_NAME.get(typ)
                if want is not None:
                    if want != f["type"]:
                        errors.append(f"{where}: type {TYPE_NAMES[f['type']]}, upstream {typ}")
                elif f["type_name"].split(".")[-1] != typ.split(".")[-1]:
                    errors.append(f"{where}: type {f['type_name']}, upstream {typ}")
            else:
                if typ != f["type"]:
                    errors.append(f"{where}: type {TYPE_NAMES.get(f['type'])}, upstream {TYPE_NAMES.get(typ)}")
                elif tn != f["type_name"]:
                    errors.append(f"{where}: type {f['type_name']}, upstream {tn}")
    for ename, values in ours["enums"].items():
        ref = ref_enums.get(ename)
        if ref is None:
            continue
        checked.add(ename)
        for vname, num in values.items():
            if vname not in ref:
                errors.append(f"{ename}.{vname} = {num}: no such value upstream")
            elif ref[vname] != num:
                errors.append(f"{ename}.{vname}: {num}, upstream {ref[vname]}")
    return errors, checked


def completeness(ours, ref_msgs, ref_enums, root):
    """Every message and enum a config can reach from `root` upstream must be
    declared here with every field and value (name and number): any config
    upstream accepts then parses here, even parts only passed through."""
    errors, seen, todo = [], set(), [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in ref_enums:
            mine = ours["enums"].get(name)
            if mine is None:
                errors.append(f"enum {name}: missing (reachable from {root})")
                continue
            for v, num in ref_enums[name].items():
                if mine.get(v) != num:
                    errors.append(f"{name}.{v} = {num}: missing")
            continue
        mine = {f["name"]: f["number"] for f in ours["messages"].get(name, [])}
        if name not in ours["messages"]:
            errors.append(f"message {name}: missing (reachable from {root})")
        for fname, (num, typ, _, tn, _) in ref_msgs[name].items():
            if name in ours["messages"] and mine.get(fname) != num:
                errors.append(f"{name}.{fname} = {num}: missing")
            if typ in (11, 14) and tn:
                todo.append(tn)
    return errors, seen


def self_test(ours, ref_msgs, ref_enums):
    """The comparison must notice a wrong number, type, label, enum value."""
    import copy
    corruptions = [
        lambda o: o["messages"]["perfetto.protos.TraceConfig"][0].update(number=99),
        lambda o: o["messages"]["perfetto.protos.TraceConfig"][1].update(type=13),
        lambda o: o["messages"]["perfetto.protos.TraceConfig"][0].update(label=1),
        lambda o: o["messages"]["perfetto.protos.TraceConfig"][0].update(type_name="x"),
        lambda o: o["messages"]["perfetto.protos.TraceConfig"].append(
            {"name": "bogus", "number": 4000, "type": 9, "label": 1, "packed": False, "type_name": ""}),
        lambda o: o["enums"]["perfetto.protos.TraceConfig.BufferConfig.FillPolicy"].update(DISCARD=7),
    ]
    for i, corrupt in enumerate(corruptions):
        bad = copy.deepcopy(ours)
        corrupt(bad)
        errors, _ = compare(bad, ref_msgs, ref_enums, from_source=False)
        assert errors, f"self-test corruption {i} went unnoticed"
    # A field or a message a config can reach, dropped, must be noticed.
    for drop in ("perfetto.protos.DataSourceConfig", "perfetto.protos.StatsdTracingConfig"):
        bad = copy.deepcopy(ours)
        bad["messages"][drop] = bad["messages"][drop][1:]
        assert completeness(bad, ref_msgs, ref_enums, "perfetto.protos.TraceConfig")[0], drop
    bad = copy.deepcopy(ours)
    del bad["messages"]["perfetto.protos.ProcessSmapsConfig.Scope"]
    assert completeness(bad, ref_msgs, ref_enums, "perfetto.protos.TraceConfig")[0]
    print(f"check_schema: self-test ok ({len(corruptions) + 3} corruptions caught)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="schema dump (default: run cargo test to produce it)")
    ap.add_argument("--upstream-git", help="Perfetto git repo to check messages PyPI lacks")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--self-test", action="store_true",
                    help="also check that corrupted copies of the dump are caught")
    args = ap.parse_args()

    table = load_ours(args.json)
    ours = ours_from_sources(os.path.join(ROOT, "proto"))
    if args.self_test:
        self_test(ours, *reference_from_pypi())
    errors = table_vs_sources(table, ours)
    print(f"check_schema: runtime table: {len(table['messages'])} messages, "
          f"{len(table['enums'])} enums compared with proto/")
    errs, checked = compare(ours, *reference_from_pypi(), from_source=False)
    errors += errs
    if args.upstream_git:
        msgs, enums = reference_from_git(args.upstream_git)
        rest = {"messages": {k: v for k, v in ours["messages"].items() if k not in checked},
                "enums": {k: v for k, v in ours["enums"].items() if k not in checked}}
        errs2, checked2 = compare(rest, msgs, enums, from_source=True)
        errors += errs2
        checked |= checked2
    errs, reached = completeness(ours, *reference_from_pypi(), "perfetto.protos.TraceConfig")
    print(f"check_schema: {len(reached)} types reachable from TraceConfig upstream, "
          f"{len(errs)} fields or types missing here")
    errors += errs
    names = set(ours["messages"]) | set(ours["enums"])
    unchecked = sorted(names - checked)
    nfields = sum(len(v) for k, v in ours["messages"].items() if k in checked)
    print(f"check_schema: {len(checked)}/{len(names)} types checked ({nfields} fields), "
          f"{len(errors)} mismatches")
    if unchecked:
        print(f"check_schema: {len(unchecked)} types not in any reference"
              + (":\n  " + "\n  ".join(unchecked) if args.verbose or len(unchecked) < 40 else ""))
    for e in errors:
        print("MISMATCH:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
