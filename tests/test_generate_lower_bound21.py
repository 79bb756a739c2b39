"""genlb21: generate for a family without an activation formula never presents a plan as fitting.

``generate --model deepseek-v3 --hardware dgx-h100:16 --global-batch 512 --seq-len 4096`` wrote micro-batch 4
without checkpointing, "accel GiB: 47.3" (activations left out: multi-head latent attention has no formula,
advisor.model.activations.FORMULA_GAPS), and ``check`` of that config said TIGHT "need >= 47.33 GiB" (M104).
Now such a plan's need prints ">=" (JSON: ``accelerator_lower_bound``, ``assumptions.peak_lower_bound``), the
search fixes micro-batch 1 and full recompute (activations grow with micro-batch x sequence; full recompute keeps
only each layer's input) unless --micro-batch / --checkpointing are given, and one warning names the command that
measures them. A tiny deepseek_v3 config.json (tests/hf_small.py's) keeps it fast and off NVMe; its llama twin (a
family with a formula) shows the search unchanged there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from advisor.errors import EXIT_OK, EXIT_TIGHT

ROOT = Path(__file__).resolve().parents[1]

DSV3 = dict(model_type="deepseek_v3", hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=4, n_shared_experts=1,
            num_experts_per_tok=2, n_group=1, topk_group=1, num_attention_heads=4, num_key_value_heads=4,
            q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False)
LLAMA = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=4, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False)
SHAPE = ["--hardware", "dgx-h100", "--global-batch", "64", "--seq-len", "256"]


def run(cmd: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", cmd, *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                                      "LANG": "C.UTF-8", "HOME": "/root", "COLUMNS": "200"})


def model(tmp_path: Path, cfg: dict) -> str:
    p = tmp_path / f"{cfg['model_type']}.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def accel_cells(text: str) -> list[str]:
    """The accel column of generate's plan rows (COLUMNS=200: one line per plan, '1  1  none  ...')."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].isdigit() and len(parts) > 6 and parts[5] in ("none", "full", "selective"):
            out.append(" ".join(parts[6:8]) if parts[6] == ">=" else parts[6])
    return out


def test_no_formula_plan_is_least_exposed_and_a_lower_bound(tmp_path):
    m = model(tmp_path, DSV3)
    out = tmp_path / "ds.json"
    r = run("generate", "--model", m, *SHAPE, "-o", str(out))
    assert r.returncode == EXIT_OK, r.stderr
    cfg = json.loads(out.read_text())
    assert cfg["train_micro_batch_size_per_gpu"] == 1  # the least activations per rank: b = 1
    assert "activation_checkpointing" in cfg
    side = json.loads((tmp_path / "ds.workload.json").read_text())
    assert side["checkpointing"] == "full" and side["micro_batch"] == 1
    cells = accel_cells(r.stdout)
    assert cells and all(c.startswith(">= ") for c in cells), r.stdout
    warnings = [ln for ln in r.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, r.stdout  # one, not per plan
    text = " ".join(r.stdout.split())
    assert "deepseek_v3" in text and "not counted" in text and "TIGHT (M104)" in text
    assert f"ds-advisor estimate {out} --model {m} --activations trace" in text
    assert "recompute searched among" not in text  # full recompute was fixed, not searched (no SAC note)
    # the config written: check says TIGHT (a lower bound, M104), not GO; the host given so only the accelerator judges
    c = run("check", str(out), "--model", m, "--hardware", "dgx-h100", "--host-memory", "2TiB")
    assert c.returncode == EXIT_TIGHT, c.stdout + c.stderr
    assert "M104" in c.stdout


def test_no_formula_json_marks_every_need(tmp_path):
    m = model(tmp_path, DSV3)
    r = run("generate", "--model", m, *SHAPE, "--format", "json")
    assert r.returncode == EXIT_OK, r.stderr
    d = json.loads(r.stdout)
    assert "deepseek_v3" in d["assumptions"]["peak_lower_bound"]
    assert d["plans"] and all(p["accelerator_lower_bound"] is True for p in d["plans"])
    assert all(p["micro_batch"] == 1 and p["checkpointing"] == "full" for p in d["plans"])
    assert len(d["warnings"]) == 1 and "--activations trace" in d["warnings"][0]
    assert all(x.get("accelerator_lower_bound") for x in d["rejected"] if x["tier"] == "accelerator")


def test_user_fixed_micro_batch_and_checkpointing_are_kept(tmp_path):
    m = model(tmp_path, DSV3)
    out = tmp_path / "ds.json"
    r = run("generate", "--model", m, *SHAPE, "--micro-batch", "2", "--checkpointing", "none", "-o", str(out))
    assert r.returncode == EXIT_OK, r.stderr
    cfg = json.loads(out.read_text())
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and "activation_checkpointing" not in cfg
    assert all(c.startswith(">= ") for c in accel_cells(r.stdout))
    text = " ".join(r.stdout.split())
    assert "the search fixed" not in text and "not counted" in text  # still a floor, nothing fixed by the search


def test_formula_family_unchanged(tmp_path):
    """The same shape with a formula (llama): needs counted, no '>=', the JSON keys absent, the micro-batch and
    recompute searched (the tiny model fits at the largest micro-batch without recompute)."""
    m = model(tmp_path, LLAMA)
    r = run("generate", "--model", m, *SHAPE, "--format", "json")
    assert r.returncode == EXIT_OK, r.stderr
    d = json.loads(r.stdout)
    assert "peak_lower_bound" not in d["assumptions"] and "warnings" not in d
    assert not any("accelerator_lower_bound" in p for p in d["plans"] + d["rejected"])
    assert d["plans"][0]["micro_batch"] == 8 and d["plans"][0]["checkpointing"] == "none"  # 64 / 8 ranks
    t = run("generate", "--model", m, *SHAPE)
    assert t.returncode == EXIT_OK
    assert accel_cells(t.stderr) and not any(c.startswith(">=") for c in accel_cells(t.stderr))
    assert "warning:" not in t.stderr
