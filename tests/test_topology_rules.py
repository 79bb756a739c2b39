"""G001-G004: DeepSpeed's topology constraints as errors, each quoting DeepSpeed's own assertion
(checked here against DeepSpeed itself where that is cheap on CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import run_cli

Z = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
     "optimizer": {"type": "Adam"}}


def _est(tmp_path, cfg, *args, model="llama-2-7b"):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    p = run_cli(["estimate", str(f), "--model", model, "--seq-len", "1024", "--format", "json", *args])
    assert "Traceback" not in p.stderr
    return p, (json.loads(p.stdout) if p.stdout.strip() else None)


def _codes(d):
    return {(f["code"], f["severity"]) for f in d["findings"]}


def test_G001_pipeline_with_zero3_is_refused(tmp_path):
    p, d = _est(tmp_path, {**Z, "zero_optimization": {"stage": 3}}, "--world-size", "8", "--pipeline-parallel", "2")
    assert p.returncode == 1 and ("G001", "error") in _codes(d)
    assert d["ranks"] == [] and "incompatible with pipeline parallelism" in d["unsupported"]
    p, d = _est(tmp_path, {**Z, "zero_optimization": {"stage": 1}}, "--world-size", "8", "--pipeline-parallel", "2")
    assert p.returncode == 0 and not any(c.startswith("G") for c, _ in _codes(d))


@pytest.mark.engine
def test_G001_message_is_deepspeeds_own():
    """PipelineEngine itself, one gloo rank on CPU, ZeRO-2: the assertion text G001 quotes."""
    pytest.importorskip("deepspeed")
    code = textwrap.dedent("""
        import os, torch, deepspeed
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29533"), RANK="0",
                          WORLD_SIZE="1", LOCAL_RANK="0")
        deepspeed.init_distributed("gloo")
        from deepspeed.pipe import PipelineModule
        m = PipelineModule([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)], num_stages=1,
                           loss_fn=torch.nn.MSELoss())
        cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
               "zero_optimization": {"stage": 2}}
        try:
            deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)
        except AssertionError as e:
            print("ASSERT:", e)
    """)
    import os
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PORT": str(port)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert "ASSERT: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in p.stdout, p.stderr[-2000:]
    from advisor.rules import all_rules
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in all_rules()["G001"].explanation()


def test_G002_ulysses_size_not_dividing_world(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({**Z, "sequence_parallel_size": 3, "zero_optimization": {"stage": 1}}))
    p = run_cli(["lint", str(f), "--world-size", "8", "--format", "json"])
    d = json.loads(p.stdout)
    hits = [x for r in d["files"] for x in r["findings"] if x["code"] == "G002"] if "files" in d else \
        [x for x in d[0]["findings"] if x["code"] == "G002"]
    assert hits and "8 is not divisible by 3" in hits[0]["message"]
    groups = pytest.importorskip("deepspeed.utils.groups")
    with pytest.raises(AssertionError, match="^8 is not divisible by 3$"):
        groups._ensure_divisibility(8, 3)


def test_G003_hpz_must_divide_world_and_should_divide_node(tmp_path):
    cfg = {**Z, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 16}}
    p, d = _est(tmp_path, cfg, "--world-size", "32", "--gpus-per-node", "8")
    assert ("G003", "warning") in _codes(d)
    cfg["zero_optimization"]["zero_hpz_partition_size"] = 3
    p, d = _est(tmp_path, cfg, "--world-size", "32", "--gpus-per-node", "8")
    assert p.returncode == 1 and ("G003", "error") in _codes(d)
    cfg["zero_optimization"]["zero_hpz_partition_size"] = 8
    p, d = _est(tmp_path, cfg, "--world-size", "32", "--gpus-per-node", "8")
    assert not any(c == "G003" for c, _ in _codes(d))


def test_G003_hpz_beyond_world_is_one_group_of_the_world(tmp_path):
    """Issue #17: DeepSpeed uses min(h, world) ranks per hpZ group (utils/groups.py
    _create_zero_param_parallel_group), so hpz 16 on 8 ranks of one node straddles nothing."""
    import inspect
    groups = pytest.importorskip("deepspeed.utils.groups")
    assert "zero_param_parallel_size_ = min(group_size, world_size)" in inspect.getsource(
        groups._create_zero_param_parallel_group)
    cfg = {**Z, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 16}}
    p, d = _est(tmp_path, cfg, "--world-size", "8", "--gpus-per-node", "8")
    assert p.returncode == 0 and not any(c == "G003" for c, _ in _codes(d)), d["findings"]
    # min(16, 8) = 8 ranks per group on nodes of 4: the group does straddle two nodes
    p, d = _est(tmp_path, cfg, "--world-size", "8", "--gpus-per-node", "4")
    assert ("G003", "warning") in _codes(d)


def test_G004_ep_size_must_divide_dp_and_experts(tmp_path):
    cfg = {**Z, "zero_optimization": {"stage": 1}}
    p, d = _est(tmp_path, cfg, "--world-size", "6", "--expert-parallel", "4", model="mixtral-8x7b")
    assert p.returncode == 1 and ("G004", "error") in _codes(d)
    assert any("6 is not divisible by 4" in f["message"] for f in d["findings"])
    p, d = _est(tmp_path, cfg, "--world-size", "8", "--expert-parallel", "4", model="mixtral-8x7b")
    assert p.returncode == 0 and d["ranks"], p.stderr


def test_G005_ulysses_degree_must_divide_the_heads(tmp_path):
    """Issue #17 item 3: Llama-3-8B (32 heads, 8 KV heads) with Ulysses 3 got a full estimate."""
    cfg = {**Z, "zero_optimization": {"stage": 1}}
    p, d = _est(tmp_path, cfg, "--world-size", "6", "--sequence-parallel", "3", model="llama-3-8b")
    assert p.returncode == 1 and ("G005", "error") in _codes(d) and d["ranks"] == []
    assert any("Number of heads (32) must be divisible by the sequence parallel size (3)!" in f["message"]
               and "Attention head count 32 is not divisible by SP size 3" in f["message"] for f in d["findings"])
    # from the config's own sequence_parallel_size: pointed at the key
    p, d = _est(tmp_path, {**cfg, "sequence_parallel_size": 3}, "--world-size", "6", model="llama-3-8b")
    assert [f["pointer"] for f in d["findings"] if f["code"] == "G005"] == ["/sequence_parallel_size"]
    # 8 divides 32 heads and 8 KV heads: accepted
    p, d = _est(tmp_path, cfg, "--world-size", "8", "--sequence-parallel", "8", model="llama-3-8b")
    assert p.returncode == 0 and not any(c == "G005" for c, _ in _codes(d)) and d["ranks"]
    # Qwen2.5-7B: 28 heads, 4 KV heads; U = 14 divides the heads, but neither 4 % 14 nor 14 % 4
    p, d = _est(tmp_path, cfg, "--world-size", "14", "--sequence-parallel", "14", model="qwen2.5-7b")
    assert any(f["code"] == "G005" and "KV attention head count 4 is not divisible by SP size 14 or vice versa"
               in f["message"] for f in d["findings"])
    # with TP 2 (Megatron-DeepSpeed's DistributedAttention): 8 KV heads / 2 = 4 per rank, U = 8
    p, d = _est(tmp_path, cfg, "--world-size", "16", "--tensor-parallel", "2", "--sequence-parallel", "8",
                model="llama-3-8b")
    assert any(f["code"] == "G005" and "Number of heads (4) must be divisible by the sequence parallel size (8)!"
               in f["message"] for f in d["findings"])


