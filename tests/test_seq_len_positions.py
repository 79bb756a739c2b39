"""W001: a sequence longer than the model's positions. GPT-2's learned position table has
n_positions = 1,024 rows (its config.json, and transformers' GPT2Model builds
``wpe = nn.Embedding(config.max_position_embeddings, ...)``): position 1,024 is out of range, which
transformers' own module shows below; RoPE models run past their length (a warning)."""

from __future__ import annotations

import json

import pytest

from advisor.model.specs import resolve_model
from advisor.rules.W001_seq_len_beyond_positions import positions_problem
from tests.conftest import run_cli

CFG = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2}}


def test_gpt2_position_table_ends_at_1024_in_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16)
    model = transformers.GPT2Model(cfg)
    assert model.wpe.num_embeddings == cfg.n_positions == resolve_model("gpt2").meta["max_seq_len"] == 1024
    model(torch.zeros(1, 1024, dtype=torch.long))  # the last position exists
    with pytest.raises(IndexError):
        model(torch.zeros(1, 1025, dtype=torch.long))


def test_kinds():
    gpt2, llama = resolve_model("gpt2").meta, resolve_model("llama-3-8b").meta
    assert positions_problem(gpt2, 1024) is None and positions_problem(gpt2, None) is None
    assert positions_problem(gpt2, 1025)[0] == "error"
    assert llama["max_seq_len"] == 8192 and llama["position_embedding"] == "rope"
    sev, msg = positions_problem(llama, 8193)
    assert sev == "warning" and "rotary (RoPE)" in msg
    assert positions_problem({"max_seq_len": 10}, 11)[0] == "warning"  # unknown kind: a warning


def test_estimate_reports_it(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(CFG))
    base = ["estimate", str(cfg), "--world-size", "8", "--gpu-memory", "80GB", "--format", "json"]
    p = run_cli(base + ["--model", "gpt2", "--seq-len", "2048"])
    w = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "W001"]
    assert len(w) == 1 and w[0]["severity"] == "error" and "1,024 positions" in w[0]["message"]
    assert p.returncode == 1
    p = run_cli(base + ["--model", "gpt2", "--seq-len", "1024"])
    assert not [f for f in json.loads(p.stdout)["findings"] if f["code"] == "W001"]
    p = run_cli(base + ["--model", "llama-3.2-1b", "--seq-len", "262144", "--checkpointing", "full"])
    w = [f for f in json.loads(p.stdout)["findings"] if f["code"] == "W001"]
    assert len(w) == 1 and w[0]["severity"] == "warning"
