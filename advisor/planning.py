"""build_plan: the one :class:`advisor.plan.Plan` of a command, from the loaded config.

Kept apart from :mod:`advisor.plan` (the plan's data types) because it runs the HF Trainer /
accelerate resolution (:mod:`advisor.config.hf`), which emits findings through the rules
registry: the rules can then name the plan's types without an import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.config.effective import effective_config
from advisor.model.inventory import Inventory, layernorm_names
from advisor.plan import Cluster, HFResolution, Plan, Workload

if TYPE_CHECKING:
    from advisor.config.loading import LoadedConfig


def refuse_hf_expert_parallel(source: str, ep: int, via: str = "--hf") -> None:
    """Raise (exit 2, one line) for ``--expert-parallel ep`` > 1 with the HF Trainer (``--hf`` / Trainer
    arguments) when the config does not turn on DeepSpeed's AutoEP: ``ep_size`` exists only on DeepSpeed's own
    ``deepspeed.moe.layer.MoE`` (``moe/layer.py`` MoE l.63-72), which no transformers model holds, so the Trainer's
    model runs every expert on every rank (every rank holds N x D, not the experts / ep the expert-parallel plan
    counts); AutoEP (``expert_parallel.enabled``, :attr:`advisor.config.effective.EffectiveConfig.autoep_enabled`)
    is what splits a transformers model's experts (``runtime/engine.py`` _configure_expert_parallel l.816-821).
    ``via``: what runs the transformers model (``--hf``, or an accelerate launch, whose model is one too)."""
    from advisor.errors import AdvisorError
    raise AdvisorError(
        f"{source}: --expert-parallel {ep} with {via}: a transformers model has no DeepSpeed MoE layer (the only one "
        "with an ep_size, deepspeed/moe/layer.py), so every rank would hold all experts; turn on DeepSpeed's AutoEP "
        f"in the config (\"expert_parallel\": {{\"enabled\": true, \"autoep_size\": {ep}}}) or drop --expert-parallel")


def config_parallel(cluster: Cluster, written, source: str) -> Cluster:
    """``cluster`` with the tensor- / expert-parallel sizes the config itself states, and their source: the one
    place the config's AutoTP / AutoEP size becomes the job's TP / EP. DeepSpeed shards the model by the config,
    whatever our flags say: AutoTP at ``tensor_parallel.autotp_size`` when it is > 1 (``runtime/engine.py``
    l.595-596 ``_configure_tensor_parallel`` -> ``_apply_autotp_partitioning`` l.1009; the TP mesh is
    (world / autotp_size, autotp_size), l.958 -> ``utils/groups.py`` _init_tp_mesh_device l.212-220), AutoEP at
    ``expert_parallel.autoep_size`` (default 1) when ``expert_parallel.enabled`` (l.821-828; keys
    ``module_inject/auto_ep_config.py`` parse_autoep_config l.48-50). With no flag (``--tensor-parallel`` /
    ``--expert-parallel`` 1, which is also their default) the config's size is taken; a flag > 1 that differs is a
    contradiction DeepSpeed resolves by the config (the flag is ours): exit 2, one line naming both. A config size
    that does not divide the world (with PP x SP) is exit 2 too: torch's DeviceMesh refuses a mesh whose shape is
    not the world (``utils/groups.py`` l.220). ``written``: the file's
    :class:`advisor.config.effective.EffectiveConfig`."""
    from dataclasses import replace

    from advisor.errors import AdvisorError
    changes: dict = {}
    for flag, key, size, have in (
            ("--tensor-parallel", "tensor_parallel.autotp_size", written.autotp_size if written.autotp else None,
             cluster.tensor_parallel),
            ("--expert-parallel", "expert_parallel.autoep_size", written.autoep_size if written.autoep_enabled else None,
             cluster.expert_parallel)):
        if size is None or size == have:
            continue
        if have > 1:
            raise AdvisorError(f"{source}: {key}: {flag} {have} disagrees with the config's {key} {size}: DeepSpeed "
                               f"shards by the config (runtime/engine.py), so the job runs at {size}; drop {flag} "
                               f"or make them agree")
        name = "tensor_parallel" if flag == "--tensor-parallel" else "expert_parallel"
        changes[name], changes[name + "_source"] = size, key
    if not changes:
        return cluster
    out = replace(cluster, **changes)
    model_par = out.tensor_parallel * out.pipeline_parallel * max(1, out.sequence_parallel)
    if out.tensor_parallel_source and out.world_size % model_par:
        raise AdvisorError(f"{source}: tensor_parallel.autotp_size: {out.tensor_parallel} (x pipeline x sequence "
                           f"parallel = {model_par}) does not divide the world size {out.world_size}: DeepSpeed's "
                           "AutoTP mesh (world / autotp_size, autotp_size) cannot be built (utils/groups.py "
                           "_init_tp_mesh_device l.212-220)")
    return out


def build_plan(loaded: "LoadedConfig", inventory: Inventory, cluster: Cluster | None = None, *,
               workload: Workload | None = None, hf: bool = False, trainer_args: dict | None = None,
               hidden_size: int | None = None, hf_model: bool = False) -> Plan:
    """The :class:`Plan` of ``loaded`` on ``inventory`` and ``cluster`` (default one rank).

    With ``hf`` (or any ``trainer_args``: :class:`advisor.config.hf.TrainerArgs` fields) the
    config is first resolved as the HF Trainer does it, once
    (:func:`advisor.config.hf.resolve_for_estimate`: "auto" batch sizes, precision, bucket
    sizes from the model's hidden size or ``hidden_size``); ``Plan.config`` is then the
    effective config of the resolved dict, ``Plan.written`` that of the file; with no optimizer block its
    ``optimizer.client`` is the Trainer's own (:func:`advisor.config.hf.trainer_optimizer`) and ``Plan.inventory`` is
    ``inventory`` in the Trainer's two param groups, decay / no-decay (:func:`advisor.config.hf.trainer_param_groups`;
    the one place they are made). Never raises on
    bad values (they fall back to DeepSpeed's defaults with a note, see
    :func:`advisor.config.effective.effective_config`). The plan's cluster takes the config's AutoTP / AutoEP
    size (:func:`config_parallel`; exit 2 when a flag disagrees). ``hf_model``: the model is a transformers one
    though ``hf`` is off (an accelerate launch, whose config is resolved already): ``--expert-parallel`` without
    AutoEP is refused as under ``hf`` (:func:`refuse_hf_expert_parallel`)."""
    written = effective_config(loaded.data)
    cluster = config_parallel(cluster or Cluster(), written, loaded.source)
    if (hf or trainer_args or hf_model) and cluster.expert_parallel > 1 and not written.autoep_enabled:
        refuse_hf_expert_parallel(loaded.source, cluster.expert_parallel,
                                  "--hf" if hf or trainer_args else "an accelerate launch")
    resolution = None
    config = written
    if hf or trainer_args:
        from advisor.config.hf import resolve_for_estimate

        t = dict(trainer_args or {})
        h = t.pop("hidden_size", None) or hidden_size
        resolved, found = resolve_for_estimate(loaded.data, t, inventory, cluster.world_size, hidden_size=h)
        resolution = HFResolution(resolved, found, trainer_args_given=trainer_args is not None, trainer_args=t)
        # no optimizer block: the Trainer builds torch's AdamW and passes it to deepspeed.initialize as the
        # client optimizer (advisor.config.hf.trainer_optimizer), not DeepSpeed's FusedAdam
        from advisor.config.hf import trainer_effective_config, trainer_param_groups
        config = trainer_effective_config(resolved, t)
        # and, with it, its two param groups (decay / no-decay): ZeRO flattens, pads and steps each apart
        from advisor.model.parallel import layer_repeat
        groups = trainer_param_groups(resolved, inventory.tensors, repeat=lambda: layer_repeat(inventory),
                                      layernorm=layernorm_names(inventory))
        if groups is not None:
            inventory = inventory.regrouped(groups)
        elif config.optimizer.client_note:  # the inventory's own groups, kept (trainer_param_groups)
            from advisor.config.hf import TRAINER_GROUPS_WORDS
            config.optimizer.client_note = config.optimizer.client_note.replace(
                TRAINER_GROUPS_WORDS, "the inventory's own param groups")
    from advisor.config.versions import apply_release_defaults
    apply_release_defaults(written, loaded.data)  # the target release's defaults the ledger reads
    if config is not written:
        apply_release_defaults(config, resolution.config if resolution else loaded.data)
    return Plan(config=config, inventory=inventory, cluster=cluster, workload=workload or Workload(),
                written=written if resolution is not None else None, hf=resolution, loaded=loaded)
