"""Op-level selective activation checkpointing (SAC): which ops of a decoder layer to save and
which to recompute under a memory budget, chosen by torch's own estimator and solver.

The model is built from its ``config.json`` on fake tensors, as in :mod:`advisor.engine.trace`,
and one training forward runs under ``torch.distributed._tools.sac_estimator.SACEstimator``
(a ``TorchDispatchMode``). For every decoder layer it yields ``SACStats``: the layer's aten ops
in order, each op's output bytes (distinct storages; view-like ops 0, the layer's last op 0:
it is the layer output, kept anyway), which ops are view-like (always recomputed), random
(saved or recomputed together), in place (with their parent) and saved by autograd.

The policy -- save (``CheckpointPolicy.MUST_SAVE``) or recompute (``PREFER_RECOMPUTE``) per op
-- comes from torch too:

* ``ilp``: ``torch.distributed._tools.sac_ilp.get_optimal_checkpointing_policy_per_module``
  (a MILP, adapted from xformers' ``checkpoint.py``): the least recompute cost whose saved
  bytes are at most ``budget`` x the layer's total op-output bytes. Needs the ``pulp`` package;
* ``greedy``: SACEstimator's own greedy order (``SACGreedyOrderMeta``): always-stored ops
  saved, then the candidates recomputed in decreasing memory-per-cost (``msps``) until the
  saved bytes fit the budget. No extra package;
* ``auto`` (the default): ``ilp`` when pulp is installed, else ``greedy``; the result says which.

Given the whole model's activation budget in bytes instead (:func:`sac_model_policy`), torch's
whole-model MILP (``sac_ilp.sac_milp``) chooses which decoder layers to checkpoint and what share
of each one's op outputs to discard; the per-layer ILP then picks each chosen layer's ops.

**Recompute cost is FLOPs, not time.** SACEstimator's two runtime modes need CUDA:
``operator-level-cost-model`` is ``RuntimeEstimator._roofline_estimate``, which raises
``AssertionError("Roofline estimation needs to access CUDA capabilities ...")`` when
``torch.cuda.is_available()`` is false (torch 2.13 ``distributed/_tools/runtime_estimator.py``,
``_roofline_estimate``), and ``operator-level-benchmark`` times kernels with
``torch.cuda.Event``; on a CPU-only torch either one aborts the process from inside the
dispatcher (``terminate called after throwing an instance of 'python_error'``, measured here).
So this module gives the estimator its per-op cost hook (``SACEstimator._estimate_runtime``)
as the op's FLOPs from torch's own formulas (``torch.utils.flop_counter.flop_registry``; the
CPU fused attention ``_scaled_dot_product_flash_attention_for_cpu`` by ``sdpa_flop_count``).
Elementwise ops and other ops without a FLOP formula cost 0: recomputing them is counted free
(on a GPU they are memory-bound, not free -- no GPU figure is invented here). The cost the
solver minimises and :attr:`SACPolicy.recompute_flops` report are FLOPs of the layer forward.

The policy is applied with ``torch.utils.checkpoint.create_selective_checkpoint_contexts``
(:func:`context_fn`): ops are matched by their position in the layer's op sequence (ops
SACEstimator skips, ``OPS_TO_ALWAYS_SKIP``, are never saved and not counted), and a sequence
that differs from the estimator's raises :class:`SACMismatch` rather than applying a wrong policy.

Imports torch lazily (the views never import this module unless ``--activations trace``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.engine.trace import TraceUnavailable, _imports, _real_mask_skip, build_config

#: Solvers accepted by :func:`sac_policy`.
SOLVERS = ("auto", "ilp", "greedy")
#: The optional packages torch's whole-model MILP imports (sac_ilp: pulp; SACEstimator's
#: trade-off curves, ``pwlf_sac_tradeoff_curve``: pwlf).
MILP_PACKAGES = ("pulp", "pwlf")


class SACMismatch(TraceUnavailable):
    """The op sequence of a checkpointed layer differs from the one SACEstimator recorded."""


@dataclass
class LayerPolicy:
    """The SAC decision for one decoder layer. Sizes in bytes, costs in FLOPs (forward)."""

    module: str
    #: aten op names in order (SACEstimator's ``func_names``).
    ops: list[str]
    #: 1 = save (MUST_SAVE), 0 = recompute, per op.
    save: list[int]
    #: Output bytes per op (SACEstimator's ``memory``).
    op_bytes: list[int]
    #: FLOPs per op (torch.utils.flop_counter formulas; 0 for ops without one).
    op_flops: list[float]
    #: False: the layer is not checkpointed at all (the whole-model choice, :func:`sac_model_policy`,
    #: left it out); every op is then kept as autograd keeps it.
    checkpointed: bool = True

    @property
    def total_bytes(self) -> int:
        """All op-output bytes of the layer: what the budget fraction is of."""
        return int(sum(self.op_bytes))

    @property
    def saved_bytes(self) -> int:
        """Bytes the policy keeps from forward to backward, besides the layer's input (kept by
        the checkpoint) and its output (handed on): the outputs of the saved ops."""
        return int(sum(b for b, s in zip(self.op_bytes, self.save) if s))

    @property
    def forward_flops(self) -> float:
        return float(sum(self.op_flops))

    @property
    def recompute_flops(self) -> float:
        """FLOPs backward spends recomputing the ops not saved."""
        return float(sum(f for f, s in zip(self.op_flops, self.save) if not s))

    def saved_ops(self) -> list[str]:
        return [f"{i}:{n}" for i, (n, s) in enumerate(zip(self.ops, self.save)) if s]


@dataclass
class SACPolicy:
    """The op-level SAC policy of every traced decoder layer of a model."""

    model_type: str
    budget: float
    solver: str
    layers: list[LayerPolicy]
    #: Decoder layers of the whole model (``layers`` holds the traced ones).
    layers_total: int
    #: Forward FLOPs of the traced model (all its ops: embedding, traced layers, head, loss).
    model_forward_flops: float
    seconds: float
    notes: list[str] = field(default_factory=list)
    #: ``layer``: every layer under the same fraction ``budget`` (:func:`sac_policy`);
    #: ``model``: torch's whole-model MILP chose the layers and their discard fractions under
    #: ``budget_bytes`` (:func:`sac_model_policy`; ``budget`` is then the traced peak's share).
    scope: str = "layer"
    #: The whole-model activation budget (bytes), scope ``model`` only.
    budget_bytes: int | None = None
    #: Scope ``model``: per checkpointed layer, the share of its op-output bytes the MILP
    #: discards (sac_milp's r_i); layers it leaves out are absent.
    discard: dict[str, float] = field(default_factory=dict)

    def recompute_flops_fraction(self) -> float:
        """Extra forward FLOPs of the recompute as a fraction of the step's FLOPs without it,
        all layers (those past the traced ones as the last traced one). The step is taken as
        3 x the forward (backward = 2 x forward for the matmuls: Narayanan et al. 2021, the
        6N-per-token rule), as in :mod:`advisor.model.activations`."""
        extra = self.layers_total - len(self.layers)
        last = self.layers[-1]
        recompute = sum(lp.recompute_flops for lp in self.layers) + extra * last.recompute_flops
        forward = self.model_forward_flops + extra * last.forward_flops
        return recompute / (3 * forward) if forward > 0 else 0.0

    def apply(self, model) -> None:
        """Checkpoint every decoder layer of a transformers ``model`` with this policy (layer i
        gets the policy of traced layer i; layers past the traced ones the last one's):
        transformers' gradient checkpointing, non-reentrant, with a SAC ``context_fn`` per layer."""
        from functools import partial

        from torch.utils.checkpoint import checkpoint

        from advisor.engine.trace import _decoder_layers

        if hasattr(model, "activation_checkpointing_enable"):  # transformers' new name (the old one warns)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:  # pragma: no cover - older transformers
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for i, layer in enumerate(_decoder_layers(model)):
            lp = self.layers[min(i, len(self.layers) - 1)]
            layer._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False, context_fn=context_fn(lp))
            if not lp.checkpointed:  # GradientCheckpointingLayer runs its plain forward
                layer.gradient_checkpointing = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["recompute_flops_fraction"] = self.recompute_flops_fraction()
        for lp, dd in zip(self.layers, d["layers"]):
            dd.update(saved_bytes=lp.saved_bytes, total_bytes=lp.total_bytes, forward_flops=lp.forward_flops,
                      recompute_flops=lp.recompute_flops)
        return d


