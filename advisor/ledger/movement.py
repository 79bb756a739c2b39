"""The movement ledger: bytes each rank moves per optimizer step, by link, direction and state class.

Where :mod:`advisor.ledger.state` says how many bytes *live* on each tier, this module says how many
bytes *move* every optimizer step (one optimizer step = ``gradient_accumulation_steps``
micro-steps), and, given a :class:`advisor.cluster.hardware.Hardware`, how long each movement takes at
the stated bandwidths and whether DeepSpeed can overlap it with compute.

Links: ``pcie`` (host <-> accelerator; directions ``to_host`` and ``to_accelerator``), ``nvme``
(directions ``write`` and ``read``, with the config's ``nvme_path`` and, with a hardware spec,
its storage tier) and ``network`` (collectives between data-parallel ranks; direction ``send``,
which equals what a rank receives in a ring collective); a network movement's ``crosses`` names
the link it takes, ``within_node`` (the peer link) or ``across_nodes`` (the NIC), and the text
table and HTML chart label it so (:data:`CROSSING_LABELS`: "peer link" / "network").

Sources, DeepSpeed 0.19.8 (paths relative to the installed package; reference = the project's
``deepspeed-0.19.8-state-accounting.md``):

* NVMe optimizer swap (ZeRO-3, ``offload_optimizer.device: nvme``), reference section 5.4,
  measured there byte-exactly: per swappable sub-group k, the fp32 master and both Adam
  moments are read and written once per step, each ``A_k(S_k) * 4`` bytes with
  ``A_k`` = round up to ``1024 * aio.intra_op_parallelism / 4`` elements
  (``swap_tensor/optimizer_utils.py`` ``_io_aligned_numel``); a sub-group is swappable iff
  ``S_k * 4 >= max(1 MiB, aio.block_size)`` (``stage3.py`` ``_swappable_optimizer_subgroup``);
  every parameter's fp32 gradient piece with ``r_i * 4 >= max(1 MiB, block_size)`` is written in
  backward and read at the step, its aligned part ``floor(r_i / k) * k * 4`` only
  (``optimizer_utils.py`` ``_adjust_for_misaligned_lengths``, ``_swap_out_gradients``). The
  first step reads no moments (they do not exist yet).
* NVMe parameter swap (``offload_param.device: nvme``), reference 5.1/5.4: only the partitions of
  trainable sub-groups that do not fit ``max_in_cpu`` (``stage3.py``
  ``_create_param_groups_fp16_flat_cpu_memory``, ``_move_to_flat_buffer``) and are at least
  ``max(1 MiB, block_size)`` (``partitioned_param_swapper.py`` ``swappable_tensor``) stay on
  NVMe: written after each step (``_partitioned_params_swap_out``), ``A'(p_i) * D`` bytes with
  ``A'`` = round up to ``1024 / D`` elements, and read on every fetch. Frozen parameters are never
  moved into the ``max_in_cpu`` buffer (it is built from the trainable groups only): on NVMe
  they are read, never written (measured in tests/engine).
* ZeRO-Offload PCIe traffic [S]: stage 1/2 copies each gradient partition to host as fp32
  (``stage_1_and_2.py`` ``async_inplace_copy_grad_to_fp32_buffer_from_gpu``) and the updated
  16-bit partition back (``param_buffer_of_bit16_for_cpu_offload_groups``); stage 3 copies the
  reduced gradient partition into the pinned host buffer and back (``stage3.py``
  ``partition_grads``), then the fp32 gradient at the boundary
  (``_offload_grad_partition_at_boundary``), and the updated 16-bit partition back to the
  accelerator unless parameters are offloaded too; offloaded parameters cross PCIe on every
  fetch. Under partial optimizer offload (``offload_optimizer.ratio`` < 1, the ledger's
  ``Placement.opt_on_accelerator``) the boundary fp32 gradient and the updated partition cross for
  the host sub-groups only; the accelerator sub-groups' fp32 masters cross to host only when
  parameters are offloaded too.
* Collectives: the ZeRO paper's volumes (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
  Training Trillion Parameter Models", SC'20, section 7): stages 0-2 move ~2 x Psi per step
  (reduce-scatter + all-gather, or all-reduce), stage 3 ~3 x Psi (forward all-gather, backward
  all-gather, gradient reduce-scatter); with ring collectives each rank sends (W-1)/W of the
  buffer. Stage 2 and 3 reduce on every micro-step; stage 3 skips the backward all-gather when
  parameters stay gathered between forward and backward (``stage3_max_reuse_distance`` >= about
  twice the non-persistent parameter count, reference 4.5).
* ZeRO++ (stage 3): qwZ (``zero_quantized_weights``) all-gathers int8, 1 byte per element, in
  place of D (``partition_parameters.py`` _all_gather_coalesced / _all_gather_sequential), plus
  a second all-gather of fp32 scales, 4 B per quantization group of each fetch
  (:func:`qwz_scale_groups`, one module per fetch). qgZ (``zero_quantized_gradients``) on more than one
  node replaces the gradient reduce-scatter by the two-stage int4 all-to-all of
  ``runtime/comm/coalesced_collectives.py`` all_to_all_quant_reduce (:func:`qgz_rank_bytes`);
  on one node DeepSpeed keeps the reduce-scatter. The transient quantization buffers are in
  the state ledger's exclusions.
  hpZ (``zero_hpz_partition_size`` h > 1): :func:`hpz_allgather_rank_bytes`, the first forward
  of the trainable parameters over the ZeRO group, the rest over the hpZ group (h ranks).
* Tensor parallelism t (Megatron, Shoeybi et al. 2019 section 3 Fig. 3-4; Narayanan et al.,
  "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC'21,
  section 2.3 / 3.2: "two all-reduce operations in the forward pass and two in the backward
  pass" per transformer layer): each layer all-reduces an activation of b x s x h elements
  (the attention and the MLP outputs, the g operator) in forward and their input gradients
  (the f operator) in backward: per rank 4 x 2 (t-1)/t x b s h x D bytes per layer and
  micro-batch on a ring. Megatron sequence parallelism replaces each all-reduce by an
  all-gather plus a reduce-scatter of the same tensor (Korthikanti et al. 2022, arXiv:2205.05198,
  section 4.2.2: "the same communication bandwidth"): the same bytes. A checkpointed layer runs
  its forward again in backward: 2 more all-reduces. Within a node (Megatron places the
  tensor-parallel ranks on one node): the peer link. The vocab-parallel embedding (first
  stage), the output layer's input gradient and the cross-entropy's three (s, b) fp32
  all-reduces (last stage) are counted too (:func:`_vocab_parallel_movements`).
* Expert parallelism (DeepSpeed MoE, ``moe/sharded_moe.py``): the dispatch and combine
  all-to-alls of every MoE layer, forward and backward (:func:`moe_movements`).
* DeepSpeed-Ulysses (``sequence_parallel_size``, ``sequence/layer.py``): the q, k, v and output
  all-to-alls of every layer, forward and backward (:func:`ulysses_movements`).
* Pipeline parallelism (DeepSpeed ``runtime/pipe/engine.py``): each stage but the last sends its
  output activation (b x s x h x D) per micro-batch, each but the first the input gradient
  back (``_exec_send_activations`` / ``_exec_send_grads``, ``p2p.send``). With tensor
  parallelism the PipelineEngine sends a 1/t partition (``pipe_partitioned`` and
  ``grad_partitioned``, on by default: ``runtime/config.py`` :279-280, ``engine.py`` :137-138,
  :732-745 ``PartitionedTensor``) and the receiver all-gathers it over the tensor-parallel group
  (``runtime/utils.py`` ``PartitionedTensor.full``: ``all_gather_into_tensor``). Under the model
  parallel movements every ZeRO collective and offload copy is the stage's tensor-parallel shard
  (:func:`advisor.model.parallel.shard`), over the ZeRO group.
* Activation checkpoints moved to host (``activation_checkpointing.cpu_checkpointing``, acting
  through ``deepspeed.checkpointing.checkpoint``): from the activation ledger
  (:class:`advisor.model.activations.ActivationEstimate` ``host_offload_bytes`` /
  ``host_restore_bytes``, per micro-batch, :func:`advisor.model.activations.cpu_checkpoint_traffic`
  with its DeepSpeed sources), GA x those bytes per step: device -> host in forward, host ->
  device in backward, overlapped on the async offload engine's side stream, blocking otherwise.
  Given only when the caller passes the activations (estimate does); else :func:`not_modelled`
  says it is not counted.

Partition, padding, sub-group, persistence and swap formulas come from :mod:`advisor.ledger.state`
(reference sections 3-5), where they live once. Ranks differ only in a few per-rank figures
(ZeRO-1/2 Cov_r and I_r, ZeRO-3 gradient swap pieces r_i): :func:`movement_roles` computes them
for every rank at once and the movements once per distinct figure.

Endurance (:func:`endurance`, :func:`endurance_report`): bytes written per day = bytes per step
x 86,400 / step seconds; rated bytes = TBW x 1e12, or DWPD x capacity x 365 x warranty years;
projected life in days = rated bytes / bytes written per day.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable

from advisor.config.effective import DTYPE_BYTES, EffectiveConfig, batch_world_size, derive_batch, micro_batch_for
from advisor.ledger.ranks import RankSet, Runs
from advisor.model.inventory import Inventory
from advisor.ledger.state import (aio_alignment_elems, zero3_partition_sums, optimizer_states, placement,
                                  placement_of, plan_optimizer, swap_threshold_bytes,
                                  zero3_param_swap_bytes_counted, zero3_partition_counts,
                                  zero3_grad_swap_files_by_rank, zero3_param_swap_files,
                                  zero3_partition_numel, zero3_persistent, zero3_stays_gathered, zero12_rank_coverage,
                                  QUANT_SCALE_BYTES, QUANT_TARGET_GROUP, module_names, quant_groups)

if TYPE_CHECKING:
    from advisor.cluster.hardware import Hardware, StorageTier
    from advisor.ledger.state import Ledger, Plan

PCIE, NVME, NETWORK = "pcie", "nvme", "network"
LINKS = (PCIE, NVME, NETWORK)
SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class Movement:
    """Bytes one rank moves over one link per optimizer step.

    ``bytes`` is the steady-state figure; ``first_step_bytes`` is set when the first step
    differs. ``seconds`` (with a hardware spec) = bytes / the rank's share of the link's
    bandwidth. ``overlap``: DeepSpeed issues it asynchronously alongside compute.
    """

    rank: int
    link: str
    direction: str
    cls: str
    item: str
    bytes: int
    phase: str
    overlap: bool
    formula: str = ""
    source: str = ""
    path: str | None = None
    tier: str | None = None
    seconds: float | None = None
    first_step_bytes: int | None = None
    #: The process group: data_parallel (ZeRO's collectives, offload copies), tensor_parallel,
    #: pipeline_parallel (stage-to-stage sends).
    group: str = "data_parallel"
    #: Network movements only: True within one node (the peer link), False across nodes (the
    #: NIC share); None: decided from the job's shape (data-parallel collectives).
    intra_node: bool | None = None
    #: NVMe movements only: the files (one aio op each) the bytes are in, per optimizer step; each
    #: adds :data:`AIO_PER_FILE_S` to the seconds (:func:`timed`).
    files: int = 0
    #: Network movements only: the link the bytes cross, ``within_node`` (the peer link:
    #: NVLink/xGMI) or ``across_nodes`` (the NIC), as :func:`link_bandwidth` times them
    #: (:func:`crossing`; set by :func:`movement_roles`); None for PCIe / NVMe.
    crosses: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Why a ZeRO-3 parameter fetch is synchronous without ``overlap_comm`` (DeepSpeed 0.19.8).
NO_OVERLAP_FETCH = ("overlap_comm false: the all-gather stream is the default stream, parameter_offload.py "
                    "l.195-196, so partitioned_param_coordinator.py issues every all-gather and prefetch "
                    "(l.400, l.606 `with stream(allgather_stream)`) on the compute stream, serialised with the "
                    "layers' kernels")


def zero3_fetch_overlaps(z: Any) -> bool:
    """Whether ZeRO-3's parameter fetches (the coordinator's all-gathers, their qwZ scales and hpZ
    parts, and an offloaded partition's copy to the accelerator inside them) run alongside compute
    in DeepSpeed 0.19.8: only with prefetching (``stage3_prefetch_bucket_size`` > 0,
    ``partitioned_param_coordinator.py`` ``fetch_sub_module``: the next modules' parameters are
    gathered while the current one computes) AND ``overlap_comm``: ``DeepSpeedZeRoOffload``
    makes the all-gather stream ``get_accelerator().Stream() if overlap_comm else
    get_accelerator().default_stream()`` (``runtime/zero/parameter_offload.py`` l.195-196), and
    the coordinator issues every all-gather, the prefetches too, ``with
    get_accelerator().stream(self.__allgather_stream)`` (``partitioned_param_coordinator.py``
    l.606; the wait at l.400-415): on the default stream they run in stream order between the
    layers' kernels, none of them hidden. NVMe parameter reads are not on a stream (aio threads,
    ``__prefetch_nvme_param_partitions`` l.667-690): they overlap with prefetching alone."""
    return z.prefetch_bucket_size > 0 and bool(z.overlap_comm)


def _grad_accum(ec: EffectiveConfig, dp: int) -> int:
    _, _, ga, err = derive_batch(ec, dp)
    if err or not ga:
        return max(1, ec.gradient_accumulation_steps or 1)
    return ga


#: qwZ all-gathers int8: 1 byte per element (partition_parameters.py _all_gather_coalesced, dtype=torch.int8).
QWZ_BYTES = 1


HPZ_SOURCE = ("ZeRO++ paper (Wang et al., arXiv 2306.10209) s.3.2 hpZ; DeepSpeed 0.19.8 "
              "runtime/zero/partition_parameters.py all_gather_coalesced l. 1571-1575 (ds_secondary_tensor present: "
              "the hpZ group zero_param_process_group, world size num_ranks_in_param_group), _partition l. 1768-1769 and "
              "_partition_param_sec l. 1900-1947 (the secondary copy is refreshed from the gathered parameter when it "
              "is released: a local copy, no network), runtime/zero/stage3.py _post_step l. 2846 -> "
              "invalidate_secondary_tensor l. 755-759 (trainable parameters only), "
              "partitioned_param_coordinator.py l. 592-606 (frozen parameters keep their secondary tensor)")


def qwz_scale_groups(inventory: Inventory, W: int, h: int = 1, which: str = "all") -> tuple[int, int]:
    """ZeRO++ qwZ: (quantization groups, hence fp32 scales, one rank quantizes in one full pass of
    parameter all-gathers, modules whose partition DeepSpeed cannot group), over ``which``
    parameters (all / trainable / frozen).

    DeepSpeed 0.19.8 ``partition_parameters.py`` _all_gather_coalesced l. 1480-1533 quantizes the
    concatenation of the fetched parameters' partitions in one CUDAQuantizer.quantize call
    (:func:`advisor.ledger.state.quant_groups`) and all-gathers its scales (quant_scale_buffer,
    fp32, groups x world size). A fetch is taken as one module's parameters (tensor names up to
    the last dot, :func:`advisor.ledger.state.module_of`, as the gathered-parameter rule takes
    it): exact for a module fetched alone (prefetch_bucket_size 0, or the first module
    of a pass); prefetch batches several modules per call, which changes the group count by the
    rounding only (about one group per 8,000 elements either way). Partition per parameter:
    ceil(n_i / W) elements, or the hpZ secondary ceil(n_i / W) x W / h with ``h`` > 1. A module
    the quantizer cannot group (DeepSpeed asserts) is counted at ceil(S / 8000) groups."""
    def compute() -> tuple[int, int]:
        sums: dict[str, int] = {}
        for t, mod in zip(inventory.tensors, module_names(inventory)):
            if which != "all" and t.trainable != (which == "trainable"):
                continue
            sums[mod] = sums.get(mod, 0) + -(-t.numel // W) * (W // h if h > 1 else 1)
        groups = bad = 0
        for s_m in sums.values():
            g = quant_groups(s_m)
            if g is None:
                bad += 1
                g = -(-s_m // QUANT_TARGET_GROUP)
            groups += g
        return groups, bad
    return inventory.memo(("qwz_scale_groups", W, h, which), compute)


def hpz_allgather_rank_bytes(p3_all: int, p3_t: int, W: int, h: int, intra: bool, ga: int, PD: int,
                             gathered: bool) -> list[tuple[str, float, bool, str]]:
    """ZeRO++ hpZ: the parameter all-gathers one rank sends per optimizer step, as (item, bytes,
    intra_node, formula) rows (bytes; ``PD`` in the formula stands for the gathered dtype's bytes).

    ``p3_all`` / ``p3_t`` = sum of the rank's primary partitions p_i = A_W(n_i) / W over all /
    trainable parameters (elements), ``W`` the ZeRO group, ``h`` = zero_hpz_partition_size
    (capped at W), ``intra``: whether every hpZ group lies within a node (:func:`hpz_within_node`),
    ``ga`` the micro-steps per step, ``PD`` bytes per gathered element (D, or 1 under qwZ).

    DeepSpeed 0.19.8 (:data:`HPZ_SOURCE`): a parameter with a secondary tensor is gathered over
    the hpZ group of h ranks from its secondary partition A_W(n_i) / h (the same p_i x W
    gathered elements, ring (h-1)/h of them sent); one without it over the whole ZeRO group
    from the primary partition. _post_step drops the trainable parameters' secondary tensors
    after every optimizer step, and the first release after the next forward rebuilds them by
    a local copy, so per step: the first micro-step's forward all-gather of the trainable
    parameters crosses the ZeRO group, (W-1)/W x sum_t(p_i) x W x PD; the other GA-1 forwards,
    the frozen parameters' forwards (their secondary tensor is never dropped; first-step fetches
    aside) and every backward all-gather run within the hpZ group, whose rows carry ``intra``."""
    f, fh = (W - 1) / W, (h - 1) / h
    p3_f = p3_all - p3_t
    rows = [("param_allgather_fwd", f * p3_t * W * PD, None,
             "forward all-gather of the trainable parameters over the ZeRO group, first micro-step only (hpZ "
             "secondary tensors dropped after the step): (W-1)/W x sum_t(p_i) x W x PD"),
            ("param_allgather_fwd_hpz", fh * ((ga - 1) * p3_t + ga * p3_f) * W * PD, intra,
             f"forward all-gather from the hpZ secondary partition within the hpZ group (h = {h}): (h-1)/h x "
             "((GA-1) x sum_t(p_i) + GA x sum_frozen(p_i)) x W x PD")]
    if not gathered:
        rows.append(("param_allgather_bwd_hpz", ga * fh * p3_all * W * PD, intra,
                     f"backward all-gather from the hpZ secondary partition within the hpZ group (h = {h}): GA x "
                     "(h-1)/h x sum(p_i) x W x PD (parameters released after forward)"))
    return rows


def hpz_within_node(plan: "Plan", ranks_per_node: int, stage: int = 0) -> bool | None:
    """Whether the ZeRO++ hpZ groups holding pipeline stage ``stage``'s ranks each lie within one node
    (None without hpZ: ZeRO-3 with ``zero_hpz_partition_size`` > 1): DeepSpeed builds them of
    min(h, world size) consecutive global ranks whatever the tensor-, pipeline- or data-parallel
    groups (:func:`group_spans_nodes` ``hpz``; G003 warns where they straddle nodes). Under tensor
    parallelism such a group holds tensor-parallel ranks, not members of one ZeRO group."""
    z = plan.config.zero
    h = z.zero_hpz_partition_size or 1
    if z.stage != 3 or h <= 1:
        return None
    cl = plan.cluster
    return not group_spans_nodes("hpz", cl.tensor_parallel, cl.pipeline_parallel, cl.zero_world_size,
                                 ranks_per_node, stage, min(h, max(1, cl.world_size)))


def qgz_rank_bytes(inventory: Inventory, W: int, L: int, nodes: int, C: int) -> list[tuple[str, float, bool, str]]:
    """ZeRO++ qgZ: bytes one rank sends per micro-step for the trainable gradients, as
    (item, bytes, intra_node, formula) rows (bytes).

    DeepSpeed 0.19.8 ``runtime/comm/coalesced_collectives.py`` all_to_all_quant_reduce (l. 31-76),
    used by ``stage3.py`` __avg_scatter_grads when the job spans nodes (num_nodes = world //
    device_count > 1; on one node it is the plain reduce-scatter). Per gradient of n elements:

    * 1-D, or n not divisible by 2 x W (l. 43-52): reduce_scatter_coalesced over the whole group,
      (W-1)/W x ceil(n/W) x W x C;
    * otherwise, with g = max(shape[0], shape[1], W) quantization groups (l. 54): swizzle_quant to
      int4 (n/2 bytes, ``pt_binding.cpp`` ds_swizzle_quant: numel / (8/4)) plus g fp32 scales
      (symmetric: 1 per group); an all-to-all within the node sends (L-1)/L of both; the
      quantized_reduction keeps 1/L of the values (``sz.back() / devices_per_node``) and g // L
      scales; an all-to-all across the nodes sends (N-1)/N of those.

    ``L`` = ranks per node, ``nodes`` = N, ``C`` = the communication dtype's bytes."""
    intra = inter = fallback = 0.0
    for t in inventory.tensors:
        if not t.trainable:
            continue
        n = t.numel
        if len(t.shape) < 2 or n % (2 * W):
            fallback += (W - 1) / W * (-(-n // W)) * W * C
            continue
        g = max(t.shape[0], t.shape[1], W)
        intra += (L - 1) / L * (n / 2 + 4 * g)
        inter += (nodes - 1) / nodes * (n / (2 * L) + 4 * (g // L))
    rows = [("qgz_intra_node_all_to_all", intra, True,
             "qgZ int4 all-to-all within the node: (L-1)/L x sum(n_i/2 + 4 g_i)"),
            ("qgz_inter_node_all_to_all", inter, False,
             "qgZ int4 all-to-all across nodes: (N-1)/N x sum(n_i/(2L) + 4 floor(g_i/L))")]
    if fallback:
        rows.append(("grad_reduce_scatter", fallback, None,
                     "qgZ fallback (1-D or n % 2W != 0) reduce-scatter: (W-1)/W x ceil(n/W) x W x C"))
    return rows


def not_modelled(plan: "Plan", activations: Any = None) -> list[str]:
    """Movements this module does not count for ``plan`` (and ``activations``, the activation
    ledger's estimate when the caller has one), in words."""
    ec = plan.config
    out = []
    ac = ec.activation_checkpointing or {}
    if ac.get("cpu_checkpointing") is True and activations is None:
        out.append("activation checkpoints copied to host (cpu_checkpointing): needs activation shapes, not counted")
    out.append("input batches, logits and loss scalars; NCCL protocol overheads; first-iteration fetches")
    z = ec.zero
    if z.stage == 3 and z.zero_quantized_weights:
        out.append("ZeRO++ qwZ: the fp32 scales are counted as if each module were fetched alone; prefetch "
                   "batches several modules per quantize call, which moves the group count by rounding only")
    cl = plan.cluster
    if (cl.tensor_parallel > 1 or cl.pipeline_parallel > 1) and not plan.workload.seq_len:
        out.append("tensor/pipeline-parallel activation traffic: needs the sequence length (--seq-len)")
    if cl.pipeline_parallel > 1 and (plan.inventory.meta or {}).get("tie_word_embeddings"):
        out.append("pipeline parallelism: the tied embedding's gradient all-reduce between the first and last stage")
    if cl.expert_parallel > 1:
        if not plan.workload.seq_len:
            out.append("expert parallelism: the MoE all-to-alls need the sequence length (--seq-len)")
        if ec.zero.stage == 3:
            out.append("expert parallelism at ZeRO-3 (refused by DeepSpeed, G008): the expert parameters' ZeRO "
                       "collectives counted over the whole ZeRO group")
    if ec.zero.stage in (1, 2) and ec.offload_optimizer_effective == "cpu" and _grad_accum(ec, batch_world_size(ec, plan.cluster)) > 1:
        out.append("ZeRO-1/2 offload with gradient accumulation: per-micro-step host accumulation copies are "
                   "approximated (source reading only)")
    return out


def _rank_terms(plan: "Plan") -> "Runs":
    """Per data-parallel rank (a :class:`advisor.ledger.ranks.Runs`), the only figures its movements depend on, read from the ledger's
    :class:`advisor.ledger.state.Placement` (``terms``, computed once per plan): ZeRO-1/2 with CPU
    offload (Cov_r, I_r) summed over groups, ZeRO-3 with NVMe optimizer swap the gradient bytes
    written, else None."""
    ec: EffectiveConfig = plan.config
    W = plan.cluster.zero_world_size
    st = ec.zero.stage
    oo = ec.offload_optimizer_effective
    pl = placement_of(plan)
    if st in (1, 2) and oo == "cpu" and pl.zero12:
        return pl.terms.map(lambda t: (t[1], t[0]))
    if st == 3 and oo == "nvme":
        # (gradient bytes written, gradient files): ranks whose pieces differ in count time differently
        return Runs.zip(pl.terms, zero3_grad_swap_files_by_rank(ec, plan.inventory, W)).map(lambda t: (t[0][0], t[1]))
    return Runs.const(W, None)


def _activation_key(activations: Any) -> tuple | None:
    """The figures of an activation estimate that movements depend on (None: none given)."""
    if activations is None:
        return None
    return (int(getattr(activations, "host_offload_bytes", 0) or 0),
            int(getattr(activations, "host_restore_bytes", 0) or 0),
            bool(getattr(activations, "host_offload_overlapped", False)))


def movement_roles(plan_or_ledger: "Plan | Ledger", hardware: "Hardware | None" = None,
                   activations: Any = None) -> list[tuple[RankSet, list[Movement]]]:
    """Movements per optimizer step grouped by rank role: [(ranks, movements of ranks[0])], the
    ranks of each role ascending (a :class:`advisor.ledger.ranks.RankSet`), roles by first rank.
    Every rank in a role moves exactly the same bytes (only ``rank`` differs). O(tensors log
    tensors) plus O(tensors) per role. With
    ``hardware`` the movements are :func:`timed`. ``activations``
    (:class:`advisor.model.activations.ActivationEstimate`) adds cpu_checkpointing's PCIe rows."""
    plan = getattr(plan_or_ledger, "plan", plan_or_ledger)
    memo = plan.derived.setdefault("movement_roles", [])
    akey = _activation_key(activations)
    for hw, ak, roles in memo:  # once per plan, hardware and activations: lint's T rules and estimate share them
        if hw is hardware and ak == akey:
            return roles
    if plan.cluster.tensor_parallel > 1 or plan.cluster.pipeline_parallel > 1:
        out = _model_parallel_roles(plan, hardware, akey)
        memo.append((hardware, akey, out))
        return out
    by = _rank_terms(plan).groups()
    rpn = _ranks_per_node(plan, hardware)
    out = []
    L = int((plan.inventory.meta or {}).get("num_layers") or 0)
    moe = moe_movements(plan, 0, (0, L), last=True, ranks_per_node=rpn) + ulysses_movements(plan, L, ranks_per_node=rpn)
    multi = plan.cluster.world_size > rpn
    hpz = hpz_within_node(plan, rpn)
    # under expert parallelism the rows the ZeRO partitions size are the dense and the expert groups' own, and the
    # ranks moving the same bytes are those with the same partition of each (_expert_zero_split)
    split = _expert_zero_split(plan, plan.inventory, not multi, akey)
    st = plan.config.zero.stage
    for ranks, k, part_rows in ([(ls, None, rows) for ls, rows in split] if split is not None
                                else [(ranks, k, None) for k, ranks in by.items()]):
        ms = _rank_movements(plan, ranks[0], k, akey, hpz)
        if part_rows is not None:
            ms = [m for m in ms if not _is_zero_partition_row(m, st)] + [replace(m, rank=ranks[0]) for m in part_rows]
        ms += [replace(m, rank=ranks[0]) for m in moe]
        ms = [replace(m, crosses=crossing(m, multi)) if m.link == NETWORK else m for m in ms]
        if hardware is not None:
            ms = timed(ms, hardware, ranks_per_node=rpn, world_size=plan.cluster.world_size, aio=plan.config.aio)
        out.append((ranks, ms))
    memo.append((hardware, akey, out))
    return out


def _model_parallel_roles(plan: "Plan", hardware: "Hardware | None", akey: tuple | None = None
                          ) -> list[tuple[list[int], list[Movement]]]:
    """:func:`movement_roles` under tensor / pipeline parallelism: per pipeline stage, the ZeRO
    movements of the stage's tensor-parallel shard over the ZeRO group (a plan of the shard's
    inventory on zero_world_size ranks), plus :func:`model_parallel_movements`. Ranks are
    global (``Cluster.coords``: rank = (stage x W_z + z) x t + m)."""
    from advisor.model.parallel import shard
    from advisor.plan import Cluster, Plan
    cl = plan.cluster
    tp, pp, wz = cl.tensor_parallel, cl.pipeline_parallel, cl.zero_world_size
    rpn = _ranks_per_node(plan, hardware)
    out = []
    for sh in shard(plan.inventory, tp, pp, cl.expert_parallel):
        sub = Plan(plan.config, sh.inventory, Cluster(world_size=wz, gpus_per_node=cl.gpus_per_node), plan.workload)
        # the stage's shard is still a PipelineModule's: its wrapper is the whole plan's (state.plan_optimizer;
        # BF16_Optimizer at ZeRO-0 under pipeline parallelism), given through the cache placement_of reads
        sub.derived["placement"] = placement(plan.config, sh.inventory, wz, plan_optimizer(plan)[0])
        # the stage's ZeRO group is DP x SP ranks at stride t (group_spans_nodes): within one node
        # when the stage's t x W_z ranks are, however many nodes the job spans
        dp_multi = group_spans_nodes("data", tp, pp, wz, rpn, sh.stage)
        extra = model_parallel_movements(plan, sh.stage, sh.layers[1] - sh.layers[0], ranks_per_node=rpn)
        extra += moe_movements(plan, sh.stage, sh.layers, last=sh.stage == pp - 1, ranks_per_node=rpn)
        extra += ulysses_movements(plan, sh.layers[1] - sh.layers[0], stage=sh.stage, ranks_per_node=rpn)
        # hpZ's groups are consecutive global ranks (group_spans_nodes "hpz"), not the sub-plan's
        hpz = hpz_within_node(plan, rpn, sh.stage)
        split = _expert_zero_split(plan, sh.inventory, not dp_multi, akey)
        st = plan.config.zero.stage
        # local ranks l = z tp + m of the stage moving the same bytes: by ZeRO rank z, or under expert parallelism by
        # the dense and the expert partitions they hold (_expert_zero_split)
        for ls, k, part_rows in ([(ls, None, rows) for ls, rows in split] if split is not None
                                 else [(zs.scaled(tp), k, None) for k, zs in _rank_terms(sub).groups().items()]):
            granks = ls.scaled(1, sh.stage * wz * tp)  # global ranks (stage wz + z) tp + m, m < tp
            ms = _rank_movements(sub, ls[0] // tp, k, akey, hpz)
            if part_rows is not None:
                ms = [m for m in ms if not _is_zero_partition_row(m, st)] + part_rows
            ms = [replace(m, rank=granks[0]) for m in ms]
            ms += [replace(m, rank=granks[0]) for m in extra]
            ms = [replace(m, crosses=crossing(m, dp_multi)) if m.link == NETWORK else m for m in ms]
            if hardware is not None:
                ms = timed(ms, hardware, ranks_per_node=rpn, world_size=cl.world_size, aio=plan.config.aio,
                           multi_node=dp_multi)
            out.append((granks, ms))
    out.sort(key=lambda x: x[0][0])
    return out


#: The ZeRO-1/2 CPU-offload PCIe rows of :func:`_rank_movements`, sized by the rank's partition of each param group
#: (Cov_r, I_r, P): under expert parallelism a moe group's partition is over the expert-data-parallel group.
ZERO12_OFFLOAD_ITEMS = frozenset({"fp32_grad", "offload_accumulated_grads_cpu", "offload_bit16_param_buffer"})


def _is_zero_collective(m: Movement) -> bool:
    """A ZeRO collective of :func:`_rank_movements` (a network row over the data-parallel group)."""
    return m.link == NETWORK and m.group == "data_parallel"


def _is_zero_partition_row(m: Movement, stage: int) -> bool:
    """A row of :func:`_rank_movements` sized by the rank's ZeRO partition: a ZeRO collective, or at ZeRO-1/2
    a CPU-offload PCIe copy (:data:`ZERO12_OFFLOAD_ITEMS`)."""
    return _is_zero_collective(m) or (stage in (1, 2) and m.link == PCIE and m.item in ZERO12_OFFLOAD_ITEMS)


def _expert_zero_split(plan: "Plan", inv: Inventory, intra: bool, akey: tuple | None = None
                       ) -> list[tuple[RankSet, list[Movement]]] | None:
    """Under expert parallelism (ep > 1) at ZeRO-0/1/2, the rows of a rank holding ``inv`` (its tensor-parallel
    shard of a stage, the rank's num_experts / ep routed experts in it) that its ZeRO partitions size
    (:func:`_is_zero_partition_row`), by the stage's local ranks l = z x TP + m that move the same bytes: the
    dense tensors' over the ZeRO group (DP x SP, :attr:`advisor.plan.Cluster.zero_world_size`) at ZeRO rank
    l // TP, and the routed experts' over DeepSpeed's expert-data-parallel group,
    :attr:`advisor.plan.Cluster.expert_data_parallel_size` ranks, at its rank l // ep (as
    ``ledger/state._model_parallel_roles`` places the entries), each as :func:`_rank_movements` counts a plan of
    those tensors on that many ranks. The group fact is cited there: ``utils/groups.py``
    _create_expert_and_data_parallel l.426-445; ZeRO-1/2 partition, reduce and all-gather a moe param group over it
    (``stage_1_and_2.py`` l.880-881 partition_count and real_dp_process_group, average_tensor's
    ``process_group = self.expert_dp_process_group[...]``), and with CPU offload each group's own fp32 partition
    receives its gradients (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``, l.1888-1909: the rank's slice of
    each parameter, converted to fp32, into ``single_partition_of_fp32_groups[i].grad``) and sends its updated
    16-bit partition back (``step`` l.3092-3096: ``bit16_partitions[partition_id].data.copy_(bit16_partition_buffer)``);
    ZeRO-0 all-reduces the expert gradients over it (``engine.py`` _reduce_expert_gradients). The expert rows are
    group ``expert_data_parallel``, the collectives ``experts_``-prefixed; ``intra``: whether the stage's ranks (and
    so that group, strided by ep across them) lie in one node. At TP 1, ep 8 on 8 ranks that group is one rank: no
    expert collective at all. Returns [(local ranks, rows)], or None when ep is 1, at ZeRO-3 (DeepSpeed refuses
    native MoE there, rule G008) or without routed experts in ``inv``. Proven by
    ``tests/engine/test_moe_offload_engine.py`` (ZeRO-2 CPU offload, ep 2 on 4 ranks: the engine's copies)."""
    from advisor.model.parallel import split_experts
    from advisor.plan import Cluster, Plan
    cl = plan.cluster
    st = plan.config.zero.stage
    if cl.expert_parallel <= 1 or st == 3:
        return None
    dense, experts = split_experts(inv)
    if not experts.tensors:
        return None
    wrapper = plan_optimizer(plan)[0]
    tp, ep = cl.tensor_parallel, cl.expert_parallel
    parts = []  # (sub-plan, ranks that hold each value of its rank terms, stride of the local rank, group)
    for part, w, group, k in ((dense, cl.zero_world_size, "data_parallel", tp),
                              (experts, max(1, cl.expert_data_parallel_size), "expert_data_parallel", ep)):
        if not part.tensors:
            continue
        sub = Plan(plan.config, part, Cluster(world_size=w, gpus_per_node=cl.gpus_per_node), plan.workload)
        sub.derived["placement"] = placement(plan.config, part, w, wrapper)
        parts.append((sub, _rank_terms(sub).groups(), k, group, len(part.tensors)))

    def rows(sub, zr, key, group, n):
        ms = [m for m in _rank_movements(sub, zr, key, akey) if _is_zero_partition_row(m, st)]
        if group == "data_parallel":
            return ms
        w = sub.cluster.world_size
        what = (f"routed experts ({n} tensors, 1/{ep} of them) over the expert-data-parallel group of {w} "
                f"(DP x SP x TP / ep)")
        src = ("; utils/groups.py _create_expert_and_data_parallel l.426-445, stage_1_and_2.py l.880-881 "
               "(Cluster.expert_data_parallel_size)")
        return [replace(m, item=f"experts_{m.item}" if m.link == NETWORK else m.item, group=group,
                        intra_node=intra if m.link == NETWORK else m.intra_node,
                        formula=f"{what}: {m.formula}", source=m.source + src) for m in ms]

    combos: list[tuple[RankSet, list[tuple]]] = [(RankSet([(0, cl.zero_world_size * tp)]), [])]
    for sub, groups, k, group, n in parts:
        combos = [(ls & zs.scaled(k), picked + [(sub, key, k, group, n)])
                  for ls, picked in combos for key, zs in groups.items() if len(ls & zs.scaled(k))]
    out = []
    for ls, picked in sorted(combos, key=lambda c: c[0][0]):
        l0 = ls[0]
        out.append((ls, [m for sub, key, k, group, n in picked for m in rows(sub, l0 // k, key, group, n)]))
    return out

def model_parallel_movements(plan: "Plan", stage: int, layers: int, ranks_per_node: int | None = None
                             ) -> list[Movement]:
    """Bytes one rank of pipeline ``stage`` (holding ``layers`` transformer layers) moves per
    optimizer step for tensor and pipeline parallelism (module docstring): with S = b x s x h x D
    (micro-batch b, sequence s / Ulysses degree, hidden size h, D the model dtype's bytes) and
    GA micro-batches per step,

    * tensor parallel t > 1: forward GA x layers x 2 x 2 (t-1)/t x S, backward GA x (layers + k)
      x 2 x 2 (t-1)/t x S (k checkpointed layers run their forward again), not overlapped;
    * pipeline p > 1: activations sent to the next stage GA x S / t, gradients to the previous
      one GA x S / t; with t > 1 each received partition all-gathered, (t-1)/t x S per receive.

    Empty without a sequence length (the workload's) or the model's hidden size. ``ranks_per_node``:
    the node's ranks the groups are placed on (None: :func:`advisor.ledger.state.ranks_per_node` of
    the plan alone; :func:`movement_roles` passes the hardware's)."""
    from advisor.model.activations import parse_checkpointing
    ec = plan.config
    cl = plan.cluster
    wl = plan.workload
    h = (plan.inventory.meta or {}).get("hidden_size")
    if not wl.seq_len or not h:
        return []
    t, p = cl.tensor_parallel, cl.pipeline_parallel
    s_loc = -(-int(wl.seq_len) // max(1, cl.sequence_parallel))
    b = micro_batch_for(ec, batch_world_size(ec, cl), wl.micro_batch)[0]
    D = DTYPE_BYTES[ec.model_dtype]
    S = b * s_loc * int(h) * D
    ga = _grad_accum(ec, batch_world_size(ec, cl))
    rows: list[Movement] = []
    msp = cl.megatron_sequence_parallel
    rpn = ranks_per_node or _ranks_per_node(plan)
    tp_intra = not group_spans_nodes("model", t, p, cl.zero_world_size, rpn, stage)
    if t > 1 and layers:
        mode, k = parse_checkpointing(wl.checkpointing, layers)
        ck = k if mode in ("full", "layers") else 0
        f = 2 * (t - 1) / t
        how = ("all-gather + reduce-scatter (Megatron sequence parallelism: the same bytes as an all-reduce)"
               if msp else "all-reduce")
        src = ("Narayanan et al. SC'21 s.2.3 (2 all-reduces forward, 2 backward per layer); "
               + ("Korthikanti et al. 2022 s.4.2.2 (sequence parallelism: all-gather + reduce-scatter); " if msp else "")
               + "Megatron megatron/core/tensor_parallel/mappings.py")
        item = "tp_allgather_reducescatter" if msp else "tp_allreduce"
        rows.append(Movement(0, NETWORK, "send", "activations", item + "_fwd", int(ga * layers * 2 * f * S), "forward",
                             False, f"GA {ga} x {layers} layers x 2 {how}s x 2 (t-1)/t x b s h D ({S:,} B)", src,
                             group="tensor_parallel", intra_node=tp_intra))
        rows.append(Movement(0, NETWORK, "send", "activations", item + "_bwd", int(ga * (layers + ck) * 2 * f * S),
                             "backward", False,
                             f"GA {ga} x ({layers} layers + {ck} recomputed) x 2 {how}s x 2 (t-1)/t x b s h D", src,
                             group="tensor_parallel", intra_node=tp_intra))
    if t > 1:
        rows += _vocab_parallel_movements(stage == 0, stage == p - 1, t, ga, S, b * s_loc, msp, tp_intra)
    if p > 1:
        # adjacent stages are W_z x t ranks apart (group_spans_nodes "pipe"): the send to stage + 1
        # and the one to stage - 1 each cross nodes or not
        fwd_intra = not group_spans_nodes("pipe", t, p, cl.zero_world_size, rpn, stage) if stage < p - 1 else True
        bwd_intra = not group_spans_nodes("pipe", t, p, cl.zero_world_size, rpn, stage - 1) if stage > 0 else True
        psrc = ("runtime/pipe/engine.py _exec_send_activations / _exec_send_grads (p2p.send)"
                + ("; pipe_partitioned / grad_partitioned (runtime/config.py :279-280): PartitionedTensor, 1/t sent"
                   if t > 1 else ""))
        part = S // t if t > 1 else S
        if stage < p - 1:
            rows.append(Movement(0, NETWORK, "send", "activations", "pp_send_activations", ga * part, "forward", False,
                                 f"GA {ga} x b s h D{' / t' if t > 1 else ''} to stage {stage + 1}", psrc,
                                 group="pipeline_parallel", intra_node=fwd_intra))
        if stage > 0:
            rows.append(Movement(0, NETWORK, "send", "gradients", "pp_send_grads", ga * part, "backward", False,
                                 f"GA {ga} x b s h D{' / t' if t > 1 else ''} to stage {stage - 1}", psrc,
                                 group="pipeline_parallel", intra_node=bwd_intra))
        if t > 1:
            n_recv = (stage > 0) + (stage < p - 1)
            rows.append(Movement(0, NETWORK, "send", "activations", "pp_partition_allgather",
                                 int(ga * n_recv * (t - 1) / t * S), "forward", False,
                                 f"GA {ga} x {n_recv} received partition(s) all-gathered over t: (t-1)/t x b s h D",
                                 "runtime/utils.py PartitionedTensor.full (all_gather_into_tensor)",
                                 group="tensor_parallel", intra_node=tp_intra))
    return rows


#: Bytes of one element of the vocab-parallel cross-entropy's all-reduced (s, b) tensors: the
#: logits are cast to fp32 first (``cross_entropy.py`` ``calculate_logits_max``: ``.float()``).
CROSS_ENTROPY_BYTES = 4


def _vocab_parallel_movements(first: bool, last: bool, t: int, ga: int, S: int, tokens: int, msp: bool,
                              intra: bool) -> list[Movement]:
    """The tensor-parallel traffic of the vocab-parallel embedding (first stage) and the output
    layer + loss (last stage), per optimizer step (GA micro-batches); S = b x s x h x D bytes of
    one activation, ``tokens`` = b x s, f = (t-1)/t the share a rank sends in a ring collective
    of the whole tensor (an all-reduce sends 2 f, an all-gather or reduce-scatter f):

    * embedding (``megatron/core/tensor_parallel/layers.py`` ``VocabParallelEmbedding.forward``):
      ``reduce_from_tensor_model_parallel_region`` all-reduces the b s h output in forward (its
      backward is the identity: the input is token ids); with Megatron sequence parallelism
      ``reduce_scatter_to_sequence_parallel_region`` instead (forward f x S, its backward the
      all-gather f x S): 2 f x S per micro-batch either way;
    * output layer (column-parallel over the vocabulary; Megatron-DeepSpeed ``parallel_lm_logits``):
      ``copy_to_tensor_model_parallel_region`` is the identity in forward and all-reduces the input
      gradient (2 f x S) in backward; with sequence parallelism the input is all-gathered in
      forward (f x S) and its gradient reduce-scattered in backward (f x S);
    * loss (``megatron/core/tensor_parallel/cross_entropy.py`` ``_VocabParallelCrossEntropy.forward``):
      three all-reduces over the tensor-parallel group of (s, b) fp32 tensors -- logits_max (MAX),
      predicted_logits and sum_exp_logits (SUM) -- 3 x 2 f x b s x 4 B per micro-batch in forward;
      the backward has none."""
    f = (t - 1) / t
    src = "megatron/core/tensor_parallel/layers.py VocabParallelEmbedding, mappings.py"
    rows: list[Movement] = []
    kw = dict(group="tensor_parallel", intra_node=intra)
    if first:
        if msp:
            rows.append(Movement(0, NETWORK, "send", "activations", "tp_embedding_reducescatter", int(ga * f * S),
                                 "forward", False, f"GA {ga} x (t-1)/t x b s h D: the embedding output "
                                 "reduce-scattered (reduce_scatter_to_sequence_parallel_region)", src, **kw))
            rows.append(Movement(0, NETWORK, "send", "gradients", "tp_embedding_allgather", int(ga * f * S),
                                 "backward", False, f"GA {ga} x (t-1)/t x b s h D: its gradient all-gathered", src, **kw))
        else:
            rows.append(Movement(0, NETWORK, "send", "activations", "tp_embedding_allreduce", int(ga * 2 * f * S),
                                 "forward", False, f"GA {ga} x 2 (t-1)/t x b s h D: the embedding output all-reduced "
                                 "(reduce_from_tensor_model_parallel_region; identity backward)", src, **kw))
    if last:
        if msp:
            rows.append(Movement(0, NETWORK, "send", "activations", "tp_head_allgather", int(ga * f * S), "forward",
                                 False, f"GA {ga} x (t-1)/t x b s h D: the output layer's input all-gathered "
                                 "(sequence parallelism)", src, **kw))
            rows.append(Movement(0, NETWORK, "send", "gradients", "tp_head_reducescatter", int(ga * f * S), "backward",
                                 False, f"GA {ga} x (t-1)/t x b s h D: its input gradient reduce-scattered", src, **kw))
        else:
            rows.append(Movement(0, NETWORK, "send", "gradients", "tp_head_allreduce", int(ga * 2 * f * S), "backward",
                                 False, f"GA {ga} x 2 (t-1)/t x b s h D: the output layer's input gradient all-reduced "
                                 "(copy_to_tensor_model_parallel_region backward)", src, **kw))
        ce = int(ga * 3 * 2 * f * tokens * CROSS_ENTROPY_BYTES)
        rows.append(Movement(0, NETWORK, "send", "activations", "tp_cross_entropy_allreduce", ce, "forward", False,
                             f"GA {ga} x 3 all-reduces x 2 (t-1)/t x b s x {CROSS_ENTROPY_BYTES} B (logits_max, "
                             "predicted_logits, sum_exp_logits)",
                             "megatron/core/tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy.forward", **kw))
    return rows


def moe_layers_in(meta: dict, layers: tuple[int, int], last: bool) -> int:
    """MoE layers among transformer layers [lo, hi) of a stage: every layer from
    ``first_dense_layers`` on (DeepSeek ``first_k_dense_replace``) is MoE, plus the MTP modules
    (``mtp_layers``) on the last stage; 0 for a dense model."""
    if not int(meta.get("num_experts") or 0):
        return 0
    lo, hi = layers
    n = max(0, hi - max(lo, int(meta.get("first_dense_layers") or 0)))
    return n + (int(meta.get("mtp_layers") or 0) if last else 0)


def moe_movements(plan: "Plan", stage: int, layers: tuple[int, int], last: bool,
                  ranks_per_node: int | None = None) -> list[Movement]:
    """The expert-parallel all-to-alls of one rank per optimizer step (DeepSpeed MoE, ep > 1).

    ``deepspeed/moe/sharded_moe.py`` ``MOELayer.forward`` (0.19.8 :649-745): the dispatched
    tokens, an (E, C, h) tensor in the model dtype (E experts, C = capacity slots per expert,
    :func:`advisor.model.activations.moe_capacity`, ``_capacity`` :152-162, so E x C ~ tokens x
    capacity_factor x top-k), go through ``_AllToAll`` over the expert-parallel group (:701,
    dispatch) and the expert output comes back through a second one (:730, combine);
    ``_AllToAll.backward`` (:108-109) is an all-to-all of the gradient, so backward repeats
    both. With tensor parallelism t the duplicate tokens are dropped first (``drop_tokens(...,
    dim=1)``, :698/:724): 1/t of the tensor. ``all_to_all_single`` keeps 1/ep of it on the rank
    and sends the rest: per all-to-all (ep-1)/ep x E x C x h x D / t bytes. Per MoE layer and
    micro-batch: 2 forward + 2 backward, and 2 more for a layer recomputed by checkpointing.
    Without a capacity factor (``drop_tokens=False``: C is the busiest expert's count,
    all-reduced MAX over the group, padded to a multiple of t and capped at the tokens, top-1
    :247-259, top-2 :368-380) C = ceil(tokens x k / E) so padded, balanced routing: a lower bound. Empty for ep = 1, a dense model, or no sequence length.

    The link: the expert-parallel group of ep consecutive global ranks DeepSpeed builds
    (:func:`group_spans_nodes` ``expert``) within a node or not, on ``ranks_per_node`` (None: the
    plan's, :func:`advisor.ledger.state.ranks_per_node`)."""
    from advisor.model.activations import moe_capacity, parse_checkpointing
    cl, wl, ec = plan.cluster, plan.workload, plan.config
    meta = plan.inventory.meta or {}
    ep = cl.expert_parallel
    n = moe_layers_in(meta, layers, last)
    if ep <= 1 or not n or not wl.seq_len or not meta.get("hidden_size"):
        return []
    E, k, h = int(meta["num_experts"]), int(meta.get("experts_per_token") or 1), int(meta["hidden_size"])
    t = cl.tensor_parallel
    b = micro_batch_for(ec, batch_world_size(ec, cl), wl.micro_batch)[0]
    tokens = b * -(-int(wl.seq_len) // max(1, cl.sequence_parallel))
    cf = wl.moe_capacity_factor
    if cf is not None:
        C = moe_capacity(tokens, E, k, cf)
    else:  # the balanced count, padded to a multiple of t, at most the tokens
        C = min(tokens, -(-(-(-tokens * k // E)) // t) * t)
    D = DTYPE_BYTES[ec.model_dtype]
    one = E * C * h * D // t * (ep - 1) // ep
    ga = _grad_accum(ec, batch_world_size(ec, cl))
    lo, hi = layers
    mode, kk = parse_checkpointing(wl.checkpointing, hi - lo)
    ck = kk if mode in ("full", "layers") else 0
    ck_moe = max(0, min(hi, lo + ck) - max(lo, int(meta.get("first_dense_layers") or 0)))  # the first ck layers
    # moe/layer.py l.93-97 -> groups.py _create_expert_and_data_parallel l.462-463: ep consecutive ranks
    intra = not group_spans_nodes("expert", t, cl.pipeline_parallel, cl.zero_world_size,
                                  ranks_per_node or _ranks_per_node(plan), stage, ep)
    cap = (f"C = {C} slots ({'capacity factor ' + format(cf, 'g') if cf is not None else 'dropless: tokens x k / E'}"
           f", {tokens} tokens, top-{k}, {E} experts)")
    src = ("deepspeed/moe/sharded_moe.py MOELayer.forward _AllToAll (dispatch :701, combine :730; backward :108-109), "
           "_capacity :152-162")
    frm = f"(ep-1)/ep x E x C x h x D{' / t' if t > 1 else ''} = {one:,} B; {cap}"
    kw = dict(group="expert_parallel", intra_node=intra)
    return [Movement(0, NETWORK, "send", "activations", "moe_alltoall_fwd", ga * n * 2 * one, "forward", False,
                     f"GA {ga} x {n} MoE layers x 2 all-to-alls (dispatch, combine) x {frm}", src, **kw),
            Movement(0, NETWORK, "send", "gradients", "moe_alltoall_bwd", ga * (n + ck_moe) * 2 * one, "backward",
                     False, f"GA {ga} x ({n} MoE layers + {ck_moe} recomputed) x 2 all-to-alls x {frm}", src, **kw)]


def ulysses_movements(plan: "Plan", layers: int, stage: int = 0, ranks_per_node: int | None = None
                      ) -> list[Movement]:
    """DeepSpeed-Ulysses' all-to-alls of one rank per optimizer step (``sequence_parallel_size``
    u > 1, ``layers`` transformer layers on the rank's stage).

    ``deepspeed/sequence/layer.py`` ``DistributedAttention.forward``: q, k and v go through
    ``_SeqAllToAll`` over the sequence-parallel group (sequence gathered, heads scattered) and the
    attention output comes back through a fourth (heads gathered, sequence scattered); each is an
    ``all_to_all_single`` (``single_all_to_all``) of the rank's (b, s/u, heads, d) tensor, of
    which it sends (u-1)/u, and its backward is the same all-to-all of the gradient. Per layer and
    micro-batch, forward and backward each: (u-1)/u x b x s/u x (2 a d_head + 2 kv d_head) x D / t
    (q and the output at the a attention heads, k and v at the kv heads; heads split by tensor
    parallelism t first); a recomputed layer repeats the forward's four. Empty for u = 1 or
    without a sequence length. The link: the sequence-parallel group of pipeline ``stage``
    (:func:`group_spans_nodes` ``sequence``) within a node or not, on ``ranks_per_node`` (None: the
    plan's, :func:`advisor.ledger.state.ranks_per_node`)."""
    from advisor.model.activations import parse_checkpointing
    cl, wl, ec = plan.cluster, plan.workload, plan.config
    u = cl.sequence_parallel
    meta = plan.inventory.meta or {}
    if u <= 1 or not layers or not wl.seq_len or not meta.get("hidden_size") or not meta.get("num_heads"):
        return []
    h, a = int(meta["hidden_size"]), int(meta["num_heads"])
    kv = int(meta.get("num_kv_heads") or a)
    d = int(meta.get("head_dim") or h // a)
    t = cl.tensor_parallel
    b = micro_batch_for(ec, batch_world_size(ec, cl), wl.micro_batch)[0]
    s_loc = -(-int(wl.seq_len) // u)
    D = DTYPE_BYTES[ec.model_dtype]
    one_layer = b * s_loc * (2 * a * d + 2 * kv * d) * D // t * (u - 1) // u  # q, k, v and the output
    ga = _grad_accum(ec, batch_world_size(ec, cl))
    mode, k = parse_checkpointing(wl.checkpointing, layers)
    ck = k if mode in ("full", "layers") else 0
    src = "deepspeed/sequence/layer.py DistributedAttention.forward, _SeqAllToAll, single_all_to_all"
    frm = (f"(u-1)/u x b x s/u x (2 a d + 2 kv d) x D{' / t' if t > 1 else ''} = {one_layer:,} B "
           f"(u {u}, a {a}, kv {kv}, d {d})")
    intra = not group_spans_nodes("sequence", t, cl.pipeline_parallel, cl.zero_world_size,
                                  ranks_per_node or _ranks_per_node(plan), stage, u)
    kw = dict(group="sequence_parallel", intra_node=intra)
    return [Movement(0, NETWORK, "send", "activations", "ulysses_alltoall_fwd", ga * layers * one_layer, "forward",
                     False, f"GA {ga} x {layers} layers x 4 all-to-alls (q, k, v, output): {frm}", src, **kw),
            Movement(0, NETWORK, "send", "gradients", "ulysses_alltoall_bwd", ga * (layers + ck) * one_layer,
                     "backward", False, f"GA {ga} x ({layers} layers + {ck} recomputed) x 4 all-to-alls: {frm}",
                     src, **kw)]


def movement_for(plan_or_ledger: "Plan | Ledger", hardware: "Hardware | None" = None,
                 ranks: "Iterable[int] | None" = None, activations: Any = None) -> list[Movement]:
    """Per-rank movements per optimizer step for a :class:`advisor.ledger.state.Plan` (or a Ledger,
    whose ``plan`` is used), one list over all data-parallel ranks (or only ``ranks``), in rank
    order. Bytes are bytes. With ``hardware``, each movement's ``seconds`` is filled and NVMe rows
    name their storage tier (``Hardware.tier_for_path`` of the config's ``nvme_path``). Built
    from :func:`movement_roles`; prefer that for large worlds (this list has W x rows), or pass
    ``ranks`` (O(roles x len(ranks)): each rank's role is found in its RankSet, not by listing
    every rank)."""
    roles = movement_roles(plan_or_ledger, hardware, activations)
    if ranks is None:
        pairs = sorted(((r, ms) for rs, ms in roles for r in rs), key=lambda p: p[0])
    else:
        pairs = []
        for r in ranks:
            ms = next((ms for rs, ms in roles if r in rs), None)
            if ms is not None:
                pairs.append((r, ms))
    out: list[Movement] = []
    for r, ms in pairs:
        out.extend(ms if (ms and ms[0].rank == r) else [replace(m, rank=r) for m in ms])
    return out


def rank_movements(plan: "Plan", r: int) -> list[Movement]:
    """Rank ``r``'s movements per optimizer step (untimed)."""
    return _rank_movements(plan, r)


def _ranks_per_node(plan: "Plan", hardware: "Hardware | None" = None) -> int:
    from advisor.ledger.state import ranks_per_node  # the one rule, which the ledger's qgZ path reads too
    return ranks_per_node(plan, hardware)


def _rank_movements(plan: "Plan", r: int, terms=None, akey: tuple | None = None,
                    hpz_intra: bool | None = None) -> list[Movement]:
    """Rank ``r``'s movements; ``terms`` = its entry of :func:`_rank_terms` (computed when None);
    ``akey`` = :func:`_activation_key` of the activation estimate (None: not counted); ``hpz_intra``:
    :func:`hpz_within_node` of the whole job's plan (None: of ``plan``, at its own ranks per node)."""
    ec: EffectiveConfig = plan.config
    inv: Inventory = plan.inventory
    W = plan.cluster.zero_world_size
    pl = placement_of(plan)  # the ledger's layouts, sub-groups and placements
    z = ec.zero
    st = z.stage
    D = DTYPE_BYTES[ec.model_dtype]
    G = DTYPE_BYTES[ec.grad_dtype]
    C = DTYPE_BYTES[ec.comm_dtype]
    M = 4
    ga = _grad_accum(ec, batch_world_size(ec, plan.cluster) if ec.autotp else W)
    oo = ec.offload_optimizer_effective
    op = ec.offload_param_effective
    rows: list[Movement] = []

    def add(link, direction, cls, item, nbytes, phase, overlap, formula, source, **kw):
        if nbytes > 0:
            rows.append(Movement(r, link, direction, cls, item, int(nbytes), phase, overlap, formula, source, **kw))

    gathered = zero3_stays_gathered(inv, z, zero3_persistent(inv, z)) if st == 3 else True
    # stage 3 fetches every parameter in forward, and again in backward unless still gathered
    f = (W - 1) / W

    # ---- collectives ---------------------------------------------------------------------------
    if W > 1:
        n_pad = sum(lay.n_pad for lay in pl.zero12) if st in (1, 2) else 0
        if st == 0:
            add(NETWORK, "send", "gradients", "grad_allreduce", 2 * f * inv.trainable_numel * C,
                "backward", False, "all-reduce of all gradients: 2 x (W-1)/W x N x C",
                "ZeRO paper s.7 (data parallel baseline 2 Psi); engine.allreduce_gradients")
            if pl.zero12:  # BF16_Optimizer at ZeRO-0 (pipeline parallelism): its fp32 master is partitioned
                n_pad0 = sum(lay.n_pad for lay in pl.zero12)
                add(NETWORK, "send", "parameters", "param_allgather", f * n_pad0 * D, "after_step", False,
                    "all-gather of updated 16-bit partitions: (W-1)/W x N_pad x D (BF16_Optimizer)",
                    "bf16_optimizer.py BF16_Optimizer.update_lp_params l.593-603 (all_gather_dp_groups), "
                    "from step l.431")
        elif st in (1, 2):
            times = ga if st == 2 else 1
            add(NETWORK, "send", "gradients", "grad_reduce_scatter", times * f * n_pad * C, "backward",
                bool(z.overlap_comm),
                f"reduce-scatter of gradients: {'GA x ' if st == 2 else ''}(W-1)/W x N_pad x C "
                f"({'every micro-step' if st == 2 else 'at the boundary'})",
                "ZeRO paper s.7.1 (P_os+g: Psi reduce-scatter); stage_1_and_2.py average_tensor / reduce_ipg_grads")
            add(NETWORK, "send", "parameters", "param_allgather", f * n_pad * D, "after_step", False,
                "all-gather of updated 16-bit partitions: (W-1)/W x N_pad x D",
                "ZeRO paper s.7.1 (Psi all-gather); stage_1_and_2.py all_gather_dp_groups")
        else:
            p3_all, p3_t = zero3_partition_sums(inv, W)
            # the coordinator's all-gathers (and the prefetches) hide behind compute only on a side
            # stream: zero3_fetch_overlaps (overlap_comm false: the default stream, serialised)
            prefetch = zero3_fetch_overlaps(z)
            nsrc = "" if prefetch or z.prefetch_bucket_size <= 0 else "; " + NO_OVERLAP_FETCH
            # ZeRO++ qwZ: every coordinator fetch is all_gather_coalesced(quantize=True), an int8 flat
            # buffer of sum(p_i) x W (1 byte per element) in place of the D-byte one.
            PD, pd, qsrc = D, "D", ""
            if z.zero_quantized_weights:
                PD, pd = QWZ_BYTES, "1 (qwZ int8)"
                qsrc = ("; qwZ: partitioned_param_coordinator.py __all_gather_params (quantize=zero_quantized_weights), "
                        "partition_parameters.py _all_gather_coalesced (int8 flat buffer, l. 1484-1488) / "
                        "_all_gather_sequential (int8 param_buffer); fp32 scales in the qwz_scales_* rows")
            L = _ranks_per_node(plan)
            h = min(z.zero_hpz_partition_size or 1, W)
            if h > 1 and hpz_intra is None:
                hpz_intra = hpz_within_node(plan, L)
            if h > 1:
                for item, nbytes, intra, formula in hpz_allgather_rank_bytes(p3_all, p3_t, W, h, bool(hpz_intra), ga,
                                                                             PD, gathered):
                    add(NETWORK, "send", "parameters", item, nbytes, "backward" if "bwd" in item else "forward",
                        prefetch, formula.replace("PD", pd), HPZ_SOURCE + qsrc + nsrc, intra_node=intra)
            if z.zero_quantized_weights:
                # the fp32 scales travel in a second all-gather beside each int8 one (l. 1527-1529)
                qs = ("partition_parameters.py _all_gather_coalesced l. 1480-1533 (quant_scale_buffer, fp32) / "
                      "CUDAQuantizer.quantize l. 867-894; one module per coalesced fetch (qwz_scale_groups)")
                if h > 1:
                    g_t = qwz_scale_groups(inv, W, 1, "trainable")[0]
                    gh_t = qwz_scale_groups(inv, W, h, "trainable")[0]
                    gh_f = qwz_scale_groups(inv, W, h, "frozen")[0]
                    gh = qwz_scale_groups(inv, W, h, "all")[0]
                    sc = [("qwz_scales_fwd", (W - 1) * g_t * QUANT_SCALE_BYTES, None, "forward",
                           "fp32 scales of the first forward over the ZeRO group: (W-1) x G_trainable x 4"),
                          ("qwz_scales_fwd_hpz", (h - 1) * ((ga - 1) * gh_t + ga * gh_f) * QUANT_SCALE_BYTES,
                           hpz_intra, "forward", "fp32 scales within the hpZ group: (h-1) x ((GA-1) x G_t + GA x "
                           "G_frozen) x 4 (groups of the secondary partitions)")]
                    if not gathered:
                        sc.append(("qwz_scales_bwd_hpz", ga * (h - 1) * gh * QUANT_SCALE_BYTES, hpz_intra,
                                   "backward", "fp32 scales within the hpZ group: GA x (h-1) x G x 4"))
                else:
                    g_all = qwz_scale_groups(inv, W)[0]
                    sc = [("qwz_scales_fwd", ga * (W - 1) * g_all * QUANT_SCALE_BYTES, None, "forward",
                           "fp32 scales all-gathered with the int8 weights: GA x (W-1) x G x 4, G = sum over "
                           "modules of quant_groups(sum_module p_i)")]
                    if not gathered:
                        sc.append(("qwz_scales_bwd", ga * (W - 1) * g_all * QUANT_SCALE_BYTES, None, "backward",
                                   "fp32 scales of the backward all-gather: GA x (W-1) x G x 4"))
                for item, nbytes, intra, phase, formula in sc:
                    add(NETWORK, "send", "parameters", item, nbytes, phase, prefetch, formula, qs + nsrc, intra_node=intra)
            if h <= 1:
                add(NETWORK, "send", "parameters", "param_allgather_fwd", ga * f * p3_all * W * PD, "forward", prefetch,
                    f"forward all-gather: GA x (W-1)/W x sum(p_i) x W x {pd}", "ZeRO paper s.7.2.2 (P_os+g+p: Psi per "
                    "pass); partition_parameters.py all-gather, partitioned_param_coordinator.py prefetch" + qsrc + nsrc)
                if not gathered:
                    add(NETWORK, "send", "parameters", "param_allgather_bwd", ga * f * p3_all * W * PD, "backward",
                        prefetch, f"backward all-gather: GA x (W-1)/W x sum(p_i) x W x {pd} (parameters released after "
                        "forward: stage3_max_reuse_distance < 2 x non-persistent numel)",
                        "ZeRO paper s.7.2.2; reference 4.5" + qsrc + nsrc)
            nodes = plan.cluster.world_size // L
            if z.zero_quantized_gradients and nodes > 1:
                for item, nbytes, intra, formula in qgz_rank_bytes(inv, plan.cluster.world_size, L, nodes, C):
                    add(NETWORK, "send", "gradients", item, ga * nbytes, "backward", bool(z.overlap_comm),
                        "every micro-step: GA x " + formula,
                        "stage3.py __avg_scatter_grads (all_to_all_quant_reduce when num_nodes > 1); "
                        "runtime/comm/coalesced_collectives.py all_to_all_quant_reduce l. 31-76; "
                        "ops/csrc/quantization/pt_binding.cpp ds_swizzle_quant / quantized_reduction",
                        intra_node=intra)
            else:
                add(NETWORK, "send", "gradients", "grad_reduce_scatter", ga * f * p3_t * W * C, "backward",
                    bool(z.overlap_comm), "gradient reduce-scatter every micro-step: GA x (W-1)/W x sum(p_i) x W x C",
                    "ZeRO paper s.7.2.2; stage3.py reduce_ipg_grads, coalesced_collectives.reduce_scatter_coalesced")

    # ---- ZeRO-Offload over PCIe ----------------------------------------------------------------
    # The backward gradient copies overlap compute only on DeepSpeed's side stream, i.e. with
    # overlap_comm; without it they run on the compute stream and are exposed.
    ov = bool(z.overlap_comm)
    ov_src = "" if ov else " (overlap_comm false: on the compute stream, stage3.py l.340-341 / stage_1_and_2.py l.2239-2245)"
    if st in (1, 2) and oo == "cpu":
        layouts = pl.zero12
        p12 = sum(lay.P for lay in layouts)
        if terms is None:  # this rank alone, O(tensors)
            terms = (sum(zero12_rank_coverage(lay, r)[1] for lay in layouts),
                     sum(zero12_rank_coverage(lay, r)[0] for lay in layouts))
        cov, i_r = terms
        # overlap_comm=false: reduce_ipg_grads runs these copies on the current (compute) stream
        # (stage_1_and_2.py l.2239-2245: reduction_stream only with overlap_comm): exposed
        add(PCIE, "to_host", "gradients", "fp32_grad", cov * M, "backward", ov,
            "gradient partition converted to fp32 on the accelerator and copied to host: Cov_r x 4",
            "stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu" + ov_src)
        if ga > 1 and st == 2:  # ZeRO-1 never accumulates through the host buffer (state: offload_accumulated_grads_cpu)
            add(PCIE, "to_host", "gradients", "offload_accumulated_grads_cpu", (ga - 1) * i_r * D, "backward", ov,
                "non-boundary micro-steps: accumulated 16-bit grads of the partition's params to host: (GA-1) x I_r x D",
                "stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu [S]" + ov_src)
            add(PCIE, "to_accelerator", "gradients", "offload_accumulated_grads_cpu", (ga - 1) * i_r * D, "backward",
                ov, "accumulated grads brought back for the next micro-step: (GA-1) x I_r x D",
                "stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu [S]" + ov_src)
        add(PCIE, "to_accelerator", "parameters", "offload_bit16_param_buffer", p12 * D, "after_step", False,
            "updated 16-bit partition copied back: P x D", "stage_1_and_2.py step (param_buffer_of_bit16_for_cpu_offload_groups)")

    if st == 3:
        p3_all, p3_t = zero3_partition_sums(inv, W)
        if oo in ("cpu", "nvme"):
            # partial optimizer offload (Twin-Flow, offload_optimizer.ratio < 1): the first int((1 - ratio) x n)
            # sub-groups keep their fp32 master and fp32 gradient on the accelerator (stage3.py l.1100-1108,
            # l.1157-1160, l.1337-1342), so their boundary gradient copy and their updated 16-bit copy stay on it;
            # the pinned grad_partitions_flat_buffer is on self.device = 'cpu' for every parameter (l.333, l.790-792)
            acc = sum(sg.numel for sg, a in zip(pl.sub_groups, pl.opt_on_accelerator) if a)
            host_t = p3_t - acc
            twin = (f" over the host sub-groups only: P3 - {acc:,} accelerator sub-group elements (offload_optimizer."
                    f"ratio {z.offload_optimizer.ratio:g})" if acc else "")
            # overlap_comm=false: partition_grads runs on the default stream (stage3.py l.340-341:
            # reduce_and_partition_stream = default_stream() without overlap_comm): exposed
            add(PCIE, "to_host", "gradients", "grad_partitions_flat_buffer", ga * p3_t * G, "backward", ov,
                "reduced gradient partition into the pinned host buffer, every micro-step: GA x P3 x G",
                "stage3.py partition_grads (grad_buffer.copy_)" + ov_src)
            add(PCIE, "to_accelerator", "gradients", "grad_partitions_flat_buffer", ga * p3_t * G, "backward", ov,
                "host gradient buffer copied back to the accelerator to accumulate / convert: GA x P3 x G",
                "stage3.py partition_grads (grad_buffer.to(device))" + ov_src)
            # _offload_grad_partition_at_boundary l.1456-1457: copy_ into fp32_partitioned_groups_flat[i].grad, which
            # lies on subgroup_to_device[i] (l.1342): a PCIe copy for 'cpu' sub-groups only
            add(PCIE, "to_host", "gradients", "fp32_grad", host_t * M, "backward", ov,
                "fp32 gradient partition to host at the boundary: P3 x 4" + twin,
                "stage3.py _offload_grad_partition_at_boundary (l.1456-1457; .grad on subgroup_to_device[i], "
                "l.1342)" + ov_src)
            if op == "none":
                # _reassign_or_swap_out_partitioned_parameters l.2858-2859: fp16 flat (accelerator) .copy_(fp32 flat on
                # subgroup_to_device[i]): crosses PCIe for 'cpu' sub-groups only
                add(PCIE, "to_accelerator", "parameters", "lp_param_partitions", host_t * D, "after_step", False,
                    "updated 16-bit partitions copied to the accelerator: P3 x D" + twin,
                    "stage3.py _optimizer_step / _reassign_or_swap_out_partitioned_parameters (l.2858-2859)")
            elif acc:
                # parameters offloaded too: the host 16-bit partition .copy_(the accelerator fp32 master) of each
                # accelerator sub-group (l.2858-2859; param NVMe: _partitioned_params_swap_out l.1280-1290 into a host
                # swap buffer); a blocking device-to-host copy with a dtype change converts on the CPU, so the fp32
                # crosses (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: conversion_device = kCPU when blocking)
                add(PCIE, "to_host", "parameters", "lp_param_partitions", acc * M, "after_step", False,
                    f"accelerator sub-groups' updated fp32 masters into the host 16-bit partitions: {acc:,} x 4 "
                    f"(offload_optimizer.ratio {z.offload_optimizer.ratio:g}; blocking copy, cast on the CPU)",
                    "stage3.py _reassign_or_swap_out_partitioned_parameters (l.2858-2859) / _partitioned_params_swap_out "
                    "(l.1280-1290); aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda")
        elif op != "none":
            add(PCIE, "to_host", "parameters", "lp_param_partitions", p3_t * D, "after_step", False,
                "parameters offloaded, optimizer on the accelerator: updated partitions back to host: P3 x D",
                "stage3.py _reassign_or_swap_out_partitioned_parameters [S]")
        if op != "none":
            # the host partition's copy to the accelerator is inside the coordinator's all-gather
            # (partition_parameters.py _all_gather_coalesced l.1514 / _all_gather_sequential l.1360:
            # ds_tensor.to(device), run under `with stream(allgather_stream)`), so it overlaps as the
            # all-gathers do (zero3_fetch_overlaps); one row per pass, each in its own window
            src = "partition_parameters.py all-gather from host partitions; reference 4.5" + (
                "" if zero3_fetch_overlaps(z) else " (" + NO_OVERLAP_FETCH + ")")
            add(PCIE, "to_accelerator", "parameters", "lp_param_partitions", ga * p3_all * D, "forward",
                zero3_fetch_overlaps(z), "offloaded partitions fetched for every forward pass: GA x sum(p_i) x D", src)
            if not gathered:
                add(PCIE, "to_accelerator", "parameters", "lp_param_partitions", ga * p3_all * D, "backward",
                    zero3_fetch_overlaps(z), "offloaded partitions fetched again for every backward pass (released "
                    "after forward): GA x sum(p_i) x D", src)

    # ---- activation checkpoints to host (cpu_checkpointing) ------------------------------------
    if akey is not None:
        out_b, in_b, overlapped = akey
        asrc = ("advisor.model.activations cpu_checkpoint_traffic (DeepSpeed checkpointing.py partition_activations / "
                "copy_to_device / gather_partitioned_activations; offload_activations.py _ActivationOffloadEngine)")
        how = "async offload engine, side stream" if overlapped else "blocking copies"
        add(PCIE, "to_host", "activations", "activation_checkpoints", ga * out_b, "forward", overlapped,
            f"checkpointed layer inputs copied to host every micro-step: GA x {out_b:,} B ({how})", asrc)
        add(PCIE, "to_accelerator", "activations", "activation_checkpoints", ga * in_b, "backward", overlapped,
            f"checkpointed layer inputs copied back before each recompute: GA x {in_b:,} B ({how})", asrc)

    # ---- NVMe ----------------------------------------------------------------------------------
    if st == 3 and oo == "nvme":
        path = z.offload_optimizer.nvme_path
        min_aio = swap_threshold_bytes(ec)
        k = aio_alignment_elems(ec, M)
        opt = optimizer_states(ec)  # the ledger's fact (one state tensor for Adagrad, two for Adam)
        opt_name = opt.basic + ("" if opt.known else " (Adam-like state assumed)")
        # pipeline_read and pipeline_write are independent: async_swap_in = pipeline_read,
        # async_swap_out = pipeline_write (swap_tensor/pipelined_optimizer_swapper.py l.76-77)
        pipelined = {"read": bool(z.offload_optimizer.pipeline_read), "write": bool(z.offload_optimizer.pipeline_write)}
        src = ("reference 5.4 (measured); swap_tensor/partitioned_optimizer_swapper.py swap_in/swap_out_optimizer_state, "
               "optimizer_utils.py _io_aligned_numel")
        master = pl.opt_swap_numel(ec) * M  # the ledger's NVMe fp32_master files
        # each moment's files: not those of the swapped sub-groups a GPU run's backup AdamW steps under partial
        # offload (ratio < 1), whose moments stay in host memory (state.twin_flow_backup_swapped)
        moments = pl.opt_swap_numel(ec, moments=True) * M
        nbk = sum(pl.opt_backup_swapped or ())
        bwords = (f", not the {nbk} swapped sub-group(s) the backup AdamW steps (offload_optimizer.ratio "
                  f"{z.offload_optimizer.ratio:g}: i < int((1 - ratio) x n); their moments stay in host memory)"
                  if nbk else "")
        bsrc = ("; stage3.py l.1100-1108, _optimizer_step l.1255-1258; optimizer_utils.py _get_state_tensors "
                "l.492-502" if nbk else "")
        # this rank's gradient pieces: advisor.ledger.state.zero3_grad_swap_bytes over r_i, and their files
        grads, gfiles = terms if terms is not None else (pl.terms[r][0],
                                                         zero3_grad_swap_files_by_rank(ec, inv, W)[r])
        mfiles, ofiles = pl.opt_swap_files(), pl.opt_swap_files(moments=True)
        sg_words = f"sum over swappable sub-groups (S_k x 4 >= {min_aio:,} B) of A_{k}(S_k) x 4"
        for direction in ("read", "write"):
            add(NVME, direction, "master_weights", "fp32_master", master, "step", pipelined[direction],
                f"fp32 master {'swapped in' if direction == 'read' else 'swapped out'}: {sg_words}", src, path=path,
                files=mfiles)
            for item in opt.items:
                add(NVME, direction, "optimizer_states", item, moments, "step", pipelined[direction],
                    f"{opt_name} {item} {'swapped in' if direction == 'read' else 'swapped out'}: {sg_words}{bwords}",
                    src + bsrc, path=path, first_step_bytes=0 if direction == "read" else None, files=ofiles)
        gsrc = "reference 5.4; optimizer_utils.py _swap_out_gradients, _adjust_for_misaligned_lengths"
        gwords = (f"fp32 gradient pieces with r_i x 4 >= {min_aio:,} B, aligned part floor(r_i/{k}) x {k} x 4 "
                  f"(the unaligned tail stays in memory)")
        add(NVME, "write", "gradients", "fp32_grad", grads, "step", False,
            "written when the boundary's gradient reduction completes (measured inside engine.step): " + gwords, gsrc,
            path=path, files=gfiles)
        add(NVME, "read", "gradients", "fp32_grad", grads, "step", pipelined["read"], "read back for the step: " + gwords, gsrc,
            path=path, files=gfiles)

    if st == 3 and op == "nvme":
        path = z.offload_param.nvme_path
        kp = aio_alignment_elems(ec, D)
        # trainable sub-groups outside the max_in_cpu flat buffer (the ledger's Placement.in_flat)
        # are swapped after every step; frozen partitions never enter the buffer
        wcounts: dict[int, int] = {}
        for sg, flat in zip(pl.sub_groups, pl.in_flat):
            if not flat:
                for i in sg.tensors:
                    p_i = zero3_partition_numel(inv.tensors[i].numel, W)
                    wcounts[p_i] = wcounts.get(p_i, 0) + 1
        wbytes = zero3_param_swap_bytes_counted(ec, wcounts)
        wfiles = zero3_param_swap_files(ec, wcounts)
        fcounts = zero3_partition_counts(inv, W, "frozen")
        fbytes = zero3_param_swap_bytes_counted(ec, fcounts)
        ffiles = zero3_param_swap_files(ec, fcounts)
        psrc = "reference 5.1/5.4 (measured N2); stage3.py _partitioned_params_swap_out, partitioned_param_swapper.py"
        add(NVME, "write", "parameters", "lp_param_partitions", wbytes, "after_step", False,
            f"trainable partitions beyond max_in_cpu ({z.offload_param.max_in_cpu:,} elements) written after every "
            f"step: sum A_{kp}(p_i) x D", psrc, path=path, files=wfiles)
        # Every fetch swaps the partition in before its all-gather (partition_parameters.py
        # _ensure_availability_of_partitioned_params l.1706-1720, or the coordinator's aio prefetch
        # __prefetch_nvme_param_partitions l.667-690, forward and backward alike: fetch_sub_module runs
        # for both): one read row per pass, each in its own window. The reads are aio threads, not a
        # stream: they overlap with prefetching alone (zero3_fetch_overlaps' note).
        # The first micro-step has no trace yet: parameters are released after forward and fetched
        # again in backward (measured N2: both in iteration 1, only forward afterwards).
        nv_over = z.prefetch_bucket_size > 0
        add(NVME, "read", "parameters", "lp_param_partitions", ga * wbytes, "forward", nv_over,
            f"trainable NVMe partitions read on every forward fetch: GA x sum A_{kp}(p_i) x D", psrc, path=path,
            # staying gathered, the first micro-step still re-reads them once, in backward
            first_step_bytes=(ga + 1) * wbytes if gathered else None, files=ga * wfiles)
        if not gathered:
            add(NVME, "read", "parameters", "lp_param_partitions", ga * wbytes, "backward", nv_over,
                f"trainable NVMe partitions read again on every backward fetch (released after forward): GA x sum "
                f"A_{kp}(p_i) x D", psrc, path=path, files=ga * wfiles)
        # Frozen: the first-step backward re-fetch happens only where a gradient flows through the
        # layer (not for leading frozen layers such as embeddings); the inventory has no graph, so
        # the first step is counted like the others (measured: a frozen first layer, no re-fetch).
        fsrc = psrc + "; tests/engine/test_nvme_traffic.py (frozen layer)"
        add(NVME, "read", "parameters", "frozen_params", ga * fbytes, "forward", nv_over,
            f"frozen partitions (never put in the max_in_cpu buffer) read on every forward fetch, never written: "
            f"GA x sum A_{kp}(p_i) x D", fsrc, path=path, files=ga * ffiles)
        if not gathered:
            add(NVME, "read", "parameters", "frozen_params", ga * fbytes, "backward", nv_over,
                f"frozen partitions read again on every backward fetch: GA x sum A_{kp}(p_i) x D", fsrc, path=path,
                files=ga * ffiles)
    return rows


# ---------------------------------------------------------------------------------------------
# time at the hardware's bandwidths


#: One NVMe request's access latency at queue depth 1, before its transfer, seconds, when a
#: storage tier states none (``read_latency_s`` / ``write_latency_s``): the random 4 KB access
#: latencies of a data-centre NVMe drive, the Intel SSD DC P4500 (read 85 us, write 20 us: Lenovo
#: Press product guide "Intel P4500 Entry NVMe PCIe SSDs", Table 2 "Technical specifications",
#: 1.0/2.0 TB drives). An assumption for any other drive: random (not sequential, 10-13 us there)
#: because the swap files sit wherever the filesystem put them, and the larger of the two.
NVME_LATENCY_S = {"read": 85e-6, "write": 20e-6}


#: Seconds each swapped file (one aio op) adds to its bytes' time, by direction: DeepSpeed swaps one
#: file per tensor (a ZeRO-3 parameter partition, ``partitioned_param_swapper.py`` l.148-161; an
#: optimizer sub-group's state, ``optimizer_utils.py`` l.46-75; a gradient piece, l.256-287), and each
#: op stats (reads) and opens its file with O_DIRECT (``deepspeed_py_io_handle.cpp`` l.288-303,
#: l.324-335), is handed to the handle's thread and back (l.281, ``deepspeed_aio_thread.cpp``), starts
#: its requests anew (``deepspeed_aio_utils.cpp`` l.77-100: a one-block file is one request in flight)
#: and is closed in ``wait`` (l.232). Fitted as t = bytes / R + files x c over the same 64 MiB as
#: files of 1-64 MiB at DeepSpeed's aio defaults (``benchmarks/aio_per_file.py``), pooled median of
#: 45 rounds per direction on this project's 2-vCPU Intel Xeon VM (virtio ext4, load 2.6-2.8;
#: ``benchmarks/results/aio_per_file-vm-run{1,2,3}.json``; per-run medians 51-166 us writing,
#: 47-78 us reading): that machine's figure, an assumption elsewhere (its syscall and virtio costs;
#: a bare-metal host's are likely lower). There a 1 MiB file took 1.13-1.49x (writes) and
#: 1.10-1.17x (reads), a 4 MiB file 1.09-1.15x / 1.04-1.13x the time of the same bytes as one file.
AIO_PER_FILE_S = {"write": 91e-6, "read": 66e-6}


def aio_bandwidth(rate: float, latency_s: float, aio: Any, streams: int = 1) -> float:
    """Bytes/s one node's ``streams`` aio handles (one per rank) get from a storage tier of
    ``rate`` bytes/s whose requests take ``latency_s`` s to start, at the config's ``aio``
    settings (an object with ``block_size`` bytes, ``queue_depth``, ``intra_op_parallelism``).

    DeepSpeed splits each swap op over ``intra_op_parallelism`` threads
    (``csrc/aio/py_lib/deepspeed_cpu_op.cpp`` ``cpu_op_desc_t::run``: ``_num_bytes_per_thread``)
    and each thread keeps up to ``queue_depth`` requests of ``block_size`` bytes in flight
    (``csrc/aio/common/deepspeed_aio_common.cpp``: ``do_aio_operation_overlap`` refills the queue
    as each request completes, ``do_aio_operation_sequential`` submits ``queue_depth`` and waits
    for them all). So O = ranks x intra_op_parallelism x queue_depth x block_size bytes are in
    flight. A window of O bytes waits the request latency, then drains at the tier's rate: it
    takes latency + O / rate (the latency-bandwidth cost of a transfer, T = alpha + n / beta:
    Hockney, "The communication challenge for MPP", Parallel Computing 20, 1994), and by
    Little's law (throughput = bytes in flight / time in flight) the node gets

        O / (latency + O / rate)  =  rate x O / (O + rate x latency)

    which tends to the rate as O outgrows rate x latency (the bytes the drive moves while one
    request starts) and is O / latency when O is small. The window draining whole is the
    sequential mode; the overlapped queue refills sooner, but on the disk this was measured on
    (benchmarks/steptime_calibration.py ``--aio-sweep``, overlap_events on) this formula was
    within 25 % at seven settings, where a hard cap min(rate, O / latency) overstated a 256 KiB x
    4 queue by 1.65x; both modes use it. At DeepSpeed's defaults (1 MiB x 8 x 1 thread, 8 MiB
    per rank) on a 7 GB/s drive at 85 us: 7e9 x 8.39 MB / (8.39 MB + 0.595 MB) = 6.54 GB/s, 93 %
    of the rate; one 128 KiB request at a time gets 1.26 GB/s. Single-submit and the per-request
    CPU cost are left out. Raises ValueError for a non-positive rate or latency."""
    if rate <= 0 or latency_s <= 0:
        raise ValueError("rate and latency must be positive")
    outstanding = (max(1, streams) * max(1, int(aio.intra_op_parallelism)) * max(1, int(aio.queue_depth))
                   * max(1, int(aio.block_size)))
    return outstanding / (latency_s + outstanding / rate)


def tier_node_rate(tier: Any, direction: str, nodes: int = 1) -> float:
    """Bytes/s one node gets from storage ``tier`` for ``direction`` while ``nodes`` nodes use it
    at once: :meth:`advisor.cluster.hardware.StorageTier.node_rate` (node-local: the tier's
    figure; shared: min(aggregate / nodes, per-client limit))."""
    return float(tier.node_rate(direction, nodes))


def nodes_of(world_size: int, ranks_per_node: int) -> int:
    """Nodes a job of ``world_size`` ranks at ``ranks_per_node`` occupies: ceil(W / per node)."""
    return max(1, -(-max(1, int(world_size)) // max(1, int(ranks_per_node))))


def nvme_rate(tier: Any, direction: str, aio: Any | None, streams: int = 1, nodes: int = 1) -> float:
    """The node's bytes/s on storage ``tier`` for ``direction`` (``read``/``write``): the node's
    figure while ``nodes`` nodes use the tier at once (:func:`tier_node_rate`: a shared tier's
    aggregate / nodes, capped by its per-client limit), limited by :func:`aio_bandwidth` at the
    config's ``aio`` settings with ``streams`` ranks issuing at once (None: that figure as
    stated). The latency is the tier's ``read_latency_s`` / ``write_latency_s``, else
    :data:`NVME_LATENCY_S`.

    A tier whose figures were measured at stated aio settings (``tier.aio``: one process, as
    ``ds_nvme_tune`` and benchmarks/steptime_calibration.py measure; keys it leaves out taken
    as the config's) states X(O_m), not the drive's rate B: B is solved from
    X = O_m B / (O_m + B L), B = X O_m / (O_m - X L), so the config at the measured settings gets
    the figure back exactly and other settings scale from it (no double count). When
    O_m <= X L the stated latency cannot explain the figure; the figure is taken as B."""
    rate = tier_node_rate(tier, direction, nodes)
    if aio is None:
        return rate
    lat = getattr(tier, f"{direction}_latency_s", None) or NVME_LATENCY_S[direction]
    measured = dict(getattr(tier, "aio", None) or ())
    if measured:
        o_m = (max(1, int(measured.get("block_size", aio.block_size)))
               * max(1, int(measured.get("queue_depth", aio.queue_depth)))
               * max(1, int(measured.get("intra_op_parallelism", aio.intra_op_parallelism))))
        if o_m > rate * lat:
            rate = rate * o_m / (o_m - rate * lat)
    return aio_bandwidth(rate, lat, aio, streams)


#: What each crossing of a ``network`` movement is called in the text table and the HTML chart:
#: the step-time model's two links (steptime.COLLECTIVE_MODEL ``within_node`` / ``across_nodes``).
CROSSING_LABELS = {"within_node": "peer link", "across_nodes": "network"}
#: The words for each crossing in a legend or note.
CROSSING_WORDS = {"within_node": "within a node, over the peer link (NVLink/xGMI; the host link where the spec gives "
                                 "no peer_bytes_per_s)",
                  "across_nodes": "across nodes, over the network (the node's NIC bandwidth shared by its ranks)"}


def group_spans_nodes(axis: str, tensor_parallel: int, pipeline_parallel: int, data_parallel: int,
                      ranks_per_node: int, stage: int | None = None, group_size: int = 1) -> bool:
    """Whether a process group of ``axis`` holds ranks on more than one node, nodes holding
    consecutive ranks (node = rank // ranks_per_node) and ranks in DeepSpeed's order:
    ``PipeModelDataParallelTopology`` axes ['pipe', 'data', 'model'], the last varying fastest
    (``runtime/pipe/topology.py`` l.244-248; ``ProcessTopology.get_rank`` l.57-72), so
    rank = (pipe x DP + data) x TP + model. ``data_parallel`` is the data axis's width (DP; with
    DeepSpeed-Ulysses DP x SP, its ranks sit inside the data axis, data = d x SP + q,
    :class:`advisor.plan.Cluster`).

    - ``data``: the groups {p DP TP + d TP + m : d < DP} of stage ``stage`` (any stage when None):
      True iff one of them spans nodes (DP x TP > ranks_per_node when ranks_per_node divides the
      stage width DP x TP or the reverse);
    - ``model``: the tensor-parallel groups {(p DP + d) TP + m : m < TP} (TP > ranks_per_node when
      ranks_per_node is a multiple of TP);
    - ``pipe``: the sends from stage ``stage`` to stage + 1 (rank r to r + DP x TP; every boundary
      when None): True iff one such pair is on two nodes;
    - ``sequence`` (``group_size`` = SP = u, DeepSpeed-Ulysses): {(p DP + d u + q) TP + m : q < u}, the
      u ranks of one sequence at stride TP inside the data axis. DeepSpeed's own builders make
      them u consecutive ranks (``runtime/sequence_parallel/parallel_state_sp.py``
      initialize_sequence_parallel l.51-52: ``range(i * sp, (i + 1) * sp)``; the ("data_parallel",
      "sequence_parallel") device mesh of ``deepspeed/__init__.py`` l.538-546, row-major, the last
      dimension fastest): the same groups at TP 1, which is all they know of (neither takes a TP
      size; Megatron-DeepSpeed's parallel_state asserts TP = PP = 1 with DeepSpeed's sequence
      parallelism);
    - ``expert`` (``group_size`` = ep): DeepSpeed MoE's expert-parallel groups, ep consecutive
      global ranks (``utils/groups.py`` _create_expert_and_data_parallel l.462-463: ``range(i * ep,
      (i + 1) * ep)`` over the world, inside one stage as ep divides its width, l.416-417), the
      path ``moe/layer.py`` l.93-97 takes without an mpu or with ``enable_expert_tensor_parallelism``
      False (the default, the experts whole on every tensor-parallel rank, as
      :mod:`advisor.model.parallel` shards them): under TP a group holds tensor-parallel ranks,
      not ranks at stride TP (that is _get_expert_parallel_ranks l.538-604, expert tensor
      parallelism only); ``use_data_before_expert_parallelism`` (l.450-453) is not modelled;
    - ``hpz`` (``group_size`` = h, ZeRO++ ``zero_hpz_partition_size``): min(h, world) consecutive
      global ranks (``utils/groups.py`` _create_zero_param_parallel_group l.944-949: ``range(i * h,
      (i + 1) * h)`` over ``dist.get_world_size()``, whatever the TP, PP or data-parallel groups;
      ``partition_parameters.py`` l.1118-1120 and ``stage3.py`` l.752-753 call it): the groups holding
      stage ``stage``'s ranks.

    Exact for any shape: a group of ranks lo..hi spans nodes iff lo mod L + (hi - lo) >= L (L =
    ranks_per_node, nodes being blocks of consecutive ranks), and the residues lo mod L repeat
    with a period of at most L groups, so each new axis checks at most L (L^2 for ``sequence``)
    groups per stage."""
    tp, pp, dp = max(1, tensor_parallel), max(1, pipeline_parallel), max(1, data_parallel)
    rpn = max(1, ranks_per_node)
    g = max(1, group_size)
    width = dp * tp  # ranks of one pipeline stage
    stages = range(pp) if stage is None else [stage]

    def spans(lo: int, span: int) -> bool:
        return lo % rpn + span >= rpn

    for p in stages:
        base = p * width
        if axis == "data":
            for m in range(tp):
                if (base + m) // rpn != (base + (dp - 1) * tp + m) // rpn:
                    return True
        elif axis == "model":
            for d in range(dp):
                if (base + d * tp) // rpn != (base + d * tp + tp - 1) // rpn:
                    return True
        elif axis == "pipe":
            if p >= pp - 1:
                continue
            if any((base + i) // rpn != (base + i + width) // rpn for i in range(width)):
                return True
        elif axis == "sequence":
            if any(spans(base + d * g * tp + m, (g - 1) * tp)
                   for d in range(min(max(1, dp // g), rpn)) for m in range(min(tp, rpn))):
                return True
        elif axis == "expert":
            if any(spans(base + i * g, g - 1) for i in range(min(max(1, width // g), rpn))):
                return True
        elif axis == "hpz":
            first, last = base // g, (base + width - 1) // g
            if any(spans(i * g, g - 1) for i in range(first, min(last + 1, first + rpn))):
                return True
        else:
            raise ValueError(f"group_spans_nodes: unknown axis {axis!r} (data, model, pipe, sequence, expert, hpz)")
    return False


def crossing(m: Movement, multi_node: bool) -> str | None:
    """``within_node`` or ``across_nodes``: the link a ``network`` movement's bytes cross, the rule
    :func:`link_bandwidth` times it by: the movement's own ``intra_node`` when set (tensor- and
    pipeline-parallel groups), else the job's shape (data-parallel collectives cross nodes when
    the job spans more than one, ``multi_node``); None for a PCIe or NVMe movement."""
    if m.link != NETWORK:
        return None
    intra = m.intra_node if m.intra_node is not None else not multi_node
    return "within_node" if intra else "across_nodes"


def link_label(m: "Movement | dict") -> str:
    """The link column of a movement (a :class:`Movement` or its dict): ``pcie``, ``nvme``, or for
    a network movement the link it crosses (:data:`CROSSING_LABELS`; ``network`` when unknown)."""
    link, crosses = (m.get("link"), m.get("crosses")) if isinstance(m, dict) else (m.link, m.crosses)
    return CROSSING_LABELS.get(crosses or "", link)


def link_bandwidth(m: Movement, hardware: "Hardware", ranks_per_node: int, multi_node: bool,
                   aio: Any | None = None, nodes: int = 1) -> float | None:
    """The bandwidth one rank gets for movement ``m``, bytes/s: PCIe = the accelerator's host
    link; NVMe = the node's read or write bandwidth on the tier while the job's ``nodes`` nodes
    swap at once (a shared tier: min(aggregate / nodes, per-client limit), :func:`tier_node_rate`)
    at the config's ``aio`` settings (:func:`nvme_rate`, the node's ranks issuing at once) shared
    by the node's ranks; network =
    the node's NIC bandwidth shared by its ranks when the job spans nodes, else the intra-node
    peer link (NVLink/xGMI), else PCIe; a movement whose ``intra_node`` is set (tensor- and
    pipeline-parallel traffic) takes the peer link when True, the NIC share when False."""
    if m.link == PCIE:
        return hardware.host_link_bytes_per_s
    if m.link == NVME:
        t = hardware.tier_for_path(m.path)
        if t is None:
            return None
        rpn = max(1, ranks_per_node)
        return nvme_rate(t, "write" if m.direction == "write" else "read", aio, rpn, nodes) / rpn
    if crossing(m, multi_node) == "across_nodes":
        return (hardware.network_bytes_per_s / max(1, ranks_per_node)) if hardware.network_bytes_per_s else None
    return hardware.peer_bytes_per_s or hardware.host_link_bytes_per_s


def timed(movements: list[Movement], hardware: "Hardware", ranks_per_node: int = 1,
          world_size: int | None = None, aio: Any | None = None, multi_node: bool | None = None
          ) -> list[Movement]:
    """Copies of ``movements`` with ``seconds`` (bytes / :func:`link_bandwidth`, NVMe at the
    config's ``aio`` settings when given, on a shared tier at the node's share while the job's
    ceil(world_size / ranks_per_node) nodes swap at once, plus ``files`` x :data:`AIO_PER_FILE_S`
    for the direction: each rank's handle runs its ops one after another, ``deepspeed_aio_thread.cpp``)
    and NVMe ``tier`` names filled from ``hardware``. ``multi_node``: whether the data-parallel
    collectives cross nodes (:func:`group_spans_nodes` ``data``); None: the job spans nodes."""
    ranks = {m.rank for m in movements}
    ws = world_size or (max(ranks) + 1 if ranks else 1)
    multi = ws > ranks_per_node if multi_node is None else multi_node
    nodes = nodes_of(ws, ranks_per_node)
    out = []
    for m in movements:
        bw = link_bandwidth(m, hardware, ranks_per_node, multi, aio, nodes)
        tier = hardware.tier_for_path(m.path) if m.link == NVME else None
        secs = (m.bytes / bw) if bw else None
        if secs is not None and m.link == NVME and m.files:
            secs += m.files * AIO_PER_FILE_S["write" if m.direction == "write" else "read"]
        out.append(replace(m, seconds=secs, tier=tier.name if tier else m.tier))
    return out


def totals(movements: Iterable[Movement], rank: int = 0) -> dict[str, dict[str, Any]]:
    """Per ``link/direction`` for one rank: bytes per step, seconds (None when a bandwidth is
    unknown) and the seconds that cannot overlap compute."""
    out: dict[str, dict[str, Any]] = {}
    for m in movements:
        if m.rank != rank:
            continue
        d = out.setdefault(f"{m.link}/{m.direction}", {"bytes": 0, "seconds": 0.0, "exposed_seconds": 0.0})
        d["bytes"] += m.bytes
        if m.seconds is None or d["seconds"] is None:
            d["seconds"] = None
            d["exposed_seconds"] = None
        else:
            d["seconds"] += m.seconds
            if not m.overlap:
                d["exposed_seconds"] += m.seconds
    return out


def nvme_bytes_per_step(movements: Iterable[Movement], direction: str = "write", rank: int | None = 0,
                        path: str | None = None) -> int:
    """NVMe bytes per steady-state optimizer step (``write`` or ``read``), for one rank (default
    0) or all ranks (``rank=None``), optionally only those under ``path``."""
    return sum(m.bytes for m in movements if m.link == NVME and m.direction == direction
               and (rank is None or m.rank == rank) and (path is None or m.path == path))


# ---------------------------------------------------------------------------------------------
# endurance


def endurance(bytes_written_per_step: float, step_time_s: float, rated_write_bytes: float | None
              ) -> tuple[float, float, float | None]:
    """(steps per day, bytes written per day, projected days of life).

    steps/day = 86,400 / step_time_s; bytes/day = bytes per step x steps/day; days =
    rated bytes / bytes per day (None without a rating; inf when nothing is written).
    Example (case C10): 1.072e11 B/step at 30 s -> 2,880 steps, 3.087e14 B/day; 1,200 TBW
    (1.2e15 B) lasts 3.89 days."""
    if step_time_s <= 0:
        raise ValueError("step_time_s must be positive")
    spd = SECONDS_PER_DAY / step_time_s
    per_day = bytes_written_per_step * spd
    if rated_write_bytes is None:
        return spd, per_day, None
    return spd, per_day, (rated_write_bytes / per_day) if per_day > 0 else math.inf


def shared_tier_wear(bytes_per_day: dict[str, float], rated_write_bytes: float | None,
                     capacity_bytes: int | None) -> dict[str, float | None]:
    """The wear of one storage tier several writers use (the NVMe swap and checkpoint saves to
    the same drive or filesystem): their bytes per day add, ``bytes_per_day`` {writer: bytes/day};
    days of life = rated bytes / the sum, drive writes per day = the sum / capacity, endurance used
    per day = the sum / rated (the figures :func:`endurance` gives one writer). E.g. 1e13 B/day of
    swap + 2e12 B/day of saves on a drive rated 1.2e15 B: 1.2e13 B/day, 100 days (120 for the swap
    alone)."""
    total = float(sum(bytes_per_day.values()))
    days = None if not rated_write_bytes else (rated_write_bytes / total if total > 0 else None)
    return {"bytes_written_per_day": total, "days_of_life": days,
            "endurance_used_per_day": total / rated_write_bytes if rated_write_bytes else None,
            "drive_writes_per_day": total / capacity_bytes if capacity_bytes else None}


def movement_plan(plan: "Plan") -> "Plan":
    """The plan the movement, step-time and checkpoint ledgers read: ``plan`` itself, except under
    expert parallelism alone (no tensor or pipeline parallelism), where it holds the rank's experts
    (:func:`advisor.model.parallel.shard`); under tensor/pipeline parallelism those ledgers shard
    the model themselves (per stage, the tensor-parallel shard over its ZeRO group)."""
    cluster = plan.cluster
    if cluster.model_parallel and cluster.tensor_parallel == 1 and cluster.pipeline_parallel == 1:
        from advisor.model.parallel import shard
        inv = shard(plan.inventory, 1, 1, cluster.expert_parallel)[0].inventory
        from advisor.plan import Plan
        return Plan(config=plan.config, inventory=inv, cluster=cluster, workload=plan.workload, loaded=plan.loaded)
    return plan


def saves_on_tier(swap_bytes_per_day: float, checkpoint_bytes_per_day: float, rated_write_bytes: float | None,
                  capacity_bytes: int | None, save_dir: str | None) -> dict[str, Any]:
    """The fields of an NVMe swap's endurance line (:class:`EnduranceLine`, or its dict in
    estimate's movement section) once checkpoint saves to ``save_dir`` write to the same tier:
    ``write_bytes_per_day`` = the swap's + the saves' bytes per day and the wear of that sum
    (:func:`shared_tier_wear`), with ``swap_bytes_per_day``, ``checkpoint_bytes_per_day`` and
    ``checkpoint_save_dir`` naming the parts. The one place estimate's endurance line
    (``views/estimate.share_save_tier``) and the T rules (``rules/_util.movements_and_endurance``)
    take the shared figure from. E.g. 1e13 B/day of swap + 2e12 B/day of saves on a drive rated
    1.2e15 B: ``write_bytes_per_day`` 1.2e13, ``days_of_life`` 100."""
    out: dict[str, Any] = dict(shared_tier_wear({"swap": swap_bytes_per_day, "checkpoint": checkpoint_bytes_per_day},
                                                rated_write_bytes, capacity_bytes))
    out["write_bytes_per_day"] = out.pop("bytes_written_per_day")
    out.update(swap_bytes_per_day=swap_bytes_per_day, checkpoint_bytes_per_day=checkpoint_bytes_per_day,
               checkpoint_save_dir=save_dir)
    return out


def implied_step_time(line: Any) -> float | None:
    """Seconds per step the tier's NVMe traffic alone takes on one node: its writes at the drive's
    write bandwidth plus its reads at its read bandwidth (one drive serves both;
    ``EnduranceLine.write/read_seconds_per_step``), or None without the bandwidths."""
    w, r = line.write_seconds_per_step, line.read_seconds_per_step
    if w is None and r is None:
        return None
    return (w or 0.0) + (r or 0.0)


@dataclass
class EnduranceLine:
    """Write volume and endurance of one storage tier on one node (bytes; days).

    ``write_bytes_per_step`` sums the node's ranks (ranks 0..ranks_per_node-1) over every
    nvme_path on the tier; per-day figures need ``step_time_s``."""

    tier: str | None
    access: str | None
    paths: list[str]
    ranks_per_node: int
    write_bytes_per_step: int
    read_bytes_per_step: int
    capacity_bytes: int | None = None
    rated_write_bytes: float | None = None
    endurance: str | None = None
    step_time_s: float | None = None
    steps_per_day: float | None = None
    write_bytes_per_day: float | None = None
    drive_writes_per_day: float | None = None
    endurance_used_per_day: float | None = None
    days_of_life: float | None = None
    write_seconds_per_step: float | None = None
    read_seconds_per_step: float | None = None
    #: write-active state classes written per step (not frozen parameters)
    write_classes: list[str] = field(default_factory=list)
    #: the step time asked for (--step-time or the model's) when it is shorter than the tier
    #: needs to move one step's NVMe traffic: the per-day figures are then at ``step_time_s``,
    #: the step time that traffic implies (:func:`implied_step_time`), not at this one
    requested_step_time_s: float | None = None
    #: Nodes whose writes the tier's drives take: 1 for a node-local tier (each node its own
    #: drive), the job's nodes for a shared one (one filesystem): the per-day figures and the
    #: drive life count ``write_bytes_per_step`` (one node's) x this.
    writing_nodes: int = 1
    #: Checkpoint saves to the same tier (``estimate --save-dir`` on it): their bytes per day, the
    #: swap's alone and the save dir; ``write_bytes_per_day`` and the wear figures then count both
    #: (:func:`shared_tier_wear`, set by ``views/estimate.share_save_tier``). None: no saves there.
    checkpoint_bytes_per_day: float | None = None
    swap_bytes_per_day: float | None = None
    checkpoint_save_dir: str | None = None

    def add_saves(self, checkpoint_bytes_per_day: float, save_dir: str | None) -> None:
        """Count checkpoint saves to this tier (bytes per day, at the save interval) in its
        per-day writes and wear (:func:`saves_on_tier`); needs the swap's per-day figure
        (``write_bytes_per_day``, i.e. a step time)."""
        if self.write_bytes_per_day is None:
            raise ValueError("the swap's bytes per day need a step time")
        for k, v in saves_on_tier(self.write_bytes_per_day, checkpoint_bytes_per_day, self.rated_write_bytes,
                                  self.capacity_bytes, save_dir).items():
            setattr(self, k, v)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["days_of_life"] == math.inf:
            d["days_of_life"] = None
        return d


def endurance_report(movements: list[Movement], hardware: "Hardware | None" = None,
                     step_time_s: float | None = None, ranks_per_node: int | None = None,
                     nodes: int = 1) -> list[EnduranceLine]:
    """One :class:`EnduranceLine` per storage tier of ``hardware`` (every tier, also those
    written nothing) plus one per nvme_path no tier holds (or every path when no hardware).
    ``ranks_per_node`` defaults to the hardware's accelerators per node, capped by the ranks
    present. The seconds a step's traffic takes on the node (the floor under the per-day
    figures' step time) are at the tier's rated figures, not at the config's aio settings
    (:func:`aio_bandwidth`): the floor is a physical bound that overrides even a measured
    ``--step-time``, and the aio limit is a model with an assumed request latency. On a shared
    tier the rated figure is the node's share while the job's ``nodes`` nodes swap at once
    (:func:`tier_node_rate`: min(aggregate / nodes, per-client limit)), and its per-day writes and
    drive life count every node's writes (``writing_nodes``), not one node's."""
    ranks = sorted({m.rank for m in movements})
    rpn = ranks_per_node or (hardware.node_accelerators if hardware else None) or 1
    rpn = max(1, min(rpn, len(ranks) or 1))
    node = set(ranks[:rpn])
    nv = [m for m in movements if m.link == NVME and m.rank in node]
    lines: dict[str, EnduranceLine] = {}
    order: list[str] = []

    def line_for(key: str, tier: "StorageTier | None") -> EnduranceLine:
        if key not in lines:
            lines[key] = EnduranceLine(
                tier=tier.name if tier else None, access=tier.access if tier else None, paths=[], ranks_per_node=rpn,
                write_bytes_per_step=0, read_bytes_per_step=0,
                capacity_bytes=tier.capacity_bytes if tier else None,
                rated_write_bytes=tier.rated_write_bytes if tier else None,
                endurance=tier.endurance.describe() if tier and tier.endurance else None)
            order.append(key)
        return lines[key]

    if hardware is not None:
        for t in hardware.storage:
            line_for("tier:" + t.name, t)
    for m in nv:
        t = hardware.tier_for_path(m.path) if hardware is not None else None
        ln = line_for("tier:" + t.name if t else f"path:{m.path}", t)
        if m.path and m.path not in ln.paths:
            ln.paths.append(m.path)
        if m.direction == "write":
            ln.write_bytes_per_step += m.bytes
            if m.cls not in ln.write_classes:
                ln.write_classes.append(m.cls)
        else:
            ln.read_bytes_per_step += m.bytes
    for key in order:
        ln = lines[key]
        t = next((x for x in hardware.storage if x.name == ln.tier), None) if hardware is not None else None
        if t is not None:
            ln.write_seconds_per_step = ln.write_bytes_per_step / tier_node_rate(t, "write", nodes)
            ln.read_seconds_per_step = ln.read_bytes_per_step / tier_node_rate(t, "read", nodes)
        if step_time_s:
            st = step_time_s
            io = implied_step_time(ln)
            if io is not None and io > st:
                # the drive cannot move one step's traffic in the step asked for: writes per day at it
                # would exceed its bandwidth, so the figures are at the step time the traffic implies
                ln.requested_step_time_s, st = step_time_s, io
            if t is not None and t.shared:
                ln.writing_nodes = max(1, int(nodes))  # one filesystem takes every node's writes
            spd, per_day, days = endurance(ln.write_bytes_per_step * ln.writing_nodes, st, ln.rated_write_bytes)
            ln.step_time_s, ln.steps_per_day, ln.write_bytes_per_day, ln.days_of_life = st, spd, per_day, days
            if ln.capacity_bytes:
                ln.drive_writes_per_day = per_day / ln.capacity_bytes
            if ln.rated_write_bytes:
                ln.endurance_used_per_day = per_day / ln.rated_write_bytes
    return [lines[k] for k in order]


# ---------------------------------------------------------------------------------------------
# views (for estimate: JSON section and text lines)


def _link_summary(ms: list[Movement]) -> dict[str, Any]:
    """Bytes and seconds per link and direction for one rank's movements."""
    out: dict[str, Any] = {
        PCIE: {"to_host_bytes": 0, "to_accelerator_bytes": 0, "to_host_seconds": 0.0, "to_accelerator_seconds": 0.0},
        NVME: {"write_bytes": 0, "read_bytes": 0, "write_seconds": 0.0, "read_seconds": 0.0},
        NETWORK: {"send_bytes": 0, "send_seconds": 0.0},
    }
    exposed: float | None = 0.0
    for m in ms:
        d = out[m.link]
        d[f"{m.direction}_bytes"] += m.bytes
        key = f"{m.direction}_seconds"
        if m.seconds is None or d[key] is None:
            d[key] = None
        else:
            d[key] += m.seconds
        if not m.overlap:
            exposed = None if (exposed is None or m.seconds is None) else exposed + m.seconds
    out["exposed_seconds"] = exposed
    return out


def movement_section(plan_or_ledger: "Plan | Ledger", hardware: "Hardware | None" = None,
                     step_time_s: float | None = None, activations: Any = None,
                     rank_sets: bool = False) -> dict[str, Any]:
    """Everything ``estimate`` shows about data movement per optimizer step, JSON-ready
    (bytes, seconds, days)::

        {"hardware": name | None, "step_time_s": s | None, "ranks_per_node": n,
         "ranks": [{"ranks": [0, 1, ...],                       # ranks with identical movements
                    "pcie": {"to_host_bytes", "to_accelerator_bytes", "*_seconds"},
                    "nvme": {"write_bytes", "read_bytes", "*_seconds"},
                    "network": {"send_bytes", "send_seconds"},
                    "exposed_seconds": not-overlapped seconds (None when a bandwidth is unknown),
                    "movements": [Movement dicts]}],
         "endurance": [EnduranceLine dicts, one per storage tier / unmapped nvme_path],
         "not_modelled": [what is left out, in words]}

    Seconds are None without a hardware spec. ``rank_sets``: each role's ``ranks`` stays a
    :class:`advisor.ledger.ranks.RankSet` (ranges, O(1) in the world size) instead of a list of
    every rank; the result is then not JSON-ready until they are listed (estimate's to_dict)."""
    plan = getattr(plan_or_ledger, "plan", plan_or_ledger)
    roles = movement_roles(plan, hardware, activations)
    rpn = _ranks_per_node(plan, hardware)
    groups: dict[tuple, dict[str, Any]] = {}
    for ranks, mine in roles:
        key = tuple((m.link, m.direction, m.item, m.bytes, m.first_step_bytes) for m in mine)
        if key in groups:
            groups[key]["ranks"] = groups[key]["ranks"] | ranks
        else:
            groups[key] = {"ranks": ranks, **_link_summary(mine),
                           "movements": [{k: v for k, v in m.to_dict().items() if k != "rank"} for m in mine]}
    # the node's ranks (0..rpn-1) for the endurance lines
    node: list[Movement] = []
    for ranks, mine in roles:
        for r in ranks[:rpn]:
            if r < rpn:
                node.extend(mine if (mine and mine[0].rank == r) else [replace(m, rank=r) for m in mine])
    ms = sorted(node, key=lambda m: m.rank)
    return {
        "hardware": hardware.name if hardware is not None else None,
        "step_time_s": step_time_s,
        "ranks_per_node": rpn,
        "ranks": [g if rank_sets else {**g, "ranks": list(g["ranks"])} for g in groups.values()],
        "endurance": [ln.to_dict() for ln in endurance_report(ms, hardware, step_time_s, ranks_per_node=rpn,
                                                              nodes=nodes_of(plan.cluster.world_size, rpn))],
        "not_modelled": not_modelled(plan, activations),
    }


