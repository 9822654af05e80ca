#!/usr/bin/env python3
"""The guest's `report --json` is JSON and agrees with the trace about
the marker slices."""
import json

import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
rep = json.load(open(f"{out}/report.json"))
text = json.dumps(rep)
v.expect("vm_report_19" in text, "report --json lacks marker slice vm_report_19")
v.expect(sum(1 for b in v.prints(trace) if "|vm_report_" in b) == 20, "trace lacks markers")
v.done()
