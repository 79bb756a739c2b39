"""Peak parity, open world: the real engine's high-water mark of live bytes per timeline phase
(every tensor storage created and freed, tracked at allocation level by the worker's
StorageTracker, a TorchDispatchMode) equals the ledger timeline's (advisor.ledger.timeline) within
1%, and the engine peaks in the phase the ledger says.

The engine side counts every storage, named by the ledger or not, so a buffer neither side
knows about shows up as a difference (and the tracker lists it with its allocation site). Phases:
load (the proxy model built in fp32, or bf16, with and without deepspeed.zero.Init), without
zero.Init initialize:cast (up to the end of _configure_distributed_model: the cast, module.to) and
at ZeRO-3 initialize:module (up to the end of the in-place partitioning), initialize (bytes at its
end), forward/backward/step of the first and the second step separately. The module's parameter
bytes by dtype after module.to are checked against N x the 16-bit dtype (or fp32).

On this CPU accelerator, accelerator memory and pageable host memory are one device: both sides
are totals over every tier (NVMe files aside); the tier split is not proven here.
"""

from __future__ import annotations

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import hf_small  # noqa: E402
import parity  # noqa: E402

from advisor.engine.measure import peak_instant, peak_parity, run_measure_many  # noqa: E402
from advisor.model.inventory import from_dict  # noqa: E402

OPT = {"type": "AdamW", "params": {"lr": 1e-3}}
BUCKETS = {"reduce_bucket_size": 50000, "overlap_comm": False, "contiguous_gradients": True}


def _cfg(stage, dtype, **zero):
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": OPT,
         "zero_optimization": {"stage": stage, **(BUCKETS if stage in (1, 2) else {}), **zero}}
    if dtype != "fp32":
        c[dtype] = {"enabled": True}
    return c


#: (id, config, world size, zero_init, inventory). ZeRO-1/2 at W = 2 exercise the backward
#: transients of advisor.ledger.state.zero12_backward_transients (the bucket flush's flat copy,
#: grads_in_partition, ZeRO-1's autograd gradients) and the step's fp64 norm copy. The two-group
#: cells (TINY_FROZEN_GROUPS at reduce_bucket_size 10,000: several flushes, an extra-large
#: gradient) exercise the step one param group at a time (state.zero12_step_groups): at group 0's
#: first update the shared grads_in_partition is still held by group 1's views while group 1's
#: moments do not exist yet (the one-instant step was 15% under there).
#: The zero.Init cells build the proxy with one child module per owning module (l1, l2, l3: the
#: worker's _build_model(submodules=True)), so zero.Init partitions each as its __init__ returns,
#: and their load phase is the ledger's timeline.zero_init_load_peak (the l2 weight being cast
#: from fp32 beside l1's partitions in bf16; l2 whole while its first partition is made in fp32).
#: The ZeRO-3 cells without zero.Init build the same per-module proxy ({"submodules": True}):
#: ZeRO-3 fetches and releases parameters per module (the coordinator's fetch_sub_module /
#: release_sub_module), so on the flat one-module proxy, which no real model is, the first
#: forward fetched all six parameters at once (+79,847 B over the ledger's per-module fetch) and
#: the first backward held them all (+93,685 B): phases that measured the proxy, not the ledger.
#: One large module run first in forward (its gradient arrives last, alone in the epilogue's flush,
#: a view: no flat buffer) and ten of 4,900 elements that fill one bucket of 50,000: the flush
#: with the largest flat buffer (ten partitions of 2,450) is not the one holding the largest
#: partition (m0's 10,000), so the fp64 norm copy's lifetime shows (state.zero3_reduce_flush_bytes).
NORM_LIFE = {"name": "norm-life", "tensors": [{"name": "m0.weight", "shape": [20000]}]
             + [{"name": f"m{i}.weight", "shape": [4900]} for i in range(1, 11)]}

#: TINY for the per-module proxy whose parameters are each used alone (worker _build_model's
#: ``_touch``: one MeanBackward0 node per parameter, the one used last in forward first in
#: backward): named ``w`` / ``b``, since a module of exactly a 2-D ``weight`` (out, in) and a
#: ``bias`` (out) is an nn.Linear to the ledger (state.zero3_linear_pairs), whose gradients come
#: from one LinearFunctionForZeroStage3 node, the weight's hook first; the proxy's come bias first.
TINY_MEANS = {"name": "tiny-mlp-means", "tensors": [
    {"name": t["name"].replace(".weight", ".w").replace(".bias", ".b"), "shape": t["shape"]}
    for t in parity.TINY["tensors"]]}

#: `ds-advisor measure --params 200000`'s model (advisor.model.inventory.from_param_count: one tensor
#: of up to 2^24 elements): every all-reduce bucket and ZeRO-3 sub-group holds one tensor
ONE_TENSOR = {"name": "params-one", "tensors": [{"name": "params.0", "shape": [200000]}]}

#: Two param groups, each with a gradient over a 10,000-element bucket owned by one rank only (W = 2: a and b
#: are the two partitions of group 0), so at c's flush each rank still holds the clone of the other group-0
#: gradient it owns no part of (z1_bf16_oo_cpu_xgroups_w2; state._zero12_offload_reduce_runs). Not Linear names:
#: the flat proxy touches each parameter alone, no autograd siblings
XGROUPS = {"name": "xgroups", "tensors": [
    {"name": "a.w", "shape": [12000]}, {"name": "b.w", "shape": [12000]},
    {"name": "c.w", "shape": [40000], "group": 1}, {"name": "d.w", "shape": [100], "group": 1}]}

#: TINY in the HF Trainer's two param groups (weight decay on the weights, none on the biases and norms:
#: transformers Trainer.get_decay_parameter_names / create_optimizer): group 0 the weights, group 1 the biases
TINY_DECAY_GROUPS = {"name": "tiny-decay-groups", "tensors": [
    dict(t, group=1 if t["name"].endswith("bias") else 0) for t in parity.TINY["tensors"]]}

def _hf_cell(cid: str, model_type: str, zero: dict, W: int = 2, frozen: tuple[str, ...] = (), **extra):
    """A cell of the HF Trainer with no optimizer block (issue 15, hf19): the ledger's side is the plan
    ``estimate --hf`` makes (planning.build_plan with hf: the Trainer's resolved config, its fused torch AdamW, its
    two param groups from advisor.config.hf.trainer_param_groups) on ds-advisor's own inventory of the small
    config.json (tests/hf_small.py; specs.spec_from_hf_config + expand, what ``--model config.json`` reads), tensors
    named in ``frozen`` (suffixes) frozen; the engine's side is that resolved config, with the
    ``zero_allow_untested_optimizer`` the Trainer adds (transformers 5.25.0 integrations/deepspeed.py l.591), and the
    Trainer's optimizer built in the worker by transformers' own grouping on the real module transformers builds
    from the same config.json (worker._trainer_optimizer: torch.optim.AdamW(groups, fused=True), fused AdamW
    running on the CPU in torch 2.13). The proxy carries the real model's parameter names, shapes and order (the
    worker refuses it otherwise) and runs the ledger's autograd pairs as real nodes ({"linear": True}); it is the
    proxy, not transformers' forward, because these cells compare model state: the real forward's activations are
    not in peak_parity's ledger side."""
    import json

    from advisor.config.loading import parse_text
    from advisor.model.specs import expand, spec_from_hf_config
    from advisor.plan import Cluster as _Cluster
    from advisor.planning import build_plan
    inv = expand(spec_from_hf_config(dict(hf_small.SMALL[model_type]), source=f"{model_type} config.json"))
    if frozen:
        from dataclasses import replace
        inv.tensors = [replace(t, trainable=False) if t.name.endswith(frozen) else t for t in inv.tensors]
    written = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
               "bf16": {"enabled": "auto"}, "zero_optimization": zero}
    targs = {"per_device_train_batch_size": 1, "bf16": True, "weight_decay": 0.01}
    plan = build_plan(parse_text(json.dumps(written), f"{cid}.json"), inv, _Cluster(world_size=W), hf=True,
                      trainer_args=targs)
    HF_PLANS[cid] = plan
    engine_cfg = {**plan.hf.config, "zero_allow_untested_optimizer": True}
    opt = {"hf_config": hf_small.SMALL[model_type], "weight_decay": targs["weight_decay"],
           "lr": plan.config.optimizer.params["lr"], "fused": bool(plan.config.optimizer.params.get("fused"))}
    return (cid, engine_cfg, W, False, inv.to_dict(), {"linear": True, "trainer_optimizer": opt, **extra})


#: cell id -> the ledger's Plan of an HF Trainer cell (_hf_cell)
HF_PLANS: dict = {}
_Z12 = {"reduce_bucket_size": 50000, "overlap_comm": False, "contiguous_gradients": True}

