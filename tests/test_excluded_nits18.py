"""Defects a newcomer found (nits18) in estimate's ``assumptions.excluded`` and one message: each line must be
listed exactly where the plan makes the thing it names, decided by DeepSpeed 0.19.8's own condition (cited), not
by today's wording. Each test failed before its fix."""
from __future__ import annotations

import json

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.model.inventory import from_dict
from tests.conftest import run_cli

Z3 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e7},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
Z1BF = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
        "data_types": {"grad_accum_dtype": "fp32"}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
Z0FP16 = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}, "zero_optimization": {"stage": 0},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}


def _cfg(tmp_path, data, name="ds.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


def _estimate(tmp_path, data, *args):
    r = run_cli(["estimate", _cfg(tmp_path, data), "--model", "gpt2", "--seq-len", "1024", *args, "--format", "json"])
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def _items(d, rank=0):
    return {i["item"]: i for i in d["ranks"][rank]["items"]}


# ---- 1. the zero-padded partitions of __avg_scatter_contiguous_grads

def test_padded_partitions_only_where_the_contiguous_all_reduce_runs_with_a_short_share(tmp_path):
    rs_off = ["--set", "zero_optimization.reduce_scatter=false"]
    # contiguous_gradients off: stage3.py l.1674 never calls __avg_scatter_contiguous_grads
    d = _estimate(tmp_path, Z3, "--world-size", "2", *rs_off, "--set", "zero_optimization.contiguous_gradients=false")
    assert not any("zero-padded" in x for x in d["assumptions"]["excluded"])
    # W = 1: each rank's share is the whole gradient (ceil(n/1) = n, l.1890-1893): nothing padded
    d = _estimate(tmp_path, Z3, "--world-size", "1", *rs_off)
    assert not any("zero-padded" in x for x in d["assumptions"]["excluded"])
    # gpt2 at W = 2: every gradient's numel is even (hidden 768 divides each shape's last dimension), so every
    # share is ceil(n/2) = n/2 whole: l.1897 never pads
    d = _estimate(tmp_path, Z3, "--world-size", "2", *rs_off)
    assert not any("zero-padded" in x for x in d["assumptions"]["excluded"])


def _ec(**zero):
    return effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                             "zero_optimization": {"stage": 3, **zero}})


def test_padded_partitions_listed_for_an_odd_gradient_within_the_bucket():
    odd = from_dict({"name": "odd", "tensors": [{"name": "params.0", "shape": [1001]}]}, "odd")
    even = from_dict({"name": "even", "tensors": [{"name": "params.0", "shape": [1000]}]}, "even")
    line = state.zero3_backward_copies_excluded(_ec(reduce_scatter=False, reduce_bucket_size=5000), [(odd, 2)])
    assert "zero-padded" in line  # 1001 = 501 + 500: rank 1's share is short by one (l.1897-1902)
    assert state.zero3_backward_copies_excluded(_ec(reduce_scatter=False, reduce_bucket_size=5000), [(even, 2)]) == ""
    # a gradient over reduce_bucket_size is alone in a bucket of more elements than the size: __avg_scatter_grads
    # (l.1674, 1583), which pads through reduce_scatter_coalesced, counted
    assert state.zero3_backward_copies_excluded(_ec(reduce_scatter=False, reduce_bucket_size=500), [(odd, 2)]) == ""
    # with reduce_scatter on, never the contiguous all-reduce
    assert state.zero3_backward_copies_excluded(_ec(reduce_bucket_size=5000), [(odd, 2)]) == ""


def test_explain_names_the_flush_path_the_plan_takes(tmp_path):
    def flush(*args):
        return _items(_estimate(tmp_path, Z3, "--world-size", "2", *args))["zero3_reduce_flush"]
    # reduce_scatter off, contiguous, every gpt2 gradient <= 5e7 elements (wte 50257 x 768 = 38,597,376):
    # every flush is __avg_scatter_contiguous_grads' in-place all_reduce (l.1674-1676), never reduce_scatter_coalesced
    ar = flush("--set", "zero_optimization.reduce_scatter=false")
    assert "__avg_scatter_contiguous_grads" in ar["source"] and "reduce_scatter_coalesced" not in ar["source"]
    rs = flush()
    assert "reduce_scatter_coalesced" in rs["source"] and "__avg_scatter_contiguous_grads" not in rs["source"]


