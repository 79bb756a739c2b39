"""A fix that changes the ZeRO stage resolves the load again from the options the load was resolved
from (``LoadAssumption.options``), never from the words of its ``*_source`` fields: those are prose
for the reader, and a parser of them mistakes a reworded or misleading source for a flag.

Expected values are DeepSpeed's / transformers' rules, not the code's output:
- ``deepspeed.zero.Init`` partitions for ZeRO-3 only (deepspeed/runtime/zero/partition_parameters.py
  ``Init``; below ZeRO-3 nothing builds under it), and a ``--zero-init`` / ``--no-zero-init`` flag
  states what the user's script does, at any stage;
- the HF Trainer builds under zero.Init exactly when ``HfDeepSpeedConfig.is_zero3()``
  (transformers/integrations/deepspeed.py), and then rank 0 reads the checkpoint's state dict whole,
  as stored (transformers modeling_utils.py ``_load_pretrained_model``: no cast): an fp32 checkpoint
  of N parameters is 4 N bytes in rank 0's host memory."""

from __future__ import annotations

import json
from dataclasses import replace

from advisor.config.effective import effective_config
from advisor.ledger.state import Cluster, Plan
from advisor.ledger.timeline import resolve_load
from advisor.model.inventory import from_param_count
from advisor.views.fixes import _load_for

INV = from_param_count(1_000_000)


def _plan(stage: int) -> Plan:
    return Plan(effective_config({"zero_optimization": {"stage": stage}}), INV, Cluster(world_size=2))


def test_a_misleading_source_text_does_not_decide_zero_init():
    z2, z3 = _plan(2), _plan(3)
    # --no-zero-init given at ZeRO-2, its source reworded to read like --zero-init: a text parser
    # would carry "--zero-init" to ZeRO-3; the flag given was --no-zero-init, so no zero.Init there
    load = replace(resolve_load(z2.config, zero_init=False), zero_init_source="--zero-init")
    got = _load_for(load, z3, z2)
    assert got.zero_init is False and got.zero_init_source == "--no-zero-init"
    # nothing given, the source reading "--no-zero-init": a parser would keep zero.Init off at ZeRO-3;
    # nothing was given, so zero.Init is assumed there as the HF Trainer and accelerate do
    load = replace(resolve_load(z2.config), zero_init_source="--no-zero-init")
    assert _load_for(load, z3, z2).zero_init is True
    # a source starting "accelerate:" on a plain script's load: a parser would keep the ZeRO-2 load
    # (no zero.Init) for a ZeRO-3 fix; no accelerate file was read, so zero.Init is assumed there
    load = replace(resolve_load(z2.config), zero_init_source="accelerate: deepspeed_config.zero3_init_flag true")
    assert _load_for(load, z3, z2).zero_init is True
    # --zero-init given at ZeRO-2 (ignored there), its source reworded: the flag holds at ZeRO-3
    load = replace(resolve_load(z2.config, zero_init=True), zero_init_source="assumed: built before initialize")
    assert load.zero_init is False and _load_for(load, z3, z2).zero_init is True


def test_the_load_dtype_flag_and_the_checkpoint_dtype_are_carried():
    z2, z3 = _plan(2), _plan(3)
    # HF, --load-dtype fp32, a bf16 checkpoint, ZeRO-2 -> ZeRO-3: the model is still built in fp32
    # (the flag), and rank 0 reads the checkpoint as stored, bf16 (no cast at read)
    load = resolve_load(z2.config, dtype="fp32", low_cpu_mem_usage=False, hf=True, hf_is_zero3=False,
                        checkpoint_dtype="bf16")
    assert load.state_dict_dtype is None  # every rank loads the whole model below ZeRO-3
    got = _load_for(replace(load, dtype_source="assumed", low_cpu_mem_usage_source="assumed"), z3, z2)
    assert (got.zero_init, got.dtype, got.low_cpu_mem_usage, got.state_dict_dtype) == (True, "fp32", False, "bf16")
    assert got.dtype_source == "--load-dtype fp32" and got.low_cpu_mem_usage_source == "--no-low-cpu-mem-usage"


def test_estimate_hf_judges_the_stage3_fix_as_running_it(cli):
    """``estimate --hf`` of a 20B ZeRO-2 job on 4 ranks with 64 GB of host memory lists ZeRO-3 as a fix:
    running it, the Trainer's from_pretrained under zero.Init reads the fp32 state dict on rank 0,
    20e9 x 4 B = 80 GB > 64 GB: host short. The fix's verdicts must say the same (before the load
    carried its options, the fix was re-resolved without the HF Trainer and listed host 'fits')."""
    base = ["sample_configs/hf_trainer_zero3_auto.json", "--hf", "--params", "20000000000", "--world-size", "4",
            "--gpus-per-node", "4", "--gpu-memory", "141GB", "--host-memory", "64GB", "--seq-len", "2048",
            "--set", "zero_optimization.offload_optimizer.device=none",
            "--set", "zero_optimization.stage3_gather_16bit_weights_on_model_save=false"]

    def run(*more):
        p = cli(["estimate", *base, *more, "--format", "json"])
        assert p.returncode in (0, 1), p.stderr
        return json.loads(p.stdout)

    d = run("--set", "zero_optimization.stage=2")
    cands = [c for f in d["findings"] for c in (f.get("data") or {}).get("candidates", [])
             if c["set"] == ["zero_optimization.stage=3"] and not c["flags"]]
    assert cands, "no ZeRO-3 fix listed"
    ran = {r["tier"]: r for r in run("--set", "zero_optimization.stage=3")["fit"]}
    assert ran["host"]["need"] == cands[0]["need"]["host"] == 20_000_000_000 * 4
    assert ran["host"]["verdict"] == cands[0]["verdicts"]["host"] == "does not fit"
    assert cands[0]["verdicts"]["accelerator"] == ran["accelerator"]["verdict"]
