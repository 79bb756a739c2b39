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
  (:func:`advisor.ledger.movement.link_bandwidth`), NVMe plus each swapped file's aio op
  (files x :data:`advisor.ledger.movement.AIO_PER_FILE_S`, :func:`advisor.ledger.movement.timed`). Read and write on one tier share the drive:
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
  starts after it returns, so nothing hides it.
* **SuperOffload** (``offload_optimizer.super_offload``, ZeRO-3 with the optimizer on the CPU, CUDA
  only; ``engine.py`` l.2748-2750, :func:`super_offload_on`): each rank's DeepSpeedCPUAdam runs in
  a worker process pinned to ``cpuadam_cores_perc`` of the rank's cores, the training process to
  the rest (``superoffload_utils.py`` l.207-228, :func:`super_offload_cores`). With
  ``gradient_clipping`` 0, at the accumulation boundary ``partition_grads`` submits each host
  sub-group to the worker as soon as the reduce flush carrying its last gradient has partitioned
  it (``superoffload_stage3.py`` l.163-181; :func:`sub_group_ready_fractions`), so the worker's
  gradient copy + Adam kernel (:data:`SUPER_OFFLOAD_GRAD_COPY_BYTES` + 28 B per element, term
  ``cpu_optimizer_async``) runs beside the rest of that backward, one sub-group at a time;
  ``step`` waits for what is left (l.200, :func:`super_offload_tail`: the **exposed** part), then
  unscales and copies the 16-bit partitions back (l.239-246, term ``cpu_optimizer``). With
  clipping (l.248-268) every host sub-group is stepped after backward and waited on: nothing is
  hidden. An fp16 overflow's rollback (``adam_rollback``, l.348-358) is left out (a skipped step).
* **partial optimizer offload** (Twin-Flow, ``offload_optimizer.ratio`` < 1 at ZeRO-3): the first
  int((1 - ratio) x n) sub-groups are stepped by the backup torch AdamW on the accelerator
  (``stage3.py`` l.313-325, l.1100-1108, ``_optimizer_step`` l.1249-1258), a term of accelerator
  memory bandwidth (**gpu_optimizer**: elements x :func:`backup_adamw_bytes_per_element` / the
  accelerator's ``memory_bandwidth_bytes_per_s``). The step's sub-group loop enqueues those
  kernels and goes on to the host sub-groups without waiting, so the GPU step runs beside the CPU
  step up to the first host sub-group's blocking 16-bit copy to the accelerator (with the 16-bit
  partitions on the host, ``offload_param`` cpu/nvme, beside all of it): exposed = max(0, GPU step
  - the CPU seconds before that copy).
* NVMe optimizer swap: ``pipeline_read`` lets the sub-group
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