def _flop_cost():
    """SACEstimator's per-op cost hook ``(func, args, kwargs) -> (out, cost)``: the op's FLOPs.

    It also keeps every op output's storage alive for the hook's lifetime (one estimation
    pass; fake storages, no real bytes). SACEstimator names an output storage by ``hash(st)``,
    which for ``UntypedStorage`` is the Python object's id, and finds an in-place op's parent
    as the first earlier op whose output ids hold the current ones
    (``SACEstimator._get_inplace_metadata``, torch 2.13 distributed/_tools/sac_estimator.py).
    Once a temporary's storage is freed its id can be reused by a later storage, so e.g.
    dropout's ``bernoulli_`` got some earlier freed op as parent instead of its ``empty_like``;
    the policy then saved the ``empty_like`` alone and torch's SAC check failed ("Tensor
    cached during selective activation checkpoint has been mutated") -- intermittently, as
    ids depend on what the process allocated before. With nothing freed, no id is reused."""
    import torch
    from torch.distributed._tools.sac_estimator import get_untyped_storages
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import flop_registry, sdpa_flop_count

    sdpa_cpu = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    kept: list = []

    def cost(func, args, kwargs):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        for o in tree_leaves(out):
            if isinstance(o, torch.Tensor):
                kept.extend(get_untyped_storages(o))
        packet = func._overloadpacket
        f = flop_registry.get(packet)
        if f is not None:
            return out, float(f(*args, **kwargs, out_val=out))
        if sdpa_cpu is not None and packet is sdpa_cpu:
            q, k, v = args[:3]
            return out, float(sdpa_flop_count(q.shape, k.shape, v.shape))
        return out, 0.0

    return cost