CELLS = [
    # the HF Trainer's own optimizer and param groups (hf19): GPT-2's no-decay group is every bias and every
    # LayerNorm weight (ln_1 / ln_2 / ln_f by their class: no name pattern matches them), 8 of 12 tensors per layer:
    # groups of 147,456 and 1,792 elements, which DeepSpeed holds as such on both ranks (group_numels). Engine
    # 2026-12-06, 2 runs each, both ranks: every phase within 0.19% (forward:1 +1,082 B, the proxy's forward scalars;
    # the rest within 0.02%), the peak at step:2 on both sides. The ledger with the inventory in one group (the
    # plan before hf19) is 10.4% under at ZeRO-1/2's step:1 (1,492,484 B vs the engine's 1,647,392: the first
    # update of group 0 runs while group 1's gradients are still held, state.zero12_step_groups) and ZeRO-3's
    # step:2 -0.3% (its sub-groups per param group)
    _hf_cell("z2_bf16_hf_gpt2_w2", "gpt2", {"stage": 2, **_Z12}),
    _hf_cell("z1_bf16_hf_gpt2_w2", "gpt2", {"stage": 1, **_Z12}),
    _hf_cell("z3_bf16_hf_gpt2_w2", "gpt2", {"stage": 3, "reduce_bucket_size": 50000}, submodules=True),
    # Llama with its RMSNorm weights frozen: the Trainer's no-decay group is empty (create_optimizer keeps only
    # p.requires_grad), and DeepSpeed 0.19.8 drops an empty param group (engine.py l.2348): one group of 139,264
    # elements on both ranks; every phase within 0.01% (2 runs)
    _hf_cell("z2_bf16_hf_llama_frozennorms_w2", "llama", {"stage": 2, **_Z12}, frozen=("norm.weight", "layernorm.weight")),
    ("z0_fp32_w1", _cfg(0, "fp32"), 1, False, parity.TINY),
    # ZeRO-3 with a small reduce bucket: the default reduce_bucket_size (5e8 elements) puts a
    # 1e9 B bucket on both sides, beside which a 170 kB residual is 0.02% and no phase can fail
    ("z3_bf16_w2", _cfg(3, "bf16", reduce_bucket_size=50000), 2, False, parity.TINY, {"submodules": True}),
    ("z3_bf16_oo_cpu_w2", _cfg(3, "bf16", reduce_bucket_size=50000, offload_optimizer={"device": "cpu"}), 2,
     False, parity.TINY, {"submodules": True}),
    # frozen parameters under ZeRO-3 (LoRA / PEFT): l2 (23,254 elements, frozen) is ds_persist like the
    # trainable ones (parameter_offload.py mark_persistent_parameters l.317-329 looks at ds_numel only), so
    # its gathered copy (frozen_params_gathered) lives as lp_params_gathered does: absent at initialize,
    # released by the step, all-gathered again by _post_step (stage3.py l.2840-2841). As a "persistent from
    # initialize" entry the ledger was 46.5 kB high at initialize / forward:1 / backward:1 (-16% to -22%)
    # and 37 kB high at step:2; every phase of both ranks within 0.4% after (issue 15)
    ("z3_bf16_groups_w2", _cfg(3, "bf16", reduce_bucket_size=10000), 2, False, parity.TINY_FROZEN_GROUPS,
     {"submodules": True}),
    # the fp64 norm copy of optimizer offload lives inside its flush: the ten-partition flush
    # (flat 98,000 + arriving m0 40,000 + 2,450 x 8) and the epilogue's (m0 alone, 10,000 x 8) are
    # apart; counted at every backward instant the ledger read 60,400 B more than the engine
    ("z3_bf16_oo_cpu_normlife_w2", _cfg(3, "bf16", reduce_bucket_size=50000, offload_optimizer={"device": "cpu"}),
     2, False, NORM_LIFE, {"submodules": True}),
    # partial optimizer offload (Twin-Flow, offload_optimizer.ratio < 1; state.twin_flow_on_accelerator): TINY's
    # partitions at W = 2 in sub-groups of 5,000 elements are S = [9,632, 11,740, 235], ratio 0.5 keeps
    # int(0.5 x 3) = 1 of them on the accelerator; sub_group_size 200 gives [9,632, 11,740, 232, 3] and ratio 0.25
    # keeps int(0.75 x 4) = 3. On this CPU accelerator DeepSpeedCPUAdam steps every sub-group (stage3.py
    # l.1250-1254: cur_device == 'cpu' for the accelerator's own name too) and the tiers are one device: these
    # cells prove the totals (per sub-group master, gradient and moments, the backup AdamW's 1-element
    # parameter), not the tier split nor the backup AdamW's step (timeline.GPU_ONLY leaves its items out here)
    ("z3_bf16_oo_cpu_ratio_w2", _cfg(3, "bf16", reduce_bucket_size=50000, sub_group_size=5000,
                                     offload_optimizer={"device": "cpu", "ratio": 0.5}),
     2, False, parity.TINY, {"submodules": True}),
    ("z3_fp32_oo_cpu_ratio_sg4_w2", _cfg(3, "fp32", reduce_bucket_size=50000, sub_group_size=200,
                                         offload_optimizer={"device": "cpu", "ratio": 0.25}),
     2, False, parity.TINY, {"submodules": True}),
    # several flushes (reduce_bucket_size 10,000 < l2.weight's 23,177 elements): each flush runs
    # while the gradient that does not fit is still whole, in autograd's order
    ("z3_bf16_smallbucket_w2", _cfg(3, "bf16", reduce_bucket_size=10000), 2, False, TINY_MEANS,
     {"submodules": True}),
    # the same at W = 1: the flush path is the same (a torch.cat of a bucket of several gradients,
    # l2.weight held whole, the arriving gradient whole), only without padding
    ("z3_bf16_smallbucket_w1", _cfg(3, "bf16", reduce_bucket_size=10000), 1, False, TINY_MEANS,
     {"submodules": True}),
    # real biased Linears (worker _build_model(linear=True): F.linear). At ZeRO-3 F.linear is
    # DeepSpeed's LinearFunctionForZeroStage3 (memory_efficient_linear), one node that makes the
    # weight's gradient (linear.py l.134) and the bias's (l.141): the weight's hook fires first
    # (state.zero3_backward_grad_order), so with a 10,000-element bucket l2.bias's arrival flushes
    # l2.weight (flat 46,356 + whole 46,354 + l2.bias 154 B) while l2 is still gathered (46,508 B).
    # At ZeRO-2 it is torch's AddmmBackward0: the bias's hook fires first while the weight's
    # gradient is whole; l1.bias's arrival flushes l2.weight's bucket with l1.weight's
    # 19,264-element gradient live beside it (state.autograd_siblings)
    ("z3_bf16_linear_smallbucket_w2", _cfg(3, "bf16", reduce_bucket_size=10000), 2, False, parity.TINY,
     {"submodules": True, "linear": True}),
    ("z2_bf16_linear_smallbucket_w2", _cfg(2, "bf16", reduce_bucket_size=10000), 2, False, parity.TINY,
     {"linear": True}),
    # ZeRO-3 with communication_data_type fp32 on a bf16 model (issue 15), CPU optimizer offload, several flushes: the
    # ipg bucket is fp32 (stage3.py l. 782-784) and takes each bf16 gradient by a casting copy_ (l. 1637); at
    # l2.bias's arrival l2.weight, too large for the bucket and held whole in bf16 (46,354 B), is cast to fp32
    # (l. 1920: 92,708 B) before reduce_scatter_coalesced's fp32 flat buffer (92,712 B), whose outputs are cast back
    # to bf16 (l. 1944: 23,178 B); state._zero3_flush_copies. The ledger had left this flush out (backward:2 +162,453 B,
    # +25%; without offload backward:1 +208,637 B, +68%); now every phase within 0.01% beside the proxy's forward
    # scalars. The same without offload, with reduce_scatter off, with grad_accum_dtype fp32 (and both) matched in a
    # probe run (2026-12-06, state.zero3_reduce_flush_modeled)
    ("z3_bf16_oo_cpu_linear_commfp32_smallbucket_w2",
     {**_cfg(3, "bf16", reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
      "communication_data_type": "fp32"}, 2, False, parity.TINY, {"submodules": True, "linear": True}),
    # ZeRO-3 without reduce_scatter, gradient_predivide_factor 4 (issue 15): l2.bias's arrival flushes l2.weight (over
    # the bucket: __avg_scatter_grads), which divides it into a copy (stage3.py l. 1922-1923: 46,354 B) before the
    # flat buffer (46,356 B) and multiplies the rank's output into another (l. 1933-1935, 4 != W: 23,178 B);
    # state._zero3_predivide_copies. The ledger had backward:1 +69,575 B (+20.9%), backward:2 +69,583 B (+12.8%) on
    # both ranks; now every phase within 0.01% beside the proxy's forward scalars. Factor 2 (= W: no multiply)
    # matched in a probe (it was +46,399 B, +14.0%)
    ("z3_bf16_linear_nors_pre4_smallbucket_w2",
     {**_cfg(3, "bf16", reduce_bucket_size=10000, reduce_scatter=False), "gradient_predivide_factor": 4.0},
     2, False, parity.TINY, {"submodules": True, "linear": True}),
    # GPT-2's Conv1D (torch.addmm) and LayerNorm pairs as real nodes (issue 15; parity.TINY_GPT, worker Leaf kinds
    # conv1d / layer_norm). At ZeRO-3 addmm is not replaced (only F.linear is), so AddmmBackward0 makes c_fc's
    # two gradients and c_fc.bias's hook fires with c_fc.weight's 19,264-element gradient whole, as it flushes
    # c_proj.weight's bucket: flat 46,356 + whole 46,354 + c_fc.bias 602 + c_fc.weight 38,528 B
    # (state.zero3_autograd_siblings). Without it backward:1 was +38,703 B (11.9%) and backward:2 +38,711 B (7.1%)
    # on both ranks; now within 0.05% (2026-12-06, 2 runs). At ZeRO-2 the same proxy matched the ledger's
    # existing siblings (state.autograd_siblings) within 0.05% in backward; forward holds the proxy's own (1, out)
    # outputs and LayerNorm inputs (+768 B, 0.45% at forward:1)
    ("z3_bf16_gpt_smallbucket_w2", _cfg(3, "bf16", reduce_bucket_size=10000), 2, False, parity.TINY_GPT,
     {"submodules": True, "linear": True}),
    ("z1_bf16_w2", _cfg(1, "bf16"), 2, False, parity.TINY),
    ("z1_fp16_w2", _cfg(1, "fp16"), 2, False, parity.TINY),
    ("z2_bf16_w2", _cfg(2, "bf16"), 2, False, parity.TINY),
    ("z2_fp16_w2", _cfg(2, "fp16"), 2, False, parity.TINY),
    # W = 1: the whole model is the rank's partition (one slice per tensor, no flat copies); at W = 1
    # ZeRO-1 and ZeRO-2 measure within 4 B of each other, so one dtype each
    ("z1_bf16_w1", _cfg(1, "bf16"), 1, False, parity.TINY),
    ("z2_fp16_w1", _cfg(2, "fp16"), 1, False, parity.TINY),
    ("z2_bf16_groups_w1", _cfg(2, "bf16", reduce_bucket_size=10000), 1, False, parity.TINY_FROZEN_GROUPS),
    ("z1_bf16_groups_w2", _cfg(1, "bf16", reduce_bucket_size=10000), 2, False, parity.TINY_FROZEN_GROUPS),
    # CPU optimizer offload: the fp64 norm copy of each gradient slice inside the reduce
    # (state.zero12_offload_norm_modeled; 31% under in backward without it)
    ("z2_bf16_oo_cpu_w2", _cfg(2, "bf16", offload_optimizer={"device": "cpu"}), 2, False, parity.TINY),
    ("z1_fp16_oo_cpu_w2", _cfg(1, "fp16", offload_optimizer={"device": "cpu"}), 2, False, parity.TINY),
    # CPU optimizer offload with gradients larger than reduce_bucket_size (10,000 < l1.weight's 19,264
    # and l2.weight's 23,177 elements): each is cloned in its hook (stage_1_and_2.py l.1444-1446,
    # _offload_gradient_safety_enabled = cpu_offload, l.232) beside its autograd storage
    # real Linears (worker _build_model(linear=True)): the flat proxy's one MeanBackward0 node per parameter
    # makes l1.bias's gradient without l1.weight's, which no nn.Linear does (AddmmBackward0 makes both:
    # state.autograd_siblings), and the norm copies of l1.bias's flush run beside them (u of
    # state.zero12_offload_reduce_terms)
    ("z2_bf16_oo_cpu_bigtensor_w2", _cfg(2, "bf16", reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
     2, False, parity.TINY, {"linear": True}),
    ("z2_bf16_groups_w2", _cfg(2, "bf16", reduce_bucket_size=10000), 2, False, parity.TINY_FROZEN_GROUPS),
    # ZeRO-3 with parameters that are not persistent (stage3_param_persistence_threshold 100: only
    # l2.bias and l3.bias stay gathered), the regime of every real model's large tensors: fetched,
    # prefetched and released per module in every forward and backward (the other ZeRO-3 cells'
    # TINY tensors all fall under the default threshold of 1e5 elements, so they are gathered for good)
    ("z3_bf16_nonpersist_w2", _cfg(3, "bf16", reduce_bucket_size=50000, stage3_param_persistence_threshold=100),
     2, False, parity.TINY, {"submodules": True}),
    # the same with container modules (issue 15): each layer inside a parameterless module (stack.i, HF
    # Llama's LlamaDecoderLayer), those in an nn.ModuleList (stack, model.layers): parity.TINY_NESTED, the
    # worker's tree of the names. Their hooks fire and are traced but fetch nothing; with a complete trace
    # each prefetches (state.zero3_container_steps). At the default prefetch bucket (5e7) the root's prefetch
    # already takes every parameter, so nothing changes: matched before the replay knew containers
    # (2026-12-05, every phase of both ranks within 0.01%, forward:2 engine 618,439 B vs ledger 618,394 B,
    # backward:2 577,769 vs 577,718, the numbers of z3_bf16_nonpersist_w2's run beside it)
    ("z3_bf16_nonpersist_containers_w2", _cfg(3, "bf16", reduce_bucket_size=50000,
                                              stage3_param_persistence_threshold=100),
     2, False, parity.TINY_NESTED, {"containers": True}),
    # a prefetch bucket (1,000) below a layer: stack.0's prefetch takes l1.bias with l2.weight in one
    # coalesced all-gather, whose flat buffer ((302 + 23,178) x 2 B = 46,960 B) lives until l2 is fetched;
    # without containers l1's own fetch gathers l1.bias alone and l2.weight is prefetched alone. Before the
    # replay knew containers: forward:2 engine 579,141 B vs ledger 532,140 B (+8.83%, both ranks), while the
    # flat twin below matched (532,185 vs 532,140)
    ("z3_bf16_nonpersist_containers_pb1000_w2", _cfg(3, "bf16", reduce_bucket_size=50000,
                                                     stage3_param_persistence_threshold=100,
                                                     stage3_prefetch_bucket_size=1000),
     2, False, parity.TINY_NESTED, {"containers": True}),
    # declared parameterless leaves (issue 15; Inventory.modules, worker Plain): parity.TINY_CALLS, TINY with a
    # rotary-like leaf before l1 (no backward hook), an activation between l1 and l2 and a dropout after l3, at
    # stage3_max_reuse_distance 0 (each module released after its use). The leaf before l1 prefetches l1.bias with
    # l2.weight in one coalesced all-gather (state.zero3_container_steps); without it (the ledger before the
    # declaration, the bare TINY) forward:2 is 7,658 B lower and backward:2 39,304 B higher (-6.8%); the
    # activation and the dropout find nothing left to prefetch here
    ("z3_bf16_nonpersist_calls_pb1000_w2", _cfg(3, "bf16", reduce_bucket_size=50000, stage3_param_persistence_threshold=100,
                                                stage3_prefetch_bucket_size=1000, stage3_max_reuse_distance=0),
     2, False, parity.TINY_CALLS, {"containers": True}),
    # an nn.Sequential of TINY's layers (issue 15; parity.TINY_SEQ, declared "sequential"): numbered like a
    # ModuleList's items, but called, so its hook prefetches before seq.0's fetch: l1.bias with l2.weight in one
    # coalesced all-gather, as stack.0's in the containers cell above; the ledger taking it as a ModuleList is
    # forward:2 46,956 B (8.8%) under
    ("z3_bf16_nonpersist_seq_pb1000_w2", _cfg(3, "bf16", reduce_bucket_size=50000, stage3_param_persistence_threshold=100,
                                              stage3_prefetch_bucket_size=1000),
     2, False, parity.TINY_SEQ, {"containers": True}),
    ("z3_bf16_nonpersist_pb1000_w2", _cfg(3, "bf16", reduce_bucket_size=50000, stage3_param_persistence_threshold=100,
                                          stage3_prefetch_bucket_size=1000), 2, False, parity.TINY, {"submodules": True}),
    # issue 15: regimes outside the cells above, each listed in UNMATCHED_ISSUE15 where it is off
    # fp32 training at ZeRO-2 and ZeRO-1: the backward / step-norm transients of the 16-bit cells with
    # D = 4 (state.zero12_transients_modeled): the bucket's flat copy (allreduce_bucket l.2367, 172,836 B
    # = N x 4 on both ranks), get_grad_norm_direct's fp64 slice copies (l.2684) beside averaged_gradients
    ("z2_fp32_w2", _cfg(2, "fp32"), 2, False, parity.TINY),
    ("z1_fp32_w2", _cfg(1, "fp32"), 2, False, parity.TINY),
    # the same with two param groups, stepped one at a time (state.zero12_groups_stepped_apart): rank 1's
    # step:1 was +41,604 B (11.3%) with one step instant; rank 0's group-1 slice lies in one tensor, so its
    # fp32 gradient is a view holding grads_in_partition whole through that update (+1,588 B without it)
    ("z2_fp32_groups_w2", _cfg(2, "fp32", reduce_bucket_size=10000), 2, False, parity.TINY_FROZEN_GROUPS),
    ("z1_fp32_groups_w2", _cfg(1, "fp32", reduce_bucket_size=10000), 2, False, parity.TINY_FROZEN_GROUPS),
    ("z0_bf16_w2", _cfg(0, "bf16"), 2, False, parity.TINY),
    ("z3_fp32_nonpersist_w2", _cfg(3, "fp32", reduce_bucket_size=50000, stage3_param_persistence_threshold=100),
     2, False, parity.TINY, {"submodules": True}),
    # issue 15's newcomer regimes. On TINY both matched on first run (z0_fp32_w2 every phase within 0.03%,
    # z3_fp32_tbsga2_w1 all but step:4, +12,653 B: the step's fp64 norm copy, now state grad_norm_fp64 at
    # ZeRO-3); the reported z0 backward -33% (peak in the step on the engine, in backward on the ledger) was
    # `ds-advisor measure --params N`'s one-tensor model, whose all-reduce bucket is flattened as a view
    # (no N x 4 copy); its ZeRO-3 run had no fp32_grad copy in the step either (one-tensor sub-group):
    # the *_onetensor cells, ONE_TENSOR = from_param_count(200,000)'s shape. The reported ZeRO-3 initialize
    # +31.6% did not reproduce (2026-12-05): initialize within +5 B on TINY (reduce_bucket_size 50,000 and the
    # default), on --params 200,000 / 1,000,000 and on --params 40,000,000 (three tensors, 480,200,005 B
    # engine vs 480,200,000 B ledger); the ledger's initialize was the same at a7d3f59, 4636123 and fa83377
    ("z0_fp32_w2", _cfg(0, "fp32"), 2, False, parity.TINY),
    # stage 0's FP16_UnfusedOptimizer (bf16 with torch's AdamW: torch_adam, state.select_optimizer): its step holds
    # torch's step temporaries (state.torch_step_temporaries), on this CPU the single-tensor loop's
    # max_i (n_(i-1) + 2 n_i) x 4 = (301 + 2 x 23,177) x 4 = 186,620 B (torch/optim/adam.py l.544), which measure
    # compares in place of the ledger's GPU foreach figure (N x 4 = 172,836 B, l.790; measure.torch_step_cpu_figures).
    # Engine 2026-12-06 (2 runs): step:1/2 1,050,844 B vs 1,050,824 on both ranks (before: UNMATCHED_ISSUE15, +186,640).
    # initialize is compared at its high-water mark, the warm-up step inside the wrapper's constructor
    # (timeline.unfused_optimizer_init_transients, instant initialize:optimizer_states): its end + N x 2 + N x 4 + the
    # same step temporaries = 604,950 + 86,418 + 172,836 + 186,620 = 1,050,824 B (at its end before, 604,950)
    ("z0_bf16_torchadam_w2", {**_cfg(0, "bf16"), "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}},
     2, False, parity.TINY),
    # the same warm-up on other shapes, so the model is not fitted to one cell: fp16 with torch's AdamW at W = 1, GA 2,
    # on a model with a frozen layer (no warm-up gradient for it: is_optimized_parameter, unfused_optimizer.py l.73) and
    # two param groups (one torch step over both groups' lists: the temporaries max_i (n_(i-1) + 2 n_i) x 4 over
    # group 0's (19,264, 301) and group 1's (385, 5)); and torch's Adagrad at bf16 (Adagrad without offload is
    # torch.optim.Adagrad, not FusedAdam: FP16_UnfusedOptimizer), whose single-tensor step holds n_(i-1) + n_i
    # (torch/optim/adagrad.py l.425). Engine 2026-12-06 (2 runs each): z0_bf16_adagrad_w2 initialize 871,722 B on both
    # ranks = the ledger's (its end 518,556 + 86,418 + 172,836 + 93,912), every phase within 0.01%. The groups cell's
    # warm-up peaks at group 0's adam() call, before torch makes group 1's state (Adam.step: _init_group then adam()
    # per group, torch/optim/adam.py l.229-248): 596,608 B = the ledger's (the whole-state figure 599,736 was -0.52%,
    # timeline.unfused_warmup_group); its forward:2 / forward:4 were +39,910 B = N_t x 2 (micro-step 1's param.grad,
    # engine.py backward:3428, kept to the boundary as FP16_Optimizer's: state lp_grads_accumulated), now +0.014%
    ("z0_fp16_torchadam_groups_tbsga2_w1", {**_cfg(0, "fp16"), "train_batch_size": 2,
                                            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}},
     1, False, parity.TINY_FROZEN_GROUPS, {"steps": 4}),
    ("z0_bf16_adagrad_w2", {**_cfg(0, "bf16"), "optimizer": {"type": "Adagrad", "params": {"lr": 1e-3}}},
     2, False, parity.TINY),
    # ZeRO-2 with torch's AdamW: _optimizer_step hands it group 0's flat fp32 partition alone (stage_1_and_2.py
    # l.2967-2983), so the CPU's single-tensor step holds 2 x P x 4 = 2 x 21,606 x 4 = 172,848 B at the update
    # (the GPU's foreach: P x 4). Engine 2026-12-06 (2 runs): step:1 605,000 / step:2 605,004 B vs 604,972 on both
    # ranks; without it the ledger's step peak was first_step:norm, 412,444 B (-32%)
    ("z2_bf16_torchadam_w2", {**_cfg(2, "bf16"), "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}},
     2, False, parity.TINY),
    # ZeRO-3 with hpZ (zero_hpz_partition_size 2 = W): initialize's high-water mark (the hook's gather of the primary
    # partition, timeline.zero3_init_transients_apply); initialize:module with the secondary partitions made before
    # each primary one (timeline.zero3_module_partition_peak: 132,776 B vs engine 132,780); the fetch replay (the
    # secondary's all-gather buffer is the primary's size); the secondaries live in the first iteration, freed by
    # each step's _post_step and, every parameter of TINY being persistent, made again only by the next step's
    # _partition_all_parameters (timeline.hpz_secondary_live): forward:2 532,265 B vs 532,140, step:2 618,625 vs
    # 618,568 (2026-12-06, 2 runs, both ranks; all phases within 0.04%)
    ("z3_bf16_hpz2_w2", _cfg(3, "bf16", reduce_bucket_size=50000, zero_hpz_partition_size=2), 2, False, parity.TINY,
     {"submodules": True}),
    # hpZ 2 inside W = 4 (the usual shape: h = GPUs per node < W): secondaries of ceil(n / 4) x 4 / 2 elements
    # (43,224 B), unlike the primaries (21,612 B); the step's high-water mark is _post_step's all-gather of the
    # persistent parameters with the secondaries not yet freed (stage3.py l.2841-2846), which at W = 2 ties with
    # the update: step:1 402,617 B = first_step:post without them (359,344) + 43,224 + 49 B of scalars
    # (2026-12-06, 2 runs, every rank; initialize:module 115,318 vs 115,314, every phase within 0.06%)
    ("z3_bf16_hpz2_w4", _cfg(3, "bf16", reduce_bucket_size=50000, zero_hpz_partition_size=2), 4, False, parity.TINY,
     {"submodules": True}),
    ("z0_fp32_onetensor_w2", _cfg(0, "fp32"), 2, False, ONE_TENSOR),
    # stage 0 FP16_Optimizer at GA 2 without pipeline parallelism: micro-step 1's param.grad lives to the boundary
    # (state lp_grads_accumulated) and the engine all-reduces only at the boundary (timeline.PIPE_REDUCE_ONLY_ITEMS:
    # backward:1 was -86,384 B, -11.1%, with the all-reduce's flat copy counted there)
    ("z0_fp16_tbsga2_w2", {**_cfg(0, "fp16"), "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    # the same GA 2 in plain fp32 (stage 0, no 16-bit wrapper: the basic optimizer itself): micro-step 1's param.grad
    # is kept to the boundary and micro-step 2's new gradient added into it (state accumulate_grad_new, lp_grads_accumulated)
    ("z0_fp32_tbsga2_w2", {**_cfg(0, "fp32"), "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    ("z3_fp32_tbsga2_w1", {**_cfg(3, "fp32", reduce_bucket_size=50000), "train_batch_size": 2}, 1, False,
     parity.TINY, {"submodules": True, "steps": 4}),
    ("z3_fp32_onetensor_tbsga2_w1", {**_cfg(3, "fp32", reduce_bucket_size=50000), "train_batch_size": 2}, 1, False,
     ONE_TENSOR, {"submodules": True, "steps": 4}),
    # gradient accumulation given only by train_batch_size: DeepSpeed derives GA = 4 / (1 x 2) = 2
    # (runtime/config.py _set_batch_related_parameters), so steps 4 = micro-steps 1-4: the first
    # optimizer step at micro-step 2, the steady one at 4 (measure.phase_instants; the
    # non-boundary step:1 / step:3 and the steady iteration's micro-step 3 have no instant).
    # Each micro-step after an iteration's first holds the previous one's grads_in_partition
    # (state prev_grads_in_partition: forward:2 was +49.5% without it) and ZeRO-2 reduces inside
    # micro-step 1's backward too (timeline reduce:1: backward:1 was +12.5% on rank 0 without it)
    ("z2_bf16_tbsga2_w2", {**_cfg(2, "bf16"), "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    # the same GA 2 at ZeRO-1: only the boundary's backward reduces (engine.py allreduce_gradients
    # l.3088-3092), so micro-step 1's param.grad and ipg bucket live into micro-step 2's forward
    # (state lp_grads_accumulated, ipg_bucket_accumulated: forward:2 was +107.9% without them) and
    # micro-step 2's new gradient is added into param.grad (accumulate_grad_new: backward:2)
    ("z1_bf16_tbsga2_w2", {**_cfg(1, "bf16"), "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    ("z1_fp16_tbsga2_w2", {**_cfg(1, "fp16"), "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    # the same GA 2 in fp32 (state.zero12_transients_modeled takes fp32 at any GA): the accumulation
    # entries with D = 4, within 0.03% in every phase on both ranks when added
    ("z2_fp32_tbsga2_w2", {**_cfg(2, "fp32"), "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    ("z1_fp32_tbsga2_w2", {**_cfg(1, "fp32"), "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    # the same GA 2 at ZeRO-3: each micro-step's backward reduce-scatters into the gradient
    # partition (stage3.py partition_grads l.2024-2030: copy_ at micro-step 0, add_ after; no
    # extra storage); the first backward releases the persistent parameters (incomplete trace)
    # and no step's _post_step gathers them before micro-step 2, whose forward prefetches them
    # (state.zero3_refetch_prefetch_bytes: forward:2 was +47,323 B, +13.2%, without it)
    ("z3_bf16_tbsga2_w2", {**_cfg(3, "bf16", reduce_bucket_size=50000), "train_batch_size": 4}, 2, False,
     parity.TINY, {"submodules": True, "steps": 4}),
    # GA 3 (train_batch_size 6): at ZeRO-3 only micro-step 2's forward fetches again (the
    # timeline's forward:2, an instant of its own here), micro-step 3's finds them gathered;
    # at ZeRO-1 micro-step 3 holds what micro-steps 1 and 2 left, as micro-step 2 did at GA 2.
    # Micro-step 2 is a middle one (timeline.middle_microstep): its forward and backward rows are compared with the
    # timeline's forward:2 / backward:2 (MIDDLE_CELLS checks that they are)
    ("z3_bf16_tbsga3_w2", {**_cfg(3, "bf16", reduce_bucket_size=50000), "train_batch_size": 6}, 2, False,
     parity.TINY, {"submodules": True, "steps": 6}),
    ("z1_bf16_tbsga3_w2", {**_cfg(1, "bf16"), "train_batch_size": 6}, 2, False, parity.TINY, {"steps": 6}),
    # GA 4 at stage 0 (FP16_Optimizer): micro-steps 2 and 3 are both middle ones, each with micro-step 1's param.grad
    # kept and its own new gradient added into it (state lp_grads_accumulated, accumulate_grad_new), nothing reduced
    # before the boundary (engine.py allreduce_gradients l.3088-3095): one forward:2 / backward:2 pair stands for both,
    # so the rows of m = 2 and m = 3 are compared with the same instants and must both be within 1%
    ("z0_fp16_tbsga4_w2", {**_cfg(0, "fp16"), "train_batch_size": 8}, 2, False, parity.TINY, {"steps": 8}),
    # GA 3 where every backward reduces inside it (timeline.reduces_in_backward): micro-step 2's backward row is compared
    # with the timeline's backward:2 and its own reduce:2 (the boundary's reduce less lifetimes boundary_reduce /
    # reduce_step). ZeRO-2 with several ipg buckets (reduce_bucket_size 10,000: flushes inside the middle backward,
    # grads_in_partition kept from micro-step 1); BF16_Optimizer (bf16 with grad_accum_dtype fp32 at ZeRO-1 without
    # offload, engine.py _do_optimizer_sanity_check l.2305-2310), whose backward_epilogue adds micro-step 2's
    # gradients into its fp32 buffer (bf16_optimizer.py l.503-538) with micro-step 1's zeroed param.grad kept
    ("z2_bf16_tbsga3_w2", {**_cfg(2, "bf16", reduce_bucket_size=10000), "train_batch_size": 6}, 2, False, parity.TINY,
     {"steps": 6, "linear": True}),
    ("z1_bf16_gaccfp32_tbsga3_w2", {**_cfg(1, "bf16"), "data_types": {"grad_accum_dtype": "fp32"},
                                    "train_batch_size": 6}, 2, False, parity.TINY, {"steps": 6}),
    # the load under deepspeed.zero.Init, the proxy's parameters on one child module per owning
    # module (l1, l2, l3), as a real model's: bf16 (each tensor created in fp32 and cast) and fp32
    ("z3_bf16_zinit_w2", _cfg(3, "bf16", reduce_bucket_size=50000), 2, True, parity.TINY),
    ("z3_fp32_zinit_w2", _cfg(3, "fp32", reduce_bucket_size=50000), 2, True, parity.TINY),
    # load and initialize only (no step; the ZeRO-3 training residuals are z3_bf16_w2's):
    # a bf16 model under zero.Init with fp16 on: each tensor made in bf16 and cast to fp16
    # (zero_wrapper_for_fp_tensor_constructor), both 2 B copies alive
    ("z3_fp16_zinit_bf16load_w2", _cfg(3, "fp16", reduce_bucket_size=50000), 2, True, parity.TINY,
     {"load_dtype": "bf16", "steps": 0}),
    # offload_param nvme under zero.Init: the swapper zero.Init makes holds buffer_count x
    # A_512(buffer_size) x 2 B pinned from the start of the load, made from a torch.empty copy of
    # the same size (both alive then); TINY's partitions are all under the 1 MiB aio swap size, so
    # they stay in host memory. Large buffers: the load peaks as the swapper is made (2 x buffers);
    # small ones: at the model's own load peak beside them
    ("z3_bf16_zinit_nvme_w2", _cfg(3, "bf16", reduce_bucket_size=50000,
                                   offload_param={"device": "nvme", "nvme_path": "/tmp", "buffer_count": 3,
                                                  "buffer_size": 100000}), 2, True, parity.TINY, {"steps": 0}),
    ("z3_bf16_zinit_nvme_small_w2", _cfg(3, "bf16", reduce_bucket_size=50000,
                                         offload_param={"device": "nvme", "nvme_path": "/tmp", "buffer_count": 3,
                                                        "buffer_size": 10000}), 2, True, parity.TINY, {"steps": 0}),
    # W = 4 (issue 15's matrix runs W = 1, 2 and 4): TINY's odd sizes (43,209 elements; l1.bias 301,
    # l2.weight 23,177, l2.bias 77, l3 385 + 5) do not divide by 4, so every partition pads
    ("z1_bf16_w4", _cfg(1, "bf16"), 4, False, parity.TINY),
    ("z2_bf16_w4", _cfg(2, "bf16"), 4, False, parity.TINY),
    ("z3_bf16_w4", _cfg(3, "bf16", reduce_bucket_size=50000), 4, False, parity.TINY, {"submodules": True}),
    ("z2_bf16_oo_cpu_w4", _cfg(2, "bf16", offload_optimizer={"device": "cpu"}), 4, False, parity.TINY),
    ("z3_bf16_nonpersist_w4", _cfg(3, "bf16", reduce_bucket_size=50000, stage3_param_persistence_threshold=100),
     4, False, parity.TINY, {"submodules": True}),
    # ZeRO-1 under offload moves every gradient in its boundary epilogue: rank 1 (largest slice 8,460
    # elements) peaks with all N x 2 B of autograd gradients live, not at its norm copy
    # (state.zero12_offload_flush_bytes; +18,772 B without it)
    ("z1_fp16_oo_cpu_w4", _cfg(1, "fp16", offload_optimizer={"device": "cpu"}), 4, False, parity.TINY),
    ("z2_fp16_w4", _cfg(2, "fp16"), 4, False, parity.TINY),
    ("z2_fp32_w4", _cfg(2, "fp32"), 4, False, parity.TINY),
    ("z0_bf16_w4", _cfg(0, "bf16"), 4, False, parity.TINY),
    ("z1_bf16_groups_w4", _cfg(1, "bf16", reduce_bucket_size=10000), 4, False, parity.TINY_FROZEN_GROUPS),
    # real Linears (AddmmBackward0: l1.bias's hook runs with l1.weight's gradient whole): rank 1 peaks at
    # the flush of l2.weight's clone, its flat copy 25,694 B + clone 46,354 B + l1's gradients 39,130 B
    # (state.zero12_offload_flush_bytes: +5,002 B without it); ranks 2 and 3 at that flush's fp64 norm copy
    # of their l2.weight slice beside the clone and l1's gradients (u of state.zero12_offload_reduce_terms:
    # +39,170 / +39,194 B without it)
    ("z2_bf16_oo_cpu_bigtensor_w4", _cfg(2, "bf16", reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
     4, False, parity.TINY, {"linear": True}),
    # ZeRO-1 offload with gradients over the bucket: their clones, kept by the ranks owning none of them
    # (state._zero12_offload_reduce_runs' zero1; it was in UNMATCHED_MORE)
    ("z1_bf16_oo_cpu_smallbucket_w4", _cfg(1, "bf16", reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
     4, False, parity.TINY, {"linear": True}),
    ("z3_bf16_oo_cpu_w4", _cfg(3, "bf16", reduce_bucket_size=50000, offload_optimizer={"device": "cpu"}), 4,
     False, parity.TINY, {"submodules": True}),
    ("z3_bf16_zinit_w4", _cfg(3, "bf16", reduce_bucket_size=50000), 4, True, parity.TINY),
    # issue 15: NVMe with training steps. BIG (2.1M parameters): its weights' partitions are over the
    # 1 MiB aio swap size (swap_tensor/constants.py MIN_AIO_BYTES), so the swappers really swap.
    # Optimizer on NVMe, sub_group_size 300,000: per rank [l1.weight 527,872] [l1.bias, l2.weight]
    # [l2.bias] (stage3.py _create_fp16_sub_groups), the first two swapped (S_k x 4 >= 1 MiB), the
    # last kept in host memory; step 1 creates each swapped sub-group's exp_avg/exp_avg_sq as host
    # tensors (cpu_adam.py l.161/164, state first_step_moments: step:1 matched as added). The fp32
    # gradient tails kept for the step (state.zero3_flush_grad_tails: l1.bias's 2,064 B and l2.weight's
    # unaligned 2,121,800 B) appear flush by flush: counted at every backward instant, backward:1
    # read 2,123,864 B (8.3%) over the engine. Real Linears ("linear"): the _touch proxy's bias-first
    # order is not a model's (TINY_MEANS)
    ("z3_bf16_oo_nvme_w2", _cfg(3, "bf16", reduce_bucket_size=50000, sub_group_size=300000,
                                offload_optimizer={"device": "nvme", "nvme_path": "/tmp", "buffer_count": 4}),
     2, False, parity.BIG, {"submodules": True, "linear": True}),
    # the same with partial offload (issue 15; offload_optimizer.ratio 0.5): int(0.5 x 3) = 1, sub-group 0 (swapped)
    # is a GPU run's backup-AdamW sub-group, its moments host tensors beside its NVMe master file
    # (state.twin_flow_backup_swapped; tests/test_twin_flow_nvme.py). On this CPU accelerator DeepSpeedCPUAdam steps
    # every sub-group as at ratio 1 (stage3.py l.1250-1254, the accelerator's name is 'cpu'), so the backup items
    # (timeline.GPU_ONLY: 8,445,956 B in the step, 4,222,980 B after it) are left out and the cell proves the rest:
    # the placeholder parameter, and the first step's DeepSpeedCPUAdam moments, whose max over the swapped
    # sub-groups is sub-group 1's (530,966 > 527,872) on both paths. Every phase of both ranks within 0.03%
    # (2026-12-06, 3 runs); the tier split and the backup AdamW's host moments are not proven here (an H100 run
    # showed the placement, not the peak: benchmarks/results/gpu_twin_flow_nvme-h100.json, tests/test_twin_flow_nvme.py)
    ("z3_bf16_oo_nvme_ratio_w2", _cfg(3, "bf16", reduce_bucket_size=50000, sub_group_size=300000,
                                      offload_optimizer={"device": "nvme", "nvme_path": "/tmp", "buffer_count": 4,
                                                         "ratio": 0.5}),
     2, False, parity.BIG, {"submodules": True, "linear": True}),
    # parameters on NVMe with steps: max_in_cpu 1000 puts every swappable partition (the weights')
    # on NVMe (partitioned_param_swapper.py), fetched through buffer_count x buffer_size pinned buffers.
    # The first iteration is the replay's (one module at a time, no prefetch: forward:1 holds l2's flat
    # all-gather buffer 2,123,860 B beside its torch.cat copies 2,123,856 B), later ones the reference's
    # rule: with that rule in the first iteration too, forward:1 was -2,109,401 B (-7.5%) and
    # backward:1 -2,111,449 B (-7.0%) under the ledger (state: the fallback's first_only)
    ("z3_bf16_op_nvme_w2", _cfg(3, "bf16", reduce_bucket_size=50000,
                                offload_param={"device": "nvme", "nvme_path": "/tmp", "buffer_count": 5,
                                               "buffer_size": 1100000, "max_in_cpu": 1000}),
     2, True, parity.BIG, {"submodules": True, "linear": True}),
    # the same at GA 2 (issue 15; train_batch_size 4 / (1 x 2)): the first backward released the persistent biases
    # too (incomplete trace) but l1's, and no step comes before micro-step 2, whose forward prefetches nothing (the
    # queue's next partition is on NVMe) and fetches l2.weight with l2.bias in one coalesced all-gather: its flat
    # buffer (530,450 + 515) x 2 x 2 = 2,123,860 B beside the torch.cat copies and l1.weight's own buffer
    # (state.zero3_nvme_refetch_bytes). Without it forward:2 was +2,123,881 B (8.19%) on both ranks, every other
    # phase within 0.01%; now all within 0.009% (2026-12-06, 2 runs)
    ("z3_bf16_op_nvme_tbsga2_w2", {**_cfg(3, "bf16", reduce_bucket_size=50000,
                                          offload_param={"device": "nvme", "nvme_path": "/tmp", "buffer_count": 5,
                                                         "buffer_size": 1100000, "max_in_cpu": 1000}),
                                   "train_batch_size": 4},
     2, True, parity.BIG, {"submodules": True, "linear": True, "steps": 4}),
    # ZeRO-1 with CPU optimizer offload at GA 2 (train_batch_size 4 / (1 x 2))
    ("z1_bf16_oo_cpu_tbsga2_w2", {**_cfg(1, "bf16", offload_optimizer={"device": "cpu"}), "train_batch_size": 4},
     2, False, parity.TINY, {"steps": 4}),
    # issue 15: the ZeRO-1/2 bucket options the cells above hold fixed (BUCKETS: overlap_comm off,
    # contiguous_gradients on), fp32 under CPU optimizer offload, and ZeRO-3 with overlap_comm.
    # overlap_comm at ZeRO-2: a second ipg buffer (setup_buckets l.3272-3278) and the same flush copies
    # (state.zero12_transients_modeled); on CPU there is no reduction stream (l.599: None on a
    # synchronized device), so the side stream's lifetimes (record_stream, GPU-only) are not proven here. Before the ledger took
    # it, step:2 was -24,512 B on rank 0 (the norm copy, get_grad_norm_direct l.2684) and rank 1's
    # backward -39,156 B (the flat copy, allreduce_bucket l.2367). z2_fp32_oo_cpu_w2 matched on every run
    # (2026-12-05, 3 runs): every phase within 96 B (0.012%) on both ranks. z3_bf16_overlap_w2 measured the
    # same bytes as z3_bf16_w2 in every phase of the run that had both (overlap_comm only picks the
    # reduce stream, stage3.py l.340-341, and a synchronized device such as the CPU accelerator gets none)
    ("z2_bf16_overlap_w2", _cfg(2, "bf16", overlap_comm=True), 2, False, parity.TINY),
    # contiguous_gradients off at ZeRO-2: no ipg buffer, each gradient whole in bucket.grads until its flush,
    # which flattens the whole bucket (allreduce_bucket l.2367), and a rank keeps the gradients meeting its
    # slice whole (state._zero12_noncontig_transients). Before it (2026-12-05) the ledger kept the coarse
    # lifetimes: backward:1 -87,384 B on rank 0 and -125,574 B on rank 1 (the N x 2 B of whole gradients,
    # engine.py l.3428, and their N x 2 B flat copy unattributed), step:2 -24,512 / -39,488 B (the fp64
    # norm copies, get_grad_norm_direct l.2684); now every phase within 36 B on both ranks
    ("z2_bf16_noncontig_w2", _cfg(2, "bf16", contiguous_gradients=False), 2, False, parity.TINY),
    # the same with several flushes (reduce_bucket_size 10,000, real Linears as z2_bf16_linear_smallbucket_w2):
    # a rank keeps the whole gradients meeting its slice from earlier flushes (kept_r of
    # state._zero12_noncontig_transients) beside each later bucket: rank 1's peak is l2.weight's flush
    # (46,354 B whole, l1.bias arriving with l1.weight, 39,130 B) beside the 934 B kept from the first
    # flush. 2026-12-05, 1 run: backward:1/2 engine +640 / +644 B over the ledger on both ranks (0.25%),
    # all of it autograd-made storage (engine.py l.3428: 86,090 B on rank 0 against the ledger's 85,484 B
    # of gradients); 602 B of it is the size of l1's 301-element output gradient in bf16, an activation
    # gradient of the proxy alive in l1's backward node, not confirmed
    ("z2_bf16_noncontig_smallbucket_w2", _cfg(2, "bf16", contiguous_gradients=False, reduce_bucket_size=10000), 2,
     False, parity.TINY, {"linear": True}),
    ("z2_fp32_oo_cpu_w2", _cfg(2, "fp32", offload_optimizer={"device": "cpu"}), 2, False, parity.TINY),
    ("z3_bf16_overlap_w2", _cfg(3, "bf16", reduce_bucket_size=50000, overlap_comm=True), 2, False, parity.TINY,
     {"submodules": True}),
    # issue 15's ZeRO-1 regimes (newcomer's runs on an odd MLP). overlap_comm at ZeRO-1 moves each gradient in
    # its hook (process_gradients l.2290; state._zero12_replay_stage): before (2026-12-05) the ledger held all
    # N x 2 B of whole gradients in backward (rank 0 backward:1 -85,452 B, -15.7%; the engine's peak is the
    # flush's flat copy, allreduce_bucket l.2367, 86,418 B) and had no norm instant in the step (step:2 +24,512 B
    # rank 0, +39,488 B rank 1: get_grad_norm_direct l.2684); now every phase within 0.03% on both ranks.
    # A gradient larger than the bucket without offload (real Linears, 10,000 < l1.weight's 19,264 /
    # l2.weight's 23,177): rank 1 owns no part of l1.weight and keeps its gradient to the end of the epilogue
    # (state._zero12_kept_xl): backward:1 +38,560 B (13.4%) before, now +32 B
    ("z1_bf16_overlap_w2", _cfg(1, "bf16", overlap_comm=True), 2, False, parity.TINY),
    ("z1_bf16_bigtensor_w2", _cfg(1, "bf16", reduce_bucket_size=10000), 2, False, parity.TINY, {"linear": True}),
    # both at once, the newcomer's first regime (overlap_comm, a tensor over the bucket): the hooks' order
    # (l3 first), the extra-large gradients kept by their non-owners. Matched on first run (2026-12-05, every
    # phase within 0.36%, the forward's +630 B proxy scalars aside); so did the newcomer's own two configs on
    # their inventory (l1 257x96 > reduce_bucket_size 20,000, real Linears): every backward/step within 0.01%
    ("z1_bf16_overlap_bigtensor_w2", _cfg(1, "bf16", reduce_bucket_size=10000, overlap_comm=True), 2, False,
     parity.TINY, {"linear": True}),
    # issue 15: ZeRO-2 with CPU optimizer offload and overlap_comm, gradients over the bucket (10,000 <
    # l1.weight's 19,264 / l2.weight's 23,177 elements), real Linears, at GA 2. overlap_comm adds the second ipg
    # buffer and changes no storage of the offload reduce (state.zero12_offload_flush_modeled): before the flush
    # replay took it (2026-12-05) rank 1's boundary backward:2 / backward:4 were +39,194 / +39,198 B (5.6% / 4.5%),
    # l1.bias's flush of l2.weight's clone with l1.weight's gradient whole (u of state.zero12_offload_reduce_terms);
    # at GA 1 the same +39,194 B (6.0%) in backward:1/2, and at reduce_bucket_size 50,000 every phase matched.
    # GA 2 under offload (with or without overlap_comm): micro-step 1's reduce makes the host buffers of
    # async_accumulate_grad_in_cpu_via_gpu and neither norms nor clears (state.zero12_offload_microstep_terms);
    # before, the ledger held those I_r x D from initialize (initialize / forward:1 -85,484 B rank 0, -47,288 B
    # rank 1, 17.8% / 10.7%) and the boundary's fp64 norm moment at micro-step 1 (backward:1 -107,726 / -131,130 B).
    # Every phase within 0.16% on both ranks in 2 runs, as were z2_bf16_oo_cpu_tbsga2_w2, its bigtensor twin and its
    # overlap_comm twin (one probe run each)
    ("z2_bf16_oo_cpu_overlap_bigtensor_tbsga2_w2",
     {**_cfg(2, "bf16", reduce_bucket_size=10000, overlap_comm=True, offload_optimizer={"device": "cpu"}),
      "train_batch_size": 4}, 2, False, parity.TINY, {"linear": True, "steps": 4}),
    # issue 15: contiguous_gradients off with overlap_comm (ZeRO-2): a gradient outside the rank's slice waits in
    # previous_reduced_grads until the next flush's allreduce_and_copy (state._zero12_noncontig_transients).
    # NORM_LIFE at reduce_bucket_size 15,000: flushes [m10, m9, m8] [m7, m6, m5] [m4, m3, m2] [m1] [m0]; flush
    # [m1] (one gradient, no flat copy) opens holding m4 on rank 0 / m2 on rank 1 (4,900 x 2 B). 2026-12-05 in one
    # launch: backward:1 engine 355,238 / 414,038 B (ranks 0 / 1), the same config without overlap_comm 345,438 /
    # 404,238 B (+9,800 B, 2.8%: the ledger without the overlap term); before (coarse lifetimes, TINY at 10,000)
    # rank 1 was +39,764 B (18.1%). Every phase within 0.03% on both ranks
    ("z2_bf16_noncontig_overlap_normlife_w2", _cfg(2, "bf16", contiguous_gradients=False, overlap_comm=True,
                                                   reduce_bucket_size=15000), 2, False, NORM_LIFE),
    # contiguous_gradients off at GA 2 with two param groups (issue 15). GA: micro-step 1's gradients meeting the
    # slice stay whole in all_grad_tensors after the epilogue drops param.grad, beside micro-step 2's (state
    # prev_grads_in_partition); on TINY (one group, 2026-12-05, 2 runs) before: forward:2 +85,540 / +47,344 B (ranks
    # 0 / 1, engine.py l.3428's kept gradients), backward:2 +172,868 / +172,862 B (those, the N x 2 B of new
    # gradients and their flat copy, allreduce_bucket l.2367), step:4 +24,512 / +39,488 B (get_grad_norm_direct
    # l.2684); every phase within 0.03% after. Groups (TINY_FROZEN_GROUPS at 10,000): the hooks fill one bucket
    # across groups and each group steps apart with its own whole gradients (no shared grads_in_partition:
    # timeline._group_bytes' shared, state._zero12_noncontig_transients' groups). Before (2026-12-06, this cell):
    # step:2 -38,496 / -39,098 B (13.6%, l1's gradients counted through group 0's update), step:4 +39,172 / +17,172 B
    # (no fp64 norm instant), backward:1 +2,030 B on rank 0 (1.2%); now every phase within 0.04% on both ranks, as
    # were its GA-1 twin and that twin with overlap_comm, and in fp32 (one probe run each)
    ("z2_bf16_noncontig_groups_tbsga2_w2", {**_cfg(2, "bf16", contiguous_gradients=False, reduce_bucket_size=10000),
                                            "train_batch_size": 4}, 2, False, parity.TINY_FROZEN_GROUPS, {"steps": 4}),
    # ZeRO-1 overlap_comm at GA 2 (issue 15): micro-step 1's hooks move nothing (l.2294), so its N x D param.grad and
    # both ipg buffers live into micro-step 2, whose hooks move the accumulated gradients in autograd's order, each
    # right after its new gradient is added (state.zero12_boundary_holds_all). Before (2026-12-05, the flat proxy at
    # reduce_bucket_size 50,000) the ledger kept the coarse lifetimes: forward:2 / forward:4 +286,474 B on both ranks
    # (setup_buckets l.3266 / l.3275's 2 x 100,000 B and engine.py l.3428's 86,418 B unattributed), backward:1
    # -85,446 B, backward:2 -40,022 B (rank 0), step:4 +24,512 / +39,488 B (no norm instant, l.2684); now every phase
    # within 0.05%. This cell (real Linears, several flushes, l1.weight / l2.weight over the bucket kept by their
    # non-owners) matched on its first run (every phase within 0.36%, the forward's 630 B proxy scalars)
    ("z1_bf16_overlap_tbsga2_bigtensor_w2", {**_cfg(1, "bf16", reduce_bucket_size=10000, overlap_comm=True),
                                             "train_batch_size": 4}, 2, False, parity.TINY,
     {"linear": True, "steps": 4}),
    # ZeRO-1 offload with several param groups (issue 15): a gradient over the bucket is cloned (l.1446) in the
    # epilogue loop whatever its group, and a rank owning none of it keeps the clone (l.2272-2274); each group has
    # its own partition. Before (2026-12-06) the clones were counted for one group only: backward:1/2 +64,444 /
    # +87,644 B (ranks 0 / 1, c's 80,000 B clone and the other group-0 clone unattributed); the same regime on
    # TINY_FROZEN_GROUPS (l1.weight's clone, both ranks owning part of it) was +38,564 B. Now every phase within
    # 0.01% on both ranks (2 runs), as is TINY_FROZEN_GROUPS (real Linears)
    ("z1_bf16_oo_cpu_xgroups_w2", _cfg(1, "bf16", reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
     2, False, XGROUPS),
    # ZeRO-1 overlap_comm under CPU offload (issue 15): the hooks reduce in autograd's order at the boundary
    # (l.2290), as ZeRO-2's, and only owners drop a clone (state.zero12_offload_flush_modeled). Before (2026-12-06)
    # backward:1/2 rank 0 +38,580 B (l1.weight's clone, l.1446), rank 1 +85,548 B (l2.weight's clone 46,354 B and
    # l1's gradients whole, engine.py l.3428, at l1.bias's flush); the same at reduce_bucket_size 50,000 (one flush)
    # matched either way. Now every phase within 0.16% (the forward's proxy scalars) on both ranks (2 runs)
    ("z1_bf16_overlap_oo_cpu_bigtensor_w2", _cfg(1, "bf16", reduce_bucket_size=10000, overlap_comm=True,
                                                 offload_optimizer={"device": "cpu"}), 2, False, parity.TINY,
     {"linear": True}),
    # the same at GA 2 (issue 15): the boundary's hooks meet every param.grad micro-step 1 left
    # (state.zero12_boundary_holds_all), in hook order, and the trigger's autograd sibling is made whole beside its
    # own old param.grad. Before (2026-12-06, state.zero12_offload_flush_modeled False here) backward:2/4 rank 0
    # +38,578 B (l1.weight's clone, stage_1_and_2.py l.1446), rank 1 +124,076 B (l2.weight's clone 46,354 B and
    # 77,662 B of gradients, engine.py l.3428, at l2.weight's flush's fp64 norm copy, l.1886); replaying the flushes
    # with ZeRO-2's hook moment (2 x clone in micro-step 1) put backward:1 +92,708 B over. Now every phase within
    # 0.16% (the forward's proxy scalars) on both ranks
    ("z1_bf16_overlap_oo_cpu_tbsga2_bigtensor_w2", {**_cfg(1, "bf16", reduce_bucket_size=10000, overlap_comm=True,
                                                          offload_optimizer={"device": "cpu"}),
                                                   "train_batch_size": 4}, 2, False, parity.TINY,
     {"linear": True, "steps": 4}),
    # ZeRO-1 without contiguous_gradients (issue 15): every gradient whole to the step beside each flush's flat
    # copy (state.zero12_backward_transients); before, the coarse lifetimes (UNMATCHED_ISSUE15's note)
    ("z1_bf16_noncontig_smallbucket_w2", _cfg(1, "bf16", contiguous_gradients=False, reduce_bucket_size=10000), 2,
     False, parity.TINY, {"linear": True}),
    # the same at GA 2 (issue 15): micro-step 1 reduces nothing (engine.py l.3088-3092) and has no ipg buffer (l.3260),
    # so its N x D param.grad live into micro-step 2 (state lp_grads_accumulated), whose epilogue walks them,
    # accumulated, as GA 1's. Before (2026-12-06, coarse lifetimes) forward:2 +86,474 B (engine.py l.3428's kept
    # gradients), backward:1 -85,446 / -47,256 B (ranks 0 / 1), backward:2 rank 1 +39,156 B, step:4 +24,512 / +39,488 B
    # (no fp64 norm instant, l.2684); now every phase within 0.03% on both ranks (2 runs; fp16 the same, one probe)
    ("z1_bf16_noncontig_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False), "train_batch_size": 4}, 2, False,
     parity.TINY, {"steps": 4}),
    # and with two param groups (TINY_FROZEN_GROUPS at 10,000, real Linears): the epilogue walks group 0 then group 1
    # into one bucket (l.971-976), l1.weight alone, then l1.bias + l3 flattened; each group steps apart. Before
    # (coarse; the flat proxy, 2026-12-06) forward:2 +39,966 B, backward:1 -39,260 / -39,882 B, step:4 +39,172 /
    # +17,172 B; now every phase within 0.51% on both ranks (2 runs; the forward's 636 B are the proxy's F.linear
    # inputs, worker.py l.608), as is its GA-1 twin (one probe run)
    # ZeRO-1 without contiguous_gradients under CPU optimizer offload (issue 15): DeepSpeed forces contiguous_gradients
    # on there (stage_1_and_2.py l.299-300, ``contiguous_gradients or self.cpu_offload``), so it is the contiguous
    # offload reduce: the ipg bucket, the boundary epilogue's flushes with the clone of a gradient over the bucket
    # (l.1446), kept by a rank owning none of it (l.2272-2274), and the fp64 norm copies (l.1886)
    # (EffectiveConfig.contiguous_gradients_effective). Before (2026-12-06, the ledger took the written false: no flush
    # replay) backward:2 / backward:4 +86,454 / +86,458 B on rank 0 (l1.weight's clone 38,528 B, l.1446, and
    # 47,890 B of gradients, engine.py l.3428), +85,852 / +85,856 B on rank 1 (both clones, 84,882 B); now every phase
    # within 0.16% (the forward's proxy scalars) on both ranks (3 runs). Its GA-1 twin was backward:1/2 +86,454 /
    # +85,852 B (ranks 0 / 1) before and matched after (one probe run), as did GA 1 with communication_data_type fp32
    ("z1_bf16_noncontig_oo_cpu_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False, reduce_bucket_size=10000,
                                                   offload_optimizer={"device": "cpu"}), "train_batch_size": 4}, 2,
     False, parity.TINY, {"linear": True, "steps": 4}),
    # the same with grad_accum_dtype fp32 (state.zero12_offload_fp32_accum): param.grad_accum in fp32 from each hook
    # (l.1237) kept across micro-steps, the fp32 ipg bucket, the boundary's fp32 clones (l.1446), the compact fp32
    # partition (l.1270) through the step, and the grad_accum the rank does not own left to the step (l.2272-2274).
    # Before (2026-12-06, the reduce in bf16, UNMATCHED_ISSUE15) rank 0 (rank 1): backward:1 +124,978 (+124,978) 24.0%,
    # forward:2 +87,050, backward:2 +172,878 (+172,276), step:2 +126,476 (+203,540, 35.8%), forward:4 +87,054,
    # backward:4 +172,882 (+172,280), step:4 +126,496 (+203,560); now every phase within 0.16% on both ranks (2 runs)
    ("z1_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False,
                                                            reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
                                                     "train_batch_size": 4, "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # ZeRO-2 in the same regime (state.zero12_offload_compact): 16-bit gradients reduced in the hooks, the rank's slices
    # cast to fp32 (l.1326) and added into the compact fp32 partition (l.1270), which accumulates on the accelerator
    # across micro-steps (copy_grads_in_partition's offload branch only records the parameter before the boundary,
    # l.2145-2161: no host buffer). Before (2026-12-06, one probe run, the host-buffer model and no partition)
    # backward:1 +78,024 / +132,140 B on ranks 0 / 1 (22.6%), later phases rank 1 +39,2xx B (6.4%); its GA-1 twin
    # +86,476-86,504 B from backward on (a probe, matched after). Now every phase within 0.16% on both ranks (2 runs)
    ("z2_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2", {**_cfg(2, "bf16", contiguous_gradients=False,
                                                            reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
                                                     "train_batch_size": 4, "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # the two above with overlap_comm (issue 15; the HF/accelerate sample configs turn it on). ZeRO-1: the boundary's
    # hooks reduce in autograd's order (l.2290 -> l.2294), so l1.bias's hook flushes l2.weight's fp32 clone (l.1446)
    # with its fp32 flat copy (allreduce_bucket l.2367, 92,708 B) and bf16 cast (l.2377, 46,354 B) beside l1's
    # unmoved grad_accum (78,260 B) and l1.weight's 16-bit gradient (engine.py l.3428, 38,528 B). Before (2026-12-06,
    # 2 runs, the same bytes) rank 0 (rank 1): backward:1 +124,978 (+124,978), forward:2 +87,050, backward:2 +242,374
    # (+171,972) 36.3%, step:2 +126,476 (+203,540), i.e. the overlap-off cell's residuals but the boundary's; with
    # the overlap-off terms backward:2 +84,238 (-38,464: the sibling counted at 4 B). ZeRO-2: the overlap-off cell's
    # residuals to the byte before (only the second ipg buffer differs). Now every phase within 0.16% on both ranks
    # (2 runs); their GA-1 twins (probe, 1 run) too (state.zero12_offload_fp32_accum_hooks A1o)
    ("z1_bf16_noncontig_oo_cpu_gaccfp32_overlap_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False,
                                                                    reduce_bucket_size=10000, overlap_comm=True,
                                                                    offload_optimizer={"device": "cpu"}),
                                                             "train_batch_size": 4,
                                                             "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    ("z2_bf16_noncontig_oo_cpu_gaccfp32_overlap_tbsga2_w2", {**_cfg(2, "bf16", contiguous_gradients=False,
                                                                    reduce_bucket_size=10000, overlap_comm=True,
                                                                    offload_optimizer={"device": "cpu"}),
                                                             "train_batch_size": 4,
                                                             "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # ZeRO-2's with two param groups (TINY_FROZEN_GROUPS, real Linears; issue 15: every HF Trainer run has the weight
    # decay groups): one compact fp32 buffer per group, made at the rank's first flush holding a slice of that group
    # (l.1303-1310; state._compact_groups_microstep_value). Before (2026-12-06, 2 runs, the same bytes, a lower bound
    # then) backward:1 +78,314 / +76,486 B (21.7%) on ranks 0 / 1: one group's buffer 39,920 B (l.1270) and the fp32
    # cast of the rank's slice 39,136 / 37,920 B (l.1326) at the epilogue's flush; the later phases within 0.4% already.
    # Now every phase within 0.4% (step:2 -0.40%, the one step instant for both groups)
    # ZeRO-1's (state.zero12_offload_fp32_accum, any param groups): the hooks' fp32 grad_accum copies run in autograd's
    # order across groups, both groups' compact partitions are made in the boundary reduce, and a rank keeps the fp32
    # ipg bucket to the step where any group's bucketed gradient misses its slice of that group (l.2272-2274): rank 0
    # here (l1.bias, l3.bias). Before (2026-12-06, 2 runs, the same bytes; the one-group terms, kept bytes 0 for
    # several groups) only step:2 / step:4 rank 0 +38,476 / +40,070 B (10.5%); as a lower bound (coarse) backward:2
    # +116,386 B (27.6%). Now every phase within 0.4%; overlap_comm and GA-1 twins (probes, 1 run) too
    ("z1_bf16_noncontig_oo_cpu_gaccfp32_groups_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False,
                                                                   reduce_bucket_size=10000,
                                                                   offload_optimizer={"device": "cpu"}),
                                                            "train_batch_size": 4,
                                                            "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY_FROZEN_GROUPS, {"linear": True, "steps": 4}),
    ("z2_bf16_noncontig_oo_cpu_gaccfp32_groups_tbsga2_w2", {**_cfg(2, "bf16", contiguous_gradients=False,
                                                                   reduce_bucket_size=10000,
                                                                   offload_optimizer={"device": "cpu"}),
                                                            "train_batch_size": 4,
                                                            "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY_FROZEN_GROUPS, {"linear": True, "steps": 4}),
    # issue 15's last two lower-bound regimes (M104). An fp16 model in the same regime (state.zero12_offload_fp32_accum /
    # zero12_offload_compact take fp16: use_grad_accum_attribute l.397-404 and _use_compact_grad_partition_buffer
    # l.1259-1266 ask only for an accumulation dtype unlike the model's; the loss scaler and the offload overflow check,
    # runtime/utils.py has_inf_or_nan l.228, hold scalars). Before (2026-12-06, 2 runs, the same bytes; a lower bound)
    # the bf16 cell's coarse residuals to the byte: rank 0 (rank 1) backward:1 +124,978 (+124,978), forward:2 +87,050,
    # backward:2 +172,878 (+172,276), step:2 +126,476 (+203,540) 35.8%; now every phase within 0.16% on both ranks (2
    # probe runs and this cell), as its ZeRO-2 twin and the GA-1 twins of both (probes)
    ("z1_fp16_noncontig_oo_cpu_gaccfp32_tbsga2_w2", {**_cfg(1, "fp16", contiguous_gradients=False,
                                                            reduce_bucket_size=10000, offload_optimizer={"device": "cpu"}),
                                                     "train_batch_size": 4, "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # ZeRO-2 with a communication_data_type unlike the model's: allreduce_bucket casts each run to it (l.2376-2377;
    # fp16 on bf16 too, a copy of the same bytes: state.zero12_comm_cast_bytes compares dtypes) and returns the cast,
    # so the flat copy is freed (l.2391-2393) before the slice's fp32 cast (l.1326; none with fp32 communication).
    # Before (2026-12-06, 2 runs, the same bytes; a lower bound) rank 0 / 1 backward:1 +116,552 / +132,140 B (22.6%),
    # later phases rank 1 +39,2xx B; with the bf16 terms rank 0 +38,556 B (l1.weight's fp16 cast, 19,264 x 2 B, compared
    # by bytes). Now every phase within 0.16% on both ranks; fp32 communication (coarse +86,456 / +85,522 B, then
    # -14,416 / -84,512 B with the slice cast counted) and the GA-1 twins in probes (2 runs) too
    ("z2_bf16_noncontig_oo_cpu_gaccfp32_commfp16_tbsga2_w2", {**_cfg(2, "bf16", contiguous_gradients=False,
                                                                     reduce_bucket_size=10000,
                                                                     offload_optimizer={"device": "cpu"}),
                                                              "train_batch_size": 4, "communication_data_type": "fp16",
                                                              "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # a 16-bit grad_accum_dtype unlike the model's under CPU offload (issue 15; a lower bound before, M104). ZeRO-1 keeps
    # param.grad_accum in it (l.397-404, l.1237) with no compact partition (l.1260-1262: fp32 only):
    # state.zero12_offload_fp32_accum's terms in G = 2 bytes. Before (2026-12-06, model-dtype terms, 2 probe runs, the
    # same bytes) backward:1 +38,560 B on both ranks (l1.weight's hook copy, l.1237), step:2 / step:4 +20,052 / +58,588 B
    # on ranks 0 / 1 (10.3%: the 16-bit ipg bucket, l.3266, and rank 1's l1.weight clone, l.1446, kept by grad_accum
    # to the step); now every phase within 0.16% (2 probe runs), as at GA 1 and 3, with overlap_comm (GA 1 and 2), fp32
    # communication, an fp16 model with bf16 accumulation and two param groups (0.24%) in probes. ZeRO-2 never reads
    # a 16-bit one (state.zero12_offload_grad_accum_unused): the model-dtype terms matched within 0.16% (probes: GA 1
    # and 2, overlap_comm, fp32 communication, fp16 with bf16)
    ("z1_bf16_oo_cpu_gaccfp16_tbsga2_w2", {**_cfg(1, "bf16", overlap_comm=False, reduce_bucket_size=10000,
                                                  offload_optimizer={"device": "cpu"}),
                                           "train_batch_size": 4, "data_types": {"grad_accum_dtype": "fp16"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # an fp32 model with grad_accum_dtype bf16 under CPU offload (issue 15; a lower bound before, M104): ZeRO-1 keeps
    # param.grad_accum in bf16 (l.397-404, l.1237) beside the hooks' fp32 gradients, the ipg bucket in bf16
    # (l.1253-1254, l.3266: RBS x 2): state.zero12_offload_fp32_accum's terms with D = 4, G = 2. Before (2026-12-06,
    # model-dtype terms, 2 probe runs, the same bytes) every phase from backward:1 on up to 105,166 B (12.7%) over the
    # engine (N x 4 counted where grad_accum holds N x 2) and step:2 / step:4 +20,068 / +58,604 B under (the bf16 bucket,
    # rank 1's bf16 clone of l1.weight kept to the step); now every phase within 0.20% (2 probe runs), as with fp16
    # accumulation, overlap_comm and at GA 1 in probes. ZeRO-2 never reads it (state.zero12_offload_grad_accum_unused:
    # the model-dtype terms, within 0.20% in 2 probe runs)
    ("z1_fp32_oo_cpu_gaccbf16_tbsga2_w2", {**_cfg(1, "fp32", overlap_comm=False, reduce_bucket_size=10000,
                                                  offload_optimizer={"device": "cpu"}),
                                           "train_batch_size": 4, "data_types": {"grad_accum_dtype": "bf16"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # ZeRO-1 on fp16 with grad_accum_dtype fp32 without offload (issue 15, M104's last lower bound with
    # contiguous_gradients on): the hooks keep param.grad_accum in fp32 (l.1237) beside the fp32 ipg bucket (l.3266)
    # across micro-steps; the boundary's epilogue flushes 4-byte gradients (flat copy l.2367, fp16 cast l.2377) into
    # the compact fp32 partition (l.1270, the slice's copy l.1326), and the gradients a rank does not own keep their
    # grad_accum to the step's norm (l.2272-2274, freed at l.2898-2901): state.zero1_compact_grad_accum. Before
    # (2026-12-06, coarse lifetimes, probe runs, the same bytes): forward:2 +213,472 B (123.5%), backward:2 +202,974 /
    # +263,438 B on ranks 0 / 1, step:2 +21,296 / +113,328 B, step:4 +65,452 / +195,674 B
    ("z1_fp16_gaccfp32_tbsga2_w2", {**_cfg(1, "fp16", overlap_comm=False, reduce_bucket_size=10000),
                                    "train_batch_size": 4, "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, parity.TINY, {"linear": True, "steps": 4}),
    # the same with the HF Trainer's two param groups (TINY_DECAY_GROUPS; issue 15): the epilogue walks group 0 then
    # group 1, each group's compact fp32 partition made at the rank's first flush of it (l.1303-1310;
    # state._zero12_compact_groups_transients with keep_unowned: rank 1 keeps l1.weight's fp32 grad_accum, which rank 0
    # owns), and the step frees each group's unowned grad_accum at its own turn (l.3103), so rank 0's first update of
    # group 0 runs beside the fp32 ipg bucket group 1's l2.bias / l3.bias keep (kept_grad_accum_later_groups). Before
    # (2026-12-06, probe run, the same bytes): as a lower bound (coarse) forward:2 +213,472 B (123.5%), backward:2
    # +202,206 / +263,272 B on ranks 0 / 1, step:4 +66,604 / +155,352 B; with the groups' compact walk but the kept
    # grad_accum to the norm only, step:2 rank 0 +17,232 B (3.8%: the bucket at the update); now every phase within 0.37%
    ("z1_fp16_gaccfp32_groups_tbsga2_w2", {**_cfg(1, "fp16", overlap_comm=False, reduce_bucket_size=10000),
                                           "train_batch_size": 4, "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, TINY_DECAY_GROUPS, {"linear": True, "steps": 4}),
    # and with overlap_comm (issue 15; HF / DeepSpeed example configs set it): the boundary's hooks move each fp32
    # grad_accum into one of the two fp32 ipg buffers (l.3266, l.3275) in autograd's order (process_gradients
    # l.2285-2291 -> l.1422), every grad_accum of micro-step 1 live when they start (state.zero12_boundary_holds_all),
    # and a flush's trigger holds its sibling's new gradient in fp16, not 4 bytes (zero12_backward_transients' Ds).
    # Before (2026-12-06, probe run, this cell): as a lower bound (coarse) forward:2 +253,472 B (146.6%: both fp32
    # buffers and the grad_accum), backward:2 +262,348 / +300,704 B on ranks 0 / 1, step:4 +66,604 / +155,352 B; with
    # the sibling in 4 bytes, backward:2 -38,492 B (-5.3%, TINY one group); now every phase within 0.37%, also TINY one
    # group and GA 1 (probes; at GA 1 the kept grad_accum at the norm had no entry: step:2 +40,036 / +117,092 B)
    ("z1_fp16_gaccfp32_overlap_groups_tbsga2_w2", {**_cfg(1, "fp16", overlap_comm=True, reduce_bucket_size=10000),
                                                   "train_batch_size": 4, "data_types": {"grad_accum_dtype": "fp32"}},
     2, False, TINY_DECAY_GROUPS, {"linear": True, "steps": 4}),
    # ZeRO-2 without contiguous_gradients with communication_data_type fp32 (issue 15; a lower bound before, M104): each
    # flush also holds its run's fp32 cast beside its flat copy through the all-reduce (allreduce_bucket l.2376-2377;
    # state._zero12_noncontig_transients). Before (2026-12-06, coarse lifetimes, 2 probe runs, the same bytes):
    # backward:1 / 2 / 4 +92,744 B on rank 0, +131,868 B on rank 1 (l2.weight's cast 23,177 x 4 = 92,708 B at l.2377),
    # step:4 +24,512 / +39,488 B; now every phase within 0.37% (the forward's proxy inputs), as fp16 communication, an
    # fp16 model, overlap_comm, GA 1 and TINY_FROZEN_GROUPS (0.50%) with and without overlap_comm (probes)
    ("z2_bf16_noncontig_commfp32_tbsga2_w2", {**_cfg(2, "bf16", contiguous_gradients=False, reduce_bucket_size=10000),
                                              "train_batch_size": 4, "communication_data_type": "fp32"}, 2, False,
     parity.TINY, {"linear": True, "steps": 4}),
    ("z1_bf16_noncontig_groups_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False, reduce_bucket_size=10000),
                                            "train_batch_size": 4}, 2, False, parity.TINY_FROZEN_GROUPS,
     {"linear": True, "steps": 4}),
    # the same two with overlap_comm (issue 15): micro-step 1's hooks move nothing (l.2293-2295), the boundary's flush
    # in autograd's order (l.2290 -> l.1422) and no flush moves a gradient out of param.grad (l.2272). The new
    # gradients are added in place and freed before each hook (the tracker's event order), so backward:2 peaks at l2's
    # AddmmBackward0 outputs, (23,177 + 77) x 2 B, beside the accumulated 86,418 B, and a flush holds its flat copy
    # and its trigger's sibling (l1.weight's new 38,528 B at l1.bias's hook) beside them:
    # state.zero12_backward_transients. Before (coarse lifetimes, 2026-12-06): forward:2 +87,054 B, backward:1
    # -84,844 / -46,654 B (ranks 0 / 1), backward:2 rank 0 -38,778 B, step:4 +24,512 / +39,488 B; the groups cell
    # forward:2 +40,546 B, backward:1 -38,658 / -39,280 B, step:4 +39,172 / +17,172 B. Now every phase of both ranks
    # within 0.51% (2 runs each; the forward's 636 B of proxy inputs); probes within 0.51% at GA 3, in fp16 and fp32,
    # and the groups at GA 1
    ("z1_bf16_noncontig_overlap_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False, overlap_comm=True,
                                                    reduce_bucket_size=10000), "train_batch_size": 4}, 2, False,
     parity.TINY, {"linear": True, "steps": 4}),
    ("z1_bf16_noncontig_overlap_groups_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False, overlap_comm=True,
                                                           reduce_bucket_size=10000), "train_batch_size": 4}, 2,
     False, parity.TINY_FROZEN_GROUPS, {"linear": True, "steps": 4}),
    # the same with communication_data_type fp32 (issue 15; a lower bound before, M104): every flush also holds its
    # run's cast, allreduce_bucket l.2376-2377, through the all-reduce (state.zero12_backward_transients, by dtype:
    # zero12_comm_cast_bytes). Before (2026-12-06, one probe run): the coarse residuals above; with the flat copy alone
    # backward:2 / backward:4 +84,764 / +84,768 B on both ranks (l2.weight's fp32 cast, 23,177 x 4 = 92,708 B at
    # l.2377); now every phase of both ranks within 0.37% (the forward's proxy scalars), as without overlap_comm (was
    # +46,232 B), with fp16 communication, at GA 1 and on an fp16 model (probes)
    ("z1_bf16_noncontig_overlap_commfp32_tbsga2_w2", {**_cfg(1, "bf16", contiguous_gradients=False, overlap_comm=True,
                                                             reduce_bucket_size=10000), "train_batch_size": 4,
                                                      "communication_data_type": "fp32"}, 2, False,
     parity.TINY, {"linear": True, "steps": 4}),
    # bf16 with fp32 gradient accumulation at ZeRO-1 (issue 15; "data_types": {"grad_accum_dtype": "fp32"}):
    # DeepSpeed picks BF16_Optimizer (engine.py _do_optimizer_sanity_check l.2305-2310). Every micro-step's
    # backward_epilogue adds each param.grad into the fp32 buffer through lp.grad.to(fp32) (bf16_optimizer.py l.523)
    # beside every 16-bit gradient; before the boundary param.grad is zeroed, not freed (clear_lp_grads l.612-623);
    # at the boundary the groups' fp32 buffers are all-reduced in one bucket, flattened (a copy for several) and cast
    # to communication_data_type (bf16 by default; engine.py allreduce_bucket l.3796-3801):
    # state.bf16_optimizer_epilogue_terms. Before (2026-12-06, coarse lifetimes): every backward +92,736 B on both
    # ranks (21.5%: l2.weight's fp32 copy, 23,177 x 4 B), forward:2 / forward:4 +86,474 / +86,478 B (micro-step 1's
    # param.grad); the two-group cell's boundary holds the cat of both buffers and its bf16 cast, (19,568 + 392) x
    # 6 B, 42,704 B over the cast moment (13.2% without it). Now every phase within 0.03% on both ranks (2 runs),
    # as were the same at GA 1, with communication_data_type fp32 (no cast) and on NORM_LIFE (one buffer's bf16
    # cast, 138,000 B, over m0's 80,000 B fp32 copy), one probe run each
    ("z1_bf16_gaccfp32_tbsga2_w2", {**_cfg(1, "bf16"), "data_types": {"grad_accum_dtype": "fp32"}, "train_batch_size": 4},
     2, False, parity.TINY, {"steps": 4}),
    ("z1_bf16_gaccfp32_groups_w2", {**_cfg(1, "bf16"), "data_types": {"grad_accum_dtype": "fp32"}}, 2, False,
     parity.TINY_FROZEN_GROUPS),
    # the same BF16_Optimizer with bf16.immediate_grad_update at GA 2 (issue 15): each post-accumulate hook adds its
    # gradient's fp32 copy into the fp32 buffer and sets param.grad = None (bf16_optimizer.py
    # accumulate_hp_grads_and_remove_lp l.707-715), so no 16-bit gradient outlives its hook: the cast moment is one
    # gradient and its copy, in backward (state.bf16_optimizer_epilogue_terms). bf15's probe (2026-12-06, one run):
    # with the epilogue model every step and forward:2 were 86,3xx B (14-20%) over and backward 40,028 B (7.6%) over.
    # As a cell (2026-12-06, 3 runs): every phase of both ranks within 0.02% (backward:4 engine 657,646 B, ledger
    # 657,606 B; the rest the worker's scalars)
    ("z1_bf16_gaccfp32_igu_tbsga2_w2", {**_cfg(1, "bf16"), "bf16": {"enabled": True, "immediate_grad_update": True},
                                       "data_types": {"grad_accum_dtype": "fp32"}, "train_batch_size": 4},
     2, False, parity.TINY, {"steps": 4}),
    # ZeRO-2 on a bf16 model with communication_data_type fp32 (issue 15), several flushes (reduce_bucket_size 10,000):
    # each flush's run is flattened (a copy for several slices, a view for one) and cast to fp32 beside it
    # (stage_1_and_2.py allreduce_bucket l.2367 / l.2376-2377; state._zero12_flush_replay's copies). bf15's probe at
    # reduce_bucket_size 50,000 with the coarse lifetimes (2026-12-06): backward:1 +173,802 / +211,992 B (ranks 0 / 1),
    # step:2 +24,512 / +39,488 B (no fp64 norm instant, get_grad_norm_direct l.2684). Real Linears, as
    # z2_bf16_linear_smallbucket_w2: the ledger takes l1.weight / l1.bias as one AddmmBackward0's pair
    # (state.autograd_siblings); on the flat proxy (one MeanBackward0 per parameter) backward:1 was -23,446 / -38,488 B
    # (ranks 0 / 1), the same -38,488 B as the flat proxy without the fp32 cast (2026-12-06, one launch): the proxy's,
    # not the cast's. As a cell (2026-12-06, 3 runs): every phase of both ranks within 0.01% but the forward's proxy
    # F.linear inputs (+636 B, 0.37%); backward:2 engine 590,282 / 637,570 B, ledger 590,242 / 637,530 B
    ("z2_bf16_commfp32_w2", {**_cfg(2, "bf16", reduce_bucket_size=10000), "communication_data_type": "fp32"}, 2, False,
     parity.TINY, {"linear": True}),
    # bf16 with grad_accum_dtype fp32 at ZeRO-2 (issue 15): DeepSpeedZeroOptimizer's compact fp32 gradient partition
    # (state.zero12_compact_grad_buffer: stage_1_and_2.py _use_compact_grad_partition_buffer l.1259-1266): no
    # grads_in_partition; the rank's P x 4 buffer is made inside its first flush (l.1268-1274) and kept across
    # micro-steps to the step (l.3131); each reduced slice of the rank is cast to fp32 as it is added (l.1326) beside
    # the flush's flat copy (l.2367). Before (2026-12-06, coarse lifetimes, 2 runs): backward:1/2/4 +163,506 / +170,994 B
    # on ranks 0 / 1 (the flat copy 86,418 B + the cast of l1.weight, 19,264 x 4 B, / of rank 1's part of l2.weight,
    # 21,136 x 4 B), forward:2 / forward:4 +86,480 B (the kept buffer), step:4 +154,148 / +169,124 B (the fp64 norm
    # copy of that slice, get_grad_norm_direct l.2684); now every phase within 0.03% on both ranks (4 runs); probes
    # at reduce_bucket_size 10,000 with real Linears (W 2 GA 2, W 4 GA 1; one run each) within 0.01% in backward:
    # an extra-large gradient the rank owns part of stays whole to the epilogue's end (l.2179-2182), and its
    # slices' runs are flattened one by one (state._xl_runs)
    ("z2_bf16_gaccfp32_tbsga2_w2", {**_cfg(2, "bf16"), "data_types": {"grad_accum_dtype": "fp32"},
                                    "train_batch_size": 4}, 2, False, parity.TINY, {"steps": 4}),
    # the same with overlap_comm (the HF / accelerate sample configs turn it on): the regime's storages unchanged but
    # for the second ipg buffer (setup_buckets l.3272-3278, 50,000 x 2 B); the flush is the same code on
    # reduction_stream, None on CPU (l.599). With the coarse lifetimes (2026-12-06, 2 runs, the same bytes):
    # backward:1/2/4 +163,506 / +170,994 B on ranks 0 / 1, forward:2 / forward:4 +86,480 B, step:4 +154,148 / +169,124 B,
    # the no-overlap cell's figures before it was modelled; now every phase within 0.03% (engine backward:1
    # 622,778 / 630,266 B, the no-overlap cell's + 100,000 B)
    ("z2_bf16_gaccfp32_overlap_tbsga2_w2", {**_cfg(2, "bf16", overlap_comm=True),
                                            "data_types": {"grad_accum_dtype": "fp32"}, "train_batch_size": 4},
     2, False, parity.TINY, {"steps": 4}),
    # the same regime with two param groups (TINY_FROZEN_GROUPS at reduce_bucket_size 10,000: l1.weight over the
    # bucket, alone in the epilogue's flush): one compact buffer per group, each made at the rank's first flush holding
    # a slice of that group (state._zero12_compact_groups_transients). With the coarse lifetimes (2026-12-06, 2 runs
    # with and without overlap_comm, the same bytes): backward:1/2/4 +116,224 / +115,008 B on ranks 0 / 1 (l1.weight's
    # autograd storage and flat copy, 38,528 B each, the fp32 cast of the rank's slice, both buffers), forward:2 /
    # forward:4 +39,976 B, step:4 +78,308 / +75,876 B (the fp64 norm copy); now every phase within 0.04%, but
    # step:2 (-752 B, -0.31%: the ledger's one step instant for both groups)
    ("z2_bf16_gaccfp32_groups_tbsga2_w2", {**_cfg(2, "bf16", reduce_bucket_size=10000),
                                           "data_types": {"grad_accum_dtype": "fp32"}, "train_batch_size": 4},
     2, False, parity.TINY_FROZEN_GROUPS, {"steps": 4}),
]


#: Phases that do not match yet, per cell, with the residual on rank 0 (engine - ledger, bytes)
#: and its cause from the tracker's allocation sites (DeepSpeed 0.19.8). The test checks they are
#: still off by more than 1% (strict: a fixed phase must be taken off this list) and that every
#: other phase matches within 1%.
#: The zero.Init cells' training phases all match: forward:1 (state.zero3_first_fetch_bytes: the first
#: forward's per-module fetch, the earlier modules released by release_sub_module while the trace is
#: incomplete), backward:1 / backward:2 (the reduce-scatter's flat buffer,
#: state.zero3_reduce_flush_bytes, and the first backward's per-module release; gloo's own
#: reduce-scatter buffer, measure.CPU_ONLY_SITES, is taken off the engine side: the ledger models
#: NCCL), step:1 / step:2 (stage3.py step -> _partition_all_parameters releases the persistent
#: parameters until _post_step gathers them again, timeline instant ``:post``; the 16-bit flatten
#: beside its fp32 cast at prep, state zero3_grad_flat_copy).
UNMATCHED_ZINIT: dict = {}
#: ZeRO-3 with non-persistent parameters: every phase matches since the ledger replays DeepSpeed's
#: fetch/prefetch/release (state.zero3_fetch_replay; before it, forward:1 -39,881 B, backward:1
#: -47,087 B, forward:2 +86,299 B, backward:2 -40,799 B). forward:1: one module at a time, l2's flat
#: buffer 46,512 B + its torch.cat copies 46,508 B; backward:1: the epilogue's flush (86,428 B) with l1
#: (the first module, whose post-backward hook never fires) still gathered, 39,130 B; forward:2: the
#: root module's prefetch of all four non-persistent parameters in one coalesced all-gather, its flat
#: buffer 86,260 B live while AllGatherCoalescedHandle.wait cats all four out of it (86,254 B);
#: backward:2: l2.weight's gradient arriving whole (46,354 B) with l1 and l2.weight gathered (85,484 B),
#: l3 released after its backward.
UNMATCHED_NONPERSIST: dict = {}
#: Real biased Linears at ZeRO-3 (z3_bf16_linear_smallbucket_w2): the first backward was engine
#: 332,273 B, ledger 325,298 B (+6,975 B) on both ranks in every run. The tracker's live storages at
#: the high-water mark without gloo's buffer (2026-12-05, rank 0 and 1 alike) and its allocation
#: log: l3.weight, l3.bias, l2.weight, l2.bias, l1.weight, l1.bias (LinearFunctionForZeroStage3's
#: weight hook before its bias's); l2.bias's arrival flushes l2.weight alone (23,177 + 77 > 10,000,
#: stage3.py l. 1583): reduce_scatter_coalesced's flat buffer 46,356 + l2.weight whole 46,354
#: (linear.py l.134) + l2.bias 154 (l.141) + l2 gathered 46,508 (AllGatherCoalescedHandle.wait's
#: torch.cat) = 139,372 B, where the ledger (bias first) put l2.weight's flush at l1.bias's arrival,
#: l1 gathered: 46,356 + 46,354 + 602 + 39,130 = 132,442 B; the other 45 B are scalars (the loss,
#: its scale, the worker's 16 B input), as in every phase. Autograd's order and DeepSpeed's bucket, not gloo: a GPU makes the same
#: moment; gloo's own buffer (46,356 B) was already outside (cpu_only). Now modelled
#: (state.zero3_linear_pairs): ledger 332,228 B.
UNMATCHED_LINEAR: dict = {}
#: Issue 15's cells (2026-12-05, 3 runs each, the same bytes every run, the 24-52 B scalars aside). The
#: residual is rank 0's; the cause is the tracker's unattributed allocation sites at the phase's high-water mark.
#: z3_fp32_nonpersist_w2 matches in every phase (the newcomer's step:1 -15.8% / step:2 +15.8% did not
#: reproduce); only its first backward is in RACY, as z3_fp32_zinit_w2's. z0_bf16_w2's step:1/step:2 were
#: +172,860 B (fused_optimizer.py l.287's per-parameter fp32 copies), now state fp32_grad_copies.
#: z1_bf16_noncontig_smallbucket_w2 (ZeRO-1 without contiguous_gradients, 2026-12-06) was here with the coarse
#: lifetimes: backward:1/2 -84,518 / -84,514 B on rank 0 (-24.5% / -16.3%) and -46,328 / -46,324 B on rank 1, step:2
#: +24,512 / +39,488 B (the fp64 norm copy, l.2684, missing). Its epilogue (reduce_gradients l.971-976) puts each
#: gradient in the bucket by reference and a ZeRO-1 flush copies nothing into a partition (l.2272), so every
#: 16-bit gradient (N x D = 86,418 B, engine.py l.3428) stays whole to the step beside the largest flush's flat copy
#: (allreduce_bucket l.2367: 934 B here; a bucket of one tensor is flattened as a view). Now
#: state.zero12_backward_transients models it at GA 1 with one param group: every phase within 1% on both ranks.
#: At GA > 1 and with several param groups (without overlap_comm) it matches too: z1_bf16_noncontig_tbsga2_w2 and
#: z1_bf16_noncontig_groups_tbsga2_w2, their coarse residuals in their notes. With overlap_comm at GA > 1 too:
#: z1_bf16_noncontig_overlap_tbsga2_w2 and z1_bf16_noncontig_overlap_groups_tbsga2_w2, their coarse residuals in their
#: notes. The earlier probe's reading of the no-overlap model's backward:2/4 +45,772 / +45,776 B (l2.weight's new
#: gradient live as its hook flushes) was not what the engine does: the tracker's event order has that new gradient
#: freed (accumulated in place) before the hook's 934 B flat copy is made; the model then lacked the moment before it,
#: l2's AddmmBackward0 outputs beside the accumulated 86,418 B (state accumulate_grad_new was 0 on that path).
UNMATCHED_ISSUE15: dict = {}
#: z3_bf16_hpz2_w2 (ZeRO-3 hpZ, zero_hpz_partition_size = W = 2) was here: initialize:module +27,098 B (the secondary
#: partitions made beside the primary ones while Init(module=...) partitions in place, site _partition_param_sec:1915,
#: now timeline.zero3_module_partition_peak's h), forward:1 +6,617 B / backward:1 -47,255 B (the reference's gathered
#: rule in place of the fetch replay, which applies to hpZ: state.zero3_fetch_replay_applies), forward:2 / backward:2
#: -43,089 / -43,163 B (the secondaries kept through the steady iteration, which step frees, stage3.py l.2846:
#: timeline.hpz_secondary_live). Engine 2026-12-06, 2 runs, both ranks: every phase within 0.04%.
#: z0_bf16_torchadam_w2 was listed here (stage 0 FP16_UnfusedOptimizer with torch's AdamW, step:1/2 engine 1,050,844 B
#: vs ledger 864,204 B, +186,640): torch's single-tensor AdamW denom temporaries (torch/optim/adam.py l.544),
#: modelled since as state.torch_step_temporaries (the GPU's foreach figure in the ledger, the CPU's compared here).
#: Its initialize was compared at its end until the warm-up step's high-water mark, 1,050,824 B = end + 86,418 (16-bit
#: zero grads, unfused_optimizer.py l.415) + 172,836 (fp32 zero grads, l.421) + 186,620 (the step, l.425), was
#: modelled (timeline.unfused_optimizer_init_transients, instant initialize:optimizer_states).
#: z1_bf16_noncontig_oo_cpu_gaccfp32_tbsga2_w2 was listed here (ZeRO-1 bf16, grad_accum_dtype fp32, CPU optimizer
#: offload: +12-36% from backward:1 on with the reduce counted in bf16; the fp32 grad_accum copies l.1237, the compact
#: partition l.1270, rank 1's fp32 clone l.1446 and the ipg bucket kept by unowned grad_accum views at the step); it
#: matches since state.zero12_offload_fp32_accum models that regime (ZeRO-2's since state.zero12_offload_compact).
#: z2_fp32_w2 was listed here (backward:1/2 rank 1 +78,296 B, step:1 rank 0 +65,856 B, step:2 rank 0
#: +67,740 B, rank 1 +82,716 B): the ledger kept the lifetimes of plans without modeled transients for
#: fp32, so averaged_gradients ((I_r + P - Cov_r) x 4: 170,968 B on rank 0, 94,588 B on rank 1) stood in
#: backward for the bucket's flat copy (N x 4 = 172,836 B on both ranks: within 1% on rank 0 by chance,
#: not a rank-1-only buffer) and the step had no norm instant (averaged_gradients + the largest slice's
#: fp64 copy). Now state.zero12_transients_modeled takes fp32 too: every phase within 0.02% on both
#: ranks, and z1_fp32_w2 likewise (it was backward:1 -170,912 B, -21.3%, before).
#: Other regimes (issue 15), each with its residual and cause. z1_bf16_oo_cpu_tbsga2_w2 (ZeRO-1 + CPU
#: optimizer offload at GA 2) was here: initialize, forward:1, the boundary's backward and both steps
#: 85,484 B over (offload_accumulated_grads_cpu, never made at ZeRO-1), forward:2 / forward:4 +100,986 B
#: (micro-step 1's param.grad and ipg bucket) and backward:1 +86,452 B (micro-step 1's param.grad, before
#: any reduce: state lp_grads_first_microstep); now every phase within 0.02% on both ranks.
#: z1_bf16_oo_cpu_smallbucket_w4 (ZeRO-1 + CPU optimizer offload, reduce_bucket_size 10,000 < l1.weight's 19,264
#: and l2.weight's 23,177 elements, real Linears) was here (2026-12-05): backward:1/2 rank 0/1 +38,564 B, ranks
#: 2 / 3 +84,918 / +82,074 B. The hook clones a gradient over the bucket at ZeRO-1 too (stage_1_and_2.py
#: l.1444-1446, _offload_gradient_safety_enabled), and a rank owning no part of it never drops its clone in the
#: reduce (ZeRO-1's branch l.2272-2274 copies, and so clears, only the rank's own): ranks 2 and 3 held both
#: clones (84,882 B) beside l2.weight's fp64 norm copy. Now state.zero12_offload_xl_clone_modeled takes ZeRO-1
#: and _zero12_offload_reduce_runs carries the kept clones per rank: every phase within 0.22% on all four ranks
#: (the same mechanism without offload: z1_bf16_bigtensor_w2, state._zero12_kept_xl).
UNMATCHED_MORE: dict = {}
UNMATCHED = {**UNMATCHED_MORE, **UNMATCHED_ZINIT, **UNMATCHED_NONPERSIST, **UNMATCHED_LINEAR, **UNMATCHED_ISSUE15}


#: Phases where gloo's thread may hold a finished all-gather's buffer past the point DeepSpeed drops
#: it (seen in 2 of 5 runs: rank 1, z3_fp32_zinit_w2 backward:1, +27,693 B): in the first backward
#: each module is re-fetched (its persistent parameters were released, release_sub_module with an
#: incomplete trace), and the async all-gather's flat buffer (_all_gather_dtype l. 1343) can then
#: still be live while that module's gradients are made. On a GPU the handle's wait frees it
#: before the module's backward runs. Allowed over the ledger: at most that buffer, the largest
#: module's (l2: (ceil(23177/2) + ceil(77/2)) x 2 x D), and never under it.
RACY = {
    "z3_bf16_zinit_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # the same per-module re-fetch without zero.Init, since these cells measure the per-module proxy
    # (31fdb4a); seen in 2 of 5 runs under load: z3_bf16_w2 backward:1 +13,859 B on one rank
    "z3_bf16_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    "z3_bf16_oo_cpu_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # the same proxy with overlap_comm (issue 15; 2026-12-05, 3 runs beside other work: rank 0 backward:1
    # +13,859 B in 2, the bytes of z3_bf16_w2's race, which z3_bf16_w2 showed too in the run that had both)
    "z3_bf16_overlap_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # the same first backward at GA 2 (seen 2026-12-05 beside other work: rank 1 backward:1
    # +13,859 B; the run before matched within 0.02%)
    "z3_bf16_tbsga2_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    "z3_bf16_tbsga3_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # the same model with a 10,000-element reduce bucket (f3a21c7): seen once under load (a full run
    # beside other work, 2026-12-05): rank 0 backward:1 +6,975 B; 4 runs alone matched within 0.02%
    "z3_bf16_smallbucket_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # and at initialize's end: seen once in a clean-clone CI run (2026-12-05, rank 0, +9,801 B, all of it
    # one 4,900-element module's buffer from _allgather_params_sequential l. 2142, the end-of-initialize
    # gather of its one-parameter modules); the runs before it matched within 0.02%
    "z3_bf16_oo_cpu_normlife_w2": {"backward:1": (10000 * 2 * 2, "m0's flat all-gather buffer held by gloo"),
                                   "initialize": (10000 * 2 * 2, "a module's all-gather buffer held by gloo")},
    "z3_fp32_zinit_w2": {"backward:1": ((11589 + 39) * 2 * 4, "l2's flat all-gather buffer held by gloo")},
    # the same race without zero.Init (issue 15's cell): seen once in 3 runs, rank 0 backward:1 +27,693 B,
    # the same bytes as z3_fp32_zinit_w2's
    "z3_fp32_nonpersist_w2": {"backward:1": ((11589 + 39) * 2 * 4, "l2's flat all-gather buffer held by gloo")},
    # the same first-backward re-fetch of l2 (its phase is matched since state.zero3_linear_pairs)
    "z3_bf16_linear_smallbucket_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # the same race with non-persistent parameters (l2 re-fetched in the first backward): seen in ds-advisor
    # measure's runs of these shapes (tests/engine/test_measure_cli.py), backward:1 +13,859 B on either rank
    "z3_bf16_nonpersist_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # the NVMe cells with steps re-fetch l2 in their first backward the same way (non-persistent weights):
    # not seen in their 3 runs each (2026-12-05, all phases within 0.03%); the same bound, BIG's l2:
    # (ceil(1,060,899/2) + ceil(1,029/2)) x 2 x 2 B
    "z3_bf16_oo_nvme_w2": {"backward:1": ((530450 + 515) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    "z3_bf16_op_nvme_w2": {"backward:1": ((530450 + 515) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # the same first iteration (no trace yet, so no prefetch: containers and the prefetch bucket play no part);
    # seen 2026-12-05 on z3_bf16_nonpersist_containers_pb1000_w2 rank 1 backward:1 +13,859 B, the same figure
    "z3_bf16_nonpersist_containers_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    "z3_bf16_nonpersist_containers_pb1000_w2": {"backward:1": ((11589 + 39) * 2 * 2,
                                                               "l2's flat all-gather buffer held by gloo")},
    "z3_bf16_nonpersist_pb1000_w2": {"backward:1": ((11589 + 39) * 2 * 2, "l2's flat all-gather buffer held by gloo")},
    # W = 4: the same first-backward re-fetch of l2, its flat buffer (ceil(23177/4) + ceil(77/4)) x 4 x D.
    # Seen 2026-12-05 (the first run of the W = 4 cells, 2 cores shared with other work): z3_bf16_w4 rank 2
    # backward:1 engine 325,873 B, ledger 312,026 B (+13,847 B, the +13,859 B of the W = 2 race), the other
    # three ranks +63 B; every rank's peak with gloo's buffers was the same 398,537 B, only the mark
    # without gloo's reduce-scatter buffer (peak_excl_cpu_only) moved: a buffer outliving its moment
    "z3_bf16_w4": {"backward:1": ((5795 + 20) * 4 * 2, "l2's flat all-gather buffer held by gloo")},
    "z3_bf16_nonpersist_w4": {"backward:1": ((5795 + 20) * 4 * 2, "l2's flat all-gather buffer held by gloo")},
    # the same first-backward re-fetch as their W = 2 cells' (not seen at W = 4 in their 1 run each)
    "z3_bf16_oo_cpu_w4": {"backward:1": ((5795 + 20) * 4 * 2, "l2's flat all-gather buffer held by gloo")},
    "z3_bf16_zinit_w4": {"backward:1": ((5795 + 20) * 4 * 2, "l2's flat all-gather buffer held by gloo")},
    # ZeRO-1 at GA 3: seen once, in a clean-clone CI run (2026-12-07, beside a one-cell engine run of mine): rank 0
    # backward:6 (the steady boundary) engine 617,634 B, ledger 578,622 (+39,012 B), the unclaimed storage
    # allreduce_bucket's flat copy (stage_1_and_2.py l.2367, 86,418 B) live beside a buffer of the reduce before it;
    # alone the cell matched every phase within 1% in 2 runs (00:11, and after), the ledger the same as at d468af9.
    # Bounded by that flat copy (N x 2 B), one-sided, at both boundaries
    "z1_bf16_tbsga3_w2": {"backward:3": (43209 * 2, "allreduce_bucket's flat copy held by gloo"),
                          "backward:6": (43209 * 2, "allreduce_bucket's flat copy held by gloo")},
    # the same flat copy at ZeRO-2 + CPU optimizer offload, W 4: seen once in a clean-clone CI run (2026-12-07,
    # 03:19-04:03, beside a `duplicates` scan of the tree) at rank 0's steady backward (backward:2, GA 1):
    # engine 646,502 B, ledger 560,044 (+86,418 B = N x 2, unattributed site stage_1_and_2.py allreduce_bucket
    # l.2367); alone right after, 2 runs, every phase within 1%. Bounded by it, one-sided, at both boundaries
    "z2_bf16_oo_cpu_w4": {"backward:1": (43209 * 2, "allreduce_bucket's flat copy held by gloo"),
                          "backward:2": (43209 * 2, "allreduce_bucket's flat copy held by gloo")},
}
#: The first forward fetches module by module too, and the same buffer can outlive its module's
#: release while the next module is gathered. Seen in runs beside other work (2026-12-05): CI,
#: z3_bf16_oo_cpu_normlife_w2 rank 0 forward:1 +9,821 B (_all_gather_sequential's buffers: one
#: parameter per module, l. 1598); here, 1 run of 6 of the ZeRO-3 cells, a rank 1 forward:1 +39,169 B
#: (_all_gather_dtype l. 1343's flat buffer); alone, every run matched within 0.02%. The same bound
#: as backward's: the largest module's buffer, never under the ledger.
for _cid, _phases in RACY.items():
    _phases["forward:1"] = (_phases.get("backward:1", ((11589 + 39) * 2 * 2, ""))[0],
                            "a released module's all-gather buffer held by gloo")


#: The race is a property of gloo, not of a cell: every ZeRO-3 cell with W >= 2 fetches module by
#: module in its first iteration (no trace yet), so every one is exposed. Cells not listed above take
#: the same bound, computed from their inventory. Seen in the clean-clone CI of 2026-12-06 on two
#: cells not listed then: z3_bf16_nonpersist_calls_pb1000_w2 rank 1 and z3_bf16_nonpersist_seq_pb1000_w2
#: rank 0, backward:1 engine 412,273 B, ledger 398,414 B: +13,859 B, the figure of every W = 2 bf16
#: race above (unattributed 125,558 B at deepspeed/utils/nvtx.py wrapped_fn, the fetch); both had
#: matched within 1% in 2 runs each the session before. initialize's end gathers the persistent
#: parameters module by module the same way (seen once, z3_bf16_oo_cpu_normlife_w2's entry above).
for _c in CELLS:
    _z = _c[1]["zero_optimization"]
    if _z["stage"] == 3 and _c[2] >= 2 and _c[0] not in RACY:
        _d = 4 if not any(_c[1].get(k, {}).get("enabled") for k in ("bf16", "fp16")) else 2
        _b = parity.largest_gather_buffer(_c[4], _c[2], _d)
        RACY[_c[0]] = {ph: (_b, "the largest module's all-gather buffer held by gloo")
                       for ph in ("initialize", "forward:1", "backward:1")}
#: Parameters that are not persistent are re-fetched module by module in EVERY forward and backward, not only in
#: the first iteration: DeepSpeed 0.19.8 marks persistent only a parameter with ds_numel <=
#: stage3_param_persistence_threshold (runtime/zero/parameter_offload.py l. 325; default 1e5, runtime/zero/config.py
#: l. 228) and releases the others after each module's forward and backward, so gloo's hold on a finished
#: all-gather's flat buffer can fall in any micro-step. Seen in the clean-clone CI of 2026-12-06 (stop 36):
#: z3_fp32_nonpersist_w2 rank 1 backward:2 engine 977,553 B, ledger 896,152 B (+81,401 B, under l2's 93,024 B fp32
#: buffer); alone, 4 runs of that cell matched every phase within 0.2% (one of them with the +27,693 B first-backward
#: race). Those cells take the same one-sided bound, the largest module's buffer, in every forward:k / backward:k
#: ("forward:*", "backward:*": see race_bound).
for _c in CELLS:
    _z = _c[1]["zero_optimization"]
    _thr = _z.get("stage3_param_persistence_threshold", 100_000)
    if _z["stage"] == 3 and _c[2] >= 2 and any(math.prod(t["shape"]) > _thr for t in _c[4]["tensors"]):
        _d = 4 if not any(_c[1].get(k, {}).get("enabled") for k in ("bf16", "fp16")) else 2
        _b = parity.largest_gather_buffer(_c[4], _c[2], _d)
        for _ph in ("forward:*", "backward:*"):
            RACY[_c[0]].setdefault(_ph, (_b, "a non-persistent module's all-gather buffer held by gloo"))


#: Cells at GA >= 3 whose every middle micro-step (1 < m < GA, first iteration) must have a forward and a backward row
#: (compared with the timeline's forward:2 / backward:2, measure.phase_instants): without them a buffer that lives only
#: there would pass unseen. cell id -> GA.
MIDDLE_CELLS = {"z3_bf16_tbsga3_w2": 3, "z1_bf16_tbsga3_w2": 3, "z0_fp16_tbsga4_w2": 4, "z2_bf16_tbsga3_w2": 3,
                "z1_bf16_gaccfp32_tbsga3_w2": 3}


def race_bound(race: dict, phase: str) -> int:
    """Bytes a RACY entry ``race`` (one cell's) allows over the ledger in ``phase``: the phase's own entry,
    else its kind's ``forward:*`` / ``backward:*`` entry, else 0."""
    return (race.get(phase) or race.get(phase.split(":")[0] + ":*") or (0, ""))[0]


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    # only the cells this session selected (-k): one engine launch per world size among them
    chosen = {it.callspec.params["cell"][0] for it in request.session.items
              if getattr(it, "originalname", "") == "test_peak_parity" and hasattr(it, "callspec")}
    out = {}
    for W in sorted({c[2] for c in CELLS if c[0] in chosen}):
        cells = [{"id": c[0], "config": c[1], "inventory": c[4], "steps": 2, "track": True, "zero_init": c[3],
                  **(c[5] if len(c) > 5 else {})} for c in CELLS if c[2] == W and c[0] in chosen]
        for cr in run_measure_many(cells, W, workdir=str(tmp_path_factory.mktemp("peak")), timeout_s=1500):
            out[cr.id] = cr
    return out


@pytest.mark.engine
@pytest.mark.parametrize("cell", CELLS, ids=[c[0] for c in CELLS])
def test_peak_parity(cell, runs):
    cid, cfg, W, zi, inv = cell[:5]
    extra = cell[5] if len(cell) > 5 else {}
    cr = runs[cid]
    assert cr.error is None, cr.error
    inventory = from_dict(inv, inv["name"])
    plan = HF_PLANS.get(cid)
    rows = peak_parity(cfg, inventory, W, cr.ranks, zero_init=zi, load_dtype=extra.get("load_dtype"), plan=plan)
    if plan is not None:
        # the param groups DeepSpeed holds (after dropping an empty one) are the plan's, element for element
        want_groups = [sum(t.numel for t in g) for g in plan.inventory.groups()]
        for r, rec in cr.ranks.items():
            assert rec.get("group_numels") == want_groups, (r, rec.get("group_numels"), want_groups)
    # what _configure_distributed_model leaves on the module (the timeline's initialize:module):
    # without zero.Init every parameter whole, cast to the 16-bit dtype if one is on (engine.py
    # _cast_module_mixed_precision, module.to(device)); under zero.Init nothing (partitioned at load)
    want = {"bf16": {"bfloat16": 2}, "fp16": {"float16": 2}}.get(
        next((d for d in ("bf16", "fp16") if cfg.get(d, {}).get("enabled")), ""), {"float32": 4})
    for r, rec in cr.ranks.items():
        got = rec.get("module_after_to")
        assert got == ({k: 0 for k in want} if zi else {k: v * inventory.numel for k, v in want.items()}), (r, got)
    if cid in MIDDLE_CELLS:
        ga = MIDDLE_CELLS[cid]
        assert cfg["train_batch_size"] == ga * W * cfg["train_micro_batch_size_per_gpu"], (cid, ga)
        for r in range(W):
            have = {x["phase"] for x in rows if x.get("rank") == r and "phase" in x}
            want_mid = {f"{kind}:{m}" for m in range(2, ga) for kind in ("forward", "backward")}
            assert want_mid <= have, (r, sorted(want_mid - have))
    off = UNMATCHED.get(cid, {})
    fixed = [ph for ph in off if all(abs(r["rel_diff"]) <= 0.01 for r in rows if r.get("phase") == ph)]
    assert not fixed, f"now within 1%, take off UNMATCHED[{cid!r}]: {fixed}"
    rows = [r for r in rows if r.get("phase") not in off]
    race = RACY.get(cid, {})

    def ok(r):
        if "error" in r:
            return False
        if abs(r["rel_diff"]) <= 0.01:
            return True
        extra = race_bound(race, r["phase"])
        return r["ledger"] * 0.99 <= r["measured"] <= r["ledger"] * 1.01 + extra
    bad = [r for r in rows if not ok(r)]
    assert not bad, "\n".join(
        f"r{r['rank']} {r.get('phase')}: engine {r.get('measured')} ledger {r.get('ledger')} "
        f"({r.get('ledger_instant')}); unattributed {r.get('unattributed', [])[:3]}" if "phase" in r else str(r)
        for r in bad)
    for r in range(W):
        # the engine's peak phase is the ledger's, or one the ledger puts within 1% of its peak
        got, want = peak_instant(rows, r)
        led = {x["phase"]: x["ledger"] for x in rows if x.get("rank") == r and "phase" in x}
        assert got == want or led[got] >= 0.99 * led[want], (r, got, want, led)
