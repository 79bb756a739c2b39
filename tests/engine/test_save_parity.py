"""Save parity, open world: the real engine's high-water mark of live bytes while it saves a
checkpoint after two steps (the worker's ``save:16bit`` phase, ``engine.save_16bit_model``, and
its ``save`` phase, ``engine.save_checkpoint``; advisor.engine.worker._save_phases) equals the
ledger timeline's largest save instant (``save:16bit`` / ``save:16bit:end``, ``save:model`` /
``save:optim`` / ``save``; advisor.ledger.timeline.save_entries, save_rank0_entries) within 1%.

What the CPU run cannot show, and is taken off the ledger's side by ``measure.peak_parity`` (its
``gpu_only``; timeline.SAVE_GPU_ONLY): torch.save's host copy of an accelerator storage
(torch/serialization.py l.1290: ``if storage.device.type != "cpu"``) and the ``.cpu()`` copies of
frozen fragments (``Tensor.cpu()`` of a CPU tensor is that tensor). A GPU run is needed to prove them.

The training phases of these configs are test_peak_parity's; only the save phases are compared here.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity  # noqa: E402

from advisor.engine.measure import peak_parity, run_measure_many  # noqa: E402
from advisor.model.inventory import from_dict  # noqa: E402

OPT = {"type": "AdamW", "params": {"lr": 1e-3}}
BUCKETS = {"reduce_bucket_size": 50000, "overlap_comm": False, "contiguous_gradients": True}


def _cfg(stage, **zero):
    return {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT, "bf16": {"enabled": True},
            "zero_optimization": {"stage": stage, **(BUCKETS if stage in (1, 2) else {"reduce_bucket_size": 50000}),
                                  **zero}}


GATHER = {"stage3_gather_16bit_weights_on_model_save": True}
#: (id, config, options). W = 2 each, TINY (l1 301 x 64 + 301, l2 77 x 301 + 77, l3 5 x 77 + 5).
#: ZeRO-3 cells use the per-module proxy, as test_peak_parity's.
CELLS = [
    # save_checkpoint holds nothing beyond the steady state on CPU (measured +76 B of tag
    # validation tensors, engine.py _checkpoint_tag_validation): rank 0's model file and every
    # rank's optimizer file are staged to host only from an accelerator (gpu_only)
    ("z1_bf16_save_w2", _cfg(1), {"save_16bit": True}),
    # ZeRO-3 without the 16-bit gather: save_16bit_model writes nothing (engine.py l.5732-5740);
    # save_checkpoint's prologue partitions the persistent parameters and its epilogue gathers
    # them again: the phase peaks at its start / end, the steady state
    ("z3_bf16_save_w2", _cfg(3), {"save_16bit": True}),
    # with the gather: rank 0 keeps every gathered tensor (on CPU the padded gathered storages,
    # sum ceil(n_i/2) x 2 x 2 B = 86,428) while the epilogue gathers the persistent ones again
    # (86,428): +86,428 B over the steady state on rank 0 (measured 618,597 B, 2026-12-05)
    ("z3_bf16_gather_save_w2", _cfg(3, **GATHER), {"save_16bit": True, "submodules": True}),
    # parameters not persistent (threshold 100: only l2.bias, l3.bias stay gathered): the
    # prologue's release frees little, so rank 1's one gathered module (l2: (11,589 + 39) x 2 x 2 B)
    # shows above the steady state
    ("z3_bf16_gather_nonpersist_save_w2", _cfg(3, stage3_param_persistence_threshold=100, **GATHER),
     {"save_16bit": True, "submodules": True}),
    # frozen parameters at ZeRO-2 and ZeRO-3 (l2 frozen, l3 in a second param group): the model-states
    # file's frozen_param_fragments are .cpu() copies, which a CPU run does not make (gpu_only):
    # nothing else appears at the save
    ("z2_bf16_frozen_save_w2", _cfg(2, reduce_bucket_size=10000), {"inventory": parity.TINY_FROZEN_GROUPS}),
    ("z3_bf16_frozen_save_w2", _cfg(3), {"inventory": parity.TINY_FROZEN_GROUPS, "submodules": True}),
]


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    chosen = {it.callspec.params["cell"][0] for it in request.session.items
              if getattr(it, "originalname", "") == "test_save_parity" and hasattr(it, "callspec")}
    cells = [{"id": c[0], "config": c[1], "inventory": parity.TINY, "steps": 2, "track": True, "save": True,
              "submodules": c[1]["zero_optimization"]["stage"] == 3, **c[2]} for c in CELLS if c[0] in chosen]
    if not cells:
        return {}
    return {cr.id: cr for cr in run_measure_many(cells, 2, workdir=str(tmp_path_factory.mktemp("save")),
                                                  timeout_s=1500)}


@pytest.mark.engine
@pytest.mark.parametrize("cell", CELLS, ids=[c[0] for c in CELLS])
def test_save_parity(cell, runs):
    cid, cfg, opts = cell
    cr = runs[cid]
    assert cr.error is None, cr.error
    inv = opts.get("inventory", parity.TINY)
    rows = [r for r in peak_parity(cfg, from_dict(inv, inv["name"]), 2, cr.ranks)
            if "error" in r or r.get("phase", "").startswith("save")]
    phases = {(r["rank"], r["phase"]) for r in rows if "phase" in r}
    want = {(r, ph) for r in (0, 1) for ph in (("save:16bit", "save") if opts.get("save_16bit") else ("save",))}
    assert phases == want, phases
    # gloo's race (test_peak_parity.RACY): the 16-bit gather goes module by module
    # (_allgather_params_coalesced), and a finished gather's flat buffer may still be held by gloo's
    # thread while the next module is gathered. Seen in the clean-clone CI of 2026-12-06:
    # z3_bf16_gather_nonpersist_save_w2 rank 1 save:16bit engine 530,781 B, ledger 492,224 B
    # (+38,557 B; unattributed 85,040 B at _allgather_params_coalesced l. 2052), after 2 runs within
    # 1%. Allowed over the ledger, never under: at most the largest module's gather buffer.
    race = 0
    if cfg["zero_optimization"]["stage"] == 3 and cfg["zero_optimization"].get(
            "stage3_gather_16bit_weights_on_model_save"):
        race = parity.largest_gather_buffer(inv, 2, 2)

    def ok(r):
        if "error" in r:
            return False
        if abs(r["rel_diff"]) <= 0.01:
            return True
        return r["phase"] == "save:16bit" and r["ledger"] * 0.99 <= r["measured"] <= r["ledger"] * 1.01 + race
    bad = [r for r in rows if not ok(r)]
    assert not bad, "\n".join(
        f"r{r['rank']} {r.get('phase')}: engine {r.get('measured')} ledger {r.get('ledger')} "
        f"({r.get('ledger_instant')}); unattributed {r.get('unattributed', [])[:3]}" if "phase" in r else str(r)
        for r in bad)
    if cid == "z3_bf16_gather_save_w2":
        # rank 0 holds the 16-bit state dict beside the persistent parameters gathered again
        r0 = next(r for r in rows if r["rank"] == 0 and r["phase"] == "save:16bit")
        r1 = next(r for r in rows if r["rank"] == 1 and r["phase"] == "save:16bit")
        assert r0["ledger_instant"] == "save:16bit:end"
        assert r0["ledger"] - r1["ledger"] == 43209 * 2          # N x D on rank 0 (the ledger's GPU copy)
        # the CPU run's padded storages (64 B), and gloo's race above on either rank: at most one module's gather
        # buffer more on one side (clean-clone CIs of 2026-12-06 under load: 772 B past the 64 B, and 46,356 B,
        # l2.weight's whole buffer, on rank 1; both passed alone)
        assert abs((r0["measured"] - r1["measured"]) - 86428) <= 64 + race, (r0["measured"], r1["measured"], race)
