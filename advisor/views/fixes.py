"""Fixes computed from the ledger for a tier that does not fit (M100): candidate changes, each
re-estimated with the same fit as the plan (:func:`advisor.views.estimate.plan_fit`: ledger,
activations, step timeline, runtime overhead rows), kept only when the whole plan then fits.

Candidates, one change each (``ds-advisor generate`` searches combinations):

* accelerator short: offload only the optimizer to host (ZeRO-1/2/3; ZeRO-2 from stage 0, where
  DeepSpeed has no optimizer offload), the optimizer to NVMe (ZeRO-3, where the config names an
  ``nvme_path`` or the hardware spec a node-local NVMe tier: :func:`nvme_path_for`), each higher ZeRO stage (never from stage 3), the parameters to host (ZeRO-3),
  a smaller micro-batch (the largest at most half of ``--micro-batch`` when given, else of the
  config's, that divides micro x accumulation) with the accumulation that keeps the global batch
  (micro 3 x 1 becomes 1 x 3; :func:`_smaller_micro_batch`); under the HF Trainer (``--hf``, or
  an accelerate file) the batch keys are its --per-device-train-batch-size and
  --gradient-accumulation-steps arguments, with the --set as well where the written config holds
  a value (either alone the Trainer refuses: H001), activation
  checkpointing of every layer (when activations are estimated and none are checkpointed), and
  another node's worth of data-parallel ranks (``--world-size``; not at ZeRO-0, where sharding
  nothing changes nothing), with the gradient accumulation divided to keep the global batch
  where it divides, else saying how the global batch grows;
* host short (per node): the optimizer from host to NVMe (as above), under NVMe optimizer offload
  M002's smaller ``sub_group_size`` where the pinned swap pool is at least what it swaps
  (:func:`advisor.rules.M002_optimizer_swap_pool.swap_pool_shrink`, the rule's own computation), the
  parameters back on the accelerator or to NVMe, half the ranks per node (``--gpus-per-node``, the same world size on
  more nodes). Pinned-memory settings (``pin_memory``) are never offered: pinned or pageable,
  the bytes are host memory;
* NVMe short: none (more NVMe space per node);
* when no single change fits every tier: each pair of the single candidates (at most
  ``_MAX_SINGLES`` of them, 15 pairs; two that set the same key or flag are not a pair),
  re-estimated through the same fit; those that fit every tier are kept (``combined``).

Each candidate carries its ``--set`` strings (config changes, the syntax of
:mod:`advisor.config.overrides`, applied to the config DeepSpeed receives) and command-line
flags (launch or workload changes), its per-tier need, the bytes rank 0 moves per step over
every link (:mod:`advisor.ledger.movement`), and with a hardware spec the modelled step time
(:mod:`advisor.ledger.steptime`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from advisor.cluster.hardware import Capacity
    from advisor.cluster.overhead import OverheadSettings
    from advisor.ledger.timeline import LoadAssumption
    from advisor.plan import Plan


@dataclass
class FitCandidate:
    """One re-estimated change. ``need``: tier -> bytes (accelerator per rank, host and NVMe per
    node); ``moved_bytes``: rank 0's bytes per optimizer step over all links; ``step_time_s``:
    modelled seconds per step (None without a hardware spec or a sequence length)."""

    change: str
    set: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    #: For a config accelerate builds from an accelerate YAML's fields: the same changes as that
    #: YAML's ``deepspeed_config`` keys ("deepspeed_config.zero_stage: 3"), what the user edits;
    #: ``set`` stays what ``--set`` on the YAML applies (the DeepSpeed keys accelerate writes).
    yaml: list[str] = field(default_factory=list)
    verdict: str = "unknown"
    #: For an accelerate file: the launch fields of that YAML to edit ("num_processes: 16"), where
    #: the plain CLI would say --world-size (the estimate reads the world size from them).
    launch: list[str] = field(default_factory=list)
    #: Two single candidates applied together (offered only when no single change fits every tier).
    combined: bool = False
    #: tier -> that tier's verdict (what a tier's M100 fix judges by; ``verdict`` is the plan's)
    verdicts: dict[str, str] = field(default_factory=dict)
    need: dict[str, int] = field(default_factory=dict)
    moved_bytes: int = 0
    step_time_s: float | None = None
    #: The re-estimated plan's accelerator peak is a lower bound (FitRow.lower_bound, rule M104): at best tight.
    lower_bound: bool = False

    @property
    def how(self) -> str:
        """What a user types to try it: ``--set K=V`` strings and flags (for an accelerate YAML's
        fields, the YAML edits and the flags)."""
        if self.yaml or self.launch:
            edits = self.yaml + self.launch
            sets = [] if self.yaml else [f"--set {s}" for s in self.set]
            return " ".join(sets + [f"set {', '.join(edits)} in the accelerate YAML;"] + self.flags).rstrip(";")
        return " ".join([f"--set {s}" for s in self.set] + self.flags)

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "set": self.set, "flags": self.flags, "yaml": self.yaml, "launch": self.launch,
                "combined": self.combined, "verdict": self.verdict,
                "verdicts": self.verdicts, "need": self.need, "moved_bytes": self.moved_bytes, "step_time_s": self.step_time_s,
                "lower_bound": self.lower_bound}


def _base_dict(plan: "Plan") -> dict | None:
    """The config dict DeepSpeed receives (the HF resolution's, else the file's)."""
    if plan.hf is not None:
        return plan.hf.config
    return plan.loaded.data if plan.loaded is not None else None


def nvme_path_for(plan: "Plan", hardware: Any = None) -> str | None:
    """The folder an NVMe candidate swaps to: the config's own ``nvme_path`` (offload_param's,
    else offload_optimizer's), else the first mount point of the hardware spec's first node-local,
    read-write storage tier that is not the root filesystem (``dgx-h100``: ``/raid``); None when
    neither names one (DeepSpeed's NVMe offload needs a path: O003)."""
    z = plan.config.zero
    path = z.offload_param.nvme_path or z.offload_optimizer.nvme_path
    if path:
        return path
    for t in getattr(hardware, "storage", ()) or ():
        if t.scope == "node-local" and t.access == "read-write":
            for m in t.mounts:
                if m and m != "/":
                    return m
    return None


def _config_changes(plan: "Plan", tiers: set[str], hardware: Any = None) -> list[tuple[str, list[str]]]:
    ec = plan.config
    z = ec.zero
    st = z.stage
    oo, op = ec.offload_optimizer_effective, ec.offload_param_effective
    nvme_path = nvme_path_for(plan, hardware)
    out: list[tuple[str, list[str]]] = []
    if "accelerator" in tiers:
        if oo == "none":
            if st == 0:
                out.append(("ZeRO-2 with the optimizer offloaded to host",
                            ["zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"]))
            else:
                out.append(("offload the optimizer to host", ["zero_optimization.offload_optimizer.device=cpu"]))
        if st == 3 and oo != "nvme" and nvme_path:
            out.append(("the optimizer to NVMe", ["zero_optimization.offload_optimizer.device=nvme",
                                                  f"zero_optimization.offload_optimizer.nvme_path={nvme_path}"]))
        for s in range(st + 1, 4):
            out.append((f"ZeRO stage {s}", [f"zero_optimization.stage={s}"]))
        if st == 3 and op == "none":
            out.append(("offload the parameters to host", ["zero_optimization.offload_param.device=cpu"]))
        # the micro-batch the estimate runs: --micro-batch when given, else the one DeepSpeed runs (written or derived)
        from advisor.config.effective import batch_world_size, derive_batch, micro_batch_for
        wl_mb = plan.workload.micro_batch
        mb = micro_batch_for(ec, batch_world_size(ec, plan.cluster), wl_mb if isinstance(wl_mb, int) and wl_mb > 0 else None)[0]
        if mb > 1:
            ga = derive_batch(ec, batch_world_size(ec, plan.cluster))[2] or 1
            dp = batch_world_size(ec, plan.cluster)
            half, ga2 = _smaller_micro_batch(mb, ga)
            words = (f"micro-batch {half} with gradient accumulation {ga2} (the same global batch, "
                     f"{mb * ga * dp} sequences)" if half * ga2 == mb * ga else
                     f"micro-batch {half} (the global batch falls from {mb * ga * dp} to {half * ga2 * dp} sequences)")
            sets = [f"train_micro_batch_size_per_gpu={half}"] + ([f"gradient_accumulation_steps={ga2}"]
                                                                   if ga2 != ga else [])
            written = _trainer_written(plan)
            if written is None:
                written = plan.loaded.data if plan.loaded is not None and isinstance(plan.loaded.data, dict) else {}
            tb = written.get("train_batch_size")
            new_tb = half * ga2 * dp
            if isinstance(tb, int) and not isinstance(tb, bool) and tb != new_tb:
                # a written train_batch_size must agree (DeepSpeed _batch_assertion): under --micro-batch
                # the global batch is the one that micro-batch runs
                sets.append(f"train_batch_size={new_tb}")
            out.append((words, sets))
    if "host" in tiers:
        if st == 3 and oo == "nvme":
            # M002's change (one computation: rules.M002_optimizer_swap_pool.swap_pool_shrink): a pinned swap
            # pool of a few sub-groups, not the whole partition (swap_tensor/optimizer_utils.py:184-189)
            from advisor.rules.M002_optimizer_swap_pool import swap_pool_shrink
            sp = swap_pool_shrink(ec, plan.inventory, plan.cluster.dp_world_size)
            if sp is not None and sp["suggest"] < z.sub_group_size:
                out.append((f"sub_group_size {sp['suggest']} (a smaller pinned optimizer swap pool, M002)",
                            [f"zero_optimization.sub_group_size={sp['suggest']}"]))
        if st == 3 and oo == "cpu" and nvme_path:
            out.append(("the optimizer to NVMe", ["zero_optimization.offload_optimizer.device=nvme",
                                                            f"zero_optimization.offload_optimizer.nvme_path={nvme_path}"]))
        if st == 3 and op == "cpu":
            out.append(("the parameters back on the accelerator", ["zero_optimization.offload_param.device=none"]))
            if nvme_path:
                out.append(("the parameters to NVMe", ["zero_optimization.offload_param.device=nvme",
                                                       f"zero_optimization.offload_param.nvme_path={nvme_path}"]))
    seen: set[tuple[str, ...]] = set()  # one change for both tiers (the optimizer to NVMe) is tried once
    return [c for c in out if not (tuple(c[1]) in seen or seen.add(tuple(c[1])))]


def _smaller_micro_batch(mb: int, ga: int) -> tuple[int, int]:
    """(micro-batch, accumulation) for the smaller-micro-batch candidate: the largest micro-batch
    at most half of ``mb`` that divides the sequences a rank runs per step (``mb`` x ``ga``), with
    the accumulation that keeps them (so the global batch, micro x accumulation x data-parallel
    ranks, DeepSpeed runtime/config.py _batch_assertion, is kept: micro 3 x 1 becomes 1 x 3, not
    1 x 1). Micro-batch 1 always divides; a product too large to factor here (over 10^12) gets
    half the micro-batch and the same accumulation, and the words say how the batch changes."""
    from advisor.config.effective import largest_divisor_at_most

    per_rank, top = mb * ga, mb // 2
    best = largest_divisor_at_most(per_rank, top)
    if best is None:
        return top, ga
    return best, per_rank // best


#: DeepSpeed config key -> the accelerate YAML field accelerate writes it from (accelerate 1.15.0
#: utils/dataclasses.py DeepSpeedPlugin: plugin_to_config_mapping, the ACCELERATE_* variables
#: utils/launch.py prepare_deepspeed_cmd_env exports from the YAML's deepspeed_config).
_YAML_FIELD = {"zero_optimization.stage": "zero_stage", "gradient_accumulation_steps": "gradient_accumulation_steps",
               "zero_optimization.offload_optimizer.device": "offload_optimizer_device",
               "zero_optimization.offload_param.device": "offload_param_device",
               "zero_optimization.offload_optimizer.nvme_path": "offload_optimizer_nvme_path",
               "zero_optimization.offload_param.nvme_path": "offload_param_nvme_path"}


def _yaml_edits(plan: "Plan", shown: list[str]) -> list[str]:
    """``shown`` (--set strings) as edits of the accelerate YAML's deepspeed_config fields, for a
    config accelerate builds from them (``Plan.accelerate_fields``); [] when one has no field."""
    if not plan.accelerate_fields or not shown:
        return []
    out = []
    for x in shown:
        key, _, value = x.partition("=")
        if key not in _YAML_FIELD:
            return []
        out.append(f"deepspeed_config.{_YAML_FIELD[key]}: {value}")
    return out


def _trainer_written(plan: "Plan") -> dict | None:
    """The DeepSpeed config as written before the HF Trainer fills "auto" (the file under --hf, the
    dict accelerate starts from for an accelerate file: ``Plan.trainer_written``); None when no
    Trainer runs."""
    if plan.trainer_written is not None:
        return plan.trainer_written
    if plan.hf is not None and plan.loaded is not None and isinstance(plan.loaded.data, dict):
        return plan.loaded.data
    return None


#: Batch keys the HF Trainer fills from its arguments when the config says "auto"
#: (transformers integrations/deepspeed.py trainer_config_process: fill_match).
_TRAINER_BATCH = {"train_micro_batch_size_per_gpu": "--per-device-train-batch-size",
                  "gradient_accumulation_steps": "--gradient-accumulation-steps"}


def _trainer_flags(plan: "Plan", sets: list[str]) -> tuple[list[str], list[str]]:
    """(--set strings, flags) a user types for ``sets`` (applied to the config DeepSpeed receives).
    Under the HF Trainer (``--hf``, or an accelerate file) a batch key is the Trainer's argument
    (transformers trainer_config_process fill_match): where the written config says "auto" the
    flag alone sets it; where it holds a value, the --set and the flag with the same value (a
    --set alone disagrees with the Trainer's argument, a flag alone with the config: H001)."""
    written = _trainer_written(plan)
    if written is None:
        return list(sets), []
    shown, flags = [], []
    for x in sets:
        key, _, value = x.partition("=")
        if key in _TRAINER_BATCH:
            flags.append(f"{_TRAINER_BATCH[key]} {value}")
            if written.get(key) != "auto":
                shown.append(x)
        else:
            shown.append(x)
    return shown, flags


def _global_batch_at(plan: "Plan", words: str, dp2: int) -> tuple[str, list[str], list[str], list[str]]:
    """(words, internal --set strings, shown --set strings, flags) for running ``plan`` on ``dp2``
    data-parallel ranks. The global batch (train_batch_size = micro-batch x accumulation x
    data-parallel ranks, DeepSpeed runtime/config.py _batch_assertion) is kept by dividing the
    gradient accumulation when it divides; else the words say how it grows (the HF Trainer fills
    train_batch_size again at the new world size, trainer_config_process; a fixed one DeepSpeed
    then refuses, and the candidate is dropped)."""
    from advisor.config.effective import batch_world_size, derive_batch, keep_train_batch

    dp = batch_world_size(plan.config, plan.cluster)
    tb, mb, ga, _ = derive_batch(plan.config, dp)
    if not (tb and mb and ga):
        return words, [], [], []
    kept = keep_train_batch(mb * ga * dp, dp2, micro=mb)
    if kept is not None and kept[0] == mb:  # the micro-batch kept: (ga x dp) / dp2 integral
        ga2 = kept[1]
        sets = [f"gradient_accumulation_steps={ga2}"]
        shown, flags = _trainer_flags(plan, sets)
        # one change in two parts: "with", never a comma (a fix's "tried:" list is comma-separated)
        return (f"{words} with gradient accumulation {ga} -> {ga2} (the same global batch, {tb} sequences)",
                sets, shown, flags)
    tb2 = mb * ga * dp2
    written = _trainer_written(plan)
    sets = [f"train_batch_size={tb2}"] if written is not None and written.get("train_batch_size", "auto") == "auto" \
        else []
    return (f"{words} (the global batch grows from {tb} to {tb2} sequences: gradient accumulation {ga} does "
            f"not split over {dp2} ranks)", sets, [], [])


def _accelerate(plan: "Plan") -> bool:
    """The config is one an accelerate file launches (its world size is the YAML's num_processes,
    over num_machines nodes: accelerate commands/launch.py)."""
    return plan.accelerate_fields or plan.trainer_written is not None


def _launch_changes(plan: "Plan", tiers: set[str], has_activations: bool,
                    hf: bool = False) -> list[tuple[str, list[str], Any, Any]]:
    """(words, flags, cluster, workload) for changes outside the config. Under the HF Trainer
    (``hf``, or an accelerate file) checkpointing is the Trainer's ``--gradient_checkpointing``
    argument (transformers TrainingArguments.gradient_checkpointing; it never reads the config's
    activation_checkpointing): the words name it, the flag is how this tool re-estimates it."""
    cl, wl = plan.cluster, plan.workload
    out = []
    if "accelerator" in tiers:
        if has_activations and wl.checkpointing == "none":
            trainer = hf or plan.hf is not None or _trainer_written(plan) is not None
            words = ("activation checkpointing of every layer (pass --gradient_checkpointing to the Trainer; "
                     "--checkpointing full re-estimates it)" if trainer else "activation checkpointing of every layer")
            out.append((words, ["--checkpointing full"], cl,
                        replace(wl, checkpointing="full")))
        if plan.config.zero.stage > 0:
            add = cl.gpus_per_node or cl.world_size
            w = cl.world_size + add
            from advisor.config.validation import MAX_WORLD_SIZE
            if w <= MAX_WORLD_SIZE:
                if _accelerate(plan):  # the YAML's num_processes / num_machines are the world (accelerate launch)
                    m = w // add
                    out.append((f"{add} more data-parallel ranks (another node: num_processes {w}, num_machines {m})",
                                [f"num_processes: {w}", f"num_machines: {m}"], replace(cl, world_size=w), wl))
                else:
                    out.append((f"{add} more data-parallel ranks (another node)", [f"--world-size {w}"],
                                replace(cl, world_size=w), wl))
    if "host" in tiers and cl.gpus_per_node and cl.gpus_per_node > 1:
        g = cl.gpus_per_node // 2
        if _accelerate(plan) and cl.world_size % g == 0:  # the launch's ranks per node: num_processes / num_machines
            out.append((f"{g} ranks per node (the same ranks on more nodes: num_machines {cl.world_size // g})",
                        [f"num_machines: {cl.world_size // g}"], replace(cl, gpus_per_node=g), wl))
        else:
            out.append((f"{g} ranks per node (the same ranks on more nodes)", [f"--gpus-per-node {g}"],
                        replace(cl, gpus_per_node=g), wl))
    return out


def fit_candidates(plan: "Plan", capacity: "Capacity", overhead: "OverheadSettings", load: "LoadAssumption",
                   tiers: set[str], fit: Callable[..., Any], has_activations: bool, hardware: Any = None,
                   hf: bool = False, activations: Callable[..., Any] | None = None) -> list[FitCandidate]:
    """Every candidate for the short ``tiers`` ("accelerator", "host", "nvme"), re-estimated
    (each with its plan's verdict and every tier's), fastest modelled step first with a hardware
    spec, else the fewest bytes moved. ``fit`` is :func:`advisor.views.estimate.plan_fit` (passed
    in: that module calls this one; ``activations`` its :func:`advisor.views.estimate.activations_for`, which
    lets a pair whose activations alone overflow the accelerator be dropped before its ledger:
    :func:`_surely_over`); ``has_activations``: the plan's activations are estimated
    (activation checkpointing is then a candidate). A candidate DeepSpeed would refuse
    (:func:`advisor.ledger.state.unsupported_reason`, or a batch triple it asserts on where the
    plan's own is consistent) is left out, and so is one whose config, on its cluster, has an error
    finding from lint's schema and rules that the plan's own config lacks (:func:`_lint_errors`: G001
    for ZeRO-2/3 under pipeline parallelism, single or paired). Never raises for a plan that
    :func:`advisor.views.estimate.plan_fit` accepted."""
    from advisor.config.effective import batch_world_size, derive_batch, effective_config, implied_micro_batch
    from advisor.config.overrides import apply_overrides
    from advisor.ledger.state import unsupported_reason

    batch_ok = derive_batch(plan.config, batch_world_size(plan.config, plan.cluster))[3] is None
    base = _base_dict(plan)
    # lint's own error findings on the plan's config: a candidate is refused for an error it adds
    base_errors = _lint_errors(plan, base, plan.cluster) if base is not None else frozenset()

    def refused(ec, cluster, raw=None) -> bool:  # DeepSpeed would not start it (or lint says so): not a way out
        return (unsupported_reason(ec, cluster.dp_world_size) is not None
                or (batch_ok and derive_batch(ec, batch_world_size(ec, cluster))[3] is not None)
                or (raw is not None and bool(_lint_errors(plan, raw, cluster) - base_errors)))

    if plan.hf is not None:  # the Trainer's own optimizer where the config has no optimizer block
        from advisor.config.hf import trainer_effective_config

        def effective_config(raw):  # noqa: F811
            return trainer_effective_config(raw, plan.hf.trainer_args)
    # one change each: (candidate, internal --set strings, cluster, workload)
    singles: list[tuple[FitCandidate, list[str], Any, Any]] = []
    if base is not None:
        for words, sets in _config_changes(plan, tiers, hardware):
            raw = apply_overrides(base, sets)
            ec = effective_config(raw)
            if refused(ec, plan.cluster, raw):
                continue
            # the candidate's own workload: the micro-batch the plan was estimated at (estimate passes its
            # resolved_plan), or the new config's when the change sets it
            mb = ec.train_micro_batch_size_per_gpu if any(x.startswith("train_micro_batch_size_per_gpu=")
                                                          for x in sets) else plan.workload.micro_batch
            shown, flags = _trainer_flags(plan, sets)
            wl_mb = plan.workload.micro_batch
            if any(x.startswith("train_micro_batch_size_per_gpu=") for x in sets) and isinstance(wl_mb, int) \
                    and wl_mb != implied_micro_batch(plan.config, batch_world_size(plan.config, plan.cluster)):
                flags = flags + [f"--micro-batch {mb}"]  # --micro-batch was given: it would override the config's
            singles.append((FitCandidate(words, set=shown, flags=flags, yaml=_yaml_edits(plan, shown)), list(sets),
                            plan.cluster, replace(plan.workload, micro_batch=mb)))
    for words, flags, cl, wl in _launch_changes(plan, tiers, has_activations, hf):
        launch = [x for x in flags if not x.startswith("--")]
        flags = [x for x in flags if x.startswith("--")]
        ec, sets, shown, raw = plan.config, [], [], base
        if base is not None and cl.dp_world_size != plan.cluster.dp_world_size:
            words, sets, shown, more = _global_batch_at(plan, words, cl.dp_world_size)
            flags = flags + more
            if sets:
                raw = apply_overrides(base, sets)
                ec = effective_config(raw)
        if refused(ec, cl, raw):
            continue
        singles.append((FitCandidate(words, set=shown, flags=flags, yaml=_yaml_edits(plan, shown), launch=launch),
                        list(sets), cl, replace(wl)))

    ledgers = _LedgerCache(plan) if REUSE else None

    def trial(sets: list[str], cl: Any, wl: Any) -> "Plan | None":
        raw = apply_overrides(base, sets) if sets else base
        ec = effective_config(raw) if sets else plan.config
        if (sets or cl != plan.cluster) and refused(ec, cl, raw):
            return None
        p = replace(plan, config=ec, written=None if sets else plan.written, cluster=cl, workload=replace(wl),
                    derived={})
        if ledgers is not None:
            ledgers.lend(p)
        return p

    def judged(cand: FitCandidate, p: "Plan", pair: bool = False) -> FitCandidate:
        pf = fit(p, _capacity_for(p, capacity, hardware), overhead, load=_load_for(load, p, plan), hf=hf)
        if ledgers is not None:
            ledgers.keep(p)
        cand.verdict = pf.verdict
        cand.need = {r.tier: r.need for r in pf.rows}
        cand.verdicts = {r.tier: r.verdict for r in pf.rows}
        cand.lower_bound = any(r.lower_bound for r in pf.rows if r.tier == "accelerator")  # M104: a floor
        if not (pair and REUSE) or cand.verdict == "fits":  # a pair is offered only when it fits
            cand.moved_bytes, cand.step_time_s = _costs(pf.plan or p, hardware, pf.activations)
        return cand

    def order(c: FitCandidate) -> tuple:
        return (c.step_time_s if c.step_time_s is not None else float("inf"), c.moved_bytes)

    out = []
    for cand, sets, cl, wl in singles:
        p = trial(sets, cl, wl)
        if p is not None:
            out.append(judged(cand, p))
    out.sort(key=order)
    if out and not any(c.verdict == "fits" for c in out):
        # no single change fits every tier: each pair of them (at most ~15 with the few singles),
        # each re-estimated through the same fit; the pairs that fit every tier, cheapest first
        pairs = []
        import itertools
        # the singles that fit most of the short tiers are paired first (a single that fits none
        # of them rarely makes a pair fit); at most _MAX_SINGLES of them
        judged_ids = {id(c) for c in out}
        ranked = sorted((x for x in singles if id(x[0]) in judged_ids),
                        key=lambda x: -sum(x[0].verdicts.get(t) == "fits" for t in tiers))
        for (c1, s1, cl1, wl1), (c2, s2, cl2, wl2) in itertools.combinations(ranked[:_MAX_SINGLES], 2):
            keys1, keys2 = {x.partition("=")[0] for x in s1}, {x.partition("=")[0] for x in s2}
            flags1, flags2 = {f.split()[0] for f in c1.flags}, {f.split()[0] for f in c2.flags}
            if keys1 & keys2 or flags1 & flags2 or (c1.launch and c2.launch):
                continue  # the same key twice: not two changes
            cl, wl = _merged(plan.cluster, cl1, cl2), _merged(plan.workload, wl1, wl2)
            if cl is None or wl is None:
                continue
            p = trial(s1 + s2, cl, wl)
            if p is None:
                continue
            if REUSE and activations is not None and _surely_over(p, _capacity_for(p, capacity, hardware), hf,
                                                                  activations):
                continue  # its accelerator row cannot fit: a pair that does not fit is not offered
            shown = c1.set + c2.set
            cand = judged(FitCandidate(f"{c1.change} and {c2.change}", set=shown, flags=c1.flags + c2.flags,
                                       yaml=_yaml_edits(plan, shown), launch=c1.launch + c2.launch,
                                       combined=True), p, pair=True)
            if cand.verdict == "fits":
                pairs.append(cand)
        pairs.sort(key=order)
        out += pairs
    return out


def _lint_errors(plan: "Plan", raw: Any, cluster: Any) -> frozenset[tuple[str, str]]:
    """(code, pointer) of every error finding lint's schema and rules
    (:func:`advisor.views.lint.lint_config`) give the config dict ``raw`` (what DeepSpeed receives)
    on ``cluster`` with ``plan``'s model: a candidate that adds one is one the tool's own lint
    refuses, e.g. G001 for ZeRO-2/3 under pipeline parallelism (DeepSpeed runtime/pipe/engine.py
    ``PipelineEngine.__init__``: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"), so
    it is never offered. Memoised per plan (``plan.derived``) by the dict's JSON and the cluster."""
    import json

    from advisor.config.loading import LoadedConfig
    from advisor.views.lint import lint_config

    if not isinstance(raw, dict):
        return frozenset()
    memo = plan.derived.setdefault("fix_lint_errors", {})
    key = (json.dumps(raw, sort_keys=True, default=str), cluster)
    if key not in memo:
        fs = lint_config(LoadedConfig(source=plan.source or "<config>", data=raw), world_size=cluster.world_size,
                         dp_world_size=cluster.dp_world_size, inventory=plan.inventory, cluster=cluster,
                         keep_refusals=True)
        memo[key] = frozenset((f.code, f.pointer) for f in fs if f.severity == "error")
    return memo[key]


#: Whether :func:`fit_candidates` reuses work across candidates (:class:`_LedgerCache`, :func:`_surely_over`,
#: a dropped pair's costs not computed). Off, every candidate is judged from scratch: the reference
#: tests/test_fix_cache_identity.py compares with, output for output (issue 21).
REUSE = True


class _LedgerCache:
    """The ledgers :func:`fit_candidates` computed, lent to the candidates with the same inputs.

    :func:`advisor.ledger.state.compute_ledger` reads the plan's effective config, its cluster (the
    ZeRO group, the model-parallel shape) and its inventory, and
    :func:`advisor.ledger.state.placement_of` the config, the inventory and the ZeRO group; neither
    reads the workload (micro-batch and sequence only size activations, checkpointing only
    recomputes them) nor the zero.Init load assumption (the timeline's load entries). Every
    candidate has the plan's inventory, so a candidate whose config and cluster are equal (by
    value, ``==`` on the dataclasses) to one already judged gets that ledger: activation
    checkpointing alone (the plan's own ledger), a pair that adds checkpointing or a micro-batch
    to a config change (the change's). At 1e5 layers a ZeRO-1 ledger under CPU offload is ~2 s of
    CPU (its per-rank reduce replay, :func:`advisor.ledger.state.zero12_offload_reduce_terms`).
    The lent ledger is the same :class:`advisor.ledger.state.Ledger` bound to the candidate's plan
    (its rank ledgers shared, which the fit only reads); ``zero12_step_groups`` (the timeline's
    per-rank step groups, from the placement and the ZeRO group) goes with it."""

    _KEYS = ("placement", "zero12_step_groups")

    def __init__(self, plan: "Plan") -> None:
        self.inventory = plan.inventory
        self.kept: list[tuple[Any, Any, dict]] = []
        if "ledger" in plan.derived:
            self.kept.append((plan.config, plan.cluster, plan.derived))

    def lend(self, p: "Plan") -> None:
        """Give ``p`` (a fresh candidate plan, empty ``derived``) a kept ledger of equal inputs."""
        if p.inventory is not self.inventory:
            return
        for ec, cl, d in self.kept:
            if ec == p.config and cl == p.cluster:
                p.derived["ledger"] = replace(d["ledger"], plan=p)
                for k in self._KEYS:
                    if k in d:
                        p.derived[k] = d[k]
                return

    def keep(self, p: "Plan") -> None:
        """Keep ``p``'s ledger (after its fit) for the candidates judged after it."""
        d = p.derived
        if p.inventory is self.inventory and "ledger" in d and not any(
                ec == p.config and cl == p.cluster for ec, cl, _ in self.kept):
            # only what is lent: the rest of ``derived`` (movement roles, ...) goes with the candidate
            self.kept.append((p.config, p.cluster, {k: d[k] for k in ("ledger", *self._KEYS) if k in d}))


def _surely_over(p: "Plan", capacity: "Capacity", hf: bool, activations_for: Callable[..., Any]) -> bool:
    """True when ``p``'s accelerator row is sure not to fit, from its activations alone (no
    ledger): the saved activations plus the loss spike, ``saved_accelerator + loss_spike``, are on
    the accelerator at every forward instant of every rank's timeline
    (:func:`advisor.ledger.timeline.role_timeline`; forward:1 is always an instant,
    :func:`advisor.ledger.timeline.instants`), beside the ledger's entries live there (bytes >= 0),
    so the tracked peak is at least that much, and the row's need adds the runtime-overhead terms
    (>= 0) to it (:func:`advisor.views.estimate.fit_rows`). Over ``capacity.accelerator``, the row
    and so the plan do not fit (:attr:`advisor.views.estimate.FitRow.verdict`). Only where
    :func:`advisor.views.estimate.plan_fit` uses these activations unchanged: one pipeline stage
    (with several, each stage's own) and formula activations (a traced estimate runs the model).
    ``activations_for`` is :func:`advisor.views.estimate.activations_for` (passed in: that module
    calls this one); the workload is copied, since it fills it in."""
    if capacity.accelerator is None or p.cluster.pipeline_parallel > 1 or p.workload.activations == "trace":
        return False
    acts = activations_for(p.config, p.inventory, p.cluster, replace(p.workload), hf=hf or p.hf is not None)[0]
    return acts is not None and acts.saved_accelerator + acts.loss_spike > capacity.accelerator


def _load_for(load: "LoadAssumption", p: "Plan", plan: "Plan") -> "LoadAssumption":
    """The load assumption a candidate ``p`` runs with when it changes ``plan``'s ZeRO stage:
    resolved again for the new stage from the options ``load`` was resolved from
    (``load.options``, :class:`advisor.ledger.timeline.LoadOptions`, with
    :func:`advisor.ledger.timeline.resolve_load`): zero.Init assumed, or the HF Trainer's choice,
    exactly at ZeRO-3 (the Trainer's ``is_zero3()`` of the candidate's stage, which ``--set`` writes
    as a number); a ``--zero-init`` / ``--no-zero-init`` flag, ``--load-dtype`` and
    ``--low-cpu-mem-usage`` kept as given; so a fix that moves to ZeRO-3 is judged as ``estimate
    --set zero_optimization.stage=3`` judges it. Under an accelerate file whose ``zero3_init_flag``
    chose zero.Init for the written stage, ``load`` as it is (not re-derived here). ``load`` itself
    for an unchanged stage."""
    if load is None or p.config.zero.stage == plan.config.zero.stage:
        return load
    o = load.options
    if o.accelerate:
        return load  # accelerate's zero3_init_flag as resolved for the written stage: not re-derived here
    from advisor.ledger.timeline import resolve_load

    return resolve_load(p.config, o.zero_init, o.dtype, o.low_cpu_mem_usage, hf=o.hf,
                        hf_is_zero3=(p.config.zero.stage == 3) if o.hf else None,
                        checkpoint_dtype=o.checkpoint_dtype, pipeline_build=o.pipeline_build,
                        pipeline_parallel=p.cluster.pipeline_parallel)


#: At most this many single candidates are paired (so at most 15 pairs are re-estimated), those
#: that fit the most short tiers first.
_MAX_SINGLES = 6


def _merged(orig: Any, a: Any, b: Any) -> Any:
    """``orig`` (a Cluster or a Workload dataclass) with the fields ``a`` and ``b`` each change from
    it; None when both change the same field to different values."""
    from dataclasses import fields

    changes: dict[str, Any] = {}
    for x in (a, b):
        for f in fields(orig):
            v = getattr(x, f.name)
            if v != getattr(orig, f.name):
                if f.name in changes and changes[f.name] != v:
                    return None
                changes[f.name] = v
    return replace(orig, **changes)


def _capacity_for(plan: "Plan", capacity: "Capacity", hardware: Any) -> "Capacity":
    """``capacity`` with the NVMe space of the hardware tier holding ``plan``'s nvme_path when none
    was known (a candidate that moves state to NVMe; the same rule as the CLI's:
    ``Hardware.capacity`` of the config's path, advisor/cli.py)."""
    if hardware is None or capacity.nvme is not None:
        return capacity
    z = plan.config.zero
    hc = hardware.capacity(z.offload_optimizer.nvme_path or z.offload_param.nvme_path)
    return replace(capacity, nvme=hc.nvme, nvme_shared=hc.nvme_shared) if hc.nvme is not None else capacity


def _costs(plan: "Plan", hardware: Any, acts: Any) -> tuple[int, float | None]:
    """(rank 0's bytes moved per step over all links, modelled step seconds or None), as estimate
    computes them for the candidate's config run directly (:func:`advisor.views.estimate.estimate`):
    the movement ledger of :func:`advisor.ledger.movement.movement_plan` (under tensor / pipeline
    parallelism the ledger shards the model per stage itself, under expert parallelism alone the
    rank's experts), and the step time from :func:`advisor.ledger.steptime.step_movements` (the slowest
    stage's movements under pipeline parallelism, rank 0's otherwise). Under model parallelism this
    returned 0 bytes and no step time before, so every PP candidate showed "0.00 GiB moved"."""
    from advisor.ledger.movement import movement_plan, movement_roles

    mp = movement_plan(plan)
    roles = movement_roles(mp, hardware, activations=acts)
    moved = sum(m.bytes for m in roles[0][1]) if roles else 0
    seq = plan.workload.seq_len or (plan.inventory.meta or {}).get("max_seq_len")
    if hardware is None or not seq:
        return moved, None
    from advisor.ledger import steptime as stm
    st = stm.step_time(mp, hardware, seq_len=int(seq),
                       recompute_fraction=acts.recompute_flops_fraction if acts is not None else 0.0,
                       movements=stm.step_movements(roles, mp.cluster.pipeline_parallel))
    return moved, st.total