def test_G005_messages_are_deepspeeds_own(monkeypatch):
    """The texts G005 quotes, from DeepSpeed itself on CPU: DistributedAttention's layout (sequence/
    layer.py) and UlyssesSPAttentionHF's constructor (ulysses_sp.py) with a 3-rank group stubbed."""
    torch = pytest.importorskip("torch")
    layer = pytest.importorskip("deepspeed.sequence.layer")
    from advisor.rules.G005_ulysses_heads import ulysses_heads_problem
    mine = ulysses_heads_problem(32, 8, 3)
    with pytest.raises(AssertionError) as e:
        layer._generate_layout_params(2, 0, 3, torch.empty(1, 4, 32, 8))
    assert str(e.value) in mine
    usp = pytest.importorskip("deepspeed.runtime.sequence_parallel.ulysses_sp")
    monkeypatch.setattr(usp, "register_all_to_all_group", lambda g: None)
    monkeypatch.setattr(usp.dist, "get_world_size", lambda group=None: 3)
    monkeypatch.setattr(usp.dist, "get_rank", lambda group=None: 0)
    kw = dict(attn=None, batch_size=1, attn_head_size=128, num_hidden_layers=32, process_group=None,
              local_seq_length=4096, global_seq_length=12288)
    with pytest.raises(ValueError) as e:
        usp.UlyssesSPAttentionHF(attn_head_count=32, kv_head_count=8, **kw)
    assert str(e.value) in mine
    monkeypatch.setattr(usp.dist, "get_world_size", lambda group=None: 14)
    with pytest.raises(ValueError) as e:
        usp.UlyssesSPAttentionHF(attn_head_count=28, kv_head_count=4, **kw)
    assert str(e.value) in ulysses_heads_problem(28, 4, 14)
    with pytest.raises(AssertionError) as e:  # a TP rank's 4 KV heads over U = 8
        layer._generate_layout_params(2, 0, 8, torch.empty(1, 4, 4, 8))
    assert str(e.value) in ulysses_heads_problem(32, 8, 8, tp=2)
    assert ulysses_heads_problem(32, 8, 8) is None and ulysses_heads_problem(32, 8, 16) is None


def test_G006_more_stages_than_layers_is_refused_not_a_crash(tmp_path):
    """Issue #17 item 2: --pipeline-parallel 64 on Llama-3-8B (32 layers) was 'internal error:
    IndexError'. DeepSpeed's partition_uniform leaves the last 32 stages empty, and torch.optim
    refuses a stage's empty parameter list."""
    cfg = {**Z, "zero_optimization": {"stage": 1}}
    p, d = _est(tmp_path, cfg, "--world-size", "64", "--gpus-per-node", "8", "--pipeline-parallel", "64",
                model="llama-3-8b")
    assert p.returncode == 1 and "internal error" not in p.stderr and d["ranks"] == []
    g = [f for f in d["findings"] if f["code"] == "G006"]
    assert g and g[0]["severity"] == "error" and "32 stage(s) no transformer layer" in g[0]["message"]
    p, d = _est(tmp_path, cfg, "--world-size", "64", "--gpus-per-node", "8", "--pipeline-parallel", "32",
                model="llama-3-8b")
    assert p.returncode == 0 and not any(c == "G006" for c, _ in _codes(d)) and d["ranks"]
    utils = pytest.importorskip("deepspeed.runtime.utils")
    parts = utils.partition_uniform(num_items=32, num_parts=64)
    assert sum(1 for i in range(64) if parts[i + 1] == parts[i]) == 32
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="optimizer got an empty parameter list") as e:
        torch.optim.Adam([], lr=1e-3)
    assert str(e.value) in g[0]["message"]


def test_G_rules_are_explained():
    for code in ("G001", "G002", "G003", "G004", "G005", "G006"):
        p = run_cli(["explain", code])
        assert p.returncode == 0 and code in p.stdout
