"""The step-time model: seconds per optimizer step as a critical path over compute, collectives,
PCIe copies, NVMe swaps and the CPU optimizer step, every term from a ledger figure over a
bandwidth or FLOP rate of the hardware spec.

One optimizer step = ``gradient_accumulation_steps`` micro-steps; every figure here is per
optimizer step and per rank (ranks of one role move equal bytes, :mod:`advisor.ledger.movement`).

Terms (each a :class:`Term`: amount, rate, seconds, formula, source):

* **compute** = (6 x N_active + attention) x T / (peak x MFU), T = tokens per rank per step (Kaplan et al.
  2020, "Scaling Laws for Neural Language Models", s.2.1: C ~ 6 N per token for forward +
  backward, 2 N forward and 4 N backward), peak = the accelerator's dense 16-bit FLOP/s
  (fp32 at half of it, TF32), MFU = :data:`MFU` unless the accelerator preset names its own
  (``assumed_mfu``). **attention** (:func:`attention_flops_per_token`): the attention scores
  and weighted values, which 6 N does not count and which grow with the sequence length s:
  per token 6 x L x s x a x (d_qk + d_v) forward + backward, PaLM's 12 x L x H x Q x T when
  d_v = d_qk (Chowdhery et al. 2022, Appendix B; the same term as Megatron-LM's
  72 B s l h^2 (1 + s/(6h) + ...), Narayanan et al. SC'21 s.5.1 eq. 3); like both, it counts
  the full s x s scores, no causal-mask halving (a causal flash kernel skips about half of
  them) and no sliding window. **recompute** = the activations estimate's fraction x the
  compute (6 N + attention) x T, in the backward window: the fraction is the recomputed forward
  FLOPs over the same 6 N + attention per token (:mod:`advisor.model.flops`, Korthikanti et al.
  2022): full (or k of L layers, k / L of it) one more forward of the layers, 2 x N_layers + A / 3
  per token (N_layers: N_active less the embeddings and output head, which layer checkpoints do
  not recompute; a model of layers only gets the paper's 8 N / 6 N = 4/3); selective the attention
  core's forward, A / 3 = 2 x L x s x a x (d_qk + d_v) (4 s h per layer with d = h / a).
* **model parallelism**: a rank of tensor parallel t, pipeline parallel p and Ulysses degree u
  computes 1/(t p u) of those FLOPs (each holds 1/t of every layer's weights, 1/p of the layers,
  s/u of each sequence). The 1F1B schedule leaves a **pipeline bubble** of (p-1)/m of the
  ideal compute time for m = GA micro-batches per step: (p-1)/(m+p-1) of the pipelined step
  (Narayanan et al., SC'21, section 2.2.1: t_pb / t_id = (p-1)/m, the same for GPipe and
  PipeDream-Flush 1F1B), charged on the critical path. The tensor-parallel all-reduces (or
  Megatron-SP all-gather/reduce-scatter) and the stage-to-stage sends are synchronous movements
  (:func:`advisor.ledger.movement.model_parallel_movements`): Megatron waits on them between
  the layer's matmuls.
* **collectives**: bytes each rank sends (:mod:`advisor.ledger.movement`, the ZeRO paper's
  volumes) over a flat **ring**: a ring all-gather or reduce-scatter of an S-byte buffer over W
  ranks sends (W-1)/W x S per rank and takes (W-1)/W x S / B; an all-reduce is a
  reduce-scatter plus an all-gather, 2 (W-1)/W x S / B (NCCL's cost model: nccl-tests
  doc/PERFORMANCE.md, "bus bandwidth"). B is the ring's slowest hop per rank: within one node
  the peer link (NVLink/xGMI) per direction; across nodes the node's network bandwidth shared
  by its ranks (``network_bytes_per_s / ranks_per_node``: one NIC rail per GPU on DGX systems).
  Latency (alpha) terms are left out: at ZeRO bucket sizes (>= 10^7 elements) they are
  microseconds against milliseconds.
* **PCIe** copies and **NVMe** reads/writes: the movement ledger's bytes over the accelerator's
  host link, or the storage tier's read/write bandwidth shared by the node's ranks
  (:func:`advisor.ledger.movement.link_bandwidth`). Read and write on one tier share the drive:
  they are added, not overlapped with each other. The tier's rate is limited by the config's
  ``aio`` settings (:func:`advisor.ledger.movement.aio_bandwidth`: by Little's law, the bytes
  O the node's ranks keep in flight, ranks x intra_op_parallelism x queue_depth x block_size,
  over the time they take, one request latency plus O at the tier's rate); DeepSpeed's defaults
  get 92 % or more of every preset tier's rate, a queue depth of 1 or small blocks far less
  (:func:`nvme_aio_rates` says per tier and direction).
* **cpu_optimizer**: DeepSpeedCPUAdam is memory-bandwidth bound. Its AVX kernel
  (``csrc/includes/cpu_adam.h`` ``Adam_Optimizer::Step_AVX``) loads the fp32 gradient, both
  moments and the fp32 parameter (16 B) and stores the parameter and both moments (12 B) per
  element: :data:`CPU_ADAM_KERNEL_BYTES` = 28 B. Before it, ``unscale_and_clip_grads`` scales
  the fp32 gradient in place (``grad.mul_``, read + write 4 B: :data:`UNSCALE_BYTES` = 8 B),
  every step at ZeRO-3, at ZeRO-1/2 unless clipping is 0 and the loss scale 1
  (:func:`unscale_runs`); the gradient norm is taken on the accelerator, not here. The updated
  16-bit copy is made on the host from the fp32 master (read 4 B, write D B:
  ``stage_1_and_2.py`` ``step`` ``param_buffer_of_bit16_for_cpu_offload_groups``, ``stage3.py``
  ``_reassign_or_swap_out_partitioned_parameters``). Per rank: partition elements x
  (28 + 8 + 4 + D) B (bf16 with clipping: 42 B); the ranks of one node run it at the same time over the node's host memory:
  t = bytes per rank x ranks per node / host memory bandwidth (the system preset's
  ``host_memory_bandwidth_bytes_per_s``, a STREAM-style figure: read + write bytes per second).
  Lion/Adagrad (one state) stream 8 B less; any other optimizer is counted like Adam.
  **The cores given to it**: the kernel's loop is ``#pragma omp parallel for``
  (``csrc/adam/cpu_adam_impl.cpp``), so a rank streams on its OpenMP threads, each a core:
  rate per rank = min(host memory bandwidth / ranks per node, threads x one core's bandwidth
  ``host_core_bandwidth_bytes_per_s``) (:func:`cpu_optimizer_rate`). Threads: ``--omp-threads`` /
  OMP_NUM_THREADS, else the launcher's default (:func:`cpu_threads_per_rank`: torchrun and
  accelerate 1 per rank with several ranks per node; torch's physical cores with one); where the
  threads limit the step, the breakdown names the fix (OMP_NUM_THREADS, ``deepspeed
  --bind_cores_to_rank``). A spec without ``host_memory_bandwidth_bytes_per_s`` but with the
  per-core figure leaves the min's share term unknown: the step is timed at the threads' rate, the
  fastest it can run, and marked a lower bound (``Term.lower_bound``, listed in ``unknown``).

Overlap, as DeepSpeed 0.19.8 applies it (the ledger's ``overlap`` flag on each movement, and the
phase it happens in):

* forward and backward windows: each pass's compute runs alongside ZeRO-3's prefetched parameter
  all-gathers and offloaded-parameter fetches of that pass (``stage3_prefetch_bucket_size`` > 0,
  ``partitioned_param_coordinator.py`` prefetch; the backward pass fetches again what forward
  released, and an NVMe-offloaded partition is read from NVMe in each pass,
  ``partition_parameters.py`` ``_ensure_availability_of_partitioned_params`` /
  ``__prefetch_nvme_param_partitions``), the all-gathers and PCIe fetches only with
  ``overlap_comm``: without it the all-gather stream is the default stream
  (``parameter_offload.py`` l.195-196; the coordinator's ``with stream(allgather_stream)``,
  l.606), so they run between the layers' kernels, exposed in full
  (:func:`advisor.ledger.movement.zero3_fetch_overlaps`); the NVMe reads are aio threads, not a
  stream, and overlap with prefetching alone;
* backward window: compute backward (4/6) and recompute run alongside the gradient
  reduce-scatter and the offload's gradient copies over PCIe, both only with ``overlap_comm``
  (``stage_1_and_2.py`` / ``stage3.py`` ``reduce_ipg_grads`` / ``partition_grads`` on a side
  stream); without it DeepSpeed runs them on the compute stream (``stage3.py`` l.340-341:
  ``reduce_and_partition_stream`` is the default stream; ``stage_1_and_2.py`` l.2239-2245), so
  they are synchronous, exposed in full;
* a window lasts max(compute, each link's overlapped seconds): links are separate resources;
  what a link needs beyond the compute is **exposed**;
* step: the CPU optimizer step, after the backward pass of the accumulation boundary and before
  the next forward: ``engine.step`` calls ``_take_model_step`` -> ``self.optimizer.step()`` only at
  the boundary (``runtime/engine.py`` l.3611-3615, l.3505-3516), and the optimizer's ``step`` runs
  DeepSpeedCPUAdam per sub-group / param group synchronously (``stage3.py`` l.2910-2927:
  unscale, ``_optimizer_step``, then ``_reassign_or_swap_out_partitioned_parameters``;
  ``stage_1_and_2.py`` ``step`` l.3013, ``_optimizer_step`` l.3084 / l.3139): the next forward
  starts after it returns, so nothing hides it. Only SuperOffload
  (``offload_optimizer.super_offload``, ZeRO-3 on CUDA; ``engine.py`` l.2748-2750) steps CPU
  sub-groups during the boundary's backward, and only with ``gradient_clipping`` 0
  (``superoffload/superoffload_stage3.py`` ``partition_grads`` l.168-181, ``not self.clip_grad``;
  with clipping ``_step_with_clipping`` steps them after backward): not modelled, the assumptions
  say so (:data:`SUPER_OFFLOAD_NOTE`: the CPU step counted in full is then an upper bound).
  With NVMe optimizer swap, ``pipeline_read`` lets the sub-group
  reads overlap the CPU step of the previous sub-group and ``pipeline_write`` the writes that of
  the next, each flag for its own direction (``swap_tensor/pipelined_optimizer_swapper.py``
  l.76-77: ``async_swap_in = pipeline_read``, ``async_swap_out = pipeline_write``): max(CPU step,
  the pipelined direction(s)), the other direction added in full;
* movements DeepSpeed issues synchronously (the all-gather of updated partitions, the 16-bit
  copy back over PCIe, the NVMe gradient write at the boundary, stage 0's all-reduce) are
  exposed in full.

step seconds = forward window + backward window + step phase + synchronous movements (the
critical path, not the sum of the terms). Left out: first-iteration fetches that nothing
precedes, kernel launch and hook overheads, data loading, and contention between a side stream
and the compute kernels (perfect overlap within a window is DeepSpeed's design intent, an upper
bound on what overlap hides).

No torch or deepspeed import.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from advisor.config.effective import DTYPE_BYTES, derive_batch
from advisor.ledger.movement import NETWORK, NVME, PCIE, Movement, movement_roles, nvme_rate
from advisor.model.flops import FORWARD_SHARE, attention_flops_per_token  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from advisor.cluster.hardware import Hardware
    from advisor.ledger.state import Plan

#: Model FLOPs utilisation assumed for the compute term when the accelerator preset names none.
#: An assumption, not a measurement: Megatron-LM reaches 52 % of peak on 3,072 A100s
#: (Narayanan et al., SC'21, abstract) and PaLM 46.2 % MFU (Chowdhery et al. 2022, Table 3);
#: ZeRO data parallelism with its extra collectives runs lower, so 0.4.
MFU = 0.4
#: Bytes DeepSpeedCPUAdam's kernel streams per element per step (csrc/includes/cpu_adam.h
#: Step_AVX: loads grad, exp_avg, exp_avg_sq, param (4 x 4 B), stores param, exp_avg,
#: exp_avg_sq (3 x 4 B)).
CPU_ADAM_KERNEL_BYTES = 28
#: Bytes the unscale pass streams per element of the CPU-resident fp32 gradient partition when it
#: runs (:func:`unscale_runs`): ``unscale_and_clip_grads`` multiplies it in place by 1 / (loss scale
#: x clip), ``grad.mul_(...)``: reads 4 B and writes 4 B, a pass of its own before the Adam kernel
#: (DeepSpeed 0.19.8 ``runtime/zero/stage3.py`` l.2918 per sub-group in ``step``, l.2988
#: ``fp32_partitioned_groups_flat[i].grad.mul_``; ``runtime/zero/stage_1_and_2.py`` l.3080 on
#: ``single_partition_of_fp32_groups[i].grad``, l.3216 ``grad.data.mul_``). Counted by bytes at the
#: host memory bandwidth; benchmarks/steptime_calibration.py times it beside the Adam kernel (on the
#: 2-vCPU VM, one thread, 8M / 32M / 64M elements: model / measured 1.20 / 1.08 / 1.01,
#: benchmarks/results/steptime_calibration-vm-unscale.json).
UNSCALE_BYTES = 8
#: Below this fraction of a storage tier's rate at the config's aio settings the step-time
#: breakdown names the tier direction (DeepSpeed's defaults give 92 % or more on every preset
#: tier: the rate is approached, never reached, :func:`advisor.ledger.movement.aio_bandwidth`).
AIO_LIMITED = 0.9
#: What the CPU optimizer term says of the threads when the hardware spec gives no per-core
#: bandwidth (``host_core_bandwidth_bytes_per_s``): the threads are then not modelled.
CPU_OPTIMIZER_THREADS_NOTE = ("each rank's DeepSpeedCPUAdam is assumed to have enough OpenMP threads to stream its share "
                              "of the host memory bandwidth (the hardware spec gives no host_core_bandwidth_bytes_per_s); "
                              "torchrun sets OMP_NUM_THREADS=1 for more than one process per node unless it is set, and "
                              "DeepSpeed's launcher gives each rank its cores only with --bind_cores_to_rank: with one "
                              "thread per rank the step can take longer than this term")
#: Where the thread count comes from when neither ``--omp-threads`` nor OMP_NUM_THREADS gives it:
#: torchrun sets OMP_NUM_THREADS=1 when it is unset and nproc_per_node > 1
#: (torch/distributed/run.py ``run``: ``if "OMP_NUM_THREADS" not in os.environ and nproc_per_node
#: > 1``), and ``accelerate launch`` passes ``--num_cpu_threads_per_process``, default
#: OMP_NUM_THREADS or 1 (accelerate/commands/launch.py, utils/launch.py ``current_env["OMP_NUM_THREADS"]``).
LAUNCHER_DEFAULT_MULTI = ("torchrun's default with more than one rank per node and OMP_NUM_THREADS unset "
                          "(torch/distributed/run.py; accelerate launch also sets 1)")
#: One rank per node and OMP_NUM_THREADS unset: torch's intra-op default, the physical cores
#: (at::init_num_threads / intraop_default_num_threads), which the cpu_adam op's ``#pragma omp
#: parallel for`` runs on from the calling thread.
LAUNCHER_DEFAULT_SINGLE = ("one rank per node, OMP_NUM_THREADS unset: torch's default, the node's physical cores "
                           "(host_cores_per_node)")
#: The words a preset's source uses for an assumed (not measured) one-core bandwidth
#: (data/hardware_presets.json: a Little's-law figure from the L2 miss queue and a latency).
CORE_BW_ASSUMED = "host_core_bandwidth_bytes_per_s ASSUMED"
#: How the collectives are costed (the one statement of it; :func:`ring_seconds` computes it), per
#: kind and per link: what the step-time JSON's ``assumptions.collectives`` and text breakdown say.
COLLECTIVE_MODEL = {
    "algorithm": "flat ring (no tree: nccl-tests doc/PERFORMANCE.md bus bandwidth, the ring's cost)",
    "all_gather": "ring all-gather: (W-1)/W x S / B",
    "reduce_scatter": "ring reduce-scatter: (W-1)/W x S / B",
    "all_reduce": "ring all-reduce (reduce-scatter + all-gather): 2 (W-1)/W x S / B",
    "within_node": "B = the peer link per direction (NVLink/xGMI)",
    "across_nodes": "B = the node's network bandwidth / ranks per node",
    "latency": "left out (microseconds at ZeRO bucket sizes)",
}
#: What the CPU optimizer line says when the host memory bandwidth is a data-sheet theoretical
#: peak (the preset's ``source`` says "theoretical peak", data/hardware_presets.json: channels x
#: MT/s x 8 B): STREAM measures less on real systems, so the CPU step is a lower bound.
HOST_BW_PEAK_NOTE = ("host memory bandwidth is the data sheet's theoretical peak (the preset's source); a measured "
                     "STREAM figure is lower, so the CPU step is a lower bound: give the measured one as "
                     "host_memory_bandwidth_bytes_per_s in a --hardware JSON")
#: How the compute term counts FLOPs (the one statement of it; :func:`step_time` computes it): what
#: the step-time JSON's ``assumptions.compute`` and generate's assumptions say.
COMPUTE_MODEL = ("(6 x active parameters + 6 x L x s x heads x (d_qk + d_v)) x tokens per rank per step / (dense "
                 "peak FLOP/s x MFU) (Kaplan et al. 2020 s.2.1; the attention scores as PaLM Appendix B's 12 L H Q T, "
                 "full s x s, no causal halving), plus the recompute with checkpointing: full / k of L one more forward "
                 "of those layers (2 x layer parameters + attention / 3 per token), selective the attention core's "
                 "forward (attention / 3) (Korthikanti et al. 2022)")
#: How the CPU optimizer term counts bytes (:func:`cpu_adam_bytes_per_element` computes it): generate's
#: assumptions say it.
CPU_OPTIMIZER_MODEL = ("DeepSpeedCPUAdam: partition elements x (28 B kernel + 8 B unscale pass where DeepSpeed runs "
                       "it + (4 + D) B 16-bit copy) / min(host_memory_bandwidth_bytes_per_s / ranks per node, OpenMP "
                       "threads per rank x host_core_bandwidth_bytes_per_s)")
#: What the step time leaves out for fp16 at ZeRO-3 with the optimizer offloaded: DeepSpeed checks the
#: host gradient buffer for inf/nan on the CPU every step (``stage3.py`` ``step`` ->
#: ``_overflow_check_and_loss_scale_update``, fp16 only; ``has_overflow`` l.3009-3018
#: ``torch.isinf`` / ``torch.isnan`` over ``grad_partitions_flat_buffer``, allocated on
#: ``self.device``, the CPU under offload, l.333 and l.791-795). Compute-bound, not a bytes term: on
#: the 2-vCPU VM, one thread, 108 ms per 32M fp16 elements against 18 ms for DeepSpeedCPUAdam's step.
FP16_OVERFLOW_CHECK_NOTE = ("fp16 at ZeRO-3 with the optimizer offloaded: DeepSpeed's overflow check (torch.isinf / "
                            "isnan over the host gradient buffer, stage3.py has_overflow) runs on the CPU every step "
                            "and is not in this step time; it is compute-bound, measured at about 6 x DeepSpeedCPUAdam's "
                            "step per element on one core")


@dataclass
class Term:
    """One part of the step: ``seconds`` it takes on its resource and the part of it that is
    ``exposed`` (on the critical path). ``amount`` in ``unit`` (FLOP or bytes) at ``rate``
    (FLOP/s or bytes/s); None where the hardware spec lacks the rate. ``lower_bound``: the rate
    is an upper limit only, one of its figures missing from the hardware spec (the CPU optimizer
    step timed at its OpenMP threads' rate without ``host_memory_bandwidth_bytes_per_s``, whose
    per-rank share could be lower), so ``seconds`` is a lower bound and the part counts as unknown
    (:class:`StepTime` ``unknown``)."""

    name: str
    resource: str
    phase: str
    amount: float
    unit: str
    rate: float | None
    seconds: float | None
    exposed: float | None = None
    overlapped: bool = False
    formula: str = ""
    source: str = ""
    lower_bound: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepTime:
    """Seconds per optimizer step (``total``) as the critical path over ``terms``; ``unknown``
    names terms whose rate the hardware spec lacks (counted as 0)."""

    total: float
    terms: list[Term]
    windows: dict[str, float]
    unknown: list[str] = field(default_factory=list)
    assumptions: dict[str, Any] = field(default_factory=dict)

    def by_resource(self, exposed: bool = True) -> dict[str, float]:
        """Seconds per resource (compute, network, pcie, nvme, host_memory): exposed (default)
        or busy."""
        out: dict[str, float] = {}
        for t in self.terms:
            v = t.exposed if exposed else t.seconds
            out[t.resource] = out.get(t.resource, 0.0) + (v or 0.0)
        return out

    def bound(self) -> str:
        """The resource with the most exposed seconds."""
        r = self.by_resource()
        return max(r, key=lambda k: r[k]) if r else "compute"

    def to_dict(self) -> dict[str, Any]:
        return {"step_time_s": self.total, "windows_seconds": self.windows,
                "exposed_seconds_by_resource": self.by_resource(), "busy_seconds_by_resource": self.by_resource(False),
                "terms": [t.to_dict() for t in self.terms], "unknown": self.unknown, "assumptions": self.assumptions}


# ---------------------------------------------------------------------------------------------
# pieces


def ring_seconds(collective: str, buffer_bytes: float, world: int, bandwidth: float) -> float:
    """Seconds for a ring collective of an S-byte buffer (the whole gathered / reduced tensor)
    over ``world`` ranks at ``bandwidth`` bytes/s per rank per direction: all-gather and
    reduce-scatter (W-1)/W x S / B, all-reduce 2 (W-1)/W x S / B (nccl-tests
    doc/PERFORMANCE.md). Raises ValueError for an unknown collective or a non-positive
    bandwidth or world."""
    if world < 1 or bandwidth <= 0:
        raise ValueError("world must be >= 1 and bandwidth positive")
    k = {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2}.get(collective)
    if k is None:
        raise ValueError(f"unknown collective {collective!r}")
    return k * (world - 1) / world * buffer_bytes / bandwidth


def window(compute_s: float, overlapped: dict[str, float]) -> tuple[float, dict[str, float]]:
    """A window in which compute runs alongside overlapped transfers on separate links: (window
    seconds = max(compute, each link's seconds), exposed seconds per link = max(0, link -
    compute))."""
    longest = max([compute_s] + list(overlapped.values()))
    return longest, {k: max(0.0, v - compute_s) for k, v in overlapped.items()}


def peak_flops(hardware: "Hardware", precision: str) -> float | None:
    """The accelerator's dense FLOP/s for ``precision`` (bf16/fp16; fp32 trains on TF32 at half
    the 16-bit peak, an assumption). None when the spec lacks it."""
    a = hardware.accelerator
    if a is None:
        return None
    if precision == "fp16":
        return a.peak_fp16_flops or a.peak_bf16_flops
    if precision == "bf16":
        return a.peak_bf16_flops
    return (a.peak_bf16_flops or 0) / 2 or None


def mfu_for(hardware: "Hardware") -> tuple[float, str]:
    """(MFU, where it comes from): the accelerator preset's ``assumed_mfu``, else :data:`MFU`."""
    a = hardware.accelerator
    v = getattr(a, "assumed_mfu", None) if a is not None else None
    if v:
        return float(v), f"{a.name} preset's assumed_mfu"
    return MFU, "default assumption (advisor.ledger.steptime.MFU)"