def _greedy(stats, meta, budget: float) -> list[int]:
    """SACEstimator's greedy order under a budget: its always-stored ops saved and its
    always-recomputed (view-like) ops recomputed; of the candidates (``msps_meta``, sorted by
    memory per cost, highest first), recompute in that order until the saved bytes are at
    most ``budget`` x total. Returns 1 (save) / 0 (recompute) per op."""
    n = len(stats.memory)

    def group(i: int) -> set[int]:
        g = {i} | set(meta.inplace_op_groups.get(i, ())) | set(meta.random_ops_group.get(i, ()))
        return g

    save = [1] * n
    for i in meta.recomputed_ops:
        for j in group(i):
            save[j] = 0
    limit = budget * sum(stats.memory)
    saved = sum(m for m, s in zip(stats.memory, save) if s)
    for cand in meta.msps_meta:
        if saved <= limit:
            break
        for j in group(cand.op_idx):
            if save[j]:
                save[j] = 0
                saved -= stats.memory[j]
    for i in meta.stored_ops:  # stored groups stay stored
        for j in group(i):
            save[j] = 1
    return save


def _closure(stats, save: list[int]) -> tuple[list[int], int]:
    """Make a policy safe to run: ops that must go together -- an in-place op and its parent,
    all random ops (SACEstimator's ``inplace_ops`` / ``rand_ops``, the ILP's own constraints)
    -- are merged into groups; a group holding an in-place op is recomputed (a cached tensor
    that a later in-place op mutates fails torch's check, ``_VersionWrapper.get_val`` in
    torch/utils/checkpoint.py: "Tensor cached during selective activation checkpoint has been
    mutated"), and a group with any op recomputed is recomputed whole. Returns the policy and
    how many saved ops it turned to recompute."""
    n = len(save)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        parent[find(a)] = find(b)

    inplace = {op for op, par in stats.inplace_ops}
    for op, par in stats.inplace_ops:
        union(op, par)
    for a, b in zip(stats.rand_ops, stats.rand_ops[1:]):
        union(a, b)
    drop: dict[int, bool] = {}
    for i in range(n):
        r = find(i)
        drop[r] = drop.get(r, False) or i in inplace or not save[i]
    out = [0 if drop[find(i)] else s for i, s in enumerate(save)]
    return out, sum(1 for a, b in zip(save, out) if a and not b)


