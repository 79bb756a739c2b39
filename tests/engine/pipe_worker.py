"""Per-rank worker of tests/engine/test_pipeline_engine.py (run by torch.distributed.run).

Builds a small Llama-shaped ``PipelineModule`` (embedding, L blocks of RMSNorm weight + MLP
up/down projections, final norm + head) split into ``num_stages`` stages by DeepSpeed's
``partition_method="type:Block"``, initialises the real ``PipelineEngine``, runs one
``train_batch`` and takes a census of the engine's tensors with ``advisor.engine.worker``'s
census (the same attribution ``ds-advisor measure`` uses). Writes ``rank{r}.json`` with the
stage id, the parameter names/shapes this stage holds and the census, then saves a checkpoint
(``engine.save_checkpoint(out_dir/ckpt, tag="t")``) for the checkpoint-file test, loads it back
(``engine.load_checkpoint``, in full and with ``load_module_only``) and writes ``load{r}.json`` with what
each load raised, if anything. Around those it calls ``engine.save_16bit_model`` three times (before any
save_checkpoint, after it, after the loads) and writes ``s16_{r}.json`` with what each returned or raised and
the files it left (rank 0 also: the type of the object a written pytorch_model.bin holds).
"""

from __future__ import annotations

import json
import os
import sys


def _save16(engine, save_dir: str) -> dict:
    """``engine.save_16bit_model(save_dir)`` on this rank: what it returned or raised (exception type, message,
    innermost frame) and the files under ``save_dir`` once every rank is done (relative paths; a collective:
    every rank calls it)."""
    import traceback
    out = {"returned": None, "error": None, "message": None, "file": None, "function": None}
    try:
        out["returned"] = engine.save_16bit_model(save_dir)
    except Exception as e:  # the outcome is the measurement
        fr = traceback.extract_tb(e.__traceback__)[-1]
        out.update(error=type(e).__name__, message=str(e)[:200], file=os.path.basename(fr.filename), function=fr.name)
    import torch.distributed as tdist
    tdist.barrier()  # every rank has returned or raised: the listing sees the files of all of them (a shared dir)
    out["files"] = sorted(os.path.relpath(os.path.join(d, f), save_dir) for d, _, fs in os.walk(save_dir) for f in fs)
    return out


def _instruction_phases(engine, tracker, wk) -> dict:
    """Split each ``train_batch`` into tracker phases by the pipe schedule's instructions: the PipelineEngine runs
    each instruction through its class's ``_INSTRUCTION_MAP`` (runtime/pipe/engine.py l.1360-1371: OptimizerStep
    -> _exec_optimizer_step l.1221, ReduceGrads -> _exec_reduce_grads l.287, ReduceTiedGrads ->
    _exec_reduce_tied_grads l.269, LoadMicroBatch l.889, ForwardPass l.699, BackwardPass l.792, SendActivation
    l.1024, RecvActivation l.1116, SendGrad l.1060, RecvGrad l.1159), looked up on ``self`` in _exec_schedule
    (l.1373-1387), so an instance attribute with wrapped methods is what runs. Each instruction opens the phase
    ``train_batch:<k>/<Instruction>:<n>`` (n: its n-th run in this train_batch, i.e. the micro-batch in the
    order this stage runs them) which lasts until the next instruction starts; ``train_batch:<k>/start`` is
    train_batch before the first instruction, ``train_batch:<k>/end`` after _exec_schedule returns (the loss
    aggregation, l.372-373). Returns the state the caller sets per call: ``k`` (the train_batch call) and ``n``
    (counters, reset per call)."""
    from types import MethodType
    state = {"k": 0, "n": {}}

    def wrap(name, fn):
        def run(self, *a, **kw):
            n = state["n"][name] = state["n"].get(name, 0) + 1
            wk._phase(tracker, f"train_batch:{state['k']}/{name}:{n}")
            return fn(self, *a, **kw)
        return run

    engine._INSTRUCTION_MAP = {cls: wrap(cls.__name__, fn) for cls, fn in type(engine)._INSTRUCTION_MAP.items()}
    orig = engine._exec_schedule

    def exec_schedule(self, sched):
        out = orig(sched)
        wk._phase(tracker, f"train_batch:{state['k']}/end")
        return out

    engine._exec_schedule = MethodType(exec_schedule, engine)
    return state


