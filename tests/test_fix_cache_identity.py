"""The M100 fixes judged with work reused across candidates (issue 21: advisor.views.fixes.REUSE: a
ledger lent to the candidates with equal config and cluster, a pair whose activations alone overflow
the accelerator dropped before its ledger, a dropped pair's costs not computed) give, byte for byte,
what judging every candidate from scratch gives (REUSE off): estimate's JSON with a hardware spec
(step times) or a capacity, check's JSON and text (the host probe fixed: /proc/meminfo moves between
two runs). Seeded random plans: ZeRO stages 0-3, CPU / NVMe offload, gradient accumulation,
micro-batches, world sizes 1-16, 2-300 layers, sequence lengths, capacities from far short to
nearly enough. The test also counts that each reuse happened (a ledger lent, a pair dropped by its
activations), so it cannot pass with them never taken."""
import json
import random

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.views import check as check_view
from advisor.views import fixes


def _case(rng: random.Random, tmp_path, i: int) -> list[list[str]]:
    h = rng.choice([64, 128, 256, 512, 1024])
    heads = rng.choice([2, 4, 8])
    model = {"model_type": "llama", "hidden_size": h, "intermediate_size": h * rng.choice([2, 3, 4]),
             "num_attention_heads": heads, "num_key_value_heads": heads, "vocab_size": rng.choice([1000, 32000]),
             "max_position_embeddings": 4096, "num_hidden_layers": rng.randint(2, 300)}
    st = rng.choice([0, 1, 2, 3, 3])
    mb, ga = rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 1, 2, 4])
    z: dict = {"stage": st}
    if st and rng.random() < 0.3:
        z["offload_optimizer"] = {"device": "cpu"}
    if st == 3 and rng.random() < 0.2:
        z["offload_param"] = {"device": rng.choice(["cpu", "nvme"]), "nvme_path": "/raid/x"}
    if st == 3 and rng.random() < 0.2:
        z["offload_optimizer"] = {"device": "nvme", "nvme_path": "/raid/x"}
    if st in (1, 2) and rng.random() < 0.3:
        z["reduce_bucket_size"] = rng.choice([4096, 100000])
    cfg = {"train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": ga,
           ("bf16" if rng.random() < 0.8 else "fp16"): {"enabled": True}, "zero_optimization": z}
    mp, cp = tmp_path / f"m{i}.json", tmp_path / f"c{i}.json"
    mp.write_text(json.dumps(model))
    cp.write_text(json.dumps(cfg))
    W = rng.choice([1, 2, 4, 8, 16])
    seq = str(rng.choice([128, 512, 2048]))
    common = [str(cp), "--model", str(mp), "--seq-len", seq]
    gpu = f"{int(10 ** rng.uniform(7.5, 10.5))}B"  # bytes, log-uniform 32 MB .. 32 GB
    if i % 2 and st:
        # a capacity a little over what a pair needs (the optimizer offloaded, every layer checkpointed):
        # pairs are tried only when no single change fits, and offered only when they fit
        both = ["--set", "zero_optimization.offload_optimizer.device=cpu", "--checkpointing", "full"]
        if i % 4 == 3 and st < 3:  # a pair without checkpointing: its activations are most of its need
            both = ["--set", "zero_optimization.offload_optimizer.device=cpu", "--set", "zero_optimization.stage=3"]
        d = json.loads(CliRunner().invoke(main, ["estimate", *common, "--world-size", str(W), *both,
                                                 "--gpu-memory", "10000GB", "--format", "json"]).output)
        need = [r["need"] for r in d["fit"] if r["tier"] == "accelerator"][0]
        gpu = f"{int(need * rng.uniform(1.1, 1.8))}B"
    host = f"{rng.choice([8, 64, 512, 512])}GB"
    cap = ["--world-size", str(W), "--gpu-memory", gpu, "--host-memory", host]
    hw = rng.choice(["workstation-4090", "a100-40gb", "dgx-h100", f"dgx-h100:{rng.choice([1, 2])}"])
    hw_args = ["--hardware", hw] + (["--world-size", str(W)] if ":" not in hw and hw != "dgx-h100" else [])
    return [["estimate", *common, *hw_args, "--format", "json"],
            ["estimate", *common, *cap, "--format", "json"],
            ["check", *common, *cap, "--format", "json"],
            ["check", *common, *cap]]


def test_fixes_with_reuse_equal_fixes_from_scratch(tmp_path, monkeypatch):
    monkeypatch.setattr(check_view, "probe_host", lambda *a, **k: check_view.HostProbe(
        available=200 * 2 ** 30, total=256 * 2 ** 30, source="/proc/meminfo"))
    for k in ("WORLD_SIZE", "SLURM_NTASKS", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    taken = {"lent": 0, "dropped": 0, "fixes": 0, "pairs": 0}
    lend, over = fixes._LedgerCache.lend, fixes._surely_over

    def counting_lend(self, p):
        lend(self, p)
        taken["lent"] += "ledger" in p.derived

    def counting_over(*a):
        got = over(*a)
        taken["dropped"] += got
        return got

    monkeypatch.setattr(fixes._LedgerCache, "lend", counting_lend)
    monkeypatch.setattr(fixes, "_surely_over", counting_over)
    rng = random.Random(21)
    runner = CliRunner()
    for i in range(16):
        for args in _case(rng, tmp_path, i):
            out = {}
            for reuse in (False, True):
                monkeypatch.setattr(fixes, "REUSE", reuse)
                r = runner.invoke(main, args)
                assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.output)
                out[reuse] = (r.exit_code, r.output)
            assert out[True] == out[False], args
            if args[-1] == "json" and '"candidates"' in out[True][1]:
                taken["fixes"] += 1
                taken["pairs"] += sum(len(f["data"].get("pairs", [])) for f in json.loads(out[True][1])["findings"]
                                      if f["code"] == "M100")
    # the reuse paths were taken (a test that never lends a ledger or drops a pair proves nothing)
    assert taken["fixes"] >= 5 and taken["pairs"] >= 3 and taken["lent"] >= 5 and taken["dropped"] >= 3, taken


@pytest.mark.parametrize("reuse", [False, True])
def test_checkpointing_fix_need_equals_running_it(tmp_path, monkeypatch, reuse):
    """The candidate 'activation checkpointing of every layer' (judged on a lent ledger with REUSE) claims
    the accelerator need that running estimate with --checkpointing full reports."""
    monkeypatch.setattr(fixes, "REUSE", reuse)
    model = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
             "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096, "num_hidden_layers": 40}
    mp, cp = tmp_path / "m.json", tmp_path / "c.json"
    mp.write_text(json.dumps(model))
    cp.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
    args = ["estimate", str(cp), "--model", str(mp), "--seq-len", "2048", "--world-size", "2",
            "--gpu-memory", "1GB", "--host-memory", "64GB", "--format", "json"]
    d = json.loads(CliRunner().invoke(main, args).output)
    cands = [c for f in d["findings"] if f["code"] == "M100" for c in f["data"].get("candidates", [])]
    ck = [c for c in cands if c["flags"] == ["--checkpointing full"]]
    assert ck, cands
    ran = json.loads(CliRunner().invoke(main, args + ["--checkpointing", "full"]).output)
    acc = [r for r in ran["fit"] if r["tier"] == "accelerator"][0]
    assert ck[0]["need"]["accelerator"] == acc["need"]
