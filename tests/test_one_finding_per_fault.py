"""One finding per fault: a refusal lint already reports is not reported again by estimate (M090).

DeepSpeed 0.19.8 refuses fp16 + bf16 (``runtime/config.py`` ``_do_error_check``: P001) and NVMe
offload without ``nvme_path`` at stage 3 (the swapper joins a None path: O003) at initialize;
estimate then has nothing to account for. The lint rule's finding is the one finding for it;
M090 stands in only when no lint rule reports the refusal (the library call without lint).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_json


@pytest.mark.parametrize("cfg,code", [
    ({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}, "bf16": {"enabled": True}}, "P001"),
    ({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}, "O003"),
])
def test_estimate_reports_a_refused_config_once(tmp_path, cfg, code):
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(cfg))
    rc, out = run_json(["estimate", str(p), "--params", "1000000", "--format", "json"])
    codes = [f["code"] for f in out["findings"] if f["severity"] == "error"]
    assert rc == 1 and codes.count(code) == 1 and "M090" not in codes, codes


def test_m090_without_lint_findings():
    from advisor.config.effective import effective_config
    from advisor.model.inventory import from_param_count
    from advisor.plan import Cluster, Plan
    from advisor.views.estimate import estimate

    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}, "bf16": {"enabled": True}})
    res = estimate(Plan(ec, from_param_count(1_000_000), Cluster(world_size=1)))
    assert [f.code for f in res.findings] == ["M090"]
