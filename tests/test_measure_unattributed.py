"""``measure``'s unattributed storages are the bytes no ledger entry accounts for: a storage no
census claimed at a phase's peak whose allocation site a ledger entry live at the compared
instant cites in its DeepSpeed source is listed ``in_ledger`` (with those items), not as
unattributed. Constructed tracker records, no engine (the sites are the worker's format,
``StorageTracker._site``: ``deepspeed/<path>:<function>:<line>``)."""

from __future__ import annotations

from advisor.engine import measure as M
from advisor.model.inventory import from_dict
from advisor.render.text import measure_text

INV = from_dict({"name": "t", "tensors": [{"name": "a.weight", "shape": [64, 64]}]}, "t")
#: ZeRO-2 with a 1,000-element bucket: the ipg bucket is 1,000 x 2 B, allocated by setup_buckets
#: (stage_1_and_2.py l.3266) and live in backward only (_release_ipg_buffers)
CFG = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
       "zero_optimization": {"stage": 2, "reduce_bucket_size": 1000, "overlap_comm": False}}
BUCKET = "deepspeed/runtime/zero/stage_1_and_2.py:setup_buckets:3266"
INJECTED = "advisor/engine/worker.py:_injected_buffer:757"
UNKNOWN_DS = "deepspeed/runtime/zero/stage_1_and_2.py:no_such_function:10"


def _rows(phase):
    sites = [{"site": BUCKET, "bytes": 2000}, {"site": INJECTED, "bytes": 4096}, {"site": UNKNOWN_DS, "bytes": 8}]
    rec = {0: {"accelerator": "cpu", "snapshots": {},
               "tracker": [{"phase": phase, "peak": 10 ** 6, "end": 10 ** 6, "unattributed": sites}]}}
    return M.peak_parity(CFG, INV, 1, rec)


def test_a_storage_a_live_entry_cites_is_in_the_ledger_not_unattributed():
    (row,) = _rows("backward:1")
    assert [u["site"] for u in row["unattributed"]] == [INJECTED, UNKNOWN_DS]
    (b,) = row["in_ledger"]
    assert b["site"] == BUCKET and b["bytes"] == 2000 and b["items"] == ["ipg_bucket"]
    assert b["ledger_bytes"] == 1000 * 2  # reduce_bucket_size x bf16
    text = measure_text({"rows": [], "phases": {"compared": True, "rows": [{**row, "ok": False}], "peak_instant": []}})
    assert f"2,000 B at {BUCKET} (ipg_bucket: 2,000 B)" in text and f"4,096 B at {INJECTED}" in text


def test_the_same_site_where_its_entry_is_not_live_stays_unattributed():
    # in forward the ipg bucket does not exist in the ledger (life in_backward): a bucket-sized
    # storage from setup_buckets at the forward peak is bytes the ledger does not count there
    (row,) = _rows("forward:1")
    assert BUCKET in [u["site"] for u in row["unattributed"]] and not row["in_ledger"]


def test_the_proxy_models_parameters_are_the_ledgers_load_entry():
    # the worker builds the model a script would (_build_model._param); at load the ledger counts it
    # as load_model_copy: N x 4 B = 4096 x 4 (fp32, one copy); a worker site of its own stays unattributed
    rec = {0: {"accelerator": "cpu", "snapshots": {}, "tracker": [{"phase": "load", "peak": 16384, "end": 16384,
           "unattributed": [{"site": "advisor/engine/worker.py:_param:533", "bytes": 16384},
                            {"site": "advisor/engine/worker.py:_run_cell_tracked:826", "bytes": 16}]}]}}
    (row,) = M.peak_parity(CFG, INV, 1, rec)
    assert [u["site"] for u in row["in_ledger"]] == ["advisor/engine/worker.py:_param:533"]
    assert row["in_ledger"][0]["items"] == ["load_model_copy"] and row["in_ledger"][0]["ledger_bytes"] == 4096 * 4
    assert [u["site"] for u in row["unattributed"]] == ["advisor/engine/worker.py:_run_cell_tracked:826"]


#: the gradients autograd makes inside DeepSpeedEngine.backward's loss.backward() (runtime/engine.py
#: l.3428 in 0.19.8), as the worker's tracker names their allocation site
AUTOGRAD = "deepspeed/runtime/engine.py:backward:3428"


def test_the_gradients_autograd_makes_in_engine_backward_are_in_the_ledger():
    # issue 15: at ZeRO-2 the gradients a hook has not yet moved into the ipg bucket are allocated
    # by autograd under engine.backward; the ledger counts them (backward_transient at the autograd
    # instant, reduce_transient's "gradients not yet in the bucket" at a flush), so whichever backward
    # instant is the peak, a live entry names that site
    rec = {0: {"accelerator": "cpu", "snapshots": {},
               "tracker": [{"phase": "backward:1", "peak": 10 ** 6, "end": 10 ** 6,
                            "unattributed": [{"site": AUTOGRAD, "bytes": 64 * 64 * 2}]}]}}
    (row,) = M.peak_parity(CFG, INV, 1, rec)
    assert not row["unattributed"]
    (b,) = row["in_ledger"]
    assert b["site"] == AUTOGRAD and set(b["items"]) & {"backward_transient", "reduce_transient"}


