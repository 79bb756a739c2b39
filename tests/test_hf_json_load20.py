"""Under --hf a config file the HF Trainer cannot read is an error (H011), at the line and column
accelerate's own reader names: accelerate/utils/deepspeed.py HfDeepSpeedConfig.__init__ (l.141-143,
``json.load``), the class transformers' HfDeepSpeedConfig (integrations/deepspeed.py l.62-84)
builds on. Plain lint keeps DeepSpeed's reading (hjson): no H011 there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HJSON_ONLY = '{\n  "train_micro_batch_size_per_gpu": "auto",\n  "zero_optimization": {"stage": 2,},\n}\n'


def _lint(path: Path, *extra: str):
    r = subprocess.run([sys.executable, "-m", "advisor", "lint", str(path), "--format", "json", *extra],
                       capture_output=True, text=True, cwd=ROOT)
    return r.returncode, json.loads(r.stdout)


def _findings(doc) -> list[dict]:
    return [f for d in doc["files"] for f in d["findings"]]


def test_h011_at_accelerates_own_error(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(HJSON_ONLY)
    acc = pytest.importorskip("accelerate.utils.deepspeed")
    with pytest.raises(json.JSONDecodeError) as real:  # the Trainer's reader itself
        acc.HfDeepSpeedConfig(str(cfg))
    rc, doc = _lint(cfg, "--hf")
    h = [f for f in _findings(doc) if f["code"] == "H011"]
    assert rc != 0 and len(h) == 1, doc
    assert (h[0]["line"], h[0]["column"]) == (real.value.lineno, real.value.colno)
    assert real.value.msg in h[0]["message"] and h[0]["severity"] == "error"
    # by hand: line 3 is '  "zero_optimization": {"stage": 2,},'; json stops at the '}' after the comma
    assert (h[0]["line"], h[0]["column"]) == (3, 36)


def test_plain_lint_reads_hjson_as_deepspeed(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(HJSON_ONLY.replace('"auto"', "1"))
    import hjson  # DeepSpeed's reader (deepspeed/runtime/config.py l.444) takes it
    assert hjson.loads(cfg.read_text())["zero_optimization"] == {"stage": 2}
    rc, doc = _lint(cfg)
    assert not [f for f in _findings(doc) if f["code"] == "H011"], doc
