"""Durable checkpoints: what ``engine.save_checkpoint`` writes, how long it takes, what a failure costs.

Not to be confused with *activation* checkpointing (recompute in backward): this module is about
the files a DeepSpeed 0.19.8 job writes so that it can restart after a failure.

Three parts, each a pure function of its inputs (no torch, no deepspeed):

1. :func:`checkpoint_files` — the files ``DeepSpeedEngine.save_checkpoint`` writes for an effective
   config, an inventory and a cluster: their names exactly as DeepSpeed builds them, the rank that
   writes each and the bytes of tensor payload in each. Source: ``runtime/engine.py``
   ``save_checkpoint`` (:4869), ``_get_ckpt_name`` (:4336), ``_get_rank_zero_ckpt_name`` (:4322),
   ``_configure_checkpointing`` (:1900, who writes), ``_save_checkpoint`` (:5377),
   ``_save_zero_checkpoint`` (:5549), ``_copy_recovery_script`` (:5530); optimizer ``state_dict``
   of ``runtime/zero/stage_1_and_2.py`` (:3358), ``runtime/bf16_optimizer.py``,
   ``runtime/zero/stage3.py`` ``_rigid_state_dict`` (:3431), ``runtime/fp16/*_optimizer.py``;
   reference ../shared/reference/deepspeed-0.19.8-state-accounting.md section 6. Under tensor /
   pipeline parallelism (:func:`_model_parallel_files`) each model-parallel rank writes its own
   set: ``mp_rank_{m:02d}`` is ``engine.checkpoint_mp_rank`` = ``mpu.get_model_parallel_rank()``
   (engine.py :2167-2169): the tensor-parallel rank with a Megatron mpu; under the
   PipelineEngine the rank's index among the ranks of its data-parallel replica
   (``runtime/pipe/topology.py`` ``PipelineParallelGrid.ds_model_rank`` :303-313), stage x t + m;
   the PipelineEngine writes the module as one ``layer_{idx:02d}[-model_{m:02d}]-model_states.pt``
   per PipelineModule layer (``runtime/pipe/module.py`` ``ckpt_layer_path`` :588-596, the
   ``-model_XX`` part from ``get_rank_repr`` when the topology has a model axis;
   ``save_state_dict`` :607-642: data-parallel rank 0 of the stage writes them, or with
   ``checkpoint.parallel_write.pipeline_stage`` the stage's data-parallel ranks a share each, each tensor
   cloned, so exact numel x D) and leaves the module out of ``mp_rank_XX_model_states.pt``
   (``PipelineEngine.module_state_dict`` :1308-1325 returns None). A native-MoE engine at ZeRO-1/2 is the
   exception at any TP / PP degree (:func:`_moe_zero12_files`): ``_save_moe_checkpoint`` writes no layer files.
2. :func:`save_16bit_model_plan` — ``engine.save_16bit_model`` (:5707): the consolidated 16-bit
   ``pytorch_model.bin`` and the memory spike while ZeRO-3 gathers it (:5631). Under the
   PipelineEngine it writes no model (:data:`PIPELINE_SAVE16_NOTE`, :func:`pipeline_saves_16bit`).
3. Timing and resilience: write/read time at a storage bandwidth, the recovery cost of a failure,
   the Young/Daly save interval and the expected fraction of time lost.

**Sizes are tensor payload.** ``bytes`` of a ``.pt`` file is the bytes of the tensor *storages*
``torch.save`` serialises (a view into a larger buffer writes that whole buffer: ZeRO-1/2 module
weights are views of the padded flat buffer, the un-padded fp32 partition is a view of the padded
one). Real ``.pt`` files are larger by the pickle/zip overhead (headers, the pickled config,
``param_shapes``, slice mappings): a few KB per file plus ~64 B per tensor record, measured
3-4 KB on a 43 k-parameter model; negligible (< 0.01 %) for billion-parameter models, dominant
for tiny ones. Swap-file copies (stage-3 NVMe ``offloaded_tensors/``) are raw and exact.

Every byte size is in bytes (int); every time in seconds (float); bandwidths in bytes/second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.config.effective import DTYPE_BYTES
from advisor.findings import literal, render_sized
from advisor.units import DEFAULT_UNITS
from advisor.model.inventory import Inventory, TensorSpec
from advisor.plan import Cluster, Plan
from advisor.ledger.state import (aio_alignment_elems, align_up, ceil_div, optimizer_states, placement,
                                  placement_of,
                                  plan_optimizer, unsupported_reason,
                                  zero3_partition_numel)

#: Size in bytes of the recovery scripts DeepSpeed 0.19.8 copies into save_dir (measured in the
#: installed package: ``deepspeed/utils/zero_to_fp32.py``, ``zero_to_torch.py``).
RECOVERY_SCRIPTS: dict[str, int] = {"zero_to_fp32.py": 38_580, "zero_to_torch.py": 2_490}

#: Default tag DeepSpeed uses when ``save_checkpoint(tag=None)``: ``f"global_step{global_steps}"``.
DEFAULT_TAG = "global_step{N}"

PICKLE_NOTE = ("sizes are tensor payload (the storages torch.save serialises); the real .pt files add "
               "pickle/zip overhead of a few KB per file (measured 3-4 KB at 43 k parameters), negligible at "
               "billions of parameters")

#: The restart note of stage 0 with BF16_Optimizer (bf16 under pipeline parallelism, ``plan_optimizer``), ``{dp}``
#: the data-parallel ranks its fp32 master and moments are partitioned over. DeepSpeed 0.19.8: the engine is not
#: a ZeRO one (``engine.py`` l.4677 ``has_zero_optimizer_state = self.zero_optimization()``), so ``_load_checkpoint``
#: hands the optimizer the model-states file's one state dict (l.4693-4696), and
#: ``BF16_Optimizer._load_legacy_checkpoint`` indexes it as a per-rank list (``bf16_optimizer.py`` l.669-670:
#: ``state_dict_list[dp_rank]``): KeyError on every rank, at the saved world size too (engine run:
#: tests/engine/test_pipeline_engine.py; by hand also at 2 stages x 2 data-parallel ranks). ``load_module_only=True``
#: skips the optimizer and refreshes the fp32 master from the loaded weights (l.4670-4673); it loads (the same
#: engine run). A universal checkpoint does not help: ``ds_to_universal`` stops on this checkpoint
#: (``ds_to_universal.py`` l.1088: AssertionError, no ``universal_checkpoint_info``; run by hand on the
#: 2 x 2 checkpoint), and read, not run: the optimizer's universal loader gets its folder only from
#: ``_load_zero_checkpoint`` (l.4746, l.4763), which needs ZeRO (l.4455).
BF16_ZERO0_RESUME_NOTE = (
    "stage 0 with BF16_Optimizer (bf16 under pipeline parallelism): the fp32 master and optimizer moments are "
    "partitioned over {dp} data-parallel rank(s), not held whole; DeepSpeed 0.19.8's load_checkpoint cannot restore "
    "them at any world size (the non-ZeRO engine passes the model-states file's single state dict, which "
    "BF16_Optimizer._load_legacy_checkpoint indexes by data-parallel rank: KeyError, bf16_optimizer.py l.670), and "
    "ds_to_universal does not convert it (AssertionError: no universal_checkpoint_info) and the universal loader "
    "is reached through ZeRO only; "
    "load_checkpoint(..., load_module_only=True) resumes the weights only (optimizer state lost)")


# ------------------------------------------------------------------------------------------------
# files

@dataclass
class CkptFile:
    """One file a save writes.

    ``path`` is relative to ``save_dir``; its first component is the tag (DeepSpeed's default
    ``global_step{N}``, N = the engine's global step);
    ``name`` is the file name as DeepSpeed writes it; ``rank`` the global rank that writes it;
    ``bytes`` the tensor payload (see the module docstring; exact for raw swap copies, scripts and
    ``latest``); ``parts`` the payload by content; ``readers`` how many ranks read it on a
    restart at the same world size.
    """

    path: str
    rank: int
    bytes: int
    kind: str  # model_states | optim_states | offloaded_tensors | latest | script
    parts: dict[str, int] = field(default_factory=dict)
    readers: int = 1
    formula: str = ""
    #: Ranks writing one such file each: ``rank``, ``rank + stride``, ... (``count`` of them). Above
    #: :data:`LIST_RANKS_UP_TO` data-parallel ranks the per-rank files are one entry with
    #: ``count`` > 1 and ``{r}`` in ``path`` for the data-parallel rank (bounded work: O(roles),
    #: not O(ranks)); ``bytes`` is then per file.
    count: int = 1
    stride: int = 1

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "path": self.path, "rank": self.rank, "bytes": self.bytes, "kind": self.kind,
             "parts": dict(self.parts), "readers": self.readers, "formula": self.formula}
        if self.count > 1:
            d.update(count=self.count, rank_stride=self.stride)
        return d


@dataclass
class FilesResult:
    files: list[CkptFile]
    wrapper: str
    basic_optimizer: str
    notes: list[str] = field(default_factory=list)
    unsupported: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes * f.count for f in self.files)

    @property
    def read_bytes(self) -> int:
        """Bytes read on a restart at the same world size: each file times its readers."""
        return sum(f.bytes * f.readers * f.count for f in self.files)

    @property
    def each_rank_bytes(self) -> int:
        """Bytes every data-parallel rank writes through the grouped (``count`` > 1) entries; they
        all cover the same ranks, by construction of :func:`checkpoint_files`."""
        return sum(f.bytes for f in self.files if f.count > 1)

    def per_rank_bytes(self) -> dict[int, int]:
        """Bytes per writing rank. With grouped entries (more than LIST_RANKS_UP_TO ranks), only
        the ranks that also write a file of their own are keys; every other rank writes
        :attr:`each_rank_bytes`."""
        out: dict[int, int] = {}
        for f in self.files:
            if f.count == 1:
                out[f.rank] = out.get(f.rank, 0) + f.bytes
        g = self.each_rank_bytes
        if g:
            out = {r: b + g for r, b in out.items()}
            first = next(f for f in self.files if f.count > 1)
            for r in (first.rank, first.rank + first.stride):  # a representative plain rank
                if r not in out:
                    out[r] = g
                    break
        return out


#: Up to this many data-parallel ranks every per-rank file is listed; above, one entry per kind
#: stands for all ranks (``CkptFile.count``), so a million ranks cost what eight do.
LIST_RANKS_UP_TO = 256


def checkpoint_files(plan: Plan, tag: str = DEFAULT_TAG, save_latest: bool = True,
                     optimizer: tuple[str, str] | None = None) -> FilesResult:
    """The files ``engine.save_checkpoint(save_dir, tag)`` writes, per stage/precision (§6).

    Formulas (D = model dtype bytes, N = trainable elements, W = data-parallel size, P / P3 the
    ZeRO-1/2 / ZeRO-3 per-rank partition of §3, k = optimizer moments (2 for Adam), s = 4 B per
    optimized flat tensor for torch Adam, else 0):

    * stage 0, fp32: ``mp_rank_00_model_states.pt`` (dp rank 0): module N_all x 4 + optimizer
      state k x N x 4 + s per param tensor.
    * stage 0, fp16/bf16 (FP16_Optimizer / FP16_UnfusedOptimizer): same file: module N_all x D +
      fp32 master N x 4 + k x N x 4 + steps. No optim file, no scripts (the wrappers have no
      ``dp_process_group``, ``engine.py:1918``).
    * stages 1/2 (and BF16_Optimizer): ``mp_rank_00_model_states.pt`` by dp rank 0 = module as the
      views of the padded flat 16-bit buffer, N_pad x D per group (+ frozen params n x D; at stage 2
      ``frozen_param_fragments`` adds a CPU copy of each frozen param on a GPU node), read by every
      rank on load; ``{bf16_}zero_pp_rank_{r}_mp_rank_00_optim_states.pt`` by every dp rank r =
      fp32 partition P x 4 (saved as an un-padded view, so the padded storage is written) + k x P x 4
      moments + s per group.
    * stage 0 with BF16_Optimizer (bf16 under pipeline parallelism, :func:`advisor.ledger.state.plan_optimizer`):
      both. The model-states file holds the module and, the engine not being a ZeRO one
      (``_common_checkpoint_state`` l.5020: ``optimizer.state_dict() if not zero_optimizer_state``), BF16_Optimizer's
      state dict (l.629-645: the fp32 partition P x 4, the base optimizer's k x P x 4 moments + steps); the
      wrapper has a ``dp_process_group``, so every dp rank also writes ``bf16_zero_pp_rank_{r}_..._optim_states.pt``
      (``_configure_checkpointing`` l.1916-1921, ``_save_zero_checkpoint`` l.5549-5567, the same state dict) and
      global rank 0 the recovery scripts (engine run: tests/engine/test_pipeline_engine.py).
    * stage 3: every rank r writes ``zero_pp_rank_{r}_mp_rank_00_model_states.pt`` (0 tensor bytes:
      parameters are partitioned placeholders; + frozen partitions p_i x D) and
      ``{bf16_}zero_pp_rank_{r}_mp_rank_00_optim_states.pt`` = per sub-group S_k x 4 fp32 flat +
      k x S_k x 4 moments + s. With ``offload_optimizer: nvme`` each swappable sub-group
      (S_k x 4 >= max(1 MiB, aio.block_size)) is not in the .pt but copied as
      ``offloaded_tensors/rank{r:02d}/{first}_{last}.tensor.swp``, ``exp_avg-…``, ``exp_avg_sq-…``
      of A_256(S_k) x 4 bytes each (gradient swap files excluded); ids are the parameters'
      ``ds_id`` = index in ``model.parameters()`` order in a fresh process. With partial offload
      (``offload_optimizer: {device: cpu, ratio < 1}``) the moments and step are the host
      sub-groups' only (the fp32 flat groups are all of them): the first int((1 - ratio) x n) are
      stepped by the backup torch AdamW, whose state ``_rigid_state_dict`` (l.3442-3444) does not save
      (:func:`advisor.ledger.state.twin_flow_backup_stepped`); with ``device: nvme`` a swapped sub-group among
      them has its master's swap file only, no moment files (:func:`advisor.ledger.state.twin_flow_backup_swapped`).
      That is a GPU run's file: on DeepSpeed's
      CPU accelerator DeepSpeedCPUAdam steps every sub-group and the file holds every moment (not
      proved on a GPU here; no engine run checks this figure).
    * any ZeRO stage: global rank 0 copies ``zero_to_fp32.py`` and ``zero_to_torch.py`` into save_dir;
      every stage: global rank 0 writes ``latest`` (the tag) when ``save_latest``.
    """
    ec, inv, cluster = plan.config, plan.inventory, plan.cluster
    wrapper, basic = optimizer or plan_optimizer(plan)  # optimizer: a pipeline stage's (_model_parallel_files)
    W = cluster.zero_world_size
    D = DTYPE_BYTES[ec.model_dtype]
    z = ec.zero
    opt = optimizer_states(ec)  # the ledger's fact: state tensors per element, step bytes
    k = len(opt.items)
    s = opt.step_bytes
    notes: list[str] = [PICKLE_NOTE]
    res = FilesResult(files=[], wrapper=wrapper, basic_optimizer=basic, notes=notes)
    why = unsupported_reason(ec, W)
    if why:
        res.unsupported = why
        notes.append(f"DeepSpeed refuses this config at initialize(), so nothing is saved: {why}")
        return res
    # native MoE at ZeRO-1/2 under TP / PP: _save_moe_checkpoint's own layout (_moe_zero12_files), not the
    # PipelineEngine's layer files nor ZeRO over the data-parallel group for the experts
    moe12 = z.stage in (1, 2) and cluster.expert_parallel > 1
    if (cluster.tensor_parallel > 1 or cluster.pipeline_parallel > 1) and "stage" not in (inv.meta or {}) \
            and not moe12:
        return _model_parallel_files(plan, tag, save_latest, res)
    if not opt.known:
        notes.append(f"optimizer {ec.optimizer.type!r}: its state is assumed to be 2 fp32 tensors per element, "
                     "like Adam")
    groups = inv.groups(trainable_only=True)
    frozen = [t for t in inv.tensors if not t.trainable]
    N = sum(t.numel for g in groups for t in g)
    n_frozen = sum(t.numel for t in frozen)
    ntensors = sum(len(g) for g in groups)
    d = tag
    files = res.files

    bf16_zero0 = z.stage == 0 and wrapper == "BF16_Optimizer"
    if bf16_zero0:
        Ps = [(lay.P, lay.n_pad - lay.n) for lay in placement_of(plan).zero12]
        P_sum = sum(P for P, _ in Ps)
        parts = {"module": (N + n_frozen) * D, "fp32_groups": P_sum * 4, "optimizer_state": k * P_sum * 4,
                 "step": s * len(Ps)}
        files.append(CkptFile(f"{d}/{MODEL_STATES_NAME}", 0, sum(parts.values()), "model_states", parts,
                              readers=cluster.world_size,
                              formula=(f"module N_all x D + BF16_Optimizer state dict: fp32 partition P x 4 + {k} x P x 4 "
                                       f"(+ step) = {N + n_frozen} x {D} + {P_sum} x 4 + {k} x {P_sum} x 4 + "
                                       f"{s} x {len(Ps)}; P = N_pad / W")))
        _zero12_optim_files(files, d, ec, cluster, W, Ps, k, s)
    elif z.stage == 0:
        if ec.model_dtype == "fp32":
            parts = {"module": (N + n_frozen) * 4, "optimizer_state": k * N * 4, "step": s * ntensors}
            formula = (f"module N_all x 4 + optimizer {k} x N x 4 + step = {N + n_frozen} x 4 + {k} x {N} x 4 "
                       f"+ {s} x {ntensors}")
        else:
            fused = wrapper == "FP16_Optimizer"
            nsteps = len(groups) if fused else ntensors
            parts = {"module": (N + n_frozen) * D, "fp32_groups": N * 4, "optimizer_state": k * N * 4,
                     "step": s * nsteps}
            formula = (f"module N_all x D + fp32 master N x 4 + {k} x N x 4 (+ step) "
                       f"= {N + n_frozen} x {D} + {N} x 4 + {k} x {N} x 4 + {s} x {nsteps} ({wrapper})")
        files.append(CkptFile(f"{d}/{MODEL_STATES_NAME}", 0, sum(parts.values()), "model_states", parts,
                              readers=cluster.world_size, formula=formula))
    elif moe12:
        _moe_zero12_files(plan, files, d, wrapper, k, s)
        if cluster.tensor_parallel > 1 or cluster.pipeline_parallel > 1:
            notes.append(MOE_MODEL_PARALLEL_NOTE.format(tp=cluster.tensor_parallel, pp=cluster.pipeline_parallel))
    elif z.stage in (1, 2):
        npad_total = 0
        Ps = []
        for lay in placement_of(plan).zero12:  # the ledger's layouts (padding, partition P per group)
            npad_total += lay.n_pad
            Ps.append((lay.P, lay.n_pad - lay.n))
        parts = {"module": npad_total * D + n_frozen * D}
        formula = f"module = flat 16-bit buffer N_pad x D = {npad_total} x {D}"
        if n_frozen:
            formula += f" + frozen {n_frozen} x {D}"
            if z.stage == 2:
                parts["frozen_param_fragments"] = n_frozen * D
                formula += " + frozen_param_fragments (a CPU copy on GPU nodes; aliases the module on CPU)"
        files.append(CkptFile(f"{d}/{MODEL_STATES_NAME}", 0, sum(parts.values()), "model_states", parts,
                              readers=cluster.world_size, formula=formula))
        _zero12_optim_files(files, d, ec, cluster, W, Ps, k, s)
    else:  # stage 3
        oo_nvme = ec.offload_optimizer_effective == "nvme"
        k_al = aio_alignment_elems(ec, 4)
        pl = placement_of(plan)  # the ledger's sub-groups and which of them are swapped to NVMe
        # partial offload (Twin-Flow): the accelerator sub-groups' moments are the backup AdamW's, not in the file
        on_acc = pl.opt_on_accelerator
        n_acc = sum(on_acc)
        frozen_part = sum(zero3_partition_numel(t.numel, W) for t in frozen) * D
        grouped = W > LIST_RANKS_UP_TO
        n_of, stride = (W, _mp(cluster)) if grouped else (1, 1)
        for r in range(1 if grouped else W):
            rank = r * _mp(cluster)
            rid = "{r}" if grouped else str(r)
            rdir = "rank{r:02d}" if grouped else f"rank{rank:02d}"
            mparts = {"module": 0}
            if frozen_part:
                mparts["frozen_param_fragments"] = frozen_part
            files.append(CkptFile(f"{d}/{model_states_name_stage3(rid)}", rank, sum(mparts.values()),
                                  "model_states", mparts,
                                  formula="module state_dict of partitioned placeholders: 0 tensor bytes"
                                  + (" + frozen partitions p_i x D" if frozen_part else ""), count=n_of, stride=stride))
            in_pt = 0
            nsub_pt = 0
            mom_pt = 0  # elements whose moments the file holds (DeepSpeedCPUAdam's sub-groups)
            nsub_mom = 0
            swapped: list[CkptFile] = []
            for i, (sg, on_nvme) in enumerate(zip(pl.sub_groups, pl.opt_swapped)):
                S = sg.numel
                if on_nvme:
                    first, last = sg.tensors[0], sg.tensors[-1]
                    a = align_up(S, k_al) * 4
                    # partial offload to NVMe: a swapped sub-group the backup AdamW steps has its master file only
                    # (state.twin_flow_backup_swapped: the swapper swaps DeepSpeedCPUAdam's state alone)
                    bk = pl.opt_backup_swapped and pl.opt_backup_swapped[i]
                    for nm in (f"{first}_{last}", *(() if bk else (f"{m}-{first}_{last}" for m in opt.items))):
                        swapped.append(CkptFile(f"{d}/offloaded_tensors/{rdir}/{nm}.tensor.swp", rank, a,
                                                "offloaded_tensors", {"swap_file": a},
                                                formula=f"A_{k_al}(S_k) x 4 = A_{k_al}({S}) x 4 (copy of the swap file)",
                                                count=n_of, stride=stride))
                else:
                    in_pt += S
                    nsub_pt += 1
                    if not (on_acc and on_acc[i]):
                        mom_pt += S
                        nsub_mom += 1
            oparts = {"fp32_flat_groups": in_pt * 4, "optimizer_state": k * mom_pt * 4, "step": s * nsub_mom}
            if n_acc:
                formula = (f"per sub-group S_k x 4 fp32 flat (all {nsub_pt}) + {k} x S_k x 4 moments + step of the "
                           f"{nsub_mom} host sub-groups only: sum S_k = {in_pt}, host {mom_pt} (partial offload, "
                           f"ratio {z.offload_optimizer.ratio:g}: the backup AdamW's moments of the first {n_acc} are "
                           "not saved, stage3.py _rigid_state_dict l.3442-3444)")
            else:
                formula = (f"per sub-group S_k x 4 fp32 flat + {k} x S_k x 4 moments + step, "
                           f"sum S_k = {in_pt}" + (" (swapped sub-groups are in offloaded_tensors/)" if swapped else ""))
            files.append(CkptFile(f"{d}/{optim_states_name(rid, ec.bf16_enabled)}", rank, sum(oparts.values()),
                                  "optim_states", oparts, count=n_of, stride=stride, formula=formula))
            files.extend(swapped)
        if n_acc:
            notes.append(
                f"partial optimizer offload (offload_optimizer.ratio {z.offload_optimizer.ratio:g}): the first {n_acc} "
                f"of {len(pl.sub_groups)} sub-groups are stepped on the GPU by the backup torch AdamW (stage3.py "
                "l.313-326, _optimizer_step l.1249-1258), whose state save_checkpoint does not write: the "
                "optimizer-states file holds DeepSpeedCPUAdam's moments of the host sub-groups only, and every "
                "sub-group's fp32 partition (_rigid_state_dict l.3442-3444); a resume restarts the others' moments "
                "(lint O008). These sizes are a GPU run's: on DeepSpeed's CPU accelerator DeepSpeedCPUAdam steps "
                "every sub-group, so a CPU run's file holds all the moments")
        if oo_nvme:
            notes.append("stage-3 NVMe optimizer: the state is the copied swap folder offloaded_tensors/; "
                         "a restart reads it back through the same folder")
    if z.stage in (1, 2, 3) or bf16_zero0:
        for nm, size in RECOVERY_SCRIPTS.items():
            files.append(CkptFile(nm, 0, size, "script", {"script": size},
                                  formula="copied from deepspeed/utils by global rank 0 (_copy_recovery_script)"))
    if save_latest:
        n = len(tag) if "{" not in tag else len("global_step") + 5
        files.append(CkptFile("latest", 0, n, "latest", {"tag": n},
                              formula="the tag, written by global rank 0"))
    return res


def pipeline_layer_indices(inv: "Inventory") -> dict[str, int]:
    """The PipelineModule layer of each tensor (by name), for ``layer_{idx:02d}`` file names:
    everything before the first transformer layer (the embedding) is layer 0, transformer layer
    i is i + 1, everything after the last (final norm, head) is num_layers + 1 -- the layer list
    ``[embedding] + blocks + [head]`` (tests/engine/pipe_worker.py; the stage split of
    :func:`advisor.model.parallel.shard`). Megatron-DeepSpeed's GPTModelPipe puts function layers
    (no state_dict, no file) between them, which shifts the indices. Memoised per tensor list and
    ``meta["num_layers"]``, all it reads (issue 21: generate asked it once per (tp, pp) layout, 6 x 1e5
    tensors at its limit); callers must not change the dict."""
    from advisor.model.parallel import layer_of
    L_meta = (inv.meta or {}).get("num_layers")

    def compute() -> dict[str, int]:
        idx = [layer_of(t) for t in inv.tensors]
        L = int(L_meta or (max((i for i in idx if i is not None), default=-1) + 1))
        first = next((k for k, i in enumerate(idx) if i is not None), len(idx))
        return {t.name: (i + 1 if i is not None and i < L else (0 if i is None and k < first else L + 1))
                for k, (t, i) in enumerate(zip(inv.tensors, idx))}
    # repr: a hashable key whatever the meta holds (1 and 1.0 kept apart: the safe side)
    return inv.memo(("pipeline_layer_indices", repr(L_meta)), compute)


def _zero12_optim_files(files: list, d: str, ec, cluster: Cluster, W: int, Ps: list[tuple[int, int]], k: int,
                        s: int) -> None:
    """The ``{bf16_}zero_pp_rank_{r}_mp_rank_00_optim_states.pt`` of every dp rank r (ZeRO-1/2, BF16_Optimizer):
    fp32 partition P x 4 + k x P x 4 moments + s per group (``Ps``: (P, padding) per group)."""
    grouped = W > LIST_RANKS_UP_TO
    P_sum = sum(P for P, _ in Ps)
    for r in range(1 if grouped else W):
        oparts = {"fp32_partition": P_sum * 4, "optimizer_state": k * P_sum * 4, "step": s * len(Ps)}
        files.append(CkptFile(
            f"{d}/{optim_states_name('{r}' if grouped else r, ec.bf16_enabled)}", r * _mp(cluster),
            sum(oparts.values()), "optim_states", oparts,
            formula=(f"fp32 partition P x 4 + {k} x P x 4 moments + step; P = N_pad / W = {P_sum} "
                     f"(written padded: the un-padded fp32 view keeps its whole storage)"),
            count=W if grouped else 1, stride=_mp(cluster)))


def _moe_zero12_files(plan: Plan, files: list, d: str, wrapper: str, k: int, s: int) -> None:
    """ZeRO-1/2 files of a native-MoE engine (``expert_parallel`` ep > 1), at any tensor- (t) and pipeline-parallel
    (p) degree; ``plan.inventory`` the whole model, or one expert-parallel rank's shard (one stage, t = p = 1).
    DeepSpeed 0.19.8 ``runtime/engine.py``: ``save_checkpoint`` calls ``_save_moe_checkpoint`` instead of
    ``_save_checkpoint`` (l.4914-4919; so under the PipelineEngine no ``layer_XX`` files: its
    ``module_state_dict`` override is bypassed, l.5295-5298 call ``DeepSpeedEngine.module_state_dict``), then every
    data-parallel rank ``_save_zero_checkpoint`` (l.4930-4932). Per pipeline stage st (its PipelineModule holds the
    stage's layers only) and tensor-parallel rank m, the file's model-parallel rank is ``checkpoint_mp_rank``
    (l.2167-2169: ``mpu.get_model_parallel_rank()``, the TP rank m with a Megatron mpu, the PipelineEngine's
    ``ds_model_rank`` = st x t + m, ``runtime/pipe/topology.py`` l.303-313, l.446-447):

    * ``_save_moe_checkpoint``: for each MoE layer of the stage's module (``moe_layer_id`` from 0 in module order,
      l.5080-5083, so per stage) the ranks of expert-data-parallel rank 0 (``is_data_parallel_writer``:
      ``dp_rank == 0``, checkpoint_engine.py l.47-48; engine.py l.5093-5095) write one
      ``layer_{id}_expert_{gid}_mp_rank_{mp:02d}_model_states.pt`` per local expert (``_get_expert_ckpt_name``
      l.4368-4381 with ``checkpoint_mp_rank`` = the writer's, l.5128-5132; gid = expp_rank x num_local_experts +
      local id, l.5117-5118), its parameters cloned (l.5122: exact numel x D). The expert groups are the legacy
      ones (``moe/layer.py`` l.93-97: no expert tensor parallelism by default; ``utils/groups.py`` l.426-445):
      the stage's local rank l = z x t + m is expert-parallel rank l mod ep and expert-data-parallel rank
      l // ep, so expert-parallel rank e is written by local rank e (global st x W_z x t + e), whose TP rank is
      e mod t: its files carry mp rank e mod t (+ st x t), one set per stage, not one per TP rank.
    * data-parallel rank 0 of each (st, m) (l.5292 ``groups._get_data_parallel_rank() == 0``; global rank
      st x W_z x t + m) writes ``mp_rank_{mp:02d}_model_states.pt`` with the non-expert module only
      (``_get_non_moe_state_dict`` l.5297-5298: the stage's dense TP shard's padded flat buffer N_pad x D).
    * every rank ``{bf16_}zero_pp_rank_{z}_mp_rank_{mp:02d}_optim_states.pt`` (``_get_zero_ckpt_name`` l.4331-4334:
      z = its rank in the optimizer's data-parallel group): every param group of the ZeRO optimizer, dense and
      ``moe`` alike: the dense fp32 partition over the W_z ZeRO ranks and the routed experts' over the
      expert-data-parallel group (:attr:`Cluster.expert_data_parallel_size` = W_z x t / ep), both (1 + k) x P x 4
      (+ step per group).

    The partitions are the ledger's: the (tensors, group size) walks ``advisor.ledger.state._model_parallel_roles``
    accounts (each stage's shard, split_experts over W_z and the expert-data-parallel group), laid out by
    ``placement`` (the same layouts, padding included)."""
    from advisor.model.parallel import is_expert, is_shard, layer_of, shard, split_experts
    ec, inv, cl = plan.config, plan.inventory, plan.cluster
    D = DTYPE_BYTES[ec.model_dtype]
    ep, W = cl.expert_parallel, cl.zero_world_size
    tp, pp = (1, 1) if is_shard(inv) else (max(1, cl.tensor_parallel), max(1, cl.pipeline_parallel))
    # the rank's shard per stage (E / ep experts per layer), as the ledger takes it; a shard is not split again
    stages = [(0, inv)] if is_shard(inv) else [(sh.stage, sh.inventory) for sh in shard(inv, tp, pp, ep)]
    We = max(1, cl.expert_data_parallel_size)
    grouped = W > LIST_RANKS_UP_TO
    n_local = max(1, int((inv.meta or {}).get("num_experts") or ep) // ep)
    for st, sinv in stages:
        n_frozen = sum(t.numel for t in sinv.tensors if not t.trainable and not is_expert(t))
        dense, experts = split_experts(sinv)
        lay_d = placement(ec, dense, W, wrapper).zero12
        lay_e = placement(ec, experts, We, wrapper).zero12
        npad_d = sum(lay.n_pad for lay in lay_d)
        base = st * W * tp  # global rank of the stage's local rank 0

        def mp_of(m: int) -> int:
            return st * tp + m if pp > 1 else m
        parts = {"module": npad_d * D + n_frozen * D}
        formula = (f"non-expert module (_get_non_moe_state_dict) = the dense groups' flat 16-bit buffer N_pad x D = "
                   f"{npad_d} x {D}" + (f" + frozen {n_frozen} x {D}" if n_frozen else ""))
        if n_frozen and ec.zero.stage == 2:
            parts["frozen_param_fragments"] = n_frozen * D
        for m in range(tp):
            files.append(CkptFile(f"{d}/{MODEL_STATES_NAME.replace('mp_rank_00', f'mp_rank_{mp_of(m):02d}')}",
                                  base + m, sum(parts.values()), "model_states", dict(parts),
                                  readers=W, formula=formula))
        # expert files: per MoE layer, each local expert's tensors (a fused (E_local, ...) tensor holds E_local of them)
        by_layer: dict[int, int] = {}
        for t in experts.tensors:
            i = layer_of(t)
            by_layer[i if i is not None else -1] = by_layer.get(i if i is not None else -1, 0) + t.numel
        for moe_id, lyr in enumerate(sorted(by_layer)):
            per_expert = by_layer[lyr] // n_local
            for e in range(ep):  # expert-parallel rank e: written by its expert-data-parallel rank 0, local rank e
                for j in range(n_local):
                    gid = e * n_local + j
                    files.append(CkptFile(
                        f"{d}/layer_{moe_id}_expert_{gid}_mp_rank_{mp_of(e % tp):02d}_model_states.pt", base + e,
                        per_expert * D, "model_states", {"expert": per_expert * D}, readers=We,
                        formula=f"expert {gid} of MoE layer {moe_id}, cloned: {per_expert:,} x {D} "
                        "(written by its expert-data-parallel rank 0)"))
        Pd = sum(lay.P for lay in lay_d)
        Pe = sum(lay.P for lay in lay_e)
        ngroups = len(lay_d) + len(lay_e)
        oparts = {"fp32_partition": Pd * 4, "expert_fp32_partition": Pe * 4, "optimizer_state": k * (Pd + Pe) * 4,
                  "step": s * ngroups}
        for m in range(tp):
            for r in range(1 if grouped else W):
                name = optim_states_name('{r}' if grouped else r, ec.bf16_enabled)
                files.append(CkptFile(
                    f"{d}/{name.replace('mp_rank_00', f'mp_rank_{mp_of(m):02d}')}", base + r * tp + m,
                    sum(oparts.values()), "optim_states", dict(oparts),
                    formula=(f"dense fp32 partition P x 4 + routed experts' P_e x 4 + {k} x (P + P_e) x 4 moments + "
                             f"step; P = N_pad / {W} = {Pd} (ZeRO ranks), P_e = N_e,pad / {We} = {Pe} "
                             "(expert-data-parallel group)"),
                    count=W if grouped else 1, stride=tp))


#: The note of a native-MoE ZeRO-1/2 save under tensor / pipeline parallelism (:func:`_moe_zero12_files`).
MOE_MODEL_PARALLEL_NOTE = (
    "MoE under model parallelism (t {tp} x p {pp}): _save_moe_checkpoint writes each stage's non-expert module into "
    "mp_rank_XX_model_states.pt (no layer_XX files: DeepSpeedEngine.module_state_dict, engine.py l.5295-5298) and "
    "each expert once per stage, from its expert-data-parallel rank 0, named by that rank's model-parallel rank")


def pipeline_layer_files(inv: "Inventory", tp: int, pp: int, ep: int, wz: int, D: int,
                         tag: str = DEFAULT_TAG, dp: int = 1) -> dict[tuple[int, int], list[CkptFile]]:
    """(pipeline stage, tensor-parallel rank) -> the ``layer_XX[-model_MM]-model_states.pt`` files of that
    stage's shard, bytes = the layer's parameters of the stage's shard x D, each with the global rank that
    writes it: PipelineModule.save_state_dict (``runtime/pipe/module.py`` l.607-642) writes each layer's state
    dict, cloned (``checkpoint/utils.py`` clone_tensors_for_torch_save l.41-59). Who writes: with
    ``checkpoint.parallel_write.pipeline_stage`` off (``dp`` = 1, the default) data-parallel rank 0 of the stage
    writes them all (l.623-626); on (``dp`` = the data-parallel size, ``grid.data_parallel_size``), the stage's
    layers ``forward_funcs`` are spread over its data-parallel ranks by ``ds_utils.partition_uniform(num_layers,
    dp_size)`` (l.618-621: data-parallel rank d writes local layers [offsets[d], offsets[d + 1]), the first
    ``num_layers mod dp`` ranks one more; with fewer layers than ranks the last write none); global rank
    ((stage x DP + d) x SP) x t + m, SP = ``wz`` / ``dp`` (topology axes pipe, data, model:
    :meth:`advisor.plan.Cluster.coords`). A stage's layers are the indices its tensors are in
    (:func:`pipeline_layer_indices`, contiguous: every layer of the ``[embedding] + blocks + [head]`` list has
    parameters). Memoised per tensor list: the one source of :func:`checkpoint_files`' layer entries and of the
    save's layer staging (``advisor.ledger.timeline._pipeline_layer_staging``)."""
    from bisect import bisect_right

    from advisor.model.parallel import partition_uniform

    def build() -> dict[tuple[int, int], list[CkptFile]]:
        from advisor.model.parallel import shard
        layer_idx = pipeline_layer_indices(inv)
        sp = max(1, wz // max(1, dp))
        out: dict[tuple[int, int], list[CkptFile]] = {}
        for sh in shard(inv, tp, pp, ep):
            by: dict[int, int] = {}
            for t in sh.inventory.tensors:
                idx = layer_idx.get(t.name, 0)
                by[idx] = by.get(idx, 0) + t.numel
            first = min(by, default=0)
            offsets = partition_uniform(max(by, default=-1) - first + 1, max(1, dp))
            # local layer j -> the data-parallel rank d with offsets[d] <= j < offsets[d + 1] (the last such d:
            # the empty parts of fewer layers than ranks repeat an offset)
            writer = {idx: bisect_right(offsets, idx - first) - 1 for idx in by}
            who = ("data-parallel rank 0 of the stage" if dp <= 1 else
                   "data-parallel rank {d} of the stage: checkpoint.parallel_write.pipeline_stage, local layers "
                   f"spread by partition_uniform {offsets}")
            for m in range(tp):
                suffix = f"-model_{m:02d}" if tp > 1 else ""
                out[(sh.stage, m)] = [
                    CkptFile(f"{tag}/layer_{idx:02d}{suffix}-model_states.pt",
                             (sh.stage * wz + writer[idx] * sp) * tp + m, by[idx] * D,
                             "model_states", {"module": by[idx] * D}, readers=wz,
                             formula=f"layer {idx}'s parameters, cloned: {by[idx]:,} x {D} "
                             f"(pipe/module.py save_state_dict, {who.format(d=writer[idx])})")
                    for idx in sorted(by)]
        return out
    return inv.memo(("pipeline_layer_files", tp, pp, ep, wz, D, tag, dp), build)


def pipeline_write_dp(plan: Plan) -> int:
    """The data-parallel ranks a stage's layer files are spread over (:func:`pipeline_layer_files`' ``dp``):
    the data-parallel size (PipelineParallelGrid ``data_parallel_size``, :attr:`advisor.plan.Cluster.dp_world_size`)
    with ``checkpoint.parallel_write.pipeline_stage`` on (``EffectiveConfig.checkpoint_parallel_write_pipeline``;
    the PipelineEngine hands it to the module, ``runtime/pipe/engine.py`` l.222), else 1 (data-parallel rank 0)."""
    return plan.cluster.dp_world_size if plan.config.checkpoint_parallel_write_pipeline else 1


def _model_parallel_files(plan: Plan, tag: str, save_latest: bool, res: FilesResult) -> FilesResult:
    """:func:`checkpoint_files` under tensor / pipeline parallelism (module docstring): per stage,
    the files of the stage's tensor-parallel shard over its ZeRO group (the same function on the
    shard), renamed and re-ranked for each model-parallel rank m (global rank (stage x W_z + r) x t
    + m, ``advisor.plan.Cluster.coords``); with pipeline parallelism the module goes to the layer
    files instead of ``mp_rank_XX_model_states.pt``."""
    from advisor.model.parallel import shard
    ec, cl = plan.config, plan.cluster
    tp, pp, wz = cl.tensor_parallel, cl.pipeline_parallel, cl.zero_world_size
    wrapper, basic = res.wrapper, res.basic_optimizer
    D = DTYPE_BYTES[ec.model_dtype]
    layer_files = (pipeline_layer_files(plan.inventory, tp, pp, cl.expert_parallel, wz, D, tag, pipeline_write_dp(plan))
                   if pp > 1 else {})
    files = res.files
    tail: list[CkptFile] = []
    for sh in shard(plan.inventory, tp, pp, cl.expert_parallel):
        sub = Plan(ec, sh.inventory, Cluster(world_size=wz, gpus_per_node=cl.gpus_per_node), plan.workload)
        # the stage's shard is still a PipelineModule's: its wrapper is the whole plan's (plan_optimizer reads
        # the pipeline degree the shard's own cluster no longer carries), given through the cache placement_of reads
        sub.derived["placement"] = placement(ec, sh.inventory, wz, wrapper)
        base = checkpoint_files(sub, tag, save_latest, optimizer=(wrapper, basic))
        for m in range(tp):
            mp = sh.stage * tp + m if pp > 1 else m
            for f in base.files:
                if f.kind in ("script", "latest"):
                    if sh.stage == 0 and m == 0:
                        tail.append(f)
                    continue
                parts = dict(f.parts)
                formula = f.formula
                if pp > 1 and f.kind == "model_states" and "module" in parts:
                    parts["module"] = 0
                    formula = ("the module is in the layer_XX files (PipelineEngine.module_state_dict returns None): "
                               "0 tensor bytes" + (" + frozen_param_fragments" if "frozen_param_fragments" in parts
                                                   else ""))
                rank = (sh.stage * wz + f.rank) * tp + m
                files.append(replace(f, path=f.path.replace("mp_rank_00", f"mp_rank_{mp:02d}"), rank=rank,
                                     bytes=sum(parts.values()), parts=parts, formula=formula,
                                     stride=f.stride * tp, readers=min(f.readers, wz) if f.readers > 1 else 1))
            if pp > 1:
                files.extend(layer_files[(sh.stage, m)])
    files.extend(tail)
    res.notes.append(f"model parallelism: {tp * pp} model-parallel ranks (t {tp} x p {pp}) write their own "
                     "mp_rank_XX files" + ("; the PipelineEngine writes the module as layer_XX files" if pp > 1 else ""))
    return res


# ------------------------------------------------------------------------------------------------
# file names (engine.py ``_get_ckpt_name`` :4336 and ``_get_rank_zero_ckpt_name`` :4322), shared
# by the writer above and the reader of a saved checkpoint below

#: The model-states file below stage 3 (one per model-parallel rank; mp rank 00 here).
MODEL_STATES_NAME = "mp_rank_00_model_states.pt"


def model_states_name_stage3(dp_rank: int | str) -> str:
    """Stage 3 (``zero_optimization_partition_weights``): every data-parallel rank's own file."""
    return f"zero_pp_rank_{dp_rank}_mp_rank_00_model_states.pt"


def optim_states_name(dp_rank: int | str, bf16: bool) -> str:
    """``{bf16_}zero_pp_rank_{r}_mp_rank_00_optim_states.pt`` (``_get_zero_ckpt_prefix``: bf16_ when
    the engine runs bf16)."""
    return f"{'bf16_' if bf16 else ''}zero_pp_rank_{dp_rank}_mp_rank_00_optim_states.pt"


#: A ``latest`` file holds one tag (a folder name, e.g. ``global_step500``): more than a path's
#: worth of bytes (Linux PATH_MAX) cannot name a folder and is refused, not read.
MAX_LATEST_BYTES = 4096


@dataclass
class SavedCheckpoint:
    """What a saved DeepSpeed checkpoint folder says about the run that wrote it, read from its
    file names only (no torch): ``folder`` (the ``load_dir``, e.g. the Trainer's
    ``output_dir/checkpoint-500``), ``tag`` (the content of ``latest``; None when there is no
    ``latest`` file), ``tags`` (the ``global_step*`` folders present), and in the tag's folder:
    ``stage3_model_ranks`` (data-parallel ranks with a stage-3 model-states file),
    ``has_model_states`` (the below-stage-3 ``mp_rank_00_model_states.pt``), ``zero_ranks``
    (data-parallel ranks with an optimizer-states file, = the saved ZeRO world size, which
    ``_load_zero_checkpoint`` compares: engine.py ``dp_world_size`` in the model states) and
    ``bf16`` (the optimizer files carry the bf16_ prefix)."""

    folder: str
    tag: str | None
    tags: list[str]
    #: Why ``latest`` exists but cannot be read as a tag (not a regular file, over
    #: :data:`MAX_LATEST_BYTES`); None when it was read or is absent.
    latest_problem: str | None = None
    stage3_model_ranks: int = 0
    has_model_states: bool = False
    zero_ranks: int = 0
    bf16: bool = False

    @property
    def stage_family(self) -> str | None:
        """"3" (partitioned weights, stage-3 file names), "0-2", or None (no model states)."""
        if self.stage3_model_ranks:
            return "3"
        return "0-2" if self.has_model_states else None


def read_saved_checkpoint(folder: str) -> SavedCheckpoint:
    """The :class:`SavedCheckpoint` of ``folder`` (names as :func:`checkpoint_files` writes them).
    Raises OSError when ``folder`` cannot be listed."""
    import os
    import re

    names = os.listdir(folder)
    tags = sorted(n for n in names if n.startswith("global_step") and os.path.isdir(os.path.join(folder, n)))
    tag = None
    latest = os.path.join(folder, "latest")
    latest_problem = None
    if os.path.lexists(latest):
        # through the one guarded reader: a FIFO or /dev/zero named latest would block or never
        # end (DeepSpeed's load_checkpoint reads it whole: engine.py ``open(latest_path).read()``)
        from advisor.config.readers import read_bytes
        from advisor.errors import ConfigLoadError
        try:
            raw = read_bytes(latest, limit=MAX_LATEST_BYTES, what="tag file", stdin_ok=False)
            tag = raw.decode("utf-8", errors="replace").strip()
        except ConfigLoadError as e:
            latest_problem = e.problem
    sc = SavedCheckpoint(folder=folder, tag=tag, tags=tags, latest_problem=latest_problem)
    if latest_problem is not None:
        return sc
    tdir = os.path.join(folder, tag) if tag else None
    if tdir is None or not os.path.isdir(tdir):
        return sc
    files = set(os.listdir(tdir))
    sc.has_model_states = MODEL_STATES_NAME in files
    # the rank field of the shared name formats, as a pattern
    m3 = re.compile(re.escape(model_states_name_stage3("@")).replace("@", r"(\d+)") + "$")
    opt = {b: re.compile(re.escape(optim_states_name("@", b)).replace("@", r"(\d+)") + "$") for b in (True, False)}
    sc.stage3_model_ranks = len({m.group(1) for f in files if (m := m3.match(f))})
    for b in (True, False):
        ranks = {m.group(1) for f in files if (m := opt[b].match(f))}
        if ranks:
            sc.zero_ranks, sc.bf16 = len(ranks), b
            break
    return sc


def _mp(cluster: Cluster) -> int:
    """Global-rank stride between consecutive ZeRO ranks: the tensor-parallel size t (1 without it).

    DeepSpeed names a ZeRO file by the rank's index in the optimizer's ``dp_process_group``
    (``engine.py`` ``_get_zero_ckpt_name`` :4331-4334), which is the sequence-data-parallel group
    (``engine.py`` :2164; ``dp_process_group=self.seq_data_parallel_group`` for BF16_Optimizer :2626, ZeRO-1/2 :2683, ZeRO-3 :2768). Under Ulysses
    that group is DP x SP *consecutive* ranks (``runtime/sequence_parallel/parallel_state_sp.py``
    ``initialize_sequence_parallel`` :58-66: ``range(i * sp * dp, (i + 1) * sp * dp)``), and in
    the rank order rank = ((stage x DP + d) x SP + q) x t + m (:class:`advisor.plan.Cluster`) the
    ZeRO rank z = d x SP + q sits at global rank (stage x W_z + z) x t + m: consecutive ZeRO ranks
    are t apart, never t x p x sp."""
    return max(1, cluster.tensor_parallel)


# ------------------------------------------------------------------------------------------------
# 16-bit consolidated weights

@dataclass
class Save16:
    """``engine.save_16bit_model(save_dir)``: rank 0 writes ``pytorch_model.bin``."""

    writes: bool
    bytes: int
    gather_accelerator_bytes: int  # extra accelerator memory on every rank while one module is gathered
    host_bytes_rank0: int  # host memory of the consolidated state dict (or its staging) on rank 0
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": "pytorch_model.bin", "writes": self.writes, "bytes": self.bytes, "rank": 0,
                "gather_accelerator_bytes": self.gather_accelerator_bytes,
                "host_bytes_rank0": self.host_bytes_rank0, "note": self.note}


def _module_of(t: TensorSpec) -> str:
    return t.name.rsplit(".", 1)[0] if "." in t.name else ""


def saves_16bit_weights(ec: EffectiveConfig) -> bool:
    """False when ``engine.save_16bit_model`` (``engine.py:5707``) writes nothing: at ZeRO stage 3
    without ``stage3_gather_16bit_weights_on_model_save`` it logs and returns False (the weights
    exist only as partitions). accelerate's ``Accelerator.get_state_dict`` raises ValueError on the
    same condition (``zero_gather_16bit_weights_on_model_save()`` false), which is what the HF
    Trainer's ``save_model`` catches (rule H008)."""
    return not (ec.zero.stage == 3 and not ec.zero.gather_16bit_weights_on_model_save)


#: What ``engine.save_16bit_model`` does under the PipelineEngine (pipeline parallelism; ZeRO 0-1 only, pipe/engine.py
#: l.75-77). Below ZeRO-3 it calls ``self.module_state_dict()`` (runtime/engine.py l.5742), which the PipelineEngine
#: overrides (runtime/pipe/engine.py l.1308-1325) to write the layer files into ``self._curr_ckpt_path`` and return
#: None; that path is set only inside ``save_checkpoint`` / ``load_checkpoint`` (engine.py l.5389-5391, l.4617-4619).
#: Measured on the real engine (tests/engine/test_pipeline_engine.py, bf16 ZeRO-0, 2 stages, W = 2): before any
#: save_checkpoint it raises AttributeError ('PipelineEngine' object has no attribute '_curr_ckpt_path'), after one
#: AssertionError ("PipelineEngine expects module_state_dict() to be called from save_checkpoint()"), and after a
#: load_checkpoint it returns True having rewritten the layer files into the loaded tag and written a
#: pytorch_model.bin on rank 0 that holds None.
PIPELINE_SAVE16_NOTE = (
    "pipeline parallelism: the PipelineEngine cannot write it (save_16bit_model calls module_state_dict, which "
    "under the PipelineEngine writes the layer files into the current save_checkpoint tag and returns None, "
    "runtime/pipe/engine.py l.1308-1325: it raises outside save_checkpoint, and after a load_checkpoint it writes "
    "a pytorch_model.bin holding None); the model weights are the layer_XX-model_states.pt files save_checkpoint "
    "writes (runtime/pipe/module.py save_state_dict l.607-642), one per PipelineModule layer, in the model dtype")

#: :data:`PIPELINE_SAVE16_NOTE`'s last clause for a native-MoE ZeRO-1/2 engine: ``save_checkpoint`` calls
#: ``_save_moe_checkpoint`` only (engine.py l.4914-4919), which writes no layer files (l.5295-5298,
#: :func:`_moe_zero12_files`).
PIPELINE_MOE_SAVE16_NOTE = PIPELINE_SAVE16_NOTE.split("; the model weights are")[0] + (
    "; with MoE layers save_checkpoint writes no layer_XX files (_save_moe_checkpoint, runtime/engine.py "
    "l.4914-4919, l.5295-5298): the model weights are each stage's mp_rank_XX_model_states.pt (the non-expert "
    "module) and the layer_X_expert_Y_mp_rank_XX_model_states.pt files, in the model dtype")


#: Why ``engine.save_16bit_model`` writes nothing at ZeRO-3 without ``stage3_gather_16bit_weights_on_model_save``:
#: ``zero_optimization_partition_weights()`` and not ``zero_gather_16bit_weights_on_model_save()`` -> it logs "Did not
#: save the model" and returns False (runtime/engine.py l.5730-5740). The one wording of this fact: the checkpoint
#: section's note (:func:`save_16bit_model_plan`) and the timeline's ``save:16bit`` label (:func:`save16_instant_words`).
ZERO3_SAVE16_WHY = ("at stage 3 without stage3_gather_16bit_weights_on_model_save it returns False without writing "
                    "(runtime/engine.py l.5730-5740)")


def save16_instant_words(ec: EffectiveConfig, cluster: Cluster) -> str:
    """What the step timeline's ``save:16bit`` instant says ``engine.save_16bit_model`` does, from the
    predicates and words :func:`save_16bit_model_plan` reads (:func:`pipeline_saves_16bit`,
    :func:`saves_16bit_weights`, :data:`ZERO3_SAVE16_WHY`), so the timeline and the checkpoint section
    never disagree: under the PipelineEngine no model; ZeRO-3 with the gather, its largest module gathered
    (the instant's spike); ZeRO-3 without it, nothing; stages 0-2, rank 0's module state dict."""
    if not pipeline_saves_16bit(cluster):
        return "writes no model under the PipelineEngine (runtime/pipe/engine.py module_state_dict l.1308-1325)"
    if ec.zero.stage == 3:
        return "the largest module gathered" if saves_16bit_weights(ec) else f"writes nothing: {ZERO3_SAVE16_WHY}"
    return "rank 0 writes the module state dict"


def pipeline_saves_16bit(cluster: Cluster) -> bool:
    """False under pipeline parallelism (``cluster.pipeline_parallel`` > 1): the PipelineEngine's
    ``save_16bit_model`` writes no model file (:data:`PIPELINE_SAVE16_NOTE`, runtime/pipe/engine.py
    l.1308-1325; measured in tests/engine/test_pipeline_engine.py)."""
    return cluster.pipeline_parallel <= 1


def save_16bit_model_plan(plan: Plan) -> Save16:
    """What ``engine.save_16bit_model`` (``engine.py:5707``) writes and the memory it needs.

    * Stage 3 with ``stage3_gather_16bit_weights_on_model_save`` false: logs and returns False,
      writes nothing. With it true, ``_zero3_consolidated_16bit_state_dict`` (``:5631``) gathers the
      parameters of one module at a time (``GatheredParameters(modifier_rank=0)`` on every rank:
      sum over the module's params of p_i x W x D accelerator bytes, the largest module is the spike)
      and rank 0 copies each into a CPU state dict that grows to N_all x D host bytes; the file
      holds N_all x D (exact on GPU nodes, where ``.cpu()`` copies only the view). Modules are
      taken from tensor names (``a.b.weight`` -> module ``a.b``).
    * Pipeline parallelism (``cluster.pipeline_parallel`` > 1): writes nothing usable
      (:data:`PIPELINE_SAVE16_NOTE`): ``writes`` False, 0 bytes; the layer files of
      :func:`checkpoint_files` hold the weights (with MoE at ZeRO-1/2, :data:`PIPELINE_MOE_SAVE16_NOTE`, the
      mp_rank_XX and expert files).
    * Stages 0-2: rank 0 writes the module state_dict (stage 1/2: the padded flat buffer N_pad x D,
      as in the model-states file); host staging on rank 0 up to the largest storage (torch.save
      copies one storage at a time to host).
    """
    ec, inv = plan.config, plan.inventory
    D = DTYPE_BYTES[ec.model_dtype]
    W = plan.cluster.zero_world_size
    n_all = inv.numel
    if not pipeline_saves_16bit(plan.cluster):
        moe12 = plan.cluster.expert_parallel > 1 and ec.zero.stage in (1, 2)
        return Save16(False, 0, 0, 0, PIPELINE_MOE_SAVE16_NOTE if moe12 else PIPELINE_SAVE16_NOTE)
    if ec.zero.stage == 3:
        if not saves_16bit_weights(ec):
            return Save16(False, 0, 0, 0, ZERO3_SAVE16_WHY + "; use zero_to_fp32.py on the checkpoint")
        mods: dict[str, int] = {}
        for t in inv.tensors:
            mods[_module_of(t)] = mods.get(_module_of(t), 0) + zero3_partition_numel(t.numel, W) * W * D
        spike = max(mods.values(), default=0)
        return Save16(True, n_all * D, spike, n_all * D,
                      "gathered module by module; rank 0 holds the whole 16-bit model in host memory before writing")
    if ec.zero.stage in (1, 2):
        flats = [lay.n_pad for lay in placement_of(plan).zero12]  # the ledger's padded flat buffers
        frozen = [t.numel for t in inv.tensors if not t.trainable]
        size = (sum(flats) + sum(frozen)) * D
        return Save16(True, size, 0, max(flats + frozen, default=0) * D,
                      "module state_dict from rank 0 (views of the padded flat 16-bit buffer)")
    size = n_all * DTYPE_BYTES[ec.model_dtype]
    return Save16(True, size, 0, max((t.numel for t in inv.tensors), default=0) * D,
                  "module state_dict from rank 0")


# ------------------------------------------------------------------------------------------------
# timing and resilience (first-order formulas)

def transfer_time(nbytes: int, bandwidth: float) -> float:
    """Seconds to move ``nbytes`` at ``bandwidth`` bytes/s (aggregate of the checkpoint storage as
    seen by all writers together): t = bytes / bandwidth."""
    if bandwidth <= 0:
        raise ValueError("bandwidth must be positive")
    return nbytes / bandwidth


def aggregate_bandwidth(tier: Any, nodes: int, files: Any, ranks_per_node: int) -> tuple[float, float, tuple[str, dict]]:
    """(write, read bandwidth of the whole save, bytes/s; how) for a save over ``nodes`` nodes.

    * node-local tier (``scope`` "node-local", the default): each node writes its own ranks' files
      to its own drive (or array: an 8-drive RAID 0 is one tier with 8x the bandwidth) in
      parallel, so the save takes the busiest node's bytes / the tier's bandwidth; as an aggregate
      over the whole save: tier bandwidth x total bytes / busiest node's bytes (= x nodes when the
      nodes write equal shares);
    * shared tier: the filesystem's aggregate, capped by nodes x its per-client limit when stated
      (:meth:`advisor.cluster.hardware.StorageTier.cluster_rate`, the rule NVMe swap time uses too).
    """
    if tier.shared:
        w, r = tier.cluster_rate("write", nodes), tier.cluster_rate("read", nodes)
        return w, r, (literal(f"shared tier {tier.name}") + f": {nodes} client nodes at min(aggregate, nodes x "
                      "per-client limit) = {w:1/s} write, {r:1/s} read", {"w": w, "r": r})
    per_node: dict[int, int] = {}
    for rk, b in files.per_rank_bytes().items():
        per_node[rk // max(1, ranks_per_node)] = per_node.get(rk // max(1, ranks_per_node), 0) + b
    busiest = max(per_node.values(), default=0)
    factor = files.total_bytes / busiest if busiest else 1.0
    return (float(tier.write_bytes_per_s) * factor, float(tier.read_bytes_per_s) * factor,
            (literal(f"node-local tier {tier.name}") + f": the {nodes} nodes write their own ranks' files in parallel; "
             "the busiest node writes {busiest:1} of {total:1}, so the save runs at "
             f"{factor:,.2f} x one node's " + "{write:1/s}",
             {"busiest": busiest, "total": files.total_bytes, "write": float(tier.write_bytes_per_s)}))


def cluster_mtbf(node_mtbf_s: float, nodes: int) -> float:
    """Mean time between failures of the whole job (seconds): per-node MTBF / nodes (independent
    nodes with exponential failure times: the minimum of n exponentials has rate n / MTBF)."""
    if node_mtbf_s <= 0 or nodes < 1:
        raise ValueError("node MTBF must be positive and nodes >= 1")
    return node_mtbf_s / nodes


def young_daly_interval(save_s: float, mtbf_s: float) -> float:
    """Optimal time between checkpoints, first order (Young 1974, Daly 2006):
    tau = sqrt(2 x save time x MTBF), seconds."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def lost_fraction(interval_s: float, save_s: float, mtbf_s: float, restart_s: float) -> dict[str, float]:
    """Expected fraction of wall time not spent on useful training, first order (valid when
    save_s, interval_s << MTBF):

    saving = save_s / interval_s; rework = interval_s / (2 x MTBF) (on average half an interval of
    work is lost per failure); restart = restart_s / MTBF (restart_s includes reloading the
    checkpoint); total = their sum.
    """
    if interval_s <= 0:
        raise ValueError("interval must be positive")
    parts = {"saving": save_s / interval_s, "rework": interval_s / (2.0 * mtbf_s), "restart": restart_s / mtbf_s}
    parts["total"] = parts["saving"] + parts["rework"] + parts["restart"]
    return parts


def recovery_cost(restart_s: float, load_s: float, interval_s: float) -> dict[str, float]:
    """Seconds one failure costs: restart (scheduler, process start, ``initialize``) + reload of the
    checkpoint + the work lost since the last save (expected interval / 2, worst case interval)."""
    return {"restart": restart_s, "reload": load_s, "lost_work_expected": interval_s / 2.0,
            "lost_work_worst": interval_s,
            "expected_total": restart_s + load_s + interval_s / 2.0,
            "worst_total": restart_s + load_s + interval_s}


# ------------------------------------------------------------------------------------------------
# the plan (CLI and estimate view)

@dataclass
class CheckpointPlan:
    files: FilesResult
    save16: Save16
    keep: int
    world_size: int
    dp_world_size: int
    zero_stage: int
    #: Where ``world_size`` comes from (``advisor.cluster.launch.job_shape``'s source: "--world-size",
    #: an environment variable, a --hardware spec, or "default 1" when nothing gives it); None when
    #: the caller does not say (estimate's checkpoint section, whose report names the world already).
    world_size_source: str | None = None
    write_bandwidth: float | None = None
    read_bandwidth: float | None = None
    nodes: int | None = None
    node_mtbf_s: float | None = None
    step_time_s: float | None = None
    #: Where ``step_time_s`` comes from: "--step-time" (a measured run) or "model"
    #: (:mod:`advisor.ledger.steptime` on the hardware spec); None when there is none.
    step_time_source: str | None = None
    #: The workload the model's ``step_time_s`` was computed on ({field: {"value", "origin"}},
    #: :func:`advisor.views.estimate.step_time_workload`); None without a model step time.
    step_time_workload: dict[str, dict[str, Any]] | None = None
    restart_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: Where the checkpoints go (``save_checkpoint(save_dir)``) and, with a hardware spec, the
    #: storage tier holding it (``Hardware.tier_for_path``); None when unknown.
    save_dir: str | None = None
    tier: Any = None
    #: Save interval given by the user (seconds); None = the Young/Daly recommendation.
    save_interval_s: float | None = None
    #: Ranks per node, for the bytes the busiest node writes to its drive per save.
    ranks_per_node: int = 1
    #: Findings about the checkpoint storage (T003), set by advisor.views.checkpoint; empty here.
    findings: list = field(default_factory=list)
    #: index in ``notes`` -> (template, sizes) for a note naming sizes
    #: (:func:`advisor.findings.render_sized`): printed in the report's ``--units``; ``notes``
    #: holds it in the default units (GiB).
    notes_sized: dict[int, tuple[str, dict]] = field(default_factory=dict)
    #: The NVMe swap's writes to the save dir's tier (an nvme_path on the same tier):
    #: {"paths", "bytes_per_day", "step_time_s", "writing_nodes"}, set by
    #: ``views/estimate.share_save_tier`` from the movement ledger; :meth:`storage` adds them.
    swap_writes: dict[str, Any] | None = None

    # derived --------------------------------------------------------------------------------
    @property
    def per_save_bytes(self) -> int:
        return self.files.total_bytes

    @property
    def kept_bytes(self) -> int:
        """Files under the tag folder times ``keep``, plus the files directly in save_dir once
        (``latest``, the recovery scripts: overwritten by every save)."""
        tagged = sum(x.bytes * x.count for x in self.files.files if "/" in x.path)
        return tagged * self.keep + (self.per_save_bytes - tagged)

    @property
    def save_s(self) -> float | None:
        return transfer_time(self.per_save_bytes, self.write_bandwidth) if self.write_bandwidth else None

    @property
    def load_s(self) -> float | None:
        return transfer_time(self.files.read_bytes, self.read_bandwidth) if self.read_bandwidth else None

    @property
    def mtbf_s(self) -> float | None:
        if self.node_mtbf_s and self.nodes:
            return cluster_mtbf(self.node_mtbf_s, self.nodes)
        return None

    def largest_writer(self) -> dict[str, Any]:
        """The rank that writes the most bytes per save. ``save_s`` divides the whole save by the
        storage's aggregate bandwidth; when one rank writes most of it (ZeRO-0/1/2: rank 0 alone
        writes the 16-bit model file), a single client's bandwidth may bound the save instead."""
        pr = self.files.per_rank_bytes()
        if not pr:
            return {"rank": None, "bytes": 0, "share": 0.0}
        r = max(pr, key=lambda k: pr[k])
        return {"rank": r, "bytes": pr[r], "share": pr[r] / max(1, self.per_save_bytes)}

    def resilience(self) -> dict[str, Any] | None:
        save, mtbf = self.save_s, self.mtbf_s
        if save is None or mtbf is None or save <= 0:  # nothing is saved (e.g. DeepSpeed refuses the config)
            return None
        tau = young_daly_interval(save, mtbf)
        restart_total = self.restart_s + (self.load_s or 0.0)
        out: dict[str, Any] = {
            "cluster_mtbf_s": mtbf,
            "interval_s": tau,
            "interval_formula": "sqrt(2 x save_s x cluster_mtbf_s) (Young/Daly, first order)",
            "lost_fraction": lost_fraction(tau, save, mtbf, restart_total),
            "recovery_s": recovery_cost(self.restart_s, self.load_s or 0.0, tau),
        }
        if self.step_time_s:
            out["interval_steps"] = max(1, round(tau / self.step_time_s))
        return out

    def node_bytes_per_save(self) -> int:
        """Bytes the busiest node writes per save: the files of its ranks (rank r on node
        r // ranks_per_node) summed; a node-local tier takes these."""
        rpn = max(1, self.ranks_per_node)
        per_node: dict[int, int] = {}
        for f in self.files.files:
            if f.count == 1:
                per_node[f.rank // rpn] = per_node.get(f.rank // rpn, 0) + f.bytes
                continue
            # grouped: ranks rank + i x stride, i < count; how many land on each node, in O(nodes touched)
            first_node, last_node = f.rank // rpn, (f.rank + (f.count - 1) * f.stride) // rpn
            for n in {first_node, first_node + 1, last_node} | set(per_node):
                lo, hi = max(n * rpn, f.rank), min((n + 1) * rpn, f.rank + f.count * f.stride) - 1
                if hi >= lo:
                    k = (hi - f.rank) // f.stride - -(-(lo - f.rank) // f.stride) + 1
                    if k > 0:
                        per_node[n] = per_node.get(n, 0) + k * f.bytes
        return max(per_node.values(), default=0)

    def tier_bytes_per_save(self) -> int:
        """Bytes one save puts on the storage tier's drives: a node-local tier (each node its own
        drive) takes the busiest node's files (:meth:`node_bytes_per_save`); a shared tier (one
        filesystem for the cluster, ``scope`` "shared") takes every node's, the whole save
        (:attr:`per_save_bytes`)."""
        if self.tier is not None and self.tier.shared:
            return self.per_save_bytes
        return self.node_bytes_per_save()

    def tier_writers(self) -> str:
        """Whose writes :meth:`tier_bytes_per_save` counts, in words: "the busiest node" or, on a
        shared tier, "all N nodes together (shared tier)"."""
        if self.tier is not None and self.tier.shared:
            n = ceil_div(self.world_size, max(1, self.ranks_per_node))
            return f"all {n} node{'s' if n != 1 else ''} together (shared tier)"
        return "the busiest node"

    def interval(self) -> tuple[float | None, str | None]:
        """(seconds between saves, where it comes from): the given interval, else Young/Daly."""
        if self.save_interval_s:
            return self.save_interval_s, "--save-interval"
        res = self.resilience()
        if res:
            return res["interval_s"], "Young/Daly"
        return None, None

    def storage(self) -> dict[str, Any] | None:
        """The checkpoint storage tier and its wear per day (bytes; seconds; days), or None when
        neither a save dir nor a tier is known. Per-day figures come from
        :func:`advisor.ledger.movement.endurance` with one save as the "step" and the save interval as
        its duration: saves/day = 86,400 / interval, bytes/day = the tier's bytes per save
        (:meth:`tier_bytes_per_save`: the busiest node's on a node-local tier, the whole save on a
        shared one) x saves/day, days of life = rated bytes / bytes per day; endurance used per day = bytes/day / rated.
        When the NVMe swap writes to the same tier (:attr:`swap_writes`), bytes/day and the wear
        count both (:func:`advisor.ledger.movement.shared_tier_wear`): ``checkpoint_bytes_per_day``
        and ``swap_bytes_per_day`` give the parts, ``shares_tier_with`` the swap's paths."""
        t = self.tier
        if self.save_dir is None and t is None:
            return None
        from advisor.ledger.movement import endurance

        out: dict[str, Any] = {"save_dir": self.save_dir, "tier": t.name if t else None,
                               "access": t.access if t else None, "mounts": list(t.mounts) if t else [],
                               "write_bytes_per_s": t.write_bytes_per_s if t else None,
                               "read_bytes_per_s": t.read_bytes_per_s if t else None,
                               "capacity_bytes": t.capacity_bytes if t else None,
                               "rated_write_bytes": t.rated_write_bytes if t else None,
                               "endurance": t.endurance.describe() if t and t.endurance else None,
                               "warranty_days": (t.endurance.warranty_years * 365.0
                                                 if t and t.endurance and t.endurance.warranty_years else None),
                               "ranks_per_node": self.ranks_per_node,
                               "bytes_written_per_save": self.tier_bytes_per_save(),
                               "written_by": self.tier_writers(),
                               "save_interval_s": None, "interval_source": None, "saves_per_day": None,
                               "bytes_written_per_day": None, "drive_writes_per_day": None,
                               "endurance_used_per_day": None, "days_of_life": None,
                               "checkpoint_bytes_per_day": None, "swap_bytes_per_day": None,
                               "shares_tier_with": None}
        iv, src = self.interval()
        if iv:
            rated = out["rated_write_bytes"]
            spd, per_day, days = endurance(out["bytes_written_per_save"], iv, rated)
            out.update(save_interval_s=iv, interval_source=src, saves_per_day=spd, bytes_written_per_day=per_day,
                       days_of_life=None if days == math.inf else days)
            if t is not None and t.capacity_bytes:
                out["drive_writes_per_day"] = per_day / t.capacity_bytes
            if rated:
                out["endurance_used_per_day"] = per_day / rated
            out["checkpoint_bytes_per_day"] = per_day
            sw = self.swap_writes
            if sw is not None and sw.get("bytes_per_day") is not None:
                from advisor.ledger.movement import shared_tier_wear
                out.update(shared_tier_wear({"checkpoint": per_day, "swap": sw["bytes_per_day"]}, rated,
                                            t.capacity_bytes if t is not None else None),
                           swap_bytes_per_day=sw["bytes_per_day"],
                           shares_tier_with=f"NVMe swap ({', '.join(sw['paths'])})")
        return out

    def to_dict(self) -> dict[str, Any]:
        f = self.files
        return {
            "zero_stage": self.zero_stage,
            "wrapper": f.wrapper,
            "basic_optimizer": f.basic_optimizer,
            "world_size": self.world_size,
            "dp_world_size": self.dp_world_size,
            **({"world_size_source": self.world_size_source} if self.world_size_source else {}),
            "unsupported": f.unsupported,
            "files": [x.to_dict() for x in f.files],
            "per_rank_bytes": {str(k): v for k, v in sorted(f.per_rank_bytes().items())},
            "largest_writer": self.largest_writer(),
            "per_save_bytes": self.per_save_bytes,
            "keep": self.keep,
            "kept_bytes": self.kept_bytes,
            "read_bytes": f.read_bytes,
            "payload": "tensor bytes (storages torch.save serialises); .pt files add pickle overhead",
            "save_16bit_model": self.save16.to_dict(),
            "write_bandwidth": self.write_bandwidth,
            "read_bandwidth": self.read_bandwidth,
            "save_s": self.save_s,
            "load_s": self.load_s,
            "restart_s": self.restart_s,
            "nodes": self.nodes,
            "node_mtbf_s": self.node_mtbf_s,
            "step_time_s": self.step_time_s,
            "step_time_source": self.step_time_source,
            "step_time_workload": self.step_time_workload,
            "resilience": self.resilience(),
            "storage": self.storage(),
            "findings": [x.to_dict() for x in self.findings],
            "notes": list(f.notes) + list(self.notes),
        }


def checkpoint_plan(plan: Plan, *, keep: int = 1,
                    write_bandwidth: float | None = None, read_bandwidth: float | None = None,
                    nodes: int | None = None, node_mtbf_hours: float | None = None,
                    step_time_s: float | None = None, restart_s: float = 300.0, tag: str = DEFAULT_TAG,
                    hardware: Any = None, save_dir: str | None = None,
                    save_interval_s: float | None = None) -> CheckpointPlan:
    """Everything about durable checkpoints for one config (bytes, seconds, bytes/second).

    ``nodes`` defaults to the hardware spec's node count, else ceil(world_size / gpus_per_node)
    (gpus_per_node default: the spec's accelerators per node, else 8, capped at the world size);
    ``restart_s`` is the time from a failure to the job running again before the reload
    (scheduler, process start, initialize).

    With ``hardware`` (:class:`advisor.cluster.hardware.Hardware`) and ``save_dir``, the storage tier
    holding ``save_dir`` supplies the defaults of ``write_bandwidth`` and ``read_bandwidth`` (given
    values win) and the plan reports the tier's wear per day at the save interval (``save_interval_s``
    when given, else Young/Daly); the findings about the tier (T003) are the view's
    (:func:`advisor.views.checkpoint.checkpoint_view`), not computed here. Without a tier,
    ``read_bandwidth`` defaults to ``write_bandwidth``.
    """
    if keep < 1:
        raise ValueError("keep must be >= 1")
    if save_interval_s is not None and not save_interval_s > 0:
        raise ValueError("save interval must be positive")
    ec, cluster = plan.config, plan.cluster
    files = checkpoint_files(plan, tag=tag)
    per_node = cluster.gpus_per_node or (hardware.node_accelerators if hardware is not None else None) or 8
    per_node = max(1, min(per_node, cluster.world_size))
    if nodes is None:
        nodes = hardware.nodes if hardware is not None else ceil_div(cluster.world_size, per_node)
    notes: list[str] = []
    notes_sized: dict[int, tuple[str, dict]] = {}
    tier = hardware.tier_for_path(save_dir) if hardware is not None and save_dir else None
    if save_dir and hardware is None:
        notes.append("--save-dir without --hardware: no storage tier known, so no bandwidth defaults or wear figures")
    elif save_dir and tier is None:
        notes.append(f"no storage tier of {hardware.name} holds {save_dir!r}" +
                     ("" if save_dir.startswith("/") else " (give an absolute path)") +
                     ": give --write-bandwidth for the save time")
    if tier is not None:
        n_writing = ceil_div(cluster.world_size, per_node)
        w_agg, r_agg, how = aggregate_bandwidth(tier, n_writing, files, per_node)
        if write_bandwidth is None:
            write_bandwidth = w_agg
        if read_bandwidth is None:
            read_bandwidth = r_agg
        if n_writing > 1:
            notes_sized[len(notes)] = how
            notes.append(render_sized(*how, DEFAULT_UNITS))
    if ec.zero.stage >= 1:
        notes.append(f"ZeRO-{ec.zero.stage} optimizer state is partitioned over {cluster.dp_world_size} data-parallel "
                     "ranks: resuming at another data-parallel world size needs DeepSpeed's universal checkpoint "
                     "(python -m deepspeed.checkpoint.ds_to_universal, then \"checkpoint\": {\"load_universal\": "
                     "true}); zero_to_fp32.py recovers the weights only")
    elif plan_optimizer(plan)[0] == "BF16_Optimizer":
        notes.append(BF16_ZERO0_RESUME_NOTE.format(dp=cluster.zero_world_size))
    else:
        notes.append("stage 0: every rank holds the full state, so a restart at another world size loads the same "
                     "file (no conversion needed)")
    s16 = plan
    from advisor.model.parallel import is_shard
    if (cluster.tensor_parallel > 1 or cluster.pipeline_parallel > 1) and not is_shard(plan.inventory):
        from advisor.model.parallel import shard  # each model-parallel rank saves its own: the first one's
        s16 = Plan(ec, shard(plan.inventory, cluster.tensor_parallel, cluster.pipeline_parallel,
                             cluster.expert_parallel)[0].inventory, cluster, plan.workload)
    cp = CheckpointPlan(files=files, save16=save_16bit_model_plan(s16), keep=keep,
                          world_size=cluster.world_size, dp_world_size=cluster.dp_world_size, zero_stage=ec.zero.stage,
                          write_bandwidth=write_bandwidth, read_bandwidth=read_bandwidth or write_bandwidth,
                          nodes=nodes, node_mtbf_s=node_mtbf_hours * 3600.0 if node_mtbf_hours else None,
                          step_time_s=step_time_s, step_time_source="--step-time" if step_time_s else None,
                          restart_s=restart_s, notes=notes, save_dir=save_dir, tier=tier,
                          save_interval_s=save_interval_s, ranks_per_node=per_node, notes_sized=notes_sized)
    return cp


def checkpoint_for(plan: Plan) -> CheckpointPlan:
    """``checkpoint_plan`` for an :class:`advisor.plan.Plan` (sizes only: no bandwidth or MTBF), the
    entry point the HTML report and the estimate view look for."""
    return checkpoint_plan(plan)


# ------------------------------------------------------------------------------------------------
# text view