def test_engine_backward_in_the_forward_phase_stays_unattributed():
    # no gradient exists in forward: a storage from that site there is not one the ledger counts
    rec = {0: {"accelerator": "cpu", "snapshots": {},
               "tracker": [{"phase": "forward:1", "peak": 10 ** 6, "end": 10 ** 6,
                            "unattributed": [{"site": AUTOGRAD, "bytes": 8192}]}]}}
    (row,) = M.peak_parity(CFG, INV, 1, rec)
    assert [u["site"] for u in row["unattributed"]] == [AUTOGRAD] and not row["in_ledger"]


#: ZeRO-1/2's fp32 gradient partition made in initialize_optimizer_states (stage_1_and_2.py l.937)
#: and dropped before it returns without offload (l.949-951 ``group.grad = None``)
INIT_ZEROS = "deepspeed/runtime/zero/stage_1_and_2.py:initialize_optimizer_states:937"


def _transient(torch, n):
    t = torch.zeros(n)  # allocated and freed inside the phase, like initialize_optimizer_states' zeros
    return int(t.untyped_storage().nbytes())


def test_the_tracker_reports_what_is_unclaimed_at_the_phases_end_too():
    import torch

    from advisor.engine.worker import StorageTracker
    tr = StorageTracker()
    with tr.mode:
        tr.set_phase("initialize")
        kept = torch.ones(1000)                 # 4,000 B, live at the end
        gone = _transient(torch, 100_000)       # 400,000 B, live at the peak only
        tr.end_phase()
    (ph,) = [p for p in tr.report({}) if p["phase"] == "initialize"]
    assert ph["peak"] - ph["end"] == gone == 400_000 and kept.numel() == 1000
    assert sum(u["bytes"] for u in ph["unattributed"]) - sum(u["bytes"] for u in ph["end_unattributed"]) == gone


def test_initialize_lists_the_storages_at_the_instant_it_compares():
    # issue 15: at ZeRO-1/2 (DeepSpeedZeroOptimizer) initialize is compared at its high-water mark, where
    # initialize_optimizer_states' zeros (P x 4 B) are live: the ledger's init_optimizer_grad_zeros entry
    # (timeline.zero12_init_transients, instant initialize:optimizer_states) cites that function, so they are
    # in the ledger, not unattributed
    rec = {0: {"accelerator": "cpu", "snapshots": {},
               "tracker": [{"phase": "initialize", "peak": 10 ** 6, "end": 10 ** 6 - 400_000,
                            "unattributed": [{"site": INIT_ZEROS, "bytes": 400_000}, {"site": INJECTED, "bytes": 16}],
                            "end_unattributed": [{"site": INJECTED, "bytes": 16}]}]}}
    (row,) = M.peak_parity(CFG, INV, 1, rec)
    assert row["ledger_instant"] == "initialize:optimizer_states" and row["measured"] == 10 ** 6
    assert [u["site"] for u in row["unattributed"]] == [INJECTED]
    assert INIT_ZEROS in [u["site"] for u in row["in_ledger"]]
    # ZeRO-1's BF16_Optimizer (bf16 with fp32 gradient accumulation) makes nothing above its end
    # (timeline.init_end_is_peak): its high-water mark is compared with the instant initialize, the peak's list
    bf16opt = {**CFG, "zero_optimization": {**CFG["zero_optimization"], "stage": 1},
               "data_types": {"grad_accum_dtype": "fp32"}}
    (row,) = M.peak_parity(bf16opt, INV, 1, rec)
    assert row["ledger_instant"] == "initialize" and row["measured"] == 10 ** 6
    # where initialize is compared at its end (stage 0 fp32 with torch's AdamW as the basic optimizer, no wrapper:
    # not measured, timeline.init_end_is_peak does not claim it), the storages listed are those at its end
    fp32_torch = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 0},
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
    (row,) = M.peak_parity(fp32_torch, INV, 1, rec)
    assert row["ledger_instant"] == "initialize" and row["measured"] == 10 ** 6 - 400_000
    assert [u["site"] for u in row["unattributed"]] == [INJECTED] and not row["in_ledger"]
    # stage 0's FP16_UnfusedOptimizer (16-bit with torch's AdamW) is compared at its high-water mark, its warm-up step
    # (timeline.unfused_optimizer_init_transients)
    unfused = {**CFG, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
               "zero_optimization": {"stage": 0}}
    (row,) = M.peak_parity(unfused, INV, 1, rec)
    assert row["ledger_instant"] == "initialize:optimizer_states" and row["measured"] == 10 ** 6
    # a later phase is compared at its peak: the peak's list stays
    rec[0]["tracker"][0]["phase"] = "backward:1"
    (row,) = M.peak_parity(unfused, INV, 1, rec)
    assert INIT_ZEROS in [u["site"] for u in row["unattributed"]]
