"""The parity matrix: cells (config x model x world size) and the ledger-vs-engine comparison.

Shared by tests/engine/test_parity.py and benchmarks/parity_matrix.py. Imports no torch: the
engine runs in subprocesses (advisor.engine.measure).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any

from advisor.config.effective import effective_config
from advisor.model.inventory import from_dict
from advisor.ledger.state import Cluster, Plan, RankLedger, compute_ledger, fold_for_cpu, model_state_bytes, unsupported_reason

#: The reference's odd-sized MLP: Linear(64,301) -> Linear(301,77) -> Linear(77,5).
TINY = {"name": "tiny-mlp", "tensors": [
    {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
    {"name": "l2.weight", "shape": [77, 301]}, {"name": "l2.bias", "shape": [77]},
    {"name": "l3.weight", "shape": [5, 77]}, {"name": "l3.bias", "shape": [5]}]}
#: 2.1M parameters (1024 -> 1031 -> 1029): partitions >= 1 MiB, so NVMe swapping happens.
BIG = {"name": "mlp-2.1m", "tensors": [
    {"name": "l1.weight", "shape": [1031, 1024]}, {"name": "l1.bias", "shape": [1031]},
    {"name": "l2.weight", "shape": [1029, 1031]}, {"name": "l2.bias", "shape": [1029]}]}
#: TINY with the middle layer frozen and the last layer in a second param group.
TINY_FROZEN_GROUPS = {"name": "tiny-frozen-groups", "tensors": [
    {"name": "l1.weight", "shape": [301, 64]}, {"name": "l1.bias", "shape": [301]},
    {"name": "l2.weight", "shape": [77, 301], "trainable": False}, {"name": "l2.bias", "shape": [77], "trainable": False},
    {"name": "l3.weight", "shape": [5, 77], "group": 1}, {"name": "l3.bias", "shape": [5], "group": 1}]}

#: BIG with its first layer frozen (a 2.1 MB frozen partition: swappable to NVMe).
BIG_FROZEN = {"name": "mlp-2.1m-frozen", "tensors": [
    {"name": "l1.weight", "shape": [1031, 1024], "trainable": False},
    {"name": "l1.bias", "shape": [1031], "trainable": False},
    {"name": "l2.weight", "shape": [1029, 1031]}, {"name": "l2.bias", "shape": [1029]}]}

DTYPES = ("fp16", "bf16", "fp32")
DEVICES = ("none", "cpu", "nvme")
WORLD_SIZES = (1, 2, 4)


def make_config(stage: int, dtype: str, oo: str = "none", op: str = "none", **zero: Any) -> dict[str, Any]:
    """A small-bucket config for one matrix cell (nvme paths are set by advisor.engine.measure)."""
    z: dict[str, Any] = {"stage": stage, "reduce_bucket_size": 50000, "stage3_param_persistence_threshold": 100}
    if oo != "none":
        z["offload_optimizer"] = {"device": oo, **({"nvme_path": "/unused"} if oo == "nvme" else {})}
    if op != "none":
        # small aio buffers: the default buffer_size (1e8 elements) page-locks 1 GB per rank
        z["offload_param"] = {"device": op, **({"nvme_path": "/unused", "buffer_size": 1_100_000}
                                               if op == "nvme" else {})}
    extra_top = zero.pop("_top", {})
    z.update(zero)
    cfg: dict[str, Any] = {"train_micro_batch_size_per_gpu": 1,
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                           "zero_optimization": z}
    if dtype != "fp32":
        cfg[dtype] = {"enabled": True}
    cfg.update(extra_top)
    return cfg


def matrix_cells() -> list[dict[str, Any]]:
    """Every cell: {id, config, inventory, world_size}."""
    cells = []
    for W in WORLD_SIZES:
        for stage, dt, oo in itertools.product((0, 1, 2, 3), DTYPES, DEVICES):
            ops = DEVICES if stage == 3 else ("none",)
            for op in ops:
                cells.append({"id": f"z{stage}-{dt}-oo_{oo}-op_{op}-w{W}", "config": make_config(stage, dt, oo, op),
                              "inventory": TINY, "world_size": W})
    # NVMe with real swapping (partitions >= 1 MiB), sub-groups, small max_in_cpu
    for W in (1, 2):
        cells.append({"id": f"big-z3-bf16-oo_nvme-op_none-w{W}", "config": make_config(3, "bf16", "nvme"),
                      "inventory": BIG, "world_size": W})
        cells.append({"id": f"big-z3-bf16-oo_nvme-op_nvme-maxincpu1000-w{W}",
                      "config": make_config(3, "bf16", "nvme", "nvme"), "inventory": BIG, "world_size": W})
        cells[-1]["config"]["zero_optimization"]["offload_param"].update(
            {"buffer_size": 2000000, "buffer_count": 5, "max_in_cpu": 1000})
    cells.append({"id": "big-z3-bf16-oo_nvme-subgroups-w1", "config": make_config(3, "bf16", "nvme", sub_group_size=600000),
                  "inventory": BIG, "world_size": 1})
    cells.append({"id": "big-z3-fp16-op_nvme-default-maxincpu-w1", "config": make_config(3, "fp16", "none", "nvme"),
                  "inventory": BIG, "world_size": 1})
    # Adagrad: ONE state tensor per parameter (torch.optim.Adagrad 'sum', DeepSpeedCPUAdagrad
    # 'exp_avg_sq'), at stage 0 (stale 16-bit state kept), ZeRO-2 with and without CPU offload,
    # ZeRO-3, and ZeRO-3 NVMe swap (3 swap buffers suffice: master + 1 state + gradients)
    def adagrad(cfg, **oo):
        cfg["optimizer"] = {"type": "Adagrad", "params": {"lr": 1e-2}}
        if oo:
            cfg["zero_optimization"]["offload_optimizer"].update(oo)
        return cfg
    for st, oo in ((0, "none"), (2, "none"), (2, "cpu"), (3, "none")):
        cells.append({"id": f"z{st}-bf16-oo_{oo}-adagrad-w1", "config": adagrad(make_config(st, "bf16", oo)),
                      "inventory": TINY, "world_size": 1})
    cells.append({"id": "big-z3-bf16-oo_nvme-adagrad-w1", "config": adagrad(make_config(3, "bf16", "nvme"), buffer_count=3),
                  "inventory": BIG, "world_size": 1})
    # frozen parameters under offload_param nvme: a frozen partition >= 1 MiB gets its own swap
    # file on NVMe, a smaller one stays in pinned host memory (never in the trainable flat buffer)
    cells.append({"id": "big-z3-bf16-op_nvme-frozen-w1", "config": make_config(3, "bf16", "none", "nvme"),
                  "inventory": BIG_FROZEN, "world_size": 1})
    cells.append({"id": "z3-bf16-op_cpu-frozen-groups-w1", "config": make_config(3, "bf16", "none", "cpu"),
                  "inventory": TINY_FROZEN_GROUPS, "world_size": 1})
    # other paths: torch_adam, BF16_Optimizer, GA>1 with offload, overlap_comm, alignment,
    # frozen tensors and two param groups, ZeRO-3 sub-groups, fp32 comm dtype, pin_memory false
    for W in (2,):
        def c(id_, cfg, inv=TINY):
            cells.append({"id": f"{id_}-w{W}", "config": cfg, "inventory": inv, "world_size": W})
        for st in (0, 1, 2, 3):
            cfg = make_config(st, "bf16")
            cfg["optimizer"]["params"]["torch_adam"] = True
            c(f"z{st}-bf16-torch_adam", cfg)
            c(f"z{st}-bf16-frozen-groups", make_config(st, "bf16"), TINY_FROZEN_GROUPS)
        c("z1-bf16-gaccfp32-bf16opt", make_config(1, "bf16", _top={"data_types": {"grad_accum_dtype": "fp32"}}))
        c("z1-bf16-gaccfp32-oo_nvme-bf16opt", make_config(1, "bf16", "nvme", _top={"data_types": {"grad_accum_dtype": "fp32"}}))
        c("z2-bf16-gaccfp32", make_config(2, "bf16", _top={"data_types": {"grad_accum_dtype": "fp32"}}))
        c("z3-bf16-gaccfp32", make_config(3, "bf16", _top={"data_types": {"grad_accum_dtype": "fp32"}}))
        c("z2-bf16-oo_cpu-ga2", make_config(2, "bf16", "cpu", _top={"gradient_accumulation_steps": 2}))
        c("z2-fp16-overlap", make_config(2, "fp16", overlap_comm=True))
        c("z2-bf16-palign", make_config(2, "bf16", parameter_alignment=True))
        c("z3-bf16-subgroup10000", make_config(3, "bf16", sub_group_size=10000))
        c("z3-bf16-commfp32", make_config(3, "bf16", _top={"communication_data_type": "fp32"}))
        cfg = make_config(2, "bf16", "cpu")
        cfg["zero_optimization"]["offload_optimizer"]["pin_memory"] = False
        c("z2-bf16-oo_cpu-nopin", cfg)
        cfg = make_config(3, "bf16", "cpu", "cpu")
        cfg["zero_optimization"]["offload_optimizer"]["pin_memory"] = False
        cfg["zero_optimization"]["offload_param"]["pin_memory"] = False
        c("z3-bf16-oo_cpu-op_cpu-nopin", cfg)
        c("z0-bf16-gaccfp32-rejected", make_config(0, "bf16", _top={"data_types": {"grad_accum_dtype": "fp32"}}))
    return cells


def expected(cell: dict[str, Any]) -> dict[str, Any]:
    """The ledger's prediction for a cell: {"error": reason} or
    {"wrapper", "basic_optimizer", "ranks": {r: {"steady"|"bwd"|"in_step": {item: {tier: bytes}}}}}
    folded for a CPU accelerator."""
    ec = effective_config(cell["config"])
    W = cell["world_size"]
    why = unsupported_reason(ec, W)
    if why:
        return {"error": why}
    inv = from_dict(cell["inventory"], cell["inventory"]["name"])
    led = compute_ledger(Plan(ec, inv, Cluster(world_size=W)))
    ranks = {}
    for rl in led.expanded():  # every rank, as before the ledger grouped ranks into roles
        # The census snapshots (bwd, in_step, steady) never see the ZeRO-3 gathered-parameter
        # workspace (life "forward_backward", freed by the time backward returns): not compared.
        rl = RankLedger(rl.rank, [e for e in rl.entries if e.item != "zero3_gathered_params"])
        # The bwd census adds the ZeRO-1/2 ipg bucket as setup_buckets allocated it inside that
        # backward (life "in_backward": released by the epilogue before backward returns).
        bwd = model_state_bytes(rl, ("backward",))
        bwd.update({k: v for k, v in model_state_bytes(rl, ("in_backward",)).items() if k == "ipg_bucket"})
        # ... and ZeRO-3's kept NVMe gradient tails, whole once backward has returned (life "step" where the
        # flush walk counts them flush by flush inside backward: state.zero3_flush_grad_tails)
        bwd.update({k: v for k, v in model_state_bytes(rl, ("step",)).items() if k == "opt_unswapped_grad_tails"})
        # resting after a step: "persistent" and what lives as persistent from the first reduce on (ZeRO-2
        # CPU offload's host accumulation buffer at GA > 1, made by micro-step 1's reduce: timeline.py)
        ranks[rl.rank] = {"steady": fold_for_cpu(model_state_bytes(rl, ("persistent", "from_first_reduce"))),
                          "bwd": fold_for_cpu(bwd),
                          "in_step": fold_for_cpu({k: v for k, v in model_state_bytes(rl, ("step",)).items()
                                                   if k != "opt_unswapped_grad_tails"})}
    return {"wrapper": led.wrapper, "basic_optimizer": led.basic_optimizer, "ranks": ranks}


def _clean(items: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {k: {t: b for t, b in v.items() if b} for k, v in items.items() if any(v.values())}


def compare(cell: dict[str, Any], measured: dict[int, dict[str, Any]]) -> list[str]:
    """Discrepancies between the ledger and the engine for one cell (empty list = byte parity).

    steady: every persistent item, both ways (nothing measured that the ledger lacks);
    bwd / in_step: every item the ledger says lives from backward to the step / inside the step,
    plus any item that appears there which the ledger does not know at all.
    """
    exp = expected(cell)
    out: list[str] = []
    errors = {r: d.get("error") for r, d in measured.items()}
    if "error" in exp:
        if not all(errors.values()):
            out.append(f"ledger says DeepSpeed rejects this ({exp['error']}) but the engine accepted it")
        return out
    if any(errors.values()):
        return [f"engine rejected a config the ledger accepts: {sorted(set(e for e in errors.values() if e))}"]
    for r, m in sorted(measured.items()):
        er = exp["ranks"][r]
        if m.get("skipped_steps"):
            # an overflowed fp16 step creates no optimizer state: nothing after it is a step's census
            out.append(f"r{r}: the engine skipped {m['skipped_steps']} step(s) on fp16 overflow; "
                       "the proxy model must keep scaled gradients finite")
            continue
        if m["wrapper"] != exp["wrapper"] or m["basic_optimizer"] != exp["basic_optimizer"]:
            out.append(f"r{r}: objects {m['wrapper']}/{m['basic_optimizer']} != ledger {exp['wrapper']}/{exp['basic_optimizer']}")
        snaps = {k: _clean(v) for k, v in m["snapshots"].items()}
        known = set(er["steady"]) | set(er["bwd"]) | set(er["in_step"])
        st = snaps.get("steady", {})
        for item in sorted(set(st) | set(er["steady"])):
            if st.get(item, {}) != er["steady"].get(item, {}):
                out.append(f"r{r} steady {item}: engine {st.get(item, {})} != ledger {er['steady'].get(item, {})}")
        for snap in ("bwd", "in_step"):
            ms = snaps.get(snap, {})
            for item in sorted(er[snap]):
                if ms.get(item, {}) != er[snap][item]:
                    out.append(f"r{r} {snap} {item}: engine {ms.get(item, {})} != ledger {er[snap][item]}")
            for item in sorted(set(ms) - known - set(st)):
                out.append(f"r{r} {snap} {item}: engine {ms[item]} not in the ledger")
    return out


def side_by_side(fn, args, workers: int = 2) -> list:
    """``[fn(a, stop) for a in args]``, ``workers`` at a time in threads (each call one launch in its own
    process group, ``advisor.engine.measure.run_process_group``), in ``args``' order; an exception inside any is
    re-raised.

    Ctrl-C reaches only the main thread (waiting here), and each launch is in its own session, out of the
    terminal's reach: a plain pool's exit waited for every launch to run to its timeout (900-1500 s). So on any
    exception here -- KeyboardInterrupt, or the first call that fails -- ``stop`` (a ``threading.Event``) is set,
    which every call passes to ``run_process_group(stop=...)`` (or ``run_measure_many(abort=...)``): each ends
    its launch's process groups (SIGTERM, SIGKILL after 5 s) and returns, and the pool shuts down with nothing
    left running."""
    import concurrent.futures as cf
    import threading

    stop = threading.Event()
    ex = cf.ThreadPoolExecutor(max(1, workers))
    futures = []
    try:
        futures = [ex.submit(fn, a, stop) for a in args]
        done, _ = cf.wait(futures, return_when=cf.FIRST_EXCEPTION)
        for f in done:
            if f.exception() is not None:
                raise f.exception()
        return [f.result() for f in futures]
    except BaseException:
        stop.set()
        for f in futures:
            f.cancel()
        raise
    finally:
        ex.shutdown(wait=True)


def run_matrix(cells: list[dict[str, Any]] | None = None, workdir: str | None = None, parallel: int = 2,
               timeout_s: float = 1500.0) -> dict[str, Any]:
    """Run every cell through the real engine, one torch.distributed.run launch per batch of
    cells with the same world size (``parallel`` launches at a time). Returns
    {"results": {cell id: {rank: record}}, "launch_errors": [...], "seconds": wall time}."""
    from advisor.engine.measure import MeasureError, run_measure_many
    cells = matrix_cells() if cells is None else cells
    t0 = time.time()
    by_w: dict[int, list] = {}
    for c in cells:
        by_w.setdefault(c["world_size"], []).append(c)
    # Gloo ranks spin while waiting, so oversubscribing 2 cores is slow: world size 4 runs alone,
    # world sizes 1 and 2 run side by side (``parallel`` launches), each as one launch.
    phases = [[(W, cs) for W, cs in sorted(by_w.items()) if W <= 2],
              [(W, cs) for W, cs in sorted(by_w.items()) if W > 2]]
    results: dict[str, Any] = {}
    errors: list[str] = []

    def go(batch, stop):
        W, cs = batch
        try:
            return run_measure_many(cs, W, workdir=workdir, timeout_s=timeout_s, partial_ok=True, abort=stop), None
        except MeasureError as e:
            return [], f"W={W} ({len(cs)} cells): {e}"

    for phase in phases:  # side_by_side: Ctrl-C ends every launch of the phase, not only the main thread
        for res, err in side_by_side(go, phase, parallel):
            if err:
                errors.append(err)
            for cr in res:
                results[cr.id] = cr.ranks
    return {"results": results, "launch_errors": errors, "seconds": time.time() - t0}
#: TINY with each layer inside a parameterless container (``stack.i``, as HF Llama's ``model.layers.i``, a
#: LlamaDecoderLayer owning no parameter), the containers in an nn.ModuleList (``stack``): the worker's
#: ``containers`` option builds this tree from the names. Not named ``layers``/``h``/``blocks``, so the
#: ledger's layer regions (model/parallel.py _LAYER_RE) are TINY's and only the containers differ.
TINY_NESTED = {"name": "tiny-mlp-nested", "tensors": [
    {"name": f"stack.{k}.{t['name']}", "shape": t["shape"]} for k, t in
    ((int(t["name"][1]) - 1, t) for t in TINY["tensors"])]}
#: TINY with declared parameterless leaves (issue 15; ``Inventory.modules``, worker ``Plain``): ``rope`` before
#: l1 whose output needs no gradient (HF Llama's ``rotary_emb``: no backward hook), ``act`` between l1 and l2
#: (``mlp.act_fn``), ``drop`` after l3 (a final dropout). Each one's hooks prefetch as a container's do, where
#: the names alone show no module.
TINY_CALLS = {"name": "tiny-mlp-calls", "tensors": TINY["tensors"], "modules": [
    {"name": "rope", "before": "l1", "backward": False},
    {"name": "act", "before": "l2"},
    {"name": "drop", "before": None}]}
#: TINY's three layers as the items of an nn.Sequential (``seq.0`` .. ``seq.2``, as
#: ``nn.Sequential(Linear, Linear, Linear)``): numbered like a ModuleList's, but called, so its hooks run
TINY_SEQ = {"name": "tiny-mlp-seq", "tensors": [
    {"name": t["name"].replace(f"l{k}.", f"seq.{int(k) - 1}."), "shape": t["shape"]}
    for t in TINY["tensors"] for k in (t["name"][1],)], "modules": [{"name": "seq", "sequential": True}]}
#: A GPT-2 MLP block's parameter shapes on TINY's sizes: LayerNorms (1-D weight and bias) and HF Conv1Ds (weight
#: (in, out), bias of out: torch.addmm(bias, x, weight)), which measure's proxy runs as their real nodes
#: (state.autograd_node_pairs); at ZeRO-3 neither is DeepSpeed's LinearFunctionForZeroStage3
TINY_GPT = {"name": "tiny-gpt-mlp", "tensors": [
    {"name": "mlp.ln_1.weight", "shape": [64]}, {"name": "mlp.ln_1.bias", "shape": [64]},
    {"name": "mlp.c_fc.weight", "shape": [64, 301]}, {"name": "mlp.c_fc.bias", "shape": [301]},
    {"name": "mlp.c_proj.weight", "shape": [301, 77]}, {"name": "mlp.c_proj.bias", "shape": [77]},
    {"name": "ln_f.weight", "shape": [77]}, {"name": "ln_f.bias", "shape": [77]}]}


def largest_gather_buffer(inv: dict, world: int, dtype_bytes: int) -> int:
    """Bytes of the largest module's flat all-gather buffer at ZeRO-3: for each module (a tensor name's
    prefix before its last dot), the sum over its parameters of ceil(numel / W) x W elements
    (partition_parameters.py _all_gather_dtype l. 1343: each parameter's padded partition, gathered
    into one flat buffer) at the model's dtype. Computed from the cell's inventory, independently of
    the ledger: TINY's l2 at W = 2, bf16: (11,589 + 39) x 2 x 2 = 46,512 B."""
    import math
    mods: dict = {}
    for t in inv["tensors"]:
        n = math.prod(t["shape"])
        mod = t["name"].rsplit(".", 1)[0]
        mods[mod] = mods.get(mod, 0) + -(-n // world) * world
    return max(mods.values(), default=0) * dtype_bytes