# ---- 2. stage 0 has no reduce-scatter staging and no ZeRO-3 in-step temporaries

def test_stage0_lists_no_reduce_scatter_or_zero3_copies(tmp_path):
    d = _estimate(tmp_path, Z0FP16, "--world-size", "2")
    assert d["assumptions"]["optimizer"]["wrapper"].startswith("FP16_")  # torch_adam: FP16_UnfusedOptimizer
    for x in d["assumptions"]["excluded"]:
        assert "reduce-scatter" not in x and "ZeRO-3" not in x, x


# ---- 3. BF16_Optimizer is not stage_1_and_2.py

def test_bf16_optimizer_has_no_stage_1_and_2_flat_copy_line(tmp_path):
    for extra in ([], ["--pipeline-parallel", "2"]):
        d = _estimate(tmp_path, Z1BF, "--world-size", "2", *extra)
        assert d["assumptions"]["optimizer"]["wrapper"] == "BF16_Optimizer"
        assert not any("stage_1_and_2.py" in x for x in d["assumptions"]["excluded"]), extra


def test_zero12_flat_copy_line_does_not_contradict_the_flatten_instant(tmp_path):
    # DeepSpeedZeroOptimizer without zero.Init: the accelerator flatten (stage_1_and_2.py l.505-508) is the
    # timeline's initialize:flatten instant, so it is not excluded; only the host fallback (l.449-460) may be
    d = _estimate(tmp_path, {**Z1BF, "data_types": {}}, "--world-size", "2")
    assert d["assumptions"]["optimizer"]["wrapper"] == "DeepSpeedZeroOptimizer"
    assert "initialize:flatten" in [t["instant"] for t in d["ranks"][0]["timeline"]]
    lines = [x for x in d["assumptions"]["excluded"] if "flat copy of a param group" in x]
    assert lines and all("host memory" in x and "built on the accelerator" not in x for x in lines)


# ---- 4. qgZ takes its all-to-all only across nodes

def test_qgz_on_one_node_reduces_as_without_it(tmp_path):
    qgz = ["--set", "zero_optimization.zero_quantized_gradients=true"]
    one = _estimate(tmp_path, Z3, "--world-size", "4", "--gpus-per-node", "4", *qgz)
    plain = _estimate(tmp_path, Z3, "--world-size", "4", "--gpus-per-node", "4")
    # stage3.py l.1925-1930: num_nodes = 4 // 4 = 1, so reduce_scatter_coalesced, as without qgZ
    assert _items(one)["zero3_reduce_flush"]["bytes"] == _items(plain)["zero3_reduce_flush"]["bytes"]
    assert not any("qgZ" in x for x in one["assumptions"]["excluded"])
    two = _estimate(tmp_path, Z3, "--world-size", "8", "--gpus-per-node", "4", *qgz)
    assert "zero3_reduce_flush" not in _items(two)  # all_to_all_quant_reduce across 2 nodes: not modelled
    line = [x for x in two["assumptions"]["excluded"] if x.startswith("ZeRO-3 backward copies")][0]
    assert "qgZ" in line and "on the timeline" not in line.split("no flush is on the timeline")[1]


# ---- 6. gradient_predivide_factor <= 0: DeepSpeed never checks it

def test_predivide_factor_refusal_states_the_true_reason(tmp_path):
    r = run_cli(["lint", _cfg(tmp_path, Z3), "--set", "gradient_predivide_factor=-1"])
    msg = r.stdout + r.stderr
    assert "gradient_predivide_factor" in msg
    assert "does not accept it" not in msg and "never checks it" in msg
    assert "runtime/config.py" in msg
