"""Run the ledger-vs-engine parity matrix and report its wall time.

    python benchmarks/parity_matrix.py [--parallel 2] [--json results.json] [--only SUBSTRING]

Prints one line per cell (pass / rejected-as-predicted / FAIL with the discrepancies), the
totals and the matrix's wall time. Needs torch and deepspeed (the engine runs on CPU with
DS_ACCELERATOR=cpu when no GPU is present); NVMe cells need libaio (Debian: libaio-dev).
Exit status 1 when any cell fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "engine"))

import parity  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", type=int, default=2, help="concurrent torch.distributed.run launches")
    ap.add_argument("--json", help="write raw measurements and discrepancies here")
    ap.add_argument("--only", help="run only cells whose id contains this")
    a = ap.parse_args(argv)
    cells = parity.matrix_cells()
    if a.only:
        cells = [c for c in cells if a.only in c["id"]]
    t0 = time.time()
    run = parity.run_matrix(cells, parallel=a.parallel)
    wall = time.time() - t0
    n_pass = n_rej = n_fail = n_missing = 0
    report = {}
    for c in cells:
        m = run["results"].get(c["id"])
        if m is None:
            n_missing += 1
            print(f"MISSING  {c['id']}")
            continue
        d = parity.compare(c, m)
        exp = parity.expected(c)
        report[c["id"]] = {"measured": m, "discrepancies": d}
        if d:
            n_fail += 1
            print(f"FAIL     {c['id']}")
            for x in d:
                print(f"           {x}")
        elif "error" in exp:
            n_rej += 1
            print(f"REJECTED {c['id']}: {exp['error']}")
        else:
            n_pass += 1
            print(f"pass     {c['id']}")
    for e in run["launch_errors"]:
        print("LAUNCH ERROR", e[:3000])
    print(f"\n{len(cells)} cells: {n_pass} pass, {n_rej} rejected by DeepSpeed as the ledger predicts, "
          f"{n_fail} fail, {n_missing} missing")
    print(f"parity matrix wall time: {wall:.1f} s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"wall_seconds": wall, "cells": report, "launch_errors": run["launch_errors"]}, fh, indent=1)
    return 1 if (n_fail or n_missing or run["launch_errors"]) else 0


if __name__ == "__main__":
    sys.exit(main())