def _ilp(stats, budget: float) -> list[int] | None:
    """torch's MILP (sac_ilp.get_optimal_checkpointing_policy_per_module); None without pulp."""
    try:
        from torch.distributed._tools.sac_ilp import get_optimal_checkpointing_policy_per_module
    except ImportError:
        return None
    import dataclasses

    # every op costs at least 1 FLOP: pulp leaves a variable with no nonzero coefficient unset
    # (varValue None) and torch's round(x.varValue) then raises TypeError (sac_ilp.py, the last
    # line of get_optimal_checkpointing_policy_per_module) -- the case of a zero-byte op
    # without a FLOP formula; a real runtime is never 0
    stats = dataclasses.replace(stats, runtimes=[r + 1.0 for r in stats.runtimes])
    res = get_optimal_checkpointing_policy_per_module(stats, budget)
    if not res:
        raise TraceUnavailable(f"SAC: the ILP found no policy within budget {budget:g}")
    return [int(x) for x in res]


def sac_policy(hf_config: dict[str, Any], seq_len: int, micro_batch: int, budget: float, dtype: str = "bf16",
               attention: str = "sdpa", max_layers: int = 4, dropout: float | None = None,
               solver: str = "auto", source: str = "config.json") -> SACPolicy:
    """Choose, per decoder layer of the model ``hf_config`` describes (a parsed config.json),
    which ops to save under ``budget`` (a fraction 0..1 of the layer's op-output bytes: 0 =
    recompute all but what must be kept, 1 = save every op). See the module docstring for the
    estimator, the solvers and the FLOP cost. ``max_layers`` layers are built (identical
    layers repeat the last one's policy).

    Raises ValueError on a bad budget/solver/dtype/attention and TraceUnavailable when torch
    or transformers is missing, transformers cannot build the type, the forward cannot run on
    fake tensors, or the model has no decoder layers SACEstimator records."""
    if not 0.0 <= float(budget) <= 1.0:
        raise ValueError(f"SAC budget must be a fraction from 0 to 1 of a layer's activation bytes, got {budget!r}")
    if solver not in SOLVERS:
        raise ValueError(f"SAC solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    _imports()  # TraceUnavailable when torch or transformers is missing, before any torch import
    from torch.distributed._tools.sac_estimator import SACEstimator

    from advisor.engine.trace import _decoder_layers

    t0 = time.perf_counter()
    full = build_config(hf_config, dropout=dropout, source=source)
    n = min(int(full.num_hidden_layers), max_layers)
    torch, mode, model, ids, cfg = _fake_model(hf_config, seq_len, micro_batch, dtype, attention, n, dropout, source)
    est = SACEstimator()
    if not hasattr(est, "_estimate_runtime"):  # pragma: no cover - a torch whose estimator changed
        raise TraceUnavailable("this torch's SACEstimator has no per-op cost hook (_estimate_runtime)")
    est._estimate_runtime = _flop_cost()
    try:
        with mode, est, _real_mask_skip(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model(input_ids=ids, labels=ids, use_cache=False)
    except Exception as e:
        raise TraceUnavailable(f"{source}: SACEstimator on {cfg.model_type} failed: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
    names = {id(m): nm for nm, m in model.named_modules()}
    root = type(model).__name__
    used = solver
    layers: list[LayerPolicy] = []
    closure_notes: set[str] = set()
    for layer in _decoder_layers(model):
        fqn = f"{root}.{names[id(layer)]}"
        stats = est.sac_mod_stats.get(fqn)
        if stats is None:
            raise TraceUnavailable(f"SACEstimator recorded no ops for {fqn}")
        save = None
        if solver in ("auto", "ilp"):
            save = _ilp(stats, float(budget))
            if save is None and solver == "ilp":
                from advisor.install import extra_command

                raise TraceUnavailable(f"SAC solver ilp needs the pulp package: {extra_command('sac')}")
            used = "ilp" if save is not None else "greedy"
        if save is None:
            save = _greedy(stats, est.sac_mod_greedy_order_meta[fqn], float(budget))
        save, dropped = _closure(stats, save)
        if dropped:
            closure_notes.add("in-place and random op groups are recomputed whole (a cached tensor mutated later "
                              "fails torch's SAC check)")
        layers.append(LayerPolicy(module=names[id(layer)], ops=list(stats.func_names), save=save,
                                  op_bytes=[int(m) for m in stats.memory], op_flops=[float(r) for r in stats.runtimes]))
    if not layers:
        raise TraceUnavailable(f"{cfg.model_type}: no decoder layers found for SAC")
    notes = ["recompute cost counted in FLOPs (torch.utils.flop_counter); elementwise ops count as free"]
    notes += sorted(closure_notes)
    root_stats = est.sac_mod_stats.get(root)
    model_flops = float(sum(root_stats.runtimes)) if root_stats else sum(lp.forward_flops for lp in layers)
    return SACPolicy(model_type=str(cfg.model_type), budget=float(budget), solver=used, layers=layers,
                     layers_total=int(full.num_hidden_layers), model_forward_flops=model_flops, seconds=round(time.perf_counter() - t0, 3), notes=notes)


def _fake_model(hf_config, seq_len, micro_batch, dtype, attention, layers, dropout, source):
    """(torch, FakeTensorMode, model, input ids, config) of :func:`sac_model_policy`: the model
    built on fake tensors as :func:`sac_policy` builds it."""
    torch = _imports()
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM

    from advisor.engine.trace import _DTYPES, _checked_dtype_attention, refuse_flash_stand_in

    attn = _checked_dtype_attention(dtype, attention)
    cfg = build_config(hf_config, layers=layers, dropout=dropout, source=source)
    refuse_flash_stand_in(cfg, attention, source)
    mode = FakeTensorMode()
    try:
        with mode:
            model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, _DTYPES[dtype]), attn_implementation=attn)
            ids = torch.randint(0, int(cfg.get_text_config().vocab_size), (micro_batch, seq_len))
    except (ValueError, KeyError, TypeError) as e:
        raise TraceUnavailable(f"{source}: transformers cannot build a causal LM for model_type {cfg.model_type!r}: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    model.train()
    return torch, mode, model, ids, cfg


def sac_model_policy(hf_config: dict[str, Any], seq_len: int, micro_batch: int, budget_bytes: int,
                     dtype: str = "bf16", attention: str = "sdpa", max_layers: int | None = None,
                     dropout: float | None = None, source: str = "config.json") -> SACPolicy:
    """Choose, for the whole model ``hf_config`` describes, which decoder layers to checkpoint
    and which ops of each to save, so that the activation peak of one training step (bytes,
    activations and activation gradients; parameters and their gradients are the ledger's and
    left out) is at most ``budget_bytes``, at the least recompute FLOPs. torch's whole-model
    MILP (``torch.distributed._tools.sac_ilp.sac_milp``) on the module graph that
    ``ilp_utils.aggregate_stats`` builds from a MemTracker, a RuntimeEstimator and a
    SACEstimator run, each on the fake model:

    * runtimes are FLOPs (:func:`_flop_cost` as both estimators' per-op hook): the
      RuntimeEstimator's own modes need CUDA (see the module docstring);
    * the MILP may checkpoint only decoder layers (``ac_units``: they are what
      :meth:`SACPolicy.apply` checkpoints) and gets parameter and gradient bytes of 0;
    * ``aggregate_stats`` reads a backward snapshot of every module it tracked, and a module
      whose output needs no gradient (the rotary embedding) has none (KeyError ``PRE_BW``), and
      the RuntimeEstimator's module order holds ``Func`` entries that are no module (the
      graph's ``parse_module_info`` asserts the counts equal): both are left out first;
    * the MILP returns, per chosen layer, the share r of its op-output bytes to discard; torch's
      per-layer ILP (``get_optimal_checkpointing_policy_per_module``) then picks that layer's
      ops under the budget 1 - r, as torch's SAC composes them (:func:`_ilp`, :func:`_closure`).

    torch's MILP bounds the memory at each module without the recompute of the layer being
    back-propagated, so the traced peak of the policy lands above the budget by about one
    layer's recomputed bytes (3-6% on a 4-layer Llama, tests/test_sac.py); the estimate reports
    the traced peak.

    ``max_layers`` None builds every layer (the MILP chooses among all of them; time grows with
    the layers). Needs pulp and pwlf (the ``sac`` extra). Raises ValueError on a budget that is
    not a positive number of bytes, TraceUnavailable when a package is missing, the model
    cannot be built or run on fake tensors, or the MILP finds no policy within the budget (the
    message gives the model's activation peak without recompute)."""
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
        raise ValueError(f"SAC whole-model budget must be a positive number of bytes, got {budget_bytes!r}")
    import importlib.util

    missing = [p for p in MILP_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        from advisor.install import extra_command

        raise TraceUnavailable(f"SAC with a whole-model budget runs torch's MILP, which needs "
                               f"{' and '.join(missing)}: {extra_command('sac')}")
    t0 = time.perf_counter()
    full = build_config(hf_config, dropout=dropout, source=source)
    L = int(full.num_hidden_layers)
    n = L if max_layers is None else min(L, max_layers)
    torch, mode, model, ids, cfg = _fake_model(hf_config, seq_len, micro_batch, dtype, attention, n, dropout, source)
    from torch.distributed._tools.ilp_utils import aggregate_stats, parse_module_info
    from torch.distributed._tools.mem_tracker import MemTracker, _ModState
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    from torch.distributed._tools.sac_estimator import SACEstimator
    from torch.distributed._tools.sac_ilp import sac_milp

    from advisor.engine.trace import _decoder_layers

    cost = _flop_cost()
    mt = MemTracker()
    mt.track_external(model, ids)
    rt = RuntimeEstimator()
    rt._estimate, rt._estimate_mode_type = cost, "flops (advisor)"
    est = SACEstimator()
    est._estimate_runtime = cost

    def step(ctx):
        with contextlib.redirect_stdout(io.StringIO()), mode, ctx, _real_mask_skip(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            if ctx is not est:  # SACEstimator records the forward; its backward runs outside it
                loss.backward()
        if ctx is est:
            with mode, warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                loss.backward()

    try:
        for ctx in (mt, rt, est):
            step(ctx)
        for m in [m for m, st in mt.memory_tracking.items()
                  if not st.snapshots.get(_ModState.PRE_BW) or not st.snapshots.get(_ModState.PEAK_BW)]:
            del mt.memory_tracking[m]  # no backward (the rotary embedding): aggregate_stats cannot read it
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = aggregate_stats(model, mt, rt, est, torch.device("cpu"))
    except Exception as e:
        raise TraceUnavailable(f"{source}: torch's SAC estimators on {cfg.model_type} failed: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
    keep = {st["fqn"] for st in info["mod_stats"]}
    for key in info["mod_order"]:
        info["mod_order"][key] = [f for f in info["mod_order"][key] if f in keep]  # the "Func" entries
    graph = parse_module_info(info)
    for node in graph.nodes:  # parameters and their gradients: the ledger's (ZeRO partitions them)
        node["param_per_module"] = node["grad_per_module"] = node["grad_total"] = 0
    peak_none = max(node["act_total"] + node["act_grad_per_module"] for node in graph.nodes)
    names = {id(m): nm for nm, m in model.named_modules()}
    root = type(model).__name__
    units = [f"{root}.{names[id(layer)]}" for layer in _decoder_layers(model)]
    if not units:
        raise TraceUnavailable(f"{cfg.model_type}: no decoder layers found for SAC")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("torch.distributed._tools.sac_ilp").setLevel(logging.CRITICAL)
        decisions, _, bound = sac_milp(graph, memory_budget=budget_bytes / 2**30, ac_units=units)
    if bound < 0:
        from advisor.units import human

        raise TraceUnavailable(f"SAC: torch's whole-model MILP found no policy within {human(budget_bytes)} of "
                               f"activations ({cfg.model_type}, {n} layers, seq {seq_len}, micro-batch {micro_batch}; "
                               f"without recompute the peak is {human(peak_none)})")
    layers: list[LayerPolicy] = []
    closure = False
    for layer, fqn in zip(_decoder_layers(model), units):
        stats = est.sac_mod_stats.get(fqn)
        if stats is None:
            raise TraceUnavailable(f"SACEstimator recorded no ops for {fqn}")
        r = decisions.get(fqn)
        if r is None:
            save = [1] * len(stats.func_names)
        else:
            save = _ilp(stats, max(0.0, 1.0 - float(r)))
            save, dropped = _closure(stats, save)
            closure = closure or bool(dropped)
        layers.append(LayerPolicy(module=names[id(layer)], ops=list(stats.func_names), save=save,
                                  op_bytes=[int(m) for m in stats.memory], op_flops=[float(x) for x in stats.runtimes],
                                  checkpointed=r is not None))
    notes = ["recompute cost counted in FLOPs (torch.utils.flop_counter); elementwise ops count as free",
             f"torch's whole-model MILP (sac_milp) checkpoints {len(decisions)} of {n} layers"]
    if closure:
        notes.append("in-place and random op groups are recomputed whole (a cached tensor mutated later fails "
                     "torch's SAC check)")
    if n < L:
        notes.append(f"built {n} of {L} layers: the budget is for those")
    root_stats = est.sac_mod_stats.get(root)
    model_flops = float(sum(root_stats.runtimes)) if root_stats else sum(lp.forward_flops for lp in layers)
    return SACPolicy(model_type=str(cfg.model_type), budget=budget_bytes / peak_none if peak_none else 1.0,
                     solver="milp", layers=layers, layers_total=n, model_forward_flops=model_flops,
                     seconds=round(time.perf_counter() - t0, 3), notes=notes, scope="model",
                     budget_bytes=int(budget_bytes), discard={k.removeprefix(root + "."): float(v)
                                                              for k, v in decisions.items()})


def context_fn(layer: LayerPolicy):
    """A ``context_fn`` for ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` that
    applies ``layer``'s decisions through ``create_selective_checkpoint_contexts``: the n-th
    counted op of the checkpointed forward gets decision n (ops in SACEstimator's
    ``OPS_TO_ALWAYS_SKIP`` are recomputed and not counted). Raises SACMismatch when an op's
    name differs from the estimator's at that position or there are more ops."""
    from torch.distributed._tools.sac_estimator import OPS_TO_ALWAYS_SKIP
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def make():
        pos = [0]

        def policy(ctx, func, *args, **kwargs):
            if func in OPS_TO_ALWAYS_SKIP:
                return CheckpointPolicy.PREFER_RECOMPUTE
            if ctx.is_recompute:  # torch 2.13 no longer asks in recompute; kept for older ones
                return CheckpointPolicy.PREFER_RECOMPUTE
            i = pos[0]
            pos[0] += 1
            name = func._overloadpacket.__name__
            if i >= len(layer.ops) or layer.ops[i] != name:
                want = layer.ops[i] if i < len(layer.ops) else "(end of layer)"
                raise SACMismatch(f"SAC policy of {layer.module}: op {i} is {name}, the estimator saw {want}")
            return CheckpointPolicy.MUST_SAVE if layer.save[i] else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return make