def _whole_train_batch(rep: list[dict]) -> list[dict]:
    """The tracker's report with a row ``train_batch:<k>`` per call before its instruction phases: the call's
    high-water mark is the largest of its phases' (they cover the call without a gap: each starts at what is
    live when the previous ends), its storages at that mark and its end those of the phase that holds them;
    ``peak_phase``: that phase (without the CPU-only sites, the mark compared)."""
    out: list[dict] = []
    for ph in rep:
        head, sep, _ = ph["phase"].partition("/")
        if sep and head.startswith("train_batch:"):
            subs = [x for x in rep if x["phase"].startswith(head + "/")]
            if ph is subs[0]:
                top = max(subs, key=lambda x: x["peak_excl_cpu_only"])
                out.append({"phase": head, "peak": max(x["peak"] for x in subs), "end": subs[-1]["end"],
                            "peak_excl_cpu_only": top["peak_excl_cpu_only"], "by_item": top["by_item"],
                            "unattributed": top["unattributed"], "end_unattributed": subs[-1]["end_unattributed"],
                            "peak_phase": top["phase"].partition("/")[2]})
        out.append(ph)
    return out


def main(out_dir: str, V: int, h: int, f: int, L: int, stages: int, cfg_json: str = "", track: str = "") -> int:
    """``cfg_json``: a DeepSpeed config (JSON text) to run instead of the ZeRO-1 fp32 one. ``track`` ("1"): run
    ``advisor.engine.worker``'s allocation-level ``StorageTracker`` (the one of the peak-parity cells) from the
    model's build on, with phases ``load``, ``initialize``, then two ``train_batch`` calls split by the pipe
    schedule's instructions (``train_batch:<k>/<Instruction>:<n>``, :func:`_instruction_phases`; the report adds
    each call's whole row ``train_batch:<k>``, :func:`_whole_train_batch`), then
    ``save`` (``engine.save_checkpoint(out_dir/save, tag="t")``: its peak and its end, what is live once it has
    returned), and write ``track{r}.json`` (the tracker's report per phase: peak, unattributed sites) instead of saving a checkpoint.
    Environment ``PIPE_BUILD=whole``: the layers are modules of the model built whole on every rank, not LayerSpecs."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    import torch.nn as nn
    import deepspeed
    import torch.distributed as tdist
    from deepspeed.pipe import LayerSpec, PipelineModule
    from advisor.engine import worker as wk
    from advisor.engine.worker import Census, _install_patches, _walk

    _install_patches()
    deepspeed.init_distributed(dist_backend="gloo")
    rank = tdist.get_rank()
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
           "steps_per_print": 10**9}
    if cfg_json:
        cfg = {**json.loads(cfg_json), "steps_per_print": 10**9}
    # the data (two train_batch calls' micro-batches), made before the tracker starts: the training script's
    g = torch.Generator().manual_seed(0)
    ga, mb = int(cfg.get("gradient_accumulation_steps", 1)), int(cfg.get("train_micro_batch_size_per_gpu", 1))
    seq = int(os.environ.get("PIPE_SEQ", "8"))
    batch = [(torch.randint(0, V, (mb, seq), generator=g), torch.randint(0, V, (mb, seq), generator=g))
             for _ in range(2 * ga)]
    tracker = restore = None
    if track:
        tracker = wk.StorageTracker()
        wk._TRACKER[:] = [tracker]
        restore = wk._settle_collectives()
        tracker.mode.__enter__()
        tracker.set_phase("load")

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, h)

        def forward(self, ids):
            return self.embed_tokens(ids)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up_proj = nn.Linear(h, f, bias=False)
            self.down_proj = nn.Linear(f, h, bias=False)
            self.input_layernorm = nn.Parameter(torch.ones(h))

        def forward(self, x):
            return x + self.down_proj(torch.relu(self.up_proj(x * self.input_layernorm)))

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.Parameter(torch.ones(h))
            self.lm_head = nn.Linear(h, V, bias=False)

        def forward(self, x):
            return self.lm_head(x * self.norm)

    from transformers.loss.loss_utils import ForCausalLMLoss

    def loss_fn(logits, labels):
        # a causal LM's loss as transformers computes it (the fp32 logits copy, the shifted labels): what the
        # activation formula's loss head models (advisor.model.activations)
        return ForCausalLMLoss(logits, labels, V)

    torch.manual_seed(0)
    if os.environ.get("PIPE_BUILD") == "whole":
        # the model built whole on every rank, its modules given to PipelineModule (no LayerSpecs): _build adds the
        # stage's modules as they are (runtime/pipe/module.py l.251-255), _layer_specs keeps them all (l.188)
        layers = [Embed()] + [Block() for _ in range(L)] + [Head()]
    else:
        layers = [LayerSpec(Embed)] + [LayerSpec(Block) for _ in range(L)] + [LayerSpec(Head)]
    model = PipelineModule(layers, num_stages=stages, loss_fn=loss_fn, partition_method="type:Block")
    if tracker is not None:
        wk._phase(tracker, "initialize")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=[p for p in model.parameters()],
                                           config=cfg)
    wk._phase(tracker, None)
    assert int(engine.gradient_accumulation_steps()) == ga
    it = iter(batch)
    if tracker is None:
        engine.train_batch(data_iter=it)
    else:
        import gc
        step = _instruction_phases(engine, tracker, wk)
        for k in (1, 2):
            step["k"], step["n"] = k, {}
            wk._phase(tracker, f"train_batch:{k}/start")
            engine.train_batch(data_iter=it)
            wk._phase(tracker, None)
            # claim the engine's tensors on the tracker's records (the census of the non-PP worker)
            _walk(engine, Census(True))
        # the save phase: engine.save_checkpoint into the run's own folder (runtime/engine.py l.4869-4966; under
        # the PipelineEngine the module goes to the layer_XX files, runtime/pipe/module.py save_state_dict
        # l.607-642), its high-water mark and what is live when it has returned (the phase's end)
        wk._phase(tracker, "save")
        engine.save_checkpoint(os.path.join(out_dir, "save"), tag="t")
        wk._phase(tracker, None)
        _walk(engine, Census(True))
        tracker.mode.__exit__(None, None, None)
        wk._TRACKER.clear()
        restore()
        rep = _whole_train_batch(tracker.report(wk._CLAIMED))
        with open(os.path.join(out_dir, f"track{rank}.json"), "w") as fh:
            json.dump({"rank": rank, "stage": engine.stage_id, "num_pipe_buffers": engine.num_pipe_buffers,
                       "wrapper": type(engine.optimizer).__name__, "phases": rep}, fh)
        gc.collect()
        tdist.barrier()
        return 0
    c = Census(True)
    _walk(engine, c)
    out = {"rank": rank, "stage": engine.stage_id, "parts": [int(x) for x in model.parts],
           "params": [[n, list(p.shape)] for n, p in model.named_parameters()],
           "census": c.result(), "wrapper": type(engine.optimizer).__name__,
           "grad_acc_dtype": str(getattr(engine.optimizer, "grad_acc_dtype", "")),
           # DeepSpeedZeroOptimizer's overlap_comm as built, and its ipg buffers (elements) after the step
           "overlap_comm": getattr(engine.optimizer, "overlap_comm", None),
           "ipg_buffers": {str(k): [int(t.numel()) for t in b.buffer]
                           for k, b in getattr(engine.optimizer, "ipg_buckets", {}).items()}}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(out, fh)
    tdist.barrier()
    s16 = {"before_save": _save16(engine, os.path.join(out_dir, "s16_before_save"))}
    tdist.barrier()
    # the files the PipelineEngine writes (engine.save_checkpoint; the test reads them back)
    engine.save_checkpoint(os.path.join(out_dir, "ckpt"), tag="t")
    tdist.barrier()
    s16["after_save"] = _save16(engine, os.path.join(out_dir, "s16_after_save"))
    tdist.barrier()
    # and loads it back into the same engine (same world size), in full and with load_module_only: load{r}.json
    # holds, for each, the exception type and the innermost frame (file basename, function) when the load raises,
    # else nulls
    import traceback
    res = {}
    for key, kw in (("full", {}), ("module_only", {"load_module_only": True})):
        res[key] = {"error": None, "file": None, "function": None}
        try:
            engine.load_checkpoint(os.path.join(out_dir, "ckpt"), tag="t", **kw)
        except Exception as e:  # the outcome is the measurement
            fr = traceback.extract_tb(e.__traceback__)[-1]
            res[key] = {"error": type(e).__name__, "file": os.path.basename(fr.filename), "function": fr.name}
    with open(os.path.join(out_dir, f"load{rank}.json"), "w") as fh:
        json.dump(res, fh)
    tdist.barrier()
    s16["after_load"] = _save16(engine, os.path.join(out_dir, "s16_after_load"))
    tdist.barrier()
    if rank == 0 and os.path.exists(os.path.join(out_dir, "s16_after_load", "pytorch_model.bin")):
        held = torch.load(os.path.join(out_dir, "s16_after_load", "pytorch_model.bin"), weights_only=False)
        s16["after_load"]["file_holds"] = type(held).__name__
    with open(os.path.join(out_dir, f"s16_{rank}.json"), "w") as fh:
        json.dump(s16, fh)
    tdist.barrier()
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], *map(int, a[1:6]), *a[6:8]))
