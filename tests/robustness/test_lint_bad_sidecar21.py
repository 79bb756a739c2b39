"""Issue 21 leftover: ``lint`` ignored a malformed workload sidecar (``CONFIG.workload.json``, what
``generate`` writes next to a config: advisor/views/workload.py). Without ``--world-size`` it did not
read it; with one it swallowed the error. ``estimate`` and ``check`` refuse such a sidecar with one
line naming it, the key and the problem, exit 2 (bad usage or unreadable input). Now ``lint`` gives
that same line for the config it belongs to (stderr in text, ``error`` in JSON), exit 2, and still
reports the other files it was given."""

from __future__ import annotations

import json

import pytest

from tests.robustness.robust_helpers import run_cli

CONFIG = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}


@pytest.mark.parametrize("sidecar, problem", [
    ('{"seq_len": 4096', "not valid JSON"),                    # cut JSON
    ('{"seq_len": "long"}', "/seq_len: invalid value"),       # wrong type
    ('{"tensor_parallel": 0}', "/tensor_parallel: invalid value"),
    ('[1, 2]', "must be a JSON object"),
])
@pytest.mark.parametrize("world", [[], ["--world-size", "8"]])
def test_lint_refuses_a_bad_sidecar_as_estimate_does(tmp_path, sidecar, problem, world):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CONFIG))
    (tmp_path / "ds.workload.json").write_text(sidecar)
    good = tmp_path / "other.json"  # no sidecar: linted as before
    good.write_text(json.dumps(CONFIG))

    est = run_cli(["estimate", "--model", "gpt2", "--world-size", "8", str(cfg)])
    assert est.returncode == 2
    line = est.stderr.strip().splitlines()[-1]
    assert problem in line and str(tmp_path / "ds.workload.json") in line, est.stderr

    lint = run_cli(["lint", *world, str(cfg), str(good)])
    assert lint.returncode == 2, (lint.stdout, lint.stderr)
    assert lint.stderr.strip().splitlines()[-1] == line  # the same one line, on stderr
    assert "1 unreadable" in lint.stdout and "Traceback" not in lint.stderr

    js = run_cli(["lint", "--format", "json", *world, str(cfg), str(good)])
    assert js.returncode == 2
    files = {f["file"]: f for f in json.loads(js.stdout)["files"]}
    assert files[str(cfg)]["error"] == line.removeprefix("ds-advisor: ")
    assert "error" not in files[str(good)] or not files[str(good)]["error"]


def test_a_good_sidecar_still_lints_clean(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CONFIG))
    (tmp_path / "ds.workload.json").write_text(json.dumps({"seq_len": 2048, "tensor_parallel": 1}))
    r = run_cli(["lint", str(cfg)])
    assert r.returncode == 0, (r.stdout, r.stderr)
