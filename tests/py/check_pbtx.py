#!/usr/bin/env python3
"""Compares tracebox's text-format parser with Python protobuf's.

For every config in tests/data/pbtx/ and configs/, parses the text with
google.protobuf.text_format into Perfetto's published TraceConfig type and
checks that it equals our binary output decoded with the same type.

Usage (same venv as check_schema.py):
  .venv/bin/python tests/py/check_pbtx.py [--bins DIR]
With --bins, DIR already holds `<fixture>.bin` files (tests/schema/py_crosscheck.rs
writes them); otherwise `cargo test` is run to produce them.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "data", "pbtx")
EXAMPLES = os.path.join(ROOT, "configs")


def main():
    from google.protobuf import text_format
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TraceConfig

    if len(sys.argv) == 3 and sys.argv[1] == "--bins":
        out = sys.argv[2]
    else:
        out = tempfile.mkdtemp()
        env = dict(os.environ, TRACEBOX_PBTX_OUT=out)
        subprocess.check_call(["cargo", "test", "-q", "--test", "pbtx_configs", "dump_for_python"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    failures = 0
    names = [(d, n) for d in (FIXTURES, EXAMPLES) for n in sorted(os.listdir(d))
             if n.endswith(".pbtx")]
    for fixture_dir, name in names:
        with open(os.path.join(fixture_dir, name)) as f:
            want = text_format.Parse(f.read(), TraceConfig())
        with open(os.path.join(out, name + ".bin"), "rb") as f:
            got = TraceConfig.FromString(f.read())
        if got != want:
            failures += 1
            print(f"MISMATCH {name}:\n--- python\n{want}\n--- tracebox\n{got}")
    print(f"check_pbtx: {len(names)} configs, {failures} mismatches")
    return 1 if failures or not names else 0


if __name__ == "__main__":
    sys.exit(main())
