"""Issue 21 audit (bounded work, config width): the schema validated each distinct element of a long array on its
own (``config.schema.reduce_arrays`` folds only equal ones), one schema error and one finding apiece before they
were folded into "N more element(s) ... have the same problem": 100,000 distinct ``{"x": i}`` in
``optimizer.params.betas`` (1.4 MB) took 5.2 s CPU / 480 MB in lint, 300,000 (3.8 MB) 16 s / 1.4 GB, and the 8 MiB
config limit holds ~660,000. Every config reader now refuses an array of more than ``MAX_ARRAY_DISTINCT``
distinct elements past its head (``readers.wide_array_problem``: ``loading.parse_text``, an accelerate
``deepspeed_config_file``) with one line naming the file, line:column and JSON pointer, exit 2; equal elements
stay one (a 2M-element ``[{}, ...]`` is still linted, benchmarks/bounds.py "lint, 2M {} array")."""

from __future__ import annotations

import json

import pytest

from advisor.config.readers import ARRAY_HEAD, MAX_ARRAY_DISTINCT, wide_array
from tests.robustness.robust_helpers import ROOT, run_cli

BASE = json.loads((ROOT / "sample_configs" / "zero2.json").read_text())


def _cfg(tmp_path, betas, name="wide.json"):
    d = json.loads(json.dumps(BASE))
    d["optimizer"]["params"]["betas"] = betas
    p = tmp_path / name
    p.write_text(json.dumps(d, indent=1))
    return p


def test_wide_array_counts_distinct_elements_past_the_head():
    at_cap = [{"x": i} for i in range(ARRAY_HEAD + MAX_ARRAY_DISTINCT)]
    assert wide_array({"a": at_cap}) is None
    assert wide_array({"a": at_cap + [{"x": -1}]}) == ("/a", len(at_cap) + 1)
    assert wide_array({"a": [{}] * 2_000_000}) is None  # equal elements are one
    assert wide_array({"a": [1, 1.0] * 20_000}) is None  # two distinct (JSON's 1 and 1.0 differ)
    # nested inside a representative; a key with "/" and "~" escaped as a JSON pointer
    assert wide_array({"p/q~": [{"in": list(range(ARRAY_HEAD + MAX_ARRAY_DISTINCT + 1))}]}) == \
        ("/p~1q~0/0/in", ARRAY_HEAD + MAX_ARRAY_DISTINCT + 1)


def test_the_distinct_elements_are_counted_over_every_array():
    # review of 7ac57cc: 62 nested arrays of 10,000 distinct {"x": i} each passed the per-array count and were
    # validated in 7.5 s / 559 MB; the count is now the config's in all (past each array's head)
    half = MAX_ARRAY_DISTINCT // 2
    two = {"a": [list(range(ARRAY_HEAD + half)), list(range(ARRAY_HEAD + half))]}
    assert wide_array(two) is None  # 2 x 5,000 = 10,000: at the limit
    three = {"a": [[{"x": i, "k": k} for i in range(ARRAY_HEAD + half)] for k in range(3)]}
    ptr, n = wide_array(three)
    assert ptr.startswith("/a/") and n == ARRAY_HEAD + half


@pytest.mark.parametrize("cmd", [["lint"], ["estimate", "--params", "1000000", "--world-size", "8"]])
def test_a_config_with_too_many_distinct_array_values_is_refused_in_one_line(tmp_path, cmd):
    cfg = _cfg(tmp_path, [{"x": i} for i in range(ARRAY_HEAD + MAX_ARRAY_DISTINCT + 1)])
    p = run_cli([cmd[0], str(cfg), *cmd[1:]])
    assert p.returncode == 2, (p.stdout[-500:], p.stderr[-500:])
    last = p.stderr.strip().splitlines()[-1]
    line = next(i for i, t in enumerate(cfg.read_text().splitlines(), 1) if '"betas"' in t)
    assert last.startswith(f"ds-advisor: {cfg}:{line}:") and "/optimizer/params/betas: an array of 10,065 elements" \
        in last and f"pass {MAX_ARRAY_DISTINCT:,} distinct values in all" in last, last
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr


def test_the_accelerate_deepspeed_config_file_is_refused_the_same_way(tmp_path):
    inner = _cfg(tmp_path, list(range(ARRAY_HEAD + MAX_ARRAY_DISTINCT + 1)), "inner.json")
    y = tmp_path / "acc.yaml"
    y.write_text(f"compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
                 f"  deepspeed_config_file: {inner}\n")
    p = run_cli(["resolve", str(y)])
    assert p.returncode == 2
    last = p.stderr.strip().splitlines()[-1]
    assert str(y) in last and str(inner) in last and "/optimizer/params/betas: an array of" in last, last


def test_an_array_at_the_limit_is_still_linted(tmp_path):
    cfg = _cfg(tmp_path, [{"x": i} for i in range(ARRAY_HEAD + MAX_ARRAY_DISTINCT)])
    p = run_cli(["lint", str(cfg), "--format", "json"])
    assert p.returncode == 1, p.stderr
    found = json.loads(p.stdout)["files"][0]["findings"]
    assert any(f["code"] == "S003" and "betas" in f["pointer"] for f in found)
