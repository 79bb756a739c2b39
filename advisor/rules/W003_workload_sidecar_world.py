"""W003 workload-sidecar-world: the workload sidecar was generated for another world shape.

``generate -o ds_config.json`` writes ``ds_config.workload.json`` beside it, and records in it (``world``) the
shape it planned for: ``--nodes`` x ``--gpus-per-node`` ranks and the plan's tensor- and pipeline-parallel sizes.
The config's batch keys (``train_batch_size`` = micro-batch x accumulation x data-parallel ranks, which DeepSpeed
asserts: ``runtime/config.py`` ``DeepSpeedConfig._batch_assertion``) and the sidecar's workload (the checkpointing
chosen so that the micro-batch fits, the TP / PP sizes) were chosen for that shape. ``estimate`` and ``checkpoint``
take the recorded shape where nothing else gives one (``advisor.cluster.launch.job_shape``: a flag, accelerate's
launch, WORLD_SIZE / SLURM_NTASKS and ``--hardware`` win over it; it wins over the default of 1);
``check`` runs with the launch it is in (its environment, probes, flags). When the world it runs with is another
shape than the recorded one, the verdict is about a job generate did not plan (a warning naming both shapes). The
ZeRO partitions, the per-node host memory and the NVMe share per node all change with the shape.

Only what both sides know is compared: a run whose ranks per node are not given is compared by its world size and
parallel sizes; a sidecar written before the shape was recorded (no ``world``) is never flagged.

Anti-pattern: ``generate --nodes 1 --gpus-per-node 8 -o ds.json`` then ``check ds.json --world-size 16``.

Fix: run check / estimate with the shape the sidecar was generated for, or run ``generate`` again for this one
(``--force`` replaces the config and its sidecar).
"""

from __future__ import annotations

import os

from advisor.rules import LintContext, Rule, register


def _shape_words(s: dict, src: str = "") -> str:
    """``16 ranks (2 nodes x 8 GPUs; --world-size), tensor parallel 2 x pipeline parallel 1`` of the keys ``s``
    holds; ``src``: where the world size came from."""
    out = f"{s['world_size']:,} rank{'s' if s['world_size'] != 1 else ''}" if "world_size" in s else "ranks unknown"
    inner = []
    if "nodes" in s and "gpus_per_node" in s:
        inner.append(f"{s['nodes']:,} node{'s' if s['nodes'] != 1 else ''} x {s['gpus_per_node']:,} GPUs")
    elif "gpus_per_node" in s:
        inner.append(f"{s['gpus_per_node']:,} per node")
    if src:
        inner.append(src)
    if inner:
        out += f" ({'; '.join(inner)})"
    return out + f", tensor parallel {s.get('tensor_parallel', 1)} x pipeline parallel {s.get('pipeline_parallel', 1)}"


@register
class WorkloadSidecarWorld(Rule):
    code = "W003"
    name = "workload-sidecar-world"
    severity = "warning"

    def check(self, ctx: LintContext):
        wl = ctx.workload
        if wl is None or not getattr(wl, "sidecar", None):
            return
        made = (wl.recorded or {}).get("world")
        if not made or not ctx.world_size:
            return
        run: dict[str, int] = {"world_size": ctx.world_size}
        c = ctx.cluster
        if c is not None:
            run.update(tensor_parallel=c.tensor_parallel, pipeline_parallel=c.pipeline_parallel)
            if c.gpus_per_node:
                run["gpus_per_node"] = c.gpus_per_node
                if ctx.world_size % c.gpus_per_node == 0:
                    run["nodes"] = ctx.world_size // c.gpus_per_node
        differ = [k for k in made if k in run and run[k] != made[k]]
        if not differ:
            return
        side = os.path.basename(wl.sidecar)
        src = ctx.world_size_source or ""
        flags = (f"--world-size {made['world_size']}" if "world_size" in made else "") + (
            f" --gpus-per-node {made['gpus_per_node']}" if "gpus_per_node" in made else "")
        for k in ("tensor_parallel", "pipeline_parallel"):
            if k in made and k in differ:
                flags += f" --{k.replace('_', '-')} {made[k]}"
        regen = ""
        if "gpus_per_node" in run and "nodes" in run:
            regen = f" (--nodes {run['nodes']} --gpus-per-node {run['gpus_per_node']})"
        yield self.finding(
            "", f"{side} was generated for {_shape_words(made)}; this run has {_shape_words(run, src)}: the "
                "sidecar's workload and the config's batch were planned for the other shape, and this run's verdict "
                "is about a job generate did not plan",
            f"run with the shape it was generated for ({flags.strip()}), or run generate again for this one{regen}, "
            f"--force replacing the config and {side}",
            sidecar=wl.sidecar, differ=differ, world={"sidecar": dict(made), "run": run})