from advisor.config.effective import DTYPE_BYTES, batch_world_size, derive_batch
from advisor.ledger.movement import AIO_PER_FILE_S, NETWORK, NVME, PCIE, Movement, movement_roles, nvme_rate
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

    def unknown_resources(self) -> list[str]:
        """Resources with a term whose seconds are unknown (``Term.seconds`` None: the hardware spec lacks
        its rate) or only a lower bound (``Term.lower_bound``): their :meth:`by_resource` sums count such a
        term as 0 (or its bound), so a renderer shows them as "?" (nothing known) or ">=" (a bound), never
        as a figure: an unknown part is never ranked as free (README)."""
        return sorted({t.resource for t in self.terms if t.seconds is None or t.lower_bound})

    def bound(self) -> str:
        """The resource with the most exposed seconds."""
        r = self.by_resource()
        return max(r, key=lambda k: r[k]) if r else "compute"

    def to_dict(self) -> dict[str, Any]:
        return {"step_time_s": self.total, "windows_seconds": self.windows,
                "exposed_seconds_by_resource": self.by_resource(), "busy_seconds_by_resource": self.by_resource(False),
                "unknown_resources": {k: ("?" if all(t.seconds is None for t in self.terms if t.resource == k) else ">=")
                                      for k in self.unknown_resources()},
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


#: Bytes of accelerator memory torch's foreach AdamW step streams per element of a sub-group the
#: backup optimizer steps under partial optimizer offload (torch.optim.AdamW on CUDA defaults to the
#: foreach implementation, ``torch/optim/optimizer.py`` _default_to_fused_or_foreach; non-capturable,
#: no amsgrad; ``torch/optim/adam.py`` _multi_tensor_adam, torch 2.13 lines): ``_foreach_lerp_(exp_avgs,
#: grads)`` l.704 reads 8 B and writes 4 B (12); ``_foreach_mul_(exp_avg_sqs, beta2)`` l.708, 8;
#: ``_foreach_addcmul_(exp_avg_sqs, grads, grads)`` l.721 reads the moment and the gradient (one tensor
#: passed twice, one load from memory) and writes the moment, 12; ``exp_avg_sq_sqrt =
#: _foreach_sqrt(exp_avg_sqs)`` l.790, 8; ``_foreach_div_`` l.792 and ``_foreach_add_(.., eps)`` l.793 on
#: that copy, 8 each; ``_foreach_addcdiv_(params, exp_avgs, exp_avg_sq_sqrt)`` l.794 reads 12 B and
#: writes 4 (16): 72 B, fp32 throughout. Weight decay != 0 adds ``_foreach_mul_(params, 1 - lr x wd)``
#: l.691, 8 B (:data:`BACKUP_ADAMW_DECAY_BYTES`).
BACKUP_ADAMW_BYTES = 72
#: The decoupled weight decay's pass of the backup AdamW (``torch/optim/adam.py`` l.688-691), only where
#: ``weight_decay`` != 0; DeepSpeedCPUAdam's default is 0 (``ops/adam/cpu_adam.py`` __init__), and the
#: backup AdamW takes the CPU optimizer's (``stage3.py`` l.318-325).
BACKUP_ADAMW_DECAY_BYTES = 8
#: Bytes SuperOffload's worker process streams per element before its Adam kernel: it copies the fp32
#: gradient into its own reusable host buffer (``superoffload/superoffload_utils.py``
#: superoffload_optimizer_worker l.133-134, ``param_grad_cpu.copy_(param_grad)``: read 4 B, write 4 B).
#: The updated parameter it sends back lives in the same shared-memory storage (torch.multiprocessing
#: shares CPU tensors in place and the sender's cache returns that storage), so the main process's
#: ``copy_`` of it (superoffload_stage3.py l.133) copies a tensor onto itself: not counted.
SUPER_OFFLOAD_GRAD_COPY_BYTES = 8
#: The resource name of the accelerator-memory-bound step terms (partial optimizer offload's backup AdamW).
ACCEL_MEMORY = "accelerator_memory"


def super_offload_on(ec: Any) -> bool:
    """Whether DeepSpeed 0.19.8 runs SuperOffloadOptimizer_Stage3 for this config:
    ``offload_optimizer.super_offload`` at ZeRO-3 (``engine.py`` l.2748-2750 picks it only in the
    stage-3 branch; its ``__init__`` asserts a CUDA accelerator, ``superoffload_stage3.py`` l.20-24) with
    the optimizer offloaded to the CPU."""
    return bool(ec.zero.stage == 3 and ec.offload_optimizer_effective == "cpu" and ec.zero.offload_optimizer.super_offload)


def super_offload_overlaps(ec: Any) -> bool:
    """Whether DeepSpeed 0.19.8 overlaps this config's CPU optimizer step with backward: SuperOffload
    (:func:`super_offload_on`) with ``gradient_clipping`` 0. ``partition_grads`` (``superoffload_stage3.py``
    l.167-181) hands each host sub-group whose every gradient has been partitioned at the accumulation
    boundary to the DeepSpeedCPUAdam worker process (``async_step``) only under ``not self.clip_grad``
    (l.170); with clipping ``step`` -> ``_step_with_clipping`` (l.227-228, l.248-268) steps every host
    sub-group after backward and waits for each (``_sync_cpu_optimizer_step`` l.330-346)."""
    return super_offload_on(ec) and not ec.gradient_clipping


def lp_copy_bytes(D: int) -> int:
    """Bytes the updated 16-bit partition's copy from the fp32 master streams per element: read 4 B,
    write D B (``stage3.py`` _reassign_or_swap_out_partitioned_parameters l.2854-2859
    ``fp16_partitioned_groups_flat[i].data.copy_(fp32...)``; ``stage_1_and_2.py`` step
    ``param_buffer_of_bit16_for_cpu_offload_groups``); 0 for an fp32 model (D = 4), as the CPU
    optimizer term counts it."""
    return 4 + D if D < 4 else 0


def backup_adamw_bytes_per_element(ec: Any) -> tuple[int, str]:
    """(accelerator memory bytes per element per step of a sub-group partial optimizer offload keeps on
    the accelerator, formula): the backup torch AdamW's foreach step (:data:`BACKUP_ADAMW_BYTES`, plus
    :data:`BACKUP_ADAMW_DECAY_BYTES` where the optimizer's ``weight_decay`` is not 0), the unscale pass
    on its fp32 gradient (:data:`UNSCALE_BYTES`, ``stage3.py`` step l.2918 -> l.2988 ``grad.mul_``, every
    sub-group) and the 16-bit copy (:func:`lp_copy_bytes`, l.2854-2859), all on the accelerator: its
    fp32 master, gradient and moments live there (``stage3.py`` l.1100-1108, l.1157-1160)."""
    D = DTYPE_BYTES[ec.model_dtype]
    try:
        wd = float(ec.optimizer.params.get("weight_decay", 0) or 0)
    except (TypeError, ValueError):
        wd = 0.0
    decay = BACKUP_ADAMW_DECAY_BYTES if wd else 0
    copy = lp_copy_bytes(D)
    return BACKUP_ADAMW_BYTES + decay + UNSCALE_BYTES + copy, (
        f"{BACKUP_ADAMW_BYTES} B foreach AdamW (lerp_ 12, mul_ 8, addcmul_ 12, sqrt 8, div_ 8, add_ 8, addcdiv_ 16)"
        + (f" + {decay} B weight decay" if decay else "")
        + f" + {UNSCALE_BYTES} B unscale pass" + (f" + {copy} B 16-bit copy" if copy else ""))


def offload_sub_groups(plan: "Plan") -> list[tuple[int, bool]]:
    """One rank's ZeRO-3 sub-groups in DeepSpeed's order as (S_k elements, kept on the accelerator by
    partial optimizer offload): every param group's sub-groups (:func:`advisor.ledger.state.zero3_sub_groups`),
    expert groups after the dense ones (``moe/utils.py`` split_params_into_different_moe_groups_for_optimizer
    appends them), each flagged by :func:`advisor.ledger.state.twin_flow_on_accelerator`. With
    ``device: nvme`` a swapped sub-group (S_k x 4 >= the aio swap size, ``stage3.py`` l.1117) is never flagged:
    where the backup AdamW steps it (i < int((1 - ratio) x n)) it does so on the swapped-in host master, torch's
    single-tensor AdamW (:func:`advisor.ledger.state.twin_flow_backup_swapped`), counted with the host
    sub-groups at the CPU optimizer's rate (a lower bound: not DeepSpeedCPUAdam's kernel). Empty below
    ZeRO-3 or without optimizer offload."""
    from advisor.ledger.state import swap_threshold_bytes, twin_flow_on_accelerator, zero3_sub_groups
    ec = plan.config
    if ec.zero.stage != 3 or ec.offload_optimizer_effective not in ("cpu", "nvme"):
        return []
    sizes = [sg.numel for sub, w in _rank_parts(plan) if sub.tensors
             for sg in zero3_sub_groups(sub, w, ec.zero.sub_group_size)]
    smin = swap_threshold_bytes(ec)
    sw = [ec.offload_optimizer_effective == "nvme" and sz * 4 >= smin for sz in sizes]
    return list(zip(sizes, twin_flow_on_accelerator(ec, len(sizes), sw)))


def _rank_parts(plan: "Plan") -> list[tuple[Any, int]]:
    """(inventory, partition world) of each part one rank's optimizer holds: the rank's tensors over
    the W ZeRO ranks, or under expert parallelism the dense tensors over W and the rank's routed
    experts over the expert-data-parallel group (:attr:`advisor.plan.Cluster.expert_data_parallel_size`,
    ``moe/utils.py``, as the ledger: state.py _model_parallel_roles)."""
    from advisor.model.parallel import split_experts
    W = plan.cluster.zero_world_size
    ep = plan.cluster.expert_parallel
    inv = _rank_inventory(plan)
    if ep > 1:
        dense, experts = split_experts(inv)
        return [(dense, W), (experts, max(1, plan.cluster.expert_data_parallel_size))]
    return [(inv, W)]


def sub_group_ready_fractions(plan: "Plan") -> list[float] | None:
    """Per ZeRO-3 sub-group (DeepSpeed's order, :func:`offload_sub_groups`): the fraction of a backward
    pass's gradient elements delivered when the reduce flush that partitions its last gradient runs,
    i.e. when SuperOffload can hand it to its CPU worker (``superoffload_stage3.py`` partition_grads
    l.163-165 counts a sub-group's partitioned gradients, l.167-181 submits the complete ones).
    Gradients arrive in :func:`advisor.ledger.state.zero3_backward_grad_order`; the ipg bucket flushes
    before an arriving gradient that would take it past ``reduce_bucket_size`` (``stage3.py``
    reduce_independent_p_g_buckets_and_remove_grads l.1583-1585) and once more in the epilogue (fraction
    1). Backward's time is taken as proportional to the gradient elements delivered (the 4 N backward
    FLOPs spread over the parameters by their size): an approximation of where in backward each flush
    falls. None under expert parallelism (several param-group parts: not modelled)."""
    from advisor.ledger.state import zero3_backward_grad_order, zero3_sub_groups
    ec = plan.config
    parts = _rank_parts(plan)
    if len(parts) != 1:
        return None
    inv, W = parts[0]
    sgs = zero3_sub_groups(inv, W, ec.zero.sub_group_size)
    owner: dict[int, int] = {}
    for k, sg in enumerate(sgs):
        for i in sg.tensors:
            owner[i] = k
    order = zero3_backward_grad_order(inv, bool(ec.zero.memory_efficient_linear))
    total = sum(inv.tensors[i].numel for i in order) or 1
    left = [len(sg.tensors) for sg in sgs]
    ready = [1.0] * len(sgs)
    bucket: list[int] = []
    elems = 0
    done = 0

    def flush(at: int) -> None:
        for i in bucket:
            k = owner.get(i)
            if k is None:
                continue
            left[k] -= 1
            if left[k] == 0:
                ready[k] = at / total
        bucket.clear()

    for i in order:
        n = inv.tensors[i].numel
        if elems + n > ec.zero.reduce_bucket_size and elems > 0:
            flush(done)
            elems = 0
        bucket.append(i)
        elems += n
        done += n
    flush(total)
    return ready


def super_offload_tail(ready_s: list[float], cost_s: list[float], backward_end_s: float) -> float:
    """Seconds SuperOffload's CPU worker is still stepping after the boundary's backward ends: one worker
    process per rank takes the sub-groups in the order they are submitted, one at a time
    (``superoffload_utils.py``: one ``mp.Process``, a FIFO ``SimpleQueue``, l.101-145), so sub-group k
    finishes at max(the previous one's finish, its submission ``ready_s[k]``) + ``cost_s[k]`` (its step seconds); ``step``
    waits for all before the rest of the step (``superoffload_stage3.py`` l.200
    ``_wait_for_async_operations``). Times in seconds from the start of the boundary's backward, which
    ends at ``backward_end_s``. Returns max(0, last finish - backward_end_s)."""
    t = 0.0
    for r, c in sorted(zip(ready_s, cost_s)):
        t = max(t, r) + c
    return max(0.0, t - backward_end_s)


def super_offload_cores(cores_per_node: int | None, ranks_per_node: int, perc: float) -> tuple[int | None, int | None]:
    """(cores of a rank's SuperOffload worker, cores left to its main process): ``_set_cpu_affinity``
    (``superoffload_utils.py`` l.214-228) splits the rank's affinity at int((1 - cpuadam_cores_perc) x n):
    the first cores to the training process, the rest to the DeepSpeedCPUAdam worker. n = the node's
    physical cores // ranks per node (the rank's cores under ``deepspeed --bind_cores_to_rank``; without
    it every rank splits the whole node the same way, so the ranks' workers share the same last cores,
    about the same per rank). An empty list for the main process means all cores (psutil
    ``cpu_affinity([])``), given as n. (None, None) when the cores are unknown."""
    if not cores_per_node:
        return None, None
    n = max(1, cores_per_node // max(1, ranks_per_node))
    split = int((1 - perc) * n)
    return max(1, n - split), (split or n)


def cpu_optimizer_elements(plan: "Plan") -> int:
    """Elements of trainable state one rank's CPU optimizer updates per step (its fp32 master
    partition): ZeRO-1/2 the flat partition P (``stage_1_and_2.py`` partition sizes, padded), ZeRO-3
    the sum of the rank's trainable parameter partitions p_i (``zero3_partition_numel``); under
    expert parallelism e the dense tensors over the W ZeRO ranks plus the rank's routed experts
    over the expert-data-parallel group of W / e (``moe/utils.py:
    split_params_into_different_moe_groups_for_optimizer``); with partial offload
    (``offload_optimizer.ratio`` < 1 at ZeRO-3) only the host sub-groups' S_k
    (:func:`advisor.ledger.state.twin_flow_on_accelerator`). 0 when the optimizer is not offloaded."""
    from advisor.ledger.state import twin_flow_splits, zero12_layouts, zero3_partition_sums
    ec = plan.config
    if ec.offload_optimizer_effective not in ("cpu", "nvme") or ec.zero.stage not in (1, 2, 3):
        return 0
    if twin_flow_splits(ec):
        # partial optimizer offload (offload_optimizer.ratio < 1): DeepSpeedCPUAdam steps only the host
        # sub-groups; the first int((1 - ratio) x n) are the backup AdamW's, on the accelerator (stage3.py
        # l.1100-1108, _optimizer_step l.1249-1258): backup_adamw_bytes_per_element times them
        return sum(sz for sz, acc in offload_sub_groups(plan) if not acc)
    n = 0
    for sub, w in _rank_parts(plan):
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
    dp = batch_world_size(plan.config, plan.cluster)  # DeepSpeed's batch rule's world (AutoTP: W)
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


def _count(n: int | None, noun: str) -> str:
    """``n`` ``noun`` with the plural when ``n`` is not 1 ("1 thread", "12 cores"); "? cores" when unknown."""
    return f"{n if n else '?'} {noun}{'' if n == 1 else 's'}"


def _ranks_per_node(plan: "Plan", hardware: "Hardware") -> int:
    """Ranks on one node: the ledger's one rule (:func:`advisor.ledger.state.ranks_per_node`), which an
    accelerator preset alone does not set (it says nothing about the node)."""
    from advisor.ledger.state import ranks_per_node
    return ranks_per_node(plan, hardware)


def _super_offload_split(plan: "Plan", hardware: "Hardware", cpu: Term, terms: list[Term], n_host: int,
                         host_bw: float | None, rpn: int, threads: int | None, core_bw: float | None,
                         cores: int | None) -> dict[str, Any]:
    """SuperOffload's CPU work (:func:`super_offload_on`), in place on the ``cpu`` term and ``terms``.

    The rank's DeepSpeedCPUAdam runs in a worker process (``superoffload_utils.py``
    SuperOffloadCPUOptimizer, always DeepSpeedCPUAdam, l.76) that copies each sub-group's fp32 gradient into
    its buffer and steps it: :data:`SUPER_OFFLOAD_GRAD_COPY_BYTES` + :data:`CPU_ADAM_KERNEL_BYTES` per
    element at the worker's rate (its cores, :func:`super_offload_cores`, the rank's OpenMP threads at
    most: a spawned process inherits OMP_NUM_THREADS). The training process then unscales every sub-group's
    gradient and copies the 16-bit partition back (``_step_without_clipping`` / ``_step_with_clipping``
    l.239-268: :data:`UNSCALE_BYTES` + :func:`lp_copy_bytes`) on its own cores. With ``gradient_clipping``
    0 the worker's part becomes the ``cpu_optimizer_async`` term of the boundary's backward
    (:func:`super_offload_overlaps`); with clipping it stays in the step, waited on sub-group by sub-group.
    Returns the step time's ``assumptions["super_offload"]``."""
    ec = plan.config
    perc = float(ec.zero.offload_optimizer.cpuadam_cores_perc)
    w_cores, m_cores = super_offload_cores(cores, rpn, perc)
    w_thr = min(threads, w_cores) if threads and w_cores else threads
    m_thr = min(threads, m_cores) if threads and m_cores else threads
    rate_w, _ = cpu_optimizer_rate(host_bw, rpn, w_thr, core_bw)
    rate_m, _ = cpu_optimizer_rate(host_bw, rpn, m_thr, core_bw)
    wb = CPU_ADAM_KERNEL_BYTES + SUPER_OFFLOAD_GRAD_COPY_BYTES
    mb = UNSCALE_BYTES + lp_copy_bytes(DTYPE_BYTES[ec.model_dtype])
    host = [sz for sz, acc in offload_sub_groups(plan) if not acc]
    main_s = n_host * mb / rate_m if rate_m else None
    work_s = n_host * wb / rate_w if rate_w else None
    overlaps = super_offload_overlaps(ec)
    src = ("runtime/superoffload/superoffload_stage3.py partition_grads l.167-181, step l.196-233, "
           "_step_without_clipping / _step_with_clipping l.239-268; superoffload_utils.py worker l.101-154, "
           "_set_cpu_affinity l.207-228")
    worker_words = (f"{n_host:,} elements x {wb} B ({SUPER_OFFLOAD_GRAD_COPY_BYTES} B gradient copy into the worker's "
                    f"buffer + {CPU_ADAM_KERNEL_BYTES} B Adam kernel) / the worker's rate ({_count(w_thr, 'thread')} "
                    f"on its {_count(w_cores, 'core')}, cpuadam_cores_perc {perc:g})")
    main_words = (f"{n_host:,} elements x {mb} B ({UNSCALE_BYTES} B unscale pass"
                  + (f" + {mb - UNSCALE_BYTES} B 16-bit copy" if mb > UNSCALE_BYTES else "")
                  + f") / the training process's rate ({_count(m_thr, 'thread')} on its "
                    f"{_count(m_cores, 'core')})")
    if overlaps:
        cpu.amount, cpu.rate, cpu.seconds = n_host * mb, rate_m, main_s
        cpu.formula = ("SuperOffload, gradient_clipping 0, after backward: " + main_words
                       + "; the Adam step ran in the worker during the boundary's backward (cpu_optimizer_async)")
        cpu.source = src
        terms.append(Term("cpu_optimizer_async", "host_memory", "backward", n_host * wb, "bytes", rate_w, work_s,
                          overlapped=True, lower_bound=cpu.lower_bound,
                          formula="SuperOffload's worker during the boundary's backward: " + worker_words
                                  + "; each sub-group from the reduce flush that partitions its last gradient, one at "
                                    "a time; what runs past backward's end is exposed",
                          source=src))
        first_pre = host[0] * UNSCALE_BYTES / rate_m if host and rate_m else None
    else:
        amount = n_host * (mb + wb)
        secs_ = main_s + work_s if main_s is not None and work_s is not None else None
        cpu.amount, cpu.seconds = amount, secs_
        cpu.rate = amount / secs_ if secs_ else None
        cpu.formula = ("SuperOffload with gradient_clipping: after backward, each host sub-group waited on in turn: "
                       + main_words + " + " + worker_words)
        cpu.source = src
        first_pre = (host[0] * (UNSCALE_BYTES / rate_m + wb / rate_w) if host and rate_m and rate_w else None)
    return {"overlaps_backward": overlaps, "cpuadam_cores_perc": perc, "worker_cores": w_cores,
            "main_cores": m_cores, "worker_threads": w_thr, "main_threads": m_thr,
            "worker_bytes_per_s": rate_w, "main_bytes_per_s": rate_m, "worker_bytes_per_element": wb,
            "main_bytes_per_element": mb, "host_sub_groups": len(host), "first_pre_s": first_pre,
            "worker_seconds": work_s, "boundary_backward_s": None, "hidden_seconds": None, "exposed_seconds": None,
            "ready_model": None,
            "left_out": ("the rollback (adam_rollback) of an fp16 overflow step, host memory shared with the "
                         "gradients' PCIe copies, and the training process's own CPU use during backward")}


def _super_offload_critical_path(plan: "Plan", terms: list[Term], info: dict[str, Any], backward_s: float) -> float:
    """The seconds SuperOffload's worker adds after the boundary's backward (:func:`super_offload_tail`),
    set as the ``cpu_optimizer_async`` term's exposed part; ``info`` (the assumptions' ``super_offload``)
    gets the hidden and exposed seconds. The boundary's backward is the last of GA micro-steps' backward
    passes: ``backward_s`` / GA (the async step runs only at the boundary, ``superoffload_stage3.py`` l.167);
    each sub-group is submitted at :func:`sub_group_ready_fractions` of it (all at its end under expert
    parallelism, not modelled: an upper bound)."""
    asyn = next((t for t in terms if t.name == "cpu_optimizer_async"), None)
    if asyn is None:
        return 0.0
    ec = plan.config
    ga = max(1, derive_batch(ec, batch_world_size(ec, plan.cluster))[2] or 1)
    bb = backward_s / ga
    rate = info.get("worker_bytes_per_s")
    if not rate:
        asyn.exposed = 0.0  # unknown rate: listed in unknown with the cpu_optimizer term
        return 0.0
    subs = offload_sub_groups(plan)
    fr = sub_group_ready_fractions(plan)
    if fr is None or len(fr) != len(subs):
        fr = [1.0] * len(subs)
        info["ready_model"] = "every sub-group at the end of backward (expert parallelism: not modelled, an upper bound)"
    else:
        info["ready_model"] = ("a sub-group is submitted at the reduce flush of its last gradient, backward's time "
                               "taken as proportional to the gradient elements delivered")
    wb = info["worker_bytes_per_element"]
    host = [(f * bb, sz * wb / rate) for (sz, acc), f in zip(subs, fr) if not acc]
    tail = super_offload_tail([r for r, _ in host], [c for _, c in host], bb)
    asyn.exposed = tail
    info.update(boundary_backward_s=bb, hidden_seconds=max(0.0, (asyn.seconds or 0.0) - tail), exposed_seconds=tail)
    return tail


def _backup_adamw_term(plan: "Plan", hardware: "Hardware", unknown: list[str]) -> Term | None:
    """The step's accelerator-memory term of partial optimizer offload (``offload_optimizer.ratio`` < 1 at
    ZeRO-3, :func:`advisor.ledger.state.twin_flow_splits`): the sub-groups kept on the accelerator
    (:func:`offload_sub_groups`) are stepped by the backup torch AdamW on the GPU (``stage3.py``
    _optimizer_step l.1249-1258; built l.313-325), bandwidth-bound: elements x
    :func:`backup_adamw_bytes_per_element` / the accelerator's memory bandwidth (the preset's data-sheet
    figure, a peak: the seconds are a lower bound of the kernels'). None without such sub-groups; seconds
    None (listed in ``unknown``) when the spec gives no ``memory_bandwidth_bytes_per_s``."""
    from advisor.ledger.state import twin_flow_splits
    ec = plan.config
    if not twin_flow_splits(ec):
        return None
    acc = sum(sz for sz, a in offload_sub_groups(plan) if a)
    if not acc:
        return None
    bpe, words = backup_adamw_bytes_per_element(ec)
    a = hardware.accelerator
    bw = getattr(a, "memory_bandwidth_bytes_per_s", None) if a is not None else None
    if not bw:
        unknown.append("gpu_optimizer (no memory_bandwidth_bytes_per_s for the accelerator in the hardware spec)")
    amount = acc * bpe
    return Term("gpu_optimizer", ACCEL_MEMORY, "step", amount, "bytes", bw, amount / bw if bw else None,
                formula=f"{acc:,} elements on the accelerator (offload_optimizer.ratio "
                        f"{ec.zero.offload_optimizer.ratio:g}) x {bpe} B ({words}) / the accelerator's memory bandwidth",
                source="runtime/zero/stage3.py l.313-325 (backup torch.optim.AdamW), l.1100-1108 (subgroup_to_device), "
                       "_optimizer_step l.1249-1258; torch/optim/adam.py _multi_tensor_adam l.688-794")


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
        m_b = max(1, derive_batch(ec, batch_world_size(ec, plan.cluster))[2] or 1)  # GA: micro-batches per step
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
    nvme_files = {"files": 0, "seconds": 0.0}  # the aio per-file part of the NVMe terms (text: breakdown_lines)
    for m in movements:
        if m.seconds is None:
            unknown.append(f"{m.link} {m.item} (no {m.link} bandwidth in the hardware spec)")
        name = f"{m.link}:{m.item}:{m.direction}"
        if name in seen:  # one item moved in two passes (ZeRO-3's forward and backward fetches)
            name += f":{m.phase}"
        seen.add(name)
        formula = m.formula
        if m.link == NVME and m.files and m.seconds is not None:
            # the seconds include each file's aio op (movement.timed), so the rate is the bytes' effective one
            c = AIO_PER_FILE_S["write" if m.direction == "write" else "read"]
            nvme_files["files"] += m.files
            nvme_files["seconds"] += m.files * c
            formula += (f"; + {m.files:,} file(s) x {c * 1e6:.0f} us each (aio per-file cost, "
                        "movement.AIO_PER_FILE_S): the rate shown includes it")
        terms.append(Term(name, m.link, m.phase, m.bytes, "bytes",
                          (m.bytes / m.seconds) if m.seconds else None, m.seconds, overlapped=m.overlap,
                          formula=formula, source=m.source))

    _first_fetch_exposed(plan, terms)
    nvme_aio = nvme_aio_notes(plan, hardware, movements)
    aio_rates = nvme_aio_rates(plan, hardware, movements)
    tier_assumed = nvme_tier_assumed(hardware, movements)

    n_opt = cpu_optimizer_elements(plan)
    host_bw = getattr(hardware, "host_memory_bandwidth_bytes_per_s", None)
    threads_info: dict[str, Any] | None = None
    so_info: dict[str, Any] | None = None
    first_pre: float | None = None  # the first host sub-group's CPU seconds before its 16-bit copy back
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
        if super_offload_on(ec):
            so_info = _super_offload_split(plan, hardware, terms[-1], terms, n_opt, host_bw, rpn, threads, core_bw,
                                           cores)
        else:
            host = [sz for sz, acc in offload_sub_groups(plan) if not acc]
            first_pre = (host[0] * (bpe - lp_copy_bytes(DTYPE_BYTES[ec.model_dtype])) / rate_
                         if host and rate_ else None)
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

    gpu = _backup_adamw_term(plan, hardware, unknown)
    if gpu is not None:
        terms.append(gpu)

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
    if cpu is not None:
        cpu.exposed = cpu_s
    if so_info is not None:
        step_w += _super_offload_critical_path(plan, terms, so_info, windows["backward"])
        first_pre = so_info.get("first_pre_s")
    if gpu is not None:
        # stage3.py step's sub-group loop (l.2910-2927) enqueues the accelerator sub-groups' backup AdamW
        # (the first ones, l.1100-1108) and goes on to the host sub-groups without waiting: the GPU step runs
        # beside the CPU step until the first host sub-group's 16-bit copy back, a copy_ to the accelerator
        # from the host (l.2857-2858) without non_blocking, which waits for the stream's queued kernels
        # (torch aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: without non_blocking it is
        # at::cuda::memcpy_and_sync, cudaMemcpyAsync then cudaStreamSynchronize, c10/cuda/CUDAFunctions.h).
        # With the 16-bit partitions on the host (offload_param cpu/nvme) that copy is host-side, and the
        # whole CPU step hides it; the next forward's kernels queue behind it either way.
        on_accel = ec.offload_param_effective == "none" and first_pre is not None
        hide = first_pre if on_accel else cpu_s
        gpu.exposed = max(0.0, secs(gpu) - (hide or 0.0))
        gpu.formula += (f"; overlaps the CPU step up to the first host sub-group's copy back ({hide or 0.0:.4g} s)"
                        if on_accel else f"; overlaps the whole CPU step ({cpu_s:.4g} s)")
        step_w += gpu.exposed
    windows["step"] = step_w
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
                   "nvme_files": nvme_files if nvme_files["files"] else None,
                   "collectives": COLLECTIVE_MODEL,
                   "host_memory_bandwidth_note": HOST_BW_PEAK_NOTE if n_opt and host_bw and
                   "theoretical peak" in (getattr(hardware, "source", "") or "") else None,
                   "cpu_optimizer_threads": threads_info,
                   "fp16_overflow_check_note": FP16_OVERFLOW_CHECK_NOTE if n_opt and ec.zero.stage == 3
                   and ec.fp16_enabled else None,
                   "super_offload": so_info,
                   "overlap": "within a window max(compute, each link); synchronous movements and the CPU step in full "
                              "(SuperOffload without clipping: its worker beside the boundary's backward, what runs past "
                              "it exposed; partial offload's GPU step beside the CPU step up to the first host "
                              "sub-group's copy back); "
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


def cpu_optimizer_line(amount: float, rate: float | None, units: str = "GiB", threads: dict | None = None,
                       worker: Any = None) -> str:
    """The CPU optimizer step's text line: ``amount`` bytes of host memory traffic per rank per
    step at ``rate`` bytes/s per rank (None: unknown), in ``units`` (GiB = 2^30 or GB = 1e9 bytes);
    ``threads``: the step time's ``assumptions["cpu_optimizer_threads"]``, which names what limits
    the rate (the node's share of host memory bandwidth, or the rank's OpenMP threads); a rate of
    threads only, the spec giving no host memory bandwidth, is shown as "<=" (an upper limit).

    ``worker``: SuperOffload's ``cpu_optimizer_async`` :class:`Term` (or its dict, the step-time
    JSON's; :func:`_super_offload_split`, gradient_clipping 0): the line then names both terms, each
    with its bytes, rate and seconds (seconds = bytes / rate), the worker's split into hidden in the
    boundary's backward and exposed after it, so that the breakdown's "CPU optimizer step busy" (their
    sum) reads off this line."""
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
        why = (f"host memory bandwidth / ranks per node; {_count(t.get('threads_per_rank'), 'OpenMP thread')} per rank "
               "would stream more")
    else:
        why = "host memory bandwidth / ranks per node"
    if worker is not None:
        w = worker if isinstance(worker, dict) else worker.to_dict()
        wr, ws, we = w.get("rate"), w.get("seconds"), w.get("exposed")

        def part(b: float, r: float | None, s: float | None) -> str:
            return (f"{size(b, units, digits=1)}{at}{rate_text(r, units, digits=1)} = {s:,.3f} s" if r and s is not None
                    else f"{size(b, units, digits=1)} (rate unknown: give host_memory_bandwidth_bytes_per_s)")
        wtxt = part(w.get("amount") or 0.0, wr, ws)
        if wr and ws is not None and we is not None:
            wtxt += f" ({max(0.0, ws - we):,.3f} s hidden in the boundary's backward, {we:,.3f} s exposed)"
        secs = amount / rate if rate else None
        return (f"  CPU optimizer: worker {wtxt} + after backward {part(amount, rate, secs)}, per rank per step"
                + (f" ({why})" if rate else ""))
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
                  "host_memory": "CPU optimizer step", ACCEL_MEMORY: "GPU optimizer step"}


#: How :func:`gpu_optimizer_line` begins (the renderer redraws it in the output's units).
GPU_OPTIMIZER_LINE_PREFIX = "  GPU optimizer step (partial offload's backup AdamW): "
#: How :func:`super_offload_lines` begin (likewise).
SUPER_OFFLOAD_LINE_PREFIXES = ("  SuperOffload CPU step in the boundary's backward", "    (SuperOffload with gradient_clipping")


def gpu_optimizer_line(term: Any, units: str = "GiB") -> str:
    """The text line of partial optimizer offload's GPU step (the ``gpu_optimizer`` :class:`Term` or its
    dict, the step-time JSON's): its accelerator memory traffic per rank, the bandwidth, and the seconds
    the CPU step does not hide, in ``units`` (GiB: 2^30, GB: 1e9 bytes)."""
    from advisor.units import rate as rate_text, size
    d = term if isinstance(term, dict) else term.to_dict()
    r = d.get("rate")
    return (GPU_OPTIMIZER_LINE_PREFIX + f"{size(d.get('amount') or 0, units, digits=1)} of accelerator memory "
            "traffic per rank per step"
            + (f" at {rate_text(r, units, digits=1)} (the data sheet's, a peak: a lower bound)" if r else
               " (no memory_bandwidth_bytes_per_s: unknown)")
            + f"; {d.get('exposed') or 0.0:,.3f} s of its {d.get('seconds') or 0.0:,.3f} s not hidden by the CPU step")


def super_offload_lines(info: dict[str, Any] | None, units: str = "GiB") -> list[str]:
    """Text lines of SuperOffload's CPU step (the step time's ``assumptions["super_offload"]``, None: none):
    with ``gradient_clipping`` 0 the worker's seconds during the boundary's backward, hidden and exposed;
    with clipping, that it steps after backward."""
    from advisor.units import rate as rate_text
    if not info:
        return []
    cores = (f"{_count(info.get('worker_threads'), 'thread')} on {_count(info.get('worker_cores'), 'core')} "
             f"(cpuadam_cores_perc {info.get('cpuadam_cores_perc'):g})")
    rate = info.get("worker_bytes_per_s")
    at = f" at {rate_text(rate, units, digits=1)}" if rate else ""
    if not info.get("overlaps_backward"):
        return [SUPER_OFFLOAD_LINE_PREFIXES[1] + f": the worker steps each host sub-group after backward, "
                f"waited on in turn, {cores}{at}; nothing hidden)"]
    return [SUPER_OFFLOAD_LINE_PREFIXES[0] + f" ({info.get('boundary_backward_s') or 0.0:,.3f} s): "
            f"worker busy {info.get('worker_seconds') or 0.0:,.3f} s, hidden {info.get('hidden_seconds') or 0.0:,.3f} s, "
            f"exposed {info.get('exposed_seconds') or 0.0:,.3f} s after backward ({cores}{at})",
            f"    ({info.get('ready_model')}; left out: {info.get('left_out')})"]


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
    marks = st.to_dict()["unknown_resources"]
    for k in ("compute", NETWORK, PCIE, NVME, "host_memory", ACCEL_MEMORY):
        if k in busy:
            out.append(f"  {names[k]:<20} busy {seconds_cell(busy[k], marks.get(k))} s   exposed "
                       f"{seconds_cell(exp.get(k, 0.0), marks.get(k))} s")
            nf = st.assumptions.get("nvme_files") if k == NVME else None
            if nf:
                out.append(f"    ({nf['files']:,} aio files per step (one per swapped partition or state), at "
                           f"{AIO_PER_FILE_S['write'] * 1e6:.0f} us written / {AIO_PER_FILE_S['read'] * 1e6:.0f} us "
                           f"read each: {nf['seconds']:,.3f} s of the busy time; movement.AIO_PER_FILE_S, this "
                           "project's measured figure)")
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
        out.append(cpu_optimizer_line(cpu.amount, cpu.rate, units, th,
                                      next((t for t in st.terms if t.name == "cpu_optimizer_async"), None)))
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
        out.extend(super_offload_lines(st.assumptions.get("super_offload"), units))
    gpu = next((t for t in st.terms if t.name == "gpu_optimizer"), None)
    if gpu is not None:
        out.append(gpu_optimizer_line(gpu, units))
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
    for u in st.unknown:  # every one: a part left off this list would read as known
        out.append(f"  unknown: {u}")
    return out


def seconds_cell(seconds: float, mark: str | None, width: int = 9) -> str:
    """A busy / exposed seconds figure right-aligned in ``width``: "?" when the resource's time is unknown
    (``mark`` "?": no rate in the hardware spec, :meth:`StepTime.unknown_resources`), ">= x" when it is only a
    lower bound (``mark`` ">="), else the figure (``x,xxx.xxx``)."""
    if mark == "?":
        return f"{'?':>{width}}"
    return f"{('>= ' if mark else '') + f'{seconds:,.3f}':>{width}}"