#: SuperOffload with gradient_clipping 0 steps CPU sub-groups asynchronously during the boundary's
#: backward (``runtime/superoffload/superoffload_stage3.py`` ``partition_grads`` l.168-181); the
#: model counts the CPU step in full after backward, as DeepSpeed runs it otherwise.
SUPER_OFFLOAD_NOTE = ("offload_optimizer.super_offload with gradient_clipping 0: DeepSpeed steps CPU sub-groups "
                      "during the boundary's backward (superoffload_stage3.py partition_grads); not modelled, the CPU "
                      "optimizer step is counted in full after backward (an upper bound)")


def super_offload_overlaps(ec: Any) -> bool:
    """Whether DeepSpeed 0.19.8 overlaps this config's CPU optimizer step with backward: SuperOffload
    (``offload_optimizer.super_offload``, ZeRO-3 only: ``engine.py`` l.2748-2750 picks
    SuperOffloadOptimizer_Stage3 there) with ``gradient_clipping`` 0 (``superoffload_stage3.py``
    l.170: ``not self.clip_grad``)."""
    return bool(ec.zero.stage == 3 and ec.offload_optimizer_effective == "cpu"
                and ec.zero.offload_optimizer.super_offload and not ec.gradient_clipping)


def cpu_optimizer_elements(plan: "Plan") -> int:
    """Elements of trainable state one rank's CPU optimizer updates per step (its fp32 master
    partition): ZeRO-1/2 the flat partition P (``stage_1_and_2.py`` partition sizes, padded), ZeRO-3
    the sum of the rank's trainable parameter partitions p_i (``zero3_partition_numel``); under
    expert parallelism e the dense tensors over the W ZeRO ranks plus the rank's routed experts
    over the expert-data-parallel group of W / e (``moe/utils.py:
    split_params_into_different_moe_groups_for_optimizer``); with partial offload
    (``offload_optimizer.ratio`` < 1 at ZeRO-3) only the host sub-groups' S_k
    (:func:`advisor.ledger.state.twin_flow_on_accelerator`). 0 when the optimizer is not offloaded."""
    from advisor.ledger.state import (twin_flow_on_accelerator, twin_flow_splits, zero12_layouts, zero3_partition_sums,
                                      zero3_sub_groups)
    from advisor.model.parallel import split_experts
    ec = plan.config
    if ec.offload_optimizer_effective not in ("cpu", "nvme"):
        return 0
    W = plan.cluster.zero_world_size
    ep = plan.cluster.expert_parallel
    inv = _rank_inventory(plan)
    if ec.zero.stage not in (1, 2, 3):
        return 0
    # under expert parallelism e the rank's routed experts are their own param groups, partitioned
    # over the expert-data-parallel group of W / e ranks (as the ledger: state.py _model_parallel_roles)
    parts = [(inv, W)]
    if ep > 1:
        dense, experts = split_experts(inv)
        parts = [(dense, W), (experts, W // ep)]
    n = 0
    if twin_flow_splits(ec):
        # partial optimizer offload (offload_optimizer.ratio < 1): DeepSpeedCPUAdam steps only the host
        # sub-groups; the first int((1 - ratio) x n) are the backup AdamW's, on the accelerator (stage3.py
        # l.1100-1108, _optimizer_step l.1249-1258). The sub-groups of every param group in order (expert groups
        # after the dense ones: moe/utils.py split_params_into_different_moe_groups_for_optimizer appends them)
        sizes = [sg.numel for sub, w in parts if sub.tensors
                 for sg in zero3_sub_groups(sub, w, ec.zero.sub_group_size)]
        return sum(sz for sz, a in zip(sizes, twin_flow_on_accelerator(ec, len(sizes))) if not a)
    for sub, w in parts:
        if not sub.tensors:
            continue
        if ec.zero.stage in (1, 2):
            n += sum(lay.P for lay in zero12_layouts(ec, sub, w))
        else:
            n += zero3_partition_sums(sub, w)[1]
    return n


def unscale_runs(ec: Any) -> bool:
    """Whether DeepSpeed 0.19.8's offloaded step runs the unscale pass over the CPU fp32 gradient
    (:data:`UNSCALE_BYTES`). ZeRO-3: always (``stage3.py`` ``step`` l.2918 calls
    ``unscale_and_clip_grads`` for every sub-group, whose ``mul_`` at l.2988 has no condition).
    ZeRO-1/2: unless ``gradient_clipping`` is 0 and the loss scale is 1 (``stage_1_and_2.py``
    ``unscale_and_clip_grads`` l.3193-3195 returns early then). The loss scale is 1 without fp16
    (``runtime/fp16/loss_scaler.py`` ``CreateLossScaler``: ``LossScaler(scale=1.0)`` for bf16 /
    fp32) and with fp16's static ``loss_scale`` 1; dynamic fp16 scaling (``loss_scale`` 0) starts at
    2^initial_scale_power and is counted as not 1."""
    if ec.zero.stage == 3:
        return True
    scale_is_one = not ec.fp16_enabled or ec.fp16_loss_scale == 1
    return not (ec.gradient_clipping == 0 and scale_is_one)


def cpu_adam_bytes_per_element(ec: Any) -> tuple[int, str]:
    """(host memory bytes per element per step, formula): the kernel's 28 B (8 B less for one-state
    optimizers: Lion, Adagrad), the unscale pass's 8 B where it runs (:func:`unscale_runs`), plus
    the 16-bit copy from the fp32 master (4 + D). The gradient norm adds nothing here: under
    offload DeepSpeed takes each parameter's norm on the accelerator before the copy to host
    (``stage3.py`` ``_offload_grad_partition_at_boundary`` l.1446 ``_constant_buffered_norm2`` of
    the accelerator grad buffer; ``stage_1_and_2.py`` ``set_norm_for_param_grad_in_gpu`` l.1106 /
    l.1873, the compact slice l.2152) and ``complete_grad_norm_calculation_for_cpu_offload`` only
    sums those scalars."""
    D = DTYPE_BYTES[ec.model_dtype]
    fam = ec.optimizer.family
    kern = CPU_ADAM_KERNEL_BYTES - (8 if fam in ("lion", "adagrad") else 0)
    unscale = UNSCALE_BYTES if unscale_runs(ec) else 0
    copy = 4 + D if D < 4 else 0
    return kern + unscale + copy, (
        f"{kern} B kernel (fp32 grad, param{', two moments' if kern == 28 else ', one state'} read; "
        f"param and state written)"
        + (f" + {unscale} B unscale pass (fp32 grad read and written, unscale_and_clip_grads)" if unscale else "")
        + (f" + {4 + D} B 16-bit copy (read fp32 4 B, write {D} B)" if copy else ""))


def cpu_threads_per_rank(plan: "Plan", hardware: "Hardware") -> tuple[int | None, str]:
    """(OpenMP threads per rank DeepSpeedCPUAdam runs on, where the figure comes from).

    DeepSpeedCPUAdam's loop is ``#pragma omp parallel for`` (``csrc/adam/cpu_adam_impl.cpp``
    ``Step_AVX``), so a rank streams on as many threads as OpenMP gives it: ``--omp-threads`` or
    OMP_NUM_THREADS (``plan.cluster.omp_threads``); else the launcher's default: 1 with more than
    one rank per node (:data:`LAUNCHER_DEFAULT_MULTI`), the node's physical cores with one
    (:data:`LAUNCHER_DEFAULT_SINGLE`; None when the spec gives no ``host_cores_per_node``).
    DeepSpeed's own launcher sets OMP_NUM_THREADS = physical cores // ranks per node only with
    ``--bind_cores_to_rank`` (deepspeed/launcher/launch.py l.219-221, utils/numa.py
    get_numactl_cmd); without it each rank gets torch's default, all the node's cores."""
    cl = plan.cluster
    if cl.omp_threads:
        return cl.omp_threads, cl.omp_threads_source or "given"
    if _ranks_per_node(plan, hardware) > 1:
        return 1, LAUNCHER_DEFAULT_MULTI
    return getattr(hardware, "host_cores_per_node", None), LAUNCHER_DEFAULT_SINGLE


def cpu_optimizer_rate(host_bw: float | None, ranks_per_node: int, threads: int | None,
                       core_bw: float | None) -> tuple[float | None, str]:
    """(bytes/s one rank's CPU optimizer streams, what limits it: "host_memory" or "threads").

    rate = min(host memory bandwidth / ranks per node, threads x one core's bandwidth), all in
    read + write bytes/s (STREAM's count): the ranks of a node share its memory bandwidth, and a
    rank's kernel runs on its OpenMP threads, each a core streaming at most ``core_bw``
    (:func:`cpu_threads_per_rank`). A term whose figure is unknown (None) is left out of the
    min; (None, "host_memory") when both are."""
    share = host_bw / ranks_per_node if host_bw else None
    thr = threads * core_bw if threads and core_bw else None
    if thr is not None and (share is None or thr < share):
        return thr, "threads"
    return share, "host_memory"


def threads_fix(cores: int | None, ranks_per_node: int, share: float | None, core_bw: float) -> int | None:
    """OpenMP threads per rank that reach the rank's share of the host memory bandwidth:
    ceil(share / core_bw), at most the node's physical cores // ranks per node (what DeepSpeed's
    ``--bind_cores_to_rank`` gives, utils/numa.py ``cores_per_rank = total_cores //
    num_local_procs``). None when the share or the cores are unknown."""
    if not share:
        return cores // ranks_per_node if cores else None
    need = -(-share // core_bw)
    return int(min(need, cores // ranks_per_node)) if cores else int(need)


# ---------------------------------------------------------------------------------------------
# the model


def _tokens_per_rank(plan: "Plan", seq_len: int, global_batch: int | None) -> float:
    """Tokens of the global batch one data-parallel replica processes per step (G x s / DP)."""
    dp = plan.cluster.dp_world_size
    if global_batch is None:
        tb, mb, ga, _ = derive_batch(plan.config, dp)
        global_batch = tb or (mb or 1) * (ga or 1) * dp
    return global_batch * seq_len / dp


def model_parallel_degree(plan: "Plan") -> int:
    """t x p x u: the ranks one data-parallel replica's FLOPs are divided over (tensor,
    pipeline, Ulysses sequence parallel)."""
    cl = plan.cluster
    return max(1, cl.tensor_parallel) * max(1, cl.pipeline_parallel) * max(1, cl.sequence_parallel)


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """1F1B pipeline bubble as a fraction of the pipelined compute time: (p-1)/(m+p-1)
    (Narayanan et al., SC'21, s.2.2.1: bubble / ideal = (p-1)/m). 0 for p = 1. Raises
    ValueError for m < 1."""
    if micro_batches < 1:
        raise ValueError("micro_batches must be >= 1")
    return (pp - 1) / (micro_batches + pp - 1) if pp > 1 else 0.0


def step_movements(roles: list, pp: int = 1) -> list[Movement]:
    """The movements that time the step from :func:`advisor.ledger.movement.movement_roles`: rank
    0's role, or under pipeline parallelism the role with the most movement seconds (the stages
    wait on the slowest)."""
    if not roles:
        return []
    if pp > 1:
        return max((ms for _, ms in roles), key=lambda ms: sum(m.seconds or 0.0 for m in ms))
    return roles[0][1]


def _rank_inventory(plan: "Plan"):
    """The tensors one rank holds: stage 0's tensor-parallel shard under model parallelism; the
    plan's own inventory when it is a shard already (``views/estimate.movement_plan`` under
    expert parallelism alone hands the step time the rank's experts)."""
    from advisor.model.parallel import is_shard, shard
    cl = plan.cluster
    if is_shard(plan.inventory):
        return plan.inventory
    if cl.tensor_parallel > 1 or cl.pipeline_parallel > 1 or cl.expert_parallel > 1:
        return shard(plan.inventory, cl.tensor_parallel, cl.pipeline_parallel, cl.expert_parallel)[0].inventory
    return plan.inventory


def _ranks_per_node(plan: "Plan", hardware: "Hardware") -> int:
    g = plan.cluster.gpus_per_node or hardware.accelerators_per_node or 1
    return max(1, min(g, plan.cluster.world_size))


def step_time(plan: "Plan", hardware: "Hardware", *, seq_len: int, global_batch: int | None = None,
              recompute_fraction: float = 0.0, precision: str | None = None, mfu: float | None = None,
              movements: list[Movement] | None = None) -> StepTime:
    """Seconds per optimizer step for ``plan`` on ``hardware`` (see the module docstring).

    ``seq_len`` tokens per sample; ``global_batch`` samples per optimizer step (default the
    config's train batch size, DeepSpeed's batch rule); ``recompute_fraction`` the activations
    estimate's extra forward FLOPs as a fraction of 6 N T (0 without checkpointing);
    ``precision`` bf16/fp16/fp32 (default the config's model dtype); ``mfu`` overrides the
    preset's. ``movements``: rank 0's timed movements when the caller has them (else computed).
    Terms whose rate the spec lacks count 0 and are listed in ``unknown``."""
    ec = plan.config
    inv = plan.inventory
    prec = precision or {2: "bf16", 4: "fp32"}.get(DTYPE_BYTES[ec.model_dtype], "bf16")
    if prec == "bf16" and ec.model_dtype == "fp16":
        prec = "fp16"
    rpn = _ranks_per_node(plan, hardware)
    n_active = int(inv.meta.get("active_params") or inv.numel)
    tokens = _tokens_per_rank(plan, seq_len, global_batch)
    peak = peak_flops(hardware, prec)
    m_src = "given"
    if mfu is None:
        mfu, m_src = mfu_for(hardware)
    unknown: list[str] = []
    terms: list[Term] = []

    mp = model_parallel_degree(plan)
    flops = 6.0 * n_active * tokens / mp
    rate = peak * mfu if peak else None
    if rate is None:
        unknown.append("compute (no peak FLOP/s in the hardware spec)")
    c_src = "Kaplan et al. 2020 s.2.1 (C ~ 6 N per token, forward + backward)"
    per_mp = f" / {mp} (t x p x u)" if mp > 1 else ""
    fwd = Term("compute_forward", "compute", "forward", flops * FORWARD_SHARE, "FLOP", rate,
               flops * FORWARD_SHARE / rate if rate else None,
               formula="2 x N_active x T / (peak x MFU)" + per_mp, source=c_src)
    bwd = Term("compute_backward", "compute", "backward", flops * (1 - FORWARD_SHARE), "FLOP", rate,
               flops * (1 - FORWARD_SHARE) / rate if rate else None,
               formula="4 x N_active x T / (peak x MFU)" + per_mp, source=c_src)
    terms += [fwd, bwd]
    attn = attention_flops_per_token(inv.meta, seq_len) * tokens / mp
    if attn:
        a_src = ("Chowdhery et al. 2022 (PaLM) Appendix B, 12 L H Q T per token; Narayanan et al. SC'21 s.5.1 eq. 3 "
                 "(full s x s scores, no causal halving)")
        for name, ph, share, k in (("attention_forward", "forward", FORWARD_SHARE, 2),
                                   ("attention_backward", "backward", 1 - FORWARD_SHARE, 4)):
            terms.append(Term(name, "compute", ph, attn * share, "FLOP", rate, attn * share / rate if rate else None,
                              formula=f"{k} x L x s x heads x (d_qk + d_v) x T / (peak x MFU), s = {seq_len:,}"
                                      + per_mp, source=a_src))
    if recompute_fraction:
        rf = (flops + attn) * recompute_fraction
        terms.append(Term("recompute", "compute", "backward", rf, "FLOP", rate, rf / rate if rate else None,
                          formula=f"{recompute_fraction:.3f} x (6 x N_active + attention) x T / (peak x MFU) (full "
                                  "/ k of L: one more forward of the checkpointed layers, 2 x N_layers + attention / 3 "
                                  "per token; selective: the attention core's forward, attention / 3)",
                          source="advisor.model.flops recompute_fraction (Korthikanti et al. 2022: 8 N vs 6 N; "
                                 "selective s.5)"))

    pp = plan.cluster.pipeline_parallel
    if pp > 1:
        m_b = max(1, derive_batch(ec, plan.cluster.dp_world_size)[2] or 1)  # GA: micro-batches per step
        ideal = sum(t.amount for t in terms)
        frac = bubble_fraction(pp, m_b)
        bub = ideal * (pp - 1) / m_b
        terms.append(Term("pipeline_bubble", "compute", "bubble", bub, "FLOP", rate, bub / rate if rate else None,
                          formula=f"(p-1)/m x the stage's compute = {pp - 1}/{m_b} ({frac:.3f} of the pipelined "
                                  "compute, (p-1)/(m+p-1), 1F1B)",
                          source="Narayanan et al. SC'21 s.2.2.1; runtime/pipe/schedule.py TrainSchedule (1F1B)"))

    if movements is None:
        movements = step_movements(movement_roles(plan, hardware), pp)
    seen: set[str] = set()
    for m in movements:
        if m.seconds is None:
            unknown.append(f"{m.link} {m.item} (no {m.link} bandwidth in the hardware spec)")
        name = f"{m.link}:{m.item}:{m.direction}"
        if name in seen:  # one item moved in two passes (ZeRO-3's forward and backward fetches)
            name += f":{m.phase}"
        seen.add(name)
        terms.append(Term(name, m.link, m.phase, m.bytes, "bytes",
                          (m.bytes / m.seconds) if m.seconds else None, m.seconds, overlapped=m.overlap,
                          formula=m.formula, source=m.source))

    _first_fetch_exposed(plan, terms)
    nvme_aio = nvme_aio_notes(plan, hardware, movements)
    aio_rates = nvme_aio_rates(plan, hardware, movements)
    tier_assumed = nvme_tier_assumed(hardware, movements)

    n_opt = cpu_optimizer_elements(plan)
    host_bw = getattr(hardware, "host_memory_bandwidth_bytes_per_s", None)
    threads_info: dict[str, Any] | None = None
    if n_opt:
        bpe, words = cpu_adam_bytes_per_element(ec)
        nbytes = n_opt * bpe
        core_bw = getattr(hardware, "host_core_bandwidth_bytes_per_s", None)
        cores = getattr(hardware, "host_cores_per_node", None)
        threads, t_src = cpu_threads_per_rank(plan, hardware)
        rate_, limit = cpu_optimizer_rate(host_bw, rpn, threads, core_bw)
        share = host_bw / rpn if host_bw else None
        # without the node's host memory bandwidth, the threads' rate (when known) is only the most
        # a rank can stream: the min's other term, the rank's share, is missing, so the seconds are a
        # lower bound and the part is unknown (never counted as if complete, issue 23)
        share_missing = rate_ is not None and share is None
        if rate_ is None:
            unknown.append("cpu_optimizer (no host_memory_bandwidth_bytes_per_s in the hardware spec)")
        elif share_missing:
            unknown.append("cpu_optimizer (no host_memory_bandwidth_bytes_per_s in the hardware spec: timed at its "
                           "OpenMP threads' rate alone, the fastest it can run, so the step time is a lower bound)")
        if core_bw and share_missing:
            formula = (f"{n_opt:,} elements x {bpe} B ({words}) / ({threads} OpenMP threads per rank x one core's "
                       "bandwidth); the rank's share of the node's host memory bandwidth is unknown (a lower bound)")
        elif core_bw:
            formula = (f"{n_opt:,} elements x {bpe} B ({words}) / min(host memory bandwidth / {rpn} ranks per node, "
                       f"{threads if threads else '?'} OpenMP threads per rank x one core's bandwidth)"
                       + (": the threads limit it" if limit == "threads" else ""))
        else:
            formula = (f"{n_opt:,} elements x {bpe} B ({words}) x {rpn} ranks per node / host memory "
                       "bandwidth")
        terms.append(Term("cpu_optimizer", "host_memory", "step", nbytes, "bytes", rate_,
                          nbytes / rate_ if rate_ else None, formula=formula, lower_bound=share_missing,
                          source="csrc/includes/cpu_adam.h Adam_Optimizer::Step_AVX; csrc/adam/cpu_adam_impl.cpp "
                                 "(#pragma omp parallel for); ops/adam/cpu_adam.py DeepSpeedCPUAdam.step; stage3.py / "
                                 "stage_1_and_2.py unscale_and_clip_grads"))
        threads_info = {"threads_per_rank": threads, "threads_source": t_src,
                        "core_bandwidth_bytes_per_s": core_bw, "host_cores_per_node": cores,
                        "threads_bytes_per_s": threads * core_bw if threads and core_bw else None,
                        "share_bytes_per_s": share, "limited_by": limit, "note": None, "fix_threads": None,
                        "core_bandwidth_assumed": bool(core_bw) and CORE_BW_ASSUMED in (getattr(hardware, "source", "")
                                                                                         or "")}
        if not core_bw:
            threads_info["note"] = CPU_OPTIMIZER_THREADS_NOTE
        elif share_missing:
            k = threads_fix(cores, rpn, share, core_bw)
            more = bool(k and k > threads)
            threads_info["fix_threads"] = k if more else None
            threads_info["note"] = (
                f"{threads} OpenMP thread{'s' if threads != 1 else ''} per rank ({t_src}) stream at most "
                f"{threads} x one core's bandwidth; the hardware spec gives no host_memory_bandwidth_bytes_per_s, so "
                "the rank's share of the node's host memory bandwidth, which can be lower, is unknown and the CPU "
                "step is a lower bound (>=): give the node's measured (STREAM) figure in a --hardware JSON"
                + (f"; more threads stream more only up to that share: OMP_NUM_THREADS={k} per rank (--omp-threads "
                   f"{k} here, physical cores // ranks per node) is the most the node's cores give" if more else ""))
        elif limit == "threads":
            k = threads_fix(cores, rpn, share, core_bw)
            threads_info["fix_threads"] = k
            threads_info["note"] = (
                f"{threads} OpenMP thread{'s' if threads != 1 else ''} per rank ({t_src}) stream at most "
                f"{threads} x one core's bandwidth, below the rank's share of the node's host memory bandwidth "
                f"({rpn} ranks per node): set OMP_NUM_THREADS={k} per rank (--omp-threads {k} here), or launch with "
                "deepspeed --bind_cores_to_rank (physical cores // ranks per node each)"
                if k and k > threads else
                f"{threads} OpenMP thread{'s' if threads != 1 else ''} per rank ({t_src}) stream at most "
                f"{threads} x one core's bandwidth, below the rank's share of the node's host memory bandwidth, and "
                "the node has no more cores per rank to give")
        elif threads and cores and threads * rpn > cores:
            threads_info["note"] = (f"{threads} OpenMP threads per rank x {rpn} ranks per node exceed the node's {cores} "
                                    "physical cores (oversubscribed, not modelled: DeepSpeed's launcher without "
                                    "--bind_cores_to_rank leaves every rank torch's default of all cores)")

    # ---- critical path ----------------------------------------------------------------------
    def secs(t: Term) -> float:
        return t.seconds or 0.0

    windows: dict[str, float] = {}
    for ph in ("forward", "backward"):
        comp = sum(secs(t) for t in terms if t.resource == "compute" and t.phase == ph)
        over: dict[str, float] = {}
        for t in terms:
            if t.phase == ph and t.overlapped and t.resource in (NETWORK, PCIE, NVME):
                over[t.resource] = over.get(t.resource, 0.0) + secs(t)
        w, exposed = window(comp, over)
        windows[ph] = w
        for t in terms:
            if t.phase != ph:
                continue
            if t.resource == "compute":
                t.exposed = secs(t)
            elif t.overlapped:
                # share the link's exposed seconds in proportion to each movement's time
                tot = over.get(t.resource, 0.0)
                t.exposed = exposed.get(t.resource, 0.0) * secs(t) / tot if tot else 0.0
    # optimizer step: CPU step, pipelined (or not) with the NVMe optimizer swap
    cpu = next((t for t in terms if t.name == "cpu_optimizer"), None)
    swap = [t for t in terms if t.phase == "step" and t.resource == NVME and t.overlapped]
    cpu_s = secs(cpu) if cpu else 0.0
    swap_s = sum(secs(t) for t in swap)
    step_w = max(cpu_s, swap_s)
    windows["step"] = step_w
    if cpu is not None:
        cpu.exposed = cpu_s
    for t in swap:
        t.exposed = (max(0.0, swap_s - cpu_s) * secs(t) / swap_s) if swap_s else 0.0
    sync = 0.0
    for t in terms:
        if t.exposed is None:
            t.exposed = secs(t)  # synchronous: on the critical path in full
            sync += t.exposed
    windows["synchronous"] = sync
    total = windows["forward"] + windows["backward"] + windows["step"] + sync
    attn_tok = attention_flops_per_token(inv.meta, seq_len)
    assumptions = {"mfu": mfu, "mfu_source": m_src, "peak_flops": peak, "precision": prec,
                   "compute": COMPUTE_MODEL, "seq_len": seq_len,
                   "attention_flops_per_token": attn_tok if attn_tok else None,
                   "attention_note": None if attn_tok else ("no num_layers / num_heads / hidden_size: the "
                                                            "attention scores' FLOPs are left out (6 N per token only)"),
                   "model_parallel_degree": mp,
                   "tokens_per_rank_per_step": tokens, "active_parameters": n_active, "ranks_per_node": rpn,
                   "host_memory_bandwidth_bytes_per_s": host_bw, "nvme_aio": nvme_aio,
                   "nvme_aio_rates": aio_rates, "nvme_tier_assumed": tier_assumed or None,
                   "collectives": COLLECTIVE_MODEL,
                   "host_memory_bandwidth_note": HOST_BW_PEAK_NOTE if n_opt and host_bw and
                   "theoretical peak" in (getattr(hardware, "source", "") or "") else None,
                   "cpu_optimizer_threads": threads_info,
                   "fp16_overflow_check_note": FP16_OVERFLOW_CHECK_NOTE if n_opt and ec.zero.stage == 3
                   and ec.fp16_enabled else None,
                   "super_offload_note": SUPER_OFFLOAD_NOTE if n_opt and super_offload_overlaps(ec) else None,
                   "overlap": "within a window max(compute, each link); synchronous movements and the CPU step in full; "
                              "NVMe optimizer swap reads (pipeline_read) / writes (pipeline_write) overlap the CPU step"}
    return StepTime(total=total, terms=terms, windows=windows, unknown=unknown, assumptions=assumptions)


def nvme_aio_notes(plan: "Plan", hardware: "Hardware", movements: list[Movement]) -> dict[str, str]:
    """Per storage tier the step's NVMe movements use: whether its figures were measured at the
    config's ``aio`` settings. DeepSpeed moves every swap through ``aio_handle(block_size,
    queue_depth, single_submit, overlap_events, intra_op_parallelism)`` (``swap_tensor/*_swapper.py``)
    and a drive's throughput depends on the requests in flight, which is why DeepSpeed's tuning
    sweep (``deepspeed/nvme/perf_run_sweep.py``) measures it per setting. The NVMe seconds are at
    :func:`advisor.ledger.movement.nvme_rate` (the figures limited by the config's settings; a
    figure measured at stated settings is taken as the rate there); this note says which kind of
    figure that started from: "measured at the config's aio settings", the differing settings, or,
    for a tier that names none (a data-sheet figure), that it was not measured at them.
    Tier name -> note."""
    ec_aio = plan.config.aio
    out: dict[str, str] = {}
    for m in movements:
        if m.link != NVME:
            continue
        tier = hardware.tier_for_path(m.path)
        if tier is None or tier.name in out:
            continue
        cfg = (f"block_size {ec_aio.block_size}, queue_depth {ec_aio.queue_depth}, "
               f"intra_op_parallelism {ec_aio.intra_op_parallelism}")
        if not tier.aio:
            out[tier.name] = (f"bandwidth as the spec states it, not measured at the config's aio settings ({cfg}): "
                              "the NVMe seconds take it as the drive's rate, limited by the aio model; measure the tier "
                              "at them (DeepSpeed's ds_nvme_tune, or benchmarks/steptime_calibration.py) and give "
                              "them as the tier's aio")
        else:
            diff = tier.aio_mismatch(ec_aio)
            out[tier.name] = ("measured at the config's aio settings" if not diff else
                              "measured at other aio settings than the config's: " + ", ".join(diff)
                              + "; the NVMe seconds scale the measured figure to the config's settings by the aio "
                                "model (advisor.ledger.movement.nvme_rate), an estimate")
    return out


def nvme_tier_assumed(hardware: "Hardware", movements: list[Movement]) -> dict[str, str]:
    """Per NVMe path of the step's movements that lies under no storage tier's own mount point
    and so falls to the tier mounted at ``/`` (the root filesystem: on DGX presets the OS drive):
    which tier the NVMe seconds assumed and why
    (:meth:`advisor.cluster.hardware.Hardware.root_fallback_note`). Path -> note."""
    out: dict[str, str] = {}
    fallback = getattr(hardware, "root_fallback_note", None)
    for m in movements:
        if fallback is None or m.link != NVME or not m.path or m.path in out:
            continue
        note = fallback(m.path)
        if note:
            out[m.path] = note
    return out


def nvme_aio_rates(plan: "Plan", hardware: "Hardware", movements: list[Movement]) -> dict[str, dict[str, Any]]:
    """Per storage tier and direction the step's NVMe movements use: the node's figure
    (``tier_bytes_per_s``, per node: a node-local tier's own, a shared tier's aggregate / the
    job's nodes capped by its per-client limit, :func:`advisor.ledger.movement.tier_node_rate`;
    then ``scope`` "shared", ``nodes`` and ``aggregate_bytes_per_s`` / ``per_client_bytes_per_s``
    say so), the rate at the config's aio settings with the node's ranks
    issuing at once (``aio_bytes_per_s``, :func:`advisor.ledger.movement.nvme_rate`, what the
    NVMe seconds divide by, and its ``fraction`` of the figure), the bytes they keep in flight and
    the request latency assumed. ``limited`` when that fraction is under :data:`AIO_LIMITED`."""
    from advisor.ledger.movement import NVME_LATENCY_S, _ranks_per_node as rpn_of, nodes_of, tier_node_rate
    a = plan.config.aio
    rpn = rpn_of(plan, hardware)
    nodes = nodes_of(plan.cluster.world_size, rpn)
    out: dict[str, dict[str, Any]] = {}
    for m in movements:
        if m.link != NVME:
            continue
        tier = hardware.tier_for_path(m.path)
        d = "write" if m.direction == "write" else "read"
        if tier is None or d in out.get(tier.name, {}):
            continue
        full = tier_node_rate(tier, d, nodes)
        got = nvme_rate(tier, d, a, rpn, nodes)
        shared = tier.shared
        out.setdefault(tier.name, {})[d] = {
            "tier_bytes_per_s": full, "aio_bytes_per_s": got, "fraction": got / full,
            "scope": "shared" if shared else "node-local", "nodes": nodes if shared else None,
            "aggregate_bytes_per_s": float(getattr(tier, f"{d}_bytes_per_s")) if shared else None,
            "per_client_bytes_per_s": getattr(tier, f"per_client_{d}_bytes_per_s", None) if shared else None,
            "limited": got < AIO_LIMITED * full,
            "in_flight_bytes_per_node": rpn * max(1, a.intra_op_parallelism) * max(1, a.queue_depth) * max(1, a.block_size),
            "latency_s": getattr(tier, f"{d}_latency_s", None) or NVME_LATENCY_S[d],
            "latency_source": "the tier's" if getattr(tier, f"{d}_latency_s", None) else
                              "assumed (advisor.ledger.movement.NVME_LATENCY_S)"}
    return out


def _first_fetch_exposed(plan: "Plan", terms: list[Term]) -> None:
    """ZeRO-3 prefetches the parameters of the modules AFTER the current one; the first module of
    each pass is all-gathered and waited on with nothing to hide behind
    (``partitioned_param_coordinator.py`` ``fetch_sub_module``: the current module's params are
    gathered and ``wait``ed, ``__prefetch_nvme_param_partitions``/prefetch only for the next
    ones). Moves that share, in proportion to the first tensor's (the embedding's) numel, out of
    each overlapped forward/backward all-gather term into a synchronous one (in place)."""
    inv = plan.inventory
    if plan.config.zero.stage != 3 or not inv.tensors:
        return
    total = inv.numel
    first = inv.tensors[0].numel / total if total else 0.0
    for t in list(terms):
        if t.resource == NETWORK and t.overlapped and t.name.startswith("network:param_allgather_"):
            part = Term(t.name + ":first_module", NETWORK, "synchronous", t.amount * first, t.unit, t.rate,
                        (t.seconds or 0.0) * first if t.seconds is not None else None, overlapped=False,
                        formula=f"the first module's share ({inv.tensors[0].name}: {first:.3f} of the parameters) "
                                "of the all-gather, waited on before compute starts",
                        source="partitioned_param_coordinator.py fetch_sub_module (prefetch covers the next modules)")
            t.amount -= part.amount
            if t.seconds is not None:
                t.seconds -= part.seconds or 0.0
            terms.append(part)


def cpu_optimizer_line(amount: float, rate: float | None, units: str = "GiB", threads: dict | None = None) -> str:
    """The CPU optimizer step's text line: ``amount`` bytes of host memory traffic per rank per
    step at ``rate`` bytes/s per rank (None: unknown), in ``units`` (GiB = 2^30 or GB = 1e9 bytes);
    ``threads``: the step time's ``assumptions["cpu_optimizer_threads"]``, which names what limits
    the rate (the node's share of host memory bandwidth, or the rank's OpenMP threads); a rate of
    threads only, the spec giving no host memory bandwidth, is shown as "<=" (an upper limit)."""
    from advisor.units import rate as rate_text, size

    t = threads or {}
    at = " at "
    if t.get("limited_by") == "threads":
        n = t.get("threads_per_rank")
        why = (f"{n} OpenMP thread{'s' if n != 1 else ''} per rank x "
               f"{rate_text(t.get('core_bandwidth_bytes_per_s') or 0, units, digits=1)} per core")
        if t.get("share_bytes_per_s") is None:  # the other term of the min is missing: an upper limit only
            at = " at <= "
            why += "; the rank's share of host memory bandwidth unknown: no host_memory_bandwidth_bytes_per_s"
    elif t.get("core_bandwidth_bytes_per_s"):
        why = (f"host memory bandwidth / ranks per node; {t.get('threads_per_rank')} OpenMP threads per rank "
               "would stream more")
    else:
        why = "host memory bandwidth / ranks per node"
    return (f"  CPU optimizer: {size(amount, units, digits=1)} per rank per step"
            + (f"{at}{rate_text(rate, units, digits=1)} per rank ({why})"
               if rate else " (host memory bandwidth unknown: give host_memory_bandwidth_bytes_per_s)"))


#: How :func:`collective_bandwidth_line` begins (the renderer redraws it in the output's units).
BANDWIDTH_LINE_PREFIX = "    B used: "


def collective_bandwidth_line(terms: list, units: str = "GiB", most: int = 4) -> str | None:
    """The text line of the bandwidths B the collectives' seconds divide by: each network term's
    amount / seconds (bytes/s per rank per direction, :func:`ring_seconds`'s B: the peer link within
    a node, the node's network / ranks per node across nodes, as the link rule says), each with the
    movements at it (at most ``most`` named), in ``units`` (GiB: 2^30, GB: 1e9 bytes). ``terms``:
    :class:`Term` objects or their dicts (the step-time JSON's). None without a timed network term."""
    from advisor.units import rate as rate_text
    by: dict[float, list[str]] = {}
    for t in terms:
        d = t if isinstance(t, dict) else t.to_dict()
        if d.get("resource") != NETWORK or not d.get("rate"):
            continue
        parts = d["name"].split(":")
        by.setdefault(float(f"{d['rate']:.6g}"), []).append(parts[1] if len(parts) > 2 else d["name"])
    if not by:
        return None
    shown = []
    for r, items in sorted(by.items(), reverse=True):
        names = list(dict.fromkeys(items))
        more = f" and {len(names) - most} more" if len(names) > most else ""
        shown.append(f"{rate_text(r, units, digits=1)} per rank ({', '.join(names[:most])}{more})")
    return BANDWIDTH_LINE_PREFIX + "; ".join(shown)


#: Each resource of the step time in the breakdown's order, with the name the breakdown (text and
#: HTML report) gives it.
RESOURCE_NAMES = {"compute": "compute", NETWORK: "collectives", PCIE: "PCIe copies", NVME: "NVMe swap",
                  "host_memory": "CPU optimizer step"}


def breakdown_lines(st: StepTime, units: str = "GiB") -> list[str]:
    """Text lines: the step seconds (">=" when a part is unknown, ``st.unknown``: a lower bound),
    what each resource is busy for and what of it is exposed
    (sizes in ``units``, :func:`cpu_optimizer_line`), and each NVMe tier direction the aio
    settings hold below the tier's rate."""
    from advisor.units import rate as rate_text, size
    busy, exp = st.by_resource(False), st.by_resource(True)
    names = RESOURCE_NAMES
    out = [f"step time (model): {'>= ' if st.unknown else ''}{st.total:,.2f} s per optimizer step (critical path; MFU {st.assumptions.get('mfu')}, "
           f"{st.assumptions.get('mfu_source')})"]
    for k in ("compute", NETWORK, PCIE, NVME, "host_memory"):
        if k in busy:
            out.append(f"  {names[k]:<20} busy {busy[k]:>9,.3f} s   exposed {exp.get(k, 0.0):>9,.3f} s")
            if k == NETWORK:
                cm = st.assumptions.get("collectives") or COLLECTIVE_MODEL
                out.append(f"    ({cm['all_gather']}, {cm['all_reduce']}; within a node {cm['within_node']}, "
                           f"across nodes {cm['across_nodes']}; latency {cm['latency']})")
                bw_line = collective_bandwidth_line(st.terms, units)
                if bw_line:
                    out.append(bw_line)
    cpu = next((t for t in st.terms if t.name == "cpu_optimizer"), None)
    if cpu is not None:
        th = st.assumptions.get("cpu_optimizer_threads") or {}
        out.append(cpu_optimizer_line(cpu.amount, cpu.rate, units, th))
        if th.get("core_bandwidth_assumed"):
            out.append("    (one core's bandwidth is the preset's assumed figure (Little's law, its source): measure one "
                       "thread with benchmarks/steptime_calibration.py and give host_core_bandwidth_bytes_per_s)")
        if th.get("note"):
            out.append(f"    ({th['note']})")
        elif th.get("threads_source"):
            out.append(f"    (OpenMP threads per rank: {th.get('threads_per_rank')}, {th['threads_source']}; "
                       "one core's bandwidth from the hardware spec)")
        if st.assumptions.get("host_memory_bandwidth_note"):
            out.append(f"    ({st.assumptions['host_memory_bandwidth_note']})")
        if st.assumptions.get("fp16_overflow_check_note"):
            out.append(f"    (left out: {st.assumptions['fp16_overflow_check_note']})")
        if st.assumptions.get("super_offload_note"):
            out.append(f"    ({st.assumptions['super_offload_note']})")
    for note in (st.assumptions.get("nvme_tier_assumed") or {}).values():
        out.append(f"  NVMe tier assumed: {note}")
    for tier, note in (st.assumptions.get("nvme_aio") or {}).items():
        if note.startswith("measured at other"):
            out.append(f"  NVMe tier {tier}: {note}")
    for tier, dirs in (st.assumptions.get("nvme_aio_rates") or {}).items():
        for d, r in dirs.items():
            if r.get("scope") == "shared":
                pc = r.get("per_client_bytes_per_s")
                out.append(f"  NVMe tier {tier} (shared): {d}s at {rate_text(r['tier_bytes_per_s'], units, digits=2)} per "
                           f"node = min(aggregate {rate_text(r['aggregate_bytes_per_s'], units, digits=2)} / "
                           f"{r['nodes']} nodes, per-client "
                           + (rate_text(pc, units, digits=2) if pc else "limit not stated") + ")")
            if r["limited"]:
                out.append(f"  NVMe tier {tier}: {d}s at {rate_text(r['aio_bytes_per_s'], units, digits=2)} per node of "
                           f"its {rate_text(r['tier_bytes_per_s'], units, digits=2)}: the aio settings keep "
                           f"{size(r['in_flight_bytes_per_node'], units, prefix='M', digits=1)} in flight per node against "
                           f"{r['latency_s'] * 1e6:,.0f} us per request (raise queue_depth or intra_op_parallelism)")
    for u in st.unknown[:3]:
        out.append(f"  unknown: {u}")
    return out
