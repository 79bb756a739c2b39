"""--hf at ZeRO-3: the checkpoint's state dict rank 0 holds while from_pretrained loads it
(advisor.ledger.timeline.hf_state_dict_entries), against transformers 5's own load path run for
real with DeepSpeed on CPU: a 2-layer Llama saved in bf16 (safetensors), loaded on 2 ranks
under an HfDeepSpeedConfig for ZeRO-3. Rank 0 materialises every tensor of the checkpoint
(map_location "cpu"), rank 1 none (all "meta"); the ledger's figure for rank 0 must be those
bytes exactly, and 0 for rank 1."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import free_port, run_group

pytestmark = pytest.mark.engine

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
       "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64, "tie_word_embeddings": False}
MAKE = """
import json, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
m = LlamaForCausalLM(LlamaConfig(**json.loads(sys.argv[2]))).to(torch.bfloat16)
m.save_pretrained(sys.argv[1])
"""


def test_rank_0_holds_the_whole_checkpoint_under_hf_zero3(tmp_path):
    ckpt = tmp_path / "ckpt"
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    made = run_group([sys.executable, "-c", MAKE, str(ckpt), json.dumps(CFG)], 300, env=env)
    assert made.returncode == 0, made.stderr[-3000:]
    ds = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}
    p = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                        "--master_port", str(free_port()), os.path.join(HERE, "hf_zero3_load_worker.py"), str(ckpt),
                        json.dumps(ds)], 600, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    # each rank's record follows its "HFZ3 " marker, wherever another rank's output broke the line
    dec = json.JSONDecoder()
    got = {d["rank"]: d for d in (dec.raw_decode(chunk)[0] for chunk in p.stdout.split("HFZ3 ")[1:])}
    assert sorted(got) == [0, 1]

    from advisor.config.effective import effective_config
    from advisor.ledger.state import Cluster, Plan, compute_ledger
    from advisor.ledger.timeline import checkpoint_load_dtype, hf_state_dict_entries, resolve_load
    from advisor.model.specs import resolve_model

    inv = resolve_model(str(ckpt / "config.json"))
    assert inv.numel == got[0]["numel"]  # the inventory is the model transformers built
    ec = effective_config(ds)
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=2)))
    load = resolve_load(ec, hf=True, checkpoint_dtype=checkpoint_load_dtype(inv.hf_config))
    assert load.state_dict_dtype == "bf16"  # save_pretrained wrote torch_dtype/dtype bfloat16
    for r in (0, 1):
        predicted = sum(e.bytes for e in hf_state_dict_entries(ec, led, load, r))
        assert predicted == got[r]["materialised_bytes"], (r, predicted, got[r])
    assert got[1]["meta_tensors"] == got[1]["tensors"] and got[0]["meta_tensors"] == 0
