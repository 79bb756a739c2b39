"""The launch shape as the launchers set it in the environment.

torchrun and the deepspeed launcher set WORLD_SIZE, RANK, LOCAL_WORLD_SIZE (and GROUP_RANK,
the node index); Slurm sets SLURM_NTASKS, SLURM_JOB_NUM_NODES, SLURM_NODEID,
SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE; the device plugins set CUDA_VISIBLE_DEVICES /
ROCR_VISIBLE_DEVICES. Flags beat the environment; every value says where it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from advisor.ledger.ranks import RankSet, rank_fields
from advisor.config.validation import (MAX_GPUS_PER_NODE, MAX_NODES, MAX_WORLD_SIZE, InputValueError, env_int,
                                       shown)


@dataclass(frozen=True)
class Found:
    """One discovered value and where it came from (a variable name, a flag, or a derivation)."""

    value: int
    source: str


#: Bounds of each launcher variable (inclusive): counts start at 1, indices at 0.
_BOUNDS: dict[str, tuple[int, int]] = {
    "WORLD_SIZE": (1, MAX_WORLD_SIZE), "SLURM_NTASKS": (1, MAX_WORLD_SIZE), "RANK": (0, MAX_WORLD_SIZE - 1),
    "LOCAL_WORLD_SIZE": (1, MAX_GPUS_PER_NODE), "SLURM_JOB_NUM_NODES": (1, MAX_NODES), "SLURM_NNODES": (1, MAX_NODES),
    "GROUP_RANK": (0, MAX_NODES - 1), "SLURM_NODEID": (0, MAX_NODES - 1),
}


def _int(env: Mapping[str, str], name: str, problems: list[str] | None = None) -> Found | None:
    """The launcher variable ``name`` as a bounded int (:data:`_BOUNDS`), None when unset.

    A malformed or out-of-bounds value raises InputValueError naming the variable, or, with
    ``problems``, is recorded there (one line) and treated as unset."""
    lo, hi = _BOUNDS[name]
    try:
        n = env_int(env, name, lo=lo, hi=hi)
    except InputValueError as e:
        if problems is None:
            raise
        problems.append(str(e))
        return None
    return None if n is None else Found(n, name)


def _slurm_gpus(env: Mapping[str, str], name: str, problems: list[str] | None = None) -> int | None:
    """Slurm GPU counts: "8", "gpu:8", "h100:8", "8(x2)", "gpu:h100:4"; None when unset.
    Anything else is malformed (raised, or recorded in ``problems``)."""
    v = env.get(name)
    if v is None or not str(v).strip():
        return None
    count = str(v).split(",")[0].split(":")[-1].split("(")[0].strip()
    try:
        return env_int({name: count}, name, lo=1, hi=MAX_GPUS_PER_NODE)
    except InputValueError:
        err = InputValueError(f"environment variable {name}={shown(v)}",
                              f"expected a GPU count (8, gpu:8, h100:8, 8(x2)) from 1 to {MAX_GPUS_PER_NODE}")
        if problems is None:
            raise err from None
        problems.append(str(err))
        return None


def world_size_from_env(env: Mapping[str, str] | None = None, *, gpus_per_node: Found | None = None,
                        nodes: Found | None = None) -> Found | None:
    """Total ranks: WORLD_SIZE (torchrun, deepspeed launcher), else SLURM_NTASKS, read by
    :func:`launcher_world_size` (one launcher task per node under Slurm: nodes x ranks per node) with
    ``gpus_per_node`` (default :func:`launcher_ranks_per_node`: what the launch states, never the visible
    devices) and ``nodes`` (default SLURM_JOB_NUM_NODES / SLURM_NNODES). Raises InputValueError naming the
    variable when it is set but not an integer from 1 to MAX_WORLD_SIZE (never a silent fallback to the other
    variable or to 1)."""
    env = os.environ if env is None else env
    if "WORLD_SIZE" in env or "SLURM_NTASKS" not in env:
        return _int(env, "WORLD_SIZE") or _int(env, "SLURM_NTASKS")
    g = gpus_per_node if gpus_per_node is not None else launcher_ranks_per_node(env)
    n = nodes if nodes is not None else launch_nodes_from_env(env)
    return launcher_world_size(env, g, n)


def launch_nodes_from_env(env: Mapping[str, str], problems: list[str] | None = None) -> Found | None:
    """The job's node count as Slurm states it: SLURM_JOB_NUM_NODES, else SLURM_NNODES ("Total number of
    nodes in the job's resource allocation", sbatch(1) OUTPUT ENVIRONMENT VARIABLES); None when unset. A
    malformed value raises InputValueError naming it, or with ``problems`` is recorded there and skipped."""
    return _int(env, "SLURM_JOB_NUM_NODES", problems) or _int(env, "SLURM_NNODES", problems)


#: The variables that list this process's devices (:func:`visible_devices_from_env`): what the machine
#: shows the process, not a count of ranks the launch starts.
VISIBLE_SOURCES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def launcher_world_size(env: Mapping[str, str], g: Found | None, nodes: Found | None,
                        problems: list[str] | None = None) -> Found | None:
    """The job's world size (ranks) as the launch environment states it -- the one derivation
    :func:`job_shape` (estimate, checkpoint, report) and :func:`discover_launch` (check) share, so
    one environment is one world in every command (fixd22: one torchrun per node under Slurm was
    world 2 in estimate and 16 in check). ``g``: the ranks per node the launch states (``--gpus-per-node``,
    else :func:`launcher_ranks_per_node`: LOCAL_WORLD_SIZE / SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE); a
    count of visible devices (:data:`VISIBLE_SOURCES`) is ignored here; ``nodes``: the job's nodes (a flag or
    num_machines, else SLURM_JOB_NUM_NODES / SLURM_NNODES).

    WORLD_SIZE (torchrun and the deepspeed launcher set it to every rank of the job); else
    SLURM_NTASKS -- except when SLURM_NTASKS equals the node count and the launch states more than one
    rank per node: then each Slurm task is one per-node launcher (``srun --ntasks-per-node=1 torchrun
    --nproc-per-node=G``), which starts G ranks, and the world size is nodes x G (torch 2.13.0:
    torch/distributed/elastic/agent/server/api.py, the world size is the sum of every node's
    local_world_size, l.620 / l.647). SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE count the GPUs Slurm
    allocated to the job on each node ("Number of GPUs allocated to the batch step", "Requested GPU count
    per allocated node", sbatch(1) OUTPUT ENVIRONMENT VARIABLES), not ranks, but they are the job's own
    request, and one task per node holding G of them runs G ranks (DeepSpeed and torchrun run a rank per
    device) or leaves G - 1 idle. The visible devices are neither: CUDA_VISIBLE_DEVICES on the machine that
    runs the tool lists what it sees, which no Slurm GPU request set (review fixg23: ``SLURM_NTASKS=2
    SLURM_JOB_NUM_NODES=2 CUDA_VISIBLE_DEVICES=0,...,7`` was world 16 for ``srun --ntasks-per-node=1 python
    train.py``, 2 ranks: sample_configs/zero3.json, llama-3-8b, seq 4096, train_batch_size unset, a 125.79 GiB
    accelerator peak read as 73.44 GiB). There SLURM_NTASKS stays the world, one rank
    per task (:func:`slurm_task_ranks_per_node` says so). SLURM_NTASKS_PER_NODE ("Number of tasks requested
    per node") counts tasks, 1 here, so it cannot say how many ranks a task starts. None when neither
    WORLD_SIZE nor SLURM_NTASKS is set. A malformed variable raises InputValueError naming it, or with
    ``problems`` is recorded there and skipped (check warns)."""
    ws = _int(env, "WORLD_SIZE", problems)
    if ws is not None:
        return ws
    nt = _int(env, "SLURM_NTASKS", problems)
    if g is not None and g.source in VISIBLE_SOURCES:
        g = None  # what this machine shows, not what the launch starts
    if (nt and nodes and g and nt.value == nodes.value and g.value > 1
            and nodes.value * g.value <= MAX_WORLD_SIZE):
        return Found(nodes.value * g.value, f"{nodes.source} x {g.source}"
                                            f" (SLURM_NTASKS={nt.value}: one launcher task per node)")
    return nt


def slurm_task_ranks_per_node(ws: Found | None, nodes: Found | None, stated: Found | None,
                              env: Mapping[str, str], hardware: Any = None,
                              hw_label: str | None = None) -> tuple[Found | None, str | None]:
    """(ranks per node, note) when :func:`launcher_world_size` kept SLURM_NTASKS as the world on as many
    nodes (``ws`` from SLURM_NTASKS equal to ``nodes``) and the launch states no ranks per node (``stated``
    None: no --gpus-per-node, LOCAL_WORLD_SIZE or SLURM_GPUS_*): one task per node, each one rank, so 1 rank
    per node -- before the visible devices or a spec's accelerators, which are no ranks. The note (estimate
    prints it, check warns) says so where those devices suggest more (``CUDA_VISIBLE_DEVICES`` lists 8, or the
    ``--hardware`` spec holds 8 per node) and names the flag for a per-node launcher. (None, None) otherwise.
    Shared by :func:`job_shape` and :func:`discover_launch`."""
    if stated is not None or ws is None or ws.source != "SLURM_NTASKS" or nodes is None or ws.value != nodes.value:
        return None, None
    g = Found(1, f"SLURM_NTASKS={ws.value} on {nodes.source}={nodes.value}: one task per node")
    hints: list[tuple[int, str]] = []
    vis = visible_devices_from_env(env)
    if vis and 1 < len(vis[0]) <= MAX_GPUS_PER_NODE:
        hints.append((len(vis[0]), f"{vis[1]} lists {len(vis[0])} devices"))
    if hardware is not None and hardware.node_accelerators and hardware.accelerators_per_node > 1:
        hints.append((hardware.accelerators_per_node,
                      f"{hw_label or '--hardware'} holds {hardware.accelerators_per_node} accelerators per node"))
    if not hints:
        return g, None
    k = hints[0][0]
    return g, (f"world size {ws.value} from SLURM_NTASKS: {ws.value} Slurm tasks on {nodes.value} nodes "
               f"({nodes.source}), one rank each; {' and '.join(h for _, h in hints)}, but devices are not ranks "
               f"and nothing in the launch says a task starts more (LOCAL_WORLD_SIZE, SLURM_GPUS_ON_NODE); if each "
               f"task is a per-node launcher (srun --ntasks-per-node=1 torchrun --nproc-per-node {k}), give "
               f"--gpus-per-node {k}: world size {nodes.value * k}")


def unlaunched_world_size(hardware: Any, g: Found | None, hw_label: str | None,
                          nodes: Found | None = None) -> Found | None:
    """The job's world size (ranks) when no flag, accelerate file or launcher variable (WORLD_SIZE /
    SLURM_NTASKS: :func:`launcher_world_size`) states it -- the one fallback :func:`job_shape` (estimate,
    checkpoint, report) and check (:func:`advisor.views.check.run_check`) share, so the same flags and
    variables are one world in both (fixa23: ``--hardware dgx-h100:2 --gpus-per-node 4`` was 16 ranks in
    estimate, 8 in check; ``--gpus-per-node 4`` alone 1 and 4). ``g``: the job's ranks per node as the caller
    found them (a flag, the launcher's LOCAL_WORLD_SIZE / SLURM_GPUS_*; check adds its probe of this node's
    visible devices), None when nothing states them; ``hardware``: the ``--hardware`` spec, labelled ``hw_label``;
    ``nodes``: the job's node count where the launch states it (``--nodes``, SLURM_JOB_NUM_NODES / SLURM_NNODES:
    :func:`launch_nodes_from_env`), which beats the spec's as the launch's ranks per node do.

    ``nodes`` x ``g`` ranks per node where both are stated (fixg23: ``SLURM_JOB_NUM_NODES=2 SLURM_GPUS_ON_NODE=4``
    was 4 ranks, "one node assumed", where the job is 8); with a spec: its (or ``nodes``') nodes x ``g``, else x
    its accelerators per node -- not an accelerator preset alone
    (:attr:`advisor.cluster.hardware.Hardware.node_accelerators` None: its one per node is a placeholder, so
    without ``g`` it gives no world size, and a workload sidecar's recorded world stands in estimate); without
    either: ``g`` ranks on one node; None when neither is known (the caller's next source)."""
    from advisor.config.validation import world_size as bounded_world_size
    if g is None and hardware is not None and hardware.node_accelerators:
        g = Found(hardware.accelerators_per_node, hw_label or "")
    if nodes is not None and g is not None:
        src = (f"{nodes.source}={nodes.value} node{'s' if nodes.value != 1 else ''} x {g.value} ranks per node "
               f"({g.source})")
        return Found(bounded_world_size(nodes.value * g.value, src), src)
    if hardware is not None and g is not None:
        # name the ranks per node's source only when it is not the spec itself (issue #17: the flag was printed
        # twice, "from --hardware dgx-h100:2: 2 nodes x --hardware dgx-h100:2")
        per = f"{g.value} ranks per node" + (f" ({g.source})" if g.source != hw_label else "")
        src = f"{hw_label}: {hardware.nodes} node{'s' if hardware.nodes != 1 else ''} x {per}"
        return Found(bounded_world_size(hardware.nodes * g.value, src), src)
    if g is not None:
        return Found(g.value, f"{g.source} (one node assumed)")
    return None


def visible_devices_from_env(env: Mapping[str, str] | None = None) -> tuple[list[str], str] | None:
    """The device list a process on this node may use: CUDA_VISIBLE_DEVICES, else
    ROCR_VISIBLE_DEVICES, else HIP_VISIBLE_DEVICES, as (ids, variable). An empty or unset
    variable is skipped; entries may be indices, UUIDs or MIG ids, returned as written."""
    env = os.environ if env is None else env
    for name in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        v = env.get(name)
        if v is None:
            continue
        ids = [x.strip() for x in v.split(",") if x.strip()]
        if ids:
            return ids, name
    return None


def launcher_ranks_per_node(env: Mapping[str, str] | None = None, problems: list[str] | None = None) -> Found | None:
    """Ranks per node as the job's launcher states them: LOCAL_WORLD_SIZE (torchrun and the deepspeed
    launcher set it to the ranks started on this node, torch/distributed/run.py --nproc-per-node), else
    SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE (Slurm may write "gpu:8" or "8(x2)"); None when none is set.
    Not the visible devices: CUDA_VISIBLE_DEVICES on the machine that runs the tool says what it sees,
    not what the job runs. A malformed variable raises InputValueError, or with ``problems`` is
    recorded there and skipped."""
    env = os.environ if env is None else env
    f = _int(env, "LOCAL_WORLD_SIZE", problems)
    if f:
        return f
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        n = _slurm_gpus(env, name, problems)
        if n:
            return Found(n, name)
    return None


def gpus_per_node_from_env(env: Mapping[str, str] | None = None, problems: list[str] | None = None) -> Found | None:
    """Ranks per node: LOCAL_WORLD_SIZE, else SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE
    (Slurm may write "gpu:8" or "8(x2)"), else the count in CUDA_VISIBLE_DEVICES /
    ROCR_VISIBLE_DEVICES (:func:`visible_ranks_per_node`). A malformed variable raises
    InputValueError, or with ``problems`` is recorded there and skipped."""
    env = os.environ if env is None else env
    return launcher_ranks_per_node(env, problems) or visible_ranks_per_node(env, problems)


def visible_ranks_per_node(env: Mapping[str, str], problems: list[str] | None = None) -> Found | None:
    """The count of this process's visible devices (:func:`visible_devices_from_env`) as ranks per node, the
    last source of ranks per node (at most MAX_GPUS_PER_NODE: more raises InputValueError, or with ``problems``
    is recorded there); None when no variable lists devices. Never a reason to read SLURM_NTASKS as per-node
    launchers (:func:`launcher_world_size`)."""
    vis = visible_devices_from_env(env)
    if vis:
        if len(vis[0]) > MAX_GPUS_PER_NODE:
            err = InputValueError(f"environment variable {vis[1]}",
                                  f"lists {len(vis[0])} devices, over the limit {MAX_GPUS_PER_NODE}")
            if problems is None:
                raise err
            problems.append(str(err))
            return None
        return Found(len(vis[0]), vis[1])
    return None


#: The most OpenMP threads per rank read from a flag or OMP_NUM_THREADS (a node's cores, with room).
MAX_OMP_THREADS = 4096


def omp_threads(flag: int | None = None, env: Mapping[str, str] | None = None) -> Found | None:
    """OpenMP threads per rank as the job sets them: ``--omp-threads`` (``flag``), else the
    environment's OMP_NUM_THREADS (its first level when it lists several, "8,2" -> 8: OpenMP's
    nested-level syntax), which torchrun, accelerate and DeepSpeed's launcher pass on to every
    rank unchanged when it is set. None when neither is given (the launcher's default applies:
    :func:`advisor.ledger.steptime.cpu_threads_per_rank`). Raises InputValueError naming the
    variable when it is set but not an integer in 1 .. :data:`MAX_OMP_THREADS`."""
    if flag is not None:
        return Found(flag, "--omp-threads")
    env = os.environ if env is None else env
    v = env.get("OMP_NUM_THREADS")
    if v is None or not str(v).strip():
        return None
    n = env_int({"OMP_NUM_THREADS": str(v).split(",")[0]}, "OMP_NUM_THREADS", lo=1, hi=MAX_OMP_THREADS)
    return None if n is None else Found(n, f"OMP_NUM_THREADS={n}")


def bounded_ranks_per_node(g: Found | None) -> Found | None:
    """``g`` (ranks per node, with its source) as given, after refusing more than
    :data:`MAX_GPUS_PER_NODE`, the documented limit. The one check every source of ranks per node
    passes through, in :func:`job_shape` and :func:`discover_launch`: flags and launcher variables
    are bounded where parsed, but an accelerate YAML's num_processes // num_machines, a world size
    over --nodes, or a hardware spec were not (issue 21: ``num_processes: 1048576`` on one machine
    took 22 s and 626 MB). Raises AdvisorError (exit 2) naming the source."""
    from advisor.errors import AdvisorError
    if g is not None and g.value > MAX_GPUS_PER_NODE:
        raise AdvisorError(f"{g.value} ranks per node ({g.source}) is over the limit of {MAX_GPUS_PER_NODE} "
                           "ranks per node: spread the ranks over more nodes (num_machines, --nodes) or "
                           "give --gpus-per-node")
    return g


@dataclass
class LaunchShape:
    """The launch shape for one node, every value with its source.

    ``world_size``: total ranks; ``gpus_per_node``: ranks per node; ``num_nodes``;
    ``node_rank``: this node's index (ranks node_rank*gpus_per_node ... on it); ``rank``: this
    process's global rank when a launcher set one; ``visible_devices``: the device ids this
    node's ranks may use, as written in the variable named by ``visible_source``.
    ``notes``: how derived values were obtained and what disagrees.
    """

    world_size: Found | None = None
    gpus_per_node: Found | None = None
    num_nodes: Found | None = None
    node_rank: Found | None = None
    rank: Found | None = None
    visible_devices: list[str] | None = None
    visible_source: str | None = None
    notes: list[str] = field(default_factory=list)
    #: Launcher variables that are set but malformed or out of bounds (one line each, naming
    #: the variable); they were ignored, and check reports each as a K112 warning.
    invalid: list[str] = field(default_factory=list)
    #: What the launch leaves open and the report must say (check prints each as a warning): SLURM_NTASKS
    #: kept as the world where only devices suggested per-node launchers (:func:`slurm_task_ranks_per_node`).
    warnings: list[str] = field(default_factory=list)

    def node_ranks(self) -> range:
        """Global ranks on this node (contiguous placement, as torchrun and Slurm's block
        distribution use): node_rank*g ... node_rank*g + g - 1, clipped to the world size. A
        ``range`` (O(1)): with the GPUs per node unknown, the node is the whole world (2^20 ranks)."""
        ws = self.world_size.value if self.world_size else 1
        g = self.gpus_per_node.value if self.gpus_per_node else ws
        node = self.node_rank.value if self.node_rank else 0
        return range(node * g, min(node * g + g, ws)) or range(min(g, ws))

    def to_dict(self) -> dict[str, Any]:
        """JSON shape: each value as {"value", "source"} or null."""
        def f(x: Found | None) -> dict[str, Any] | None:
            return None if x is None else {"value": x.value, "source": x.source}
        return {"world_size": f(self.world_size), "gpus_per_node": f(self.gpus_per_node),
                "num_nodes": f(self.num_nodes), "node_rank": f(self.node_rank), "rank": f(self.rank),
                "visible_devices": ({"value": self.visible_devices, "source": self.visible_source}
                                    if self.visible_devices is not None else None),
                "node_ranks": rank_fields(RankSet.span(self.node_ranks().start, self.node_ranks().stop)), "notes": list(self.notes), "invalid": list(self.invalid)}


def discover_launch(env: Mapping[str, str] | None = None, *, world_size: int | None = None,
                    gpus_per_node: int | None = None, world_size_source: str = "--world-size",
                    gpus_per_node_source: str = "--gpus-per-node", nodes: Found | None = None,
                    hardware: Any = None, hardware_label: str | None = None) -> LaunchShape:
    """The launch shape from flags (``world_size``, ``gpus_per_node``: they win) and the
    environment ``env`` (default ``os.environ``). ``world_size_source`` labels a given
    ``world_size`` (default the flag; e.g. an accelerate config's ``num_processes``).

    Rules, in order: world size = --world-size, WORLD_SIZE, else SLURM_NTASKS -- except that
    when SLURM_NTASKS equals SLURM_JOB_NUM_NODES and the launch states more than one rank per node
    (--gpus-per-node, LOCAL_WORLD_SIZE, SLURM_GPUS_*: one task per node that runs a per-node launcher
    such as torchrun), the world size is nodes x those ranks (:func:`launcher_world_size`; not the
    visible devices). Ranks per node = --gpus-per-node, LOCAL_WORLD_SIZE, SLURM_GPUS_ON_NODE,
    SLURM_GPUS_PER_NODE, else 1 where SLURM_NTASKS tasks run one per node
    (:func:`slurm_task_ranks_per_node`, said in ``warnings`` where devices suggest more), else the count
    of visible devices. Nodes = ``nodes`` (e.g. an accelerate
    config's num_machines), SLURM_JOB_NUM_NODES
    (SLURM_NNODES), else world size / ranks per node. This node's index = GROUP_RANK
    (torchrun), SLURM_NODEID, else RANK // ranks per node, else 0.
    The ranks per node pass :func:`checked_ranks_per_node` (with ``hardware``, the ``--hardware``
    spec, labelled ``hardware_label``), as in :func:`job_shape`: a launch estimate refuses, check
    refuses (AdvisorError, exit 2); a count above a flag's world size is capped at it.
    """
    env = os.environ if env is None else env
    shape = LaunchShape()
    bad = shape.invalid
    vis = visible_devices_from_env(env)
    if vis:
        shape.visible_devices, shape.visible_source = vis
    shape.rank = _int(env, "RANK", bad)

    if gpus_per_node is not None:
        stated = bounded_ranks_per_node(Found(gpus_per_node, gpus_per_node_source))
    else:
        stated = launcher_ranks_per_node(env, bad)
    nodes = nodes or launch_nodes_from_env(env, bad)

    if world_size is not None:
        shape.world_size = Found(world_size, world_size_source)
    else:
        # the world from what the launch states; this node's visible devices stay its ranks per node below,
        # never a reason to read SLURM_NTASKS as per-node launchers (launcher_world_size)
        shape.world_size = launcher_world_size(env, stated, nodes, bad)
    per_task, note = slurm_task_ranks_per_node(shape.world_size, nodes, stated, env, hardware, hardware_label)
    if note:
        shape.warnings.append(note)
    shape.gpus_per_node = stated or per_task or visible_ranks_per_node(env, bad)
    # the one validation estimate's job_shape applies too (fixa22: check said GO for LOCAL_WORLD_SIZE=16
    # on an 8-GPU preset that estimate refuses): more ranks than the spec's node, or than the launcher's world
    shape.gpus_per_node = checked_ranks_per_node(shape.world_size, shape.gpus_per_node, hardware, hardware_label)
    g = shape.gpus_per_node.value if shape.gpus_per_node else None

    if nodes:
        shape.num_nodes = nodes
    elif shape.world_size and g:
        shape.num_nodes = Found(max(1, -(-shape.world_size.value // g)),
                                f"{shape.world_size.source} / {shape.gpus_per_node.source}")

    node = _int(env, "GROUP_RANK", bad)
    if node is None:
        node = _int(env, "SLURM_NODEID", bad)
    if node is None and shape.rank is not None and g:
        node = Found(shape.rank.value // g, f"RANK // {shape.gpus_per_node.source}")
    shape.node_rank = node

    ws_v = shape.world_size.value if shape.world_size else None
    if ws_v and g and ws_v % g and ws_v > g:
        shape.notes.append(f"world size {ws_v} is not a multiple of {g} ranks per node")
    if ws_v and g and shape.num_nodes and shape.num_nodes.value * g < ws_v:
        shape.notes.append(f"{shape.num_nodes.value} node(s) x {g} ranks per node = {shape.num_nodes.value * g} "
                           f"< world size {ws_v}")
    return shape


#: The launcher variables that state the job's world size (:func:`world_size_from_env`).
LAUNCHER_WORLD_SOURCES = ("WORLD_SIZE", "SLURM_NTASKS")


def accelerator_alone_problem(hardware: Any, hw_label: str, flags: str = "--gpus-per-node or --world-size") -> str:
    """The one-line refusal when an accelerator preset alone (:attr:`advisor.cluster.hardware.Hardware.node_known`
    False: ``--hardware h100-sxm-80gb:4``) must give a world size: it says how many nodes (``:N``) but not how
    many accelerators each holds, so nodes x ranks per node has no second factor (its 1 per node is a
    placeholder). Shared by estimate, check, checkpoint, report (:func:`job_shape`, check's run_check where
    :func:`unlaunched_world_size` finds none) and generate; ``flags``: what the command takes instead."""
    what = hardware.accelerator.name if hardware.accelerator else hardware.name
    if hardware.nodes_given:
        return (f"{hw_label} names {hardware.nodes} node{'s' if hardware.nodes != 1 else ''} but not how many "
                f"accelerators each holds ({what} is an accelerator preset alone), so it gives no world size: "
                f"give {flags}, or a node preset (see `ds-advisor hardware`)")
    return (f"{hw_label} names no node ({what} is an accelerator preset alone, which says nothing about the "
            f"node): give {flags}, or a node preset (see `ds-advisor hardware`)")


def checked_node_count(ws: Found | None, g: Found | None, hardware: Any = None,
                       hw_label: str | None = None) -> Found | None:
    """Ranks per node ``g`` against a node count the user named (``--hardware NAME:N`` / ``FILE:N``,
    :attr:`advisor.cluster.hardware.Hardware.nodes_given`): the job runs on those N nodes, so its world
    size ``ws`` must be N x ranks per node (the launchers start the same count on every node: torchrun's one
    ``--nproc-per-node``, torch 2.13.0 torch/distributed/run.py l.35-40; DeepSpeed 0.19.8's launcher gives every
    host ``--num_gpus`` slots, launcher/runner.py ``apply_num_nodes_and_gpus`` l.385-403). Returns ``g``; where nothing states ``g``: the spec's accelerators per node, or
    for an accelerator preset alone (which says nothing about the node) ws / N, said in its source.
    Raises AdvisorError (exit 2, one line naming both sources) when ws is not N x ranks per node -- e.g.
    ``--hardware dgx-h100:2 --world-size 32``: 2 nodes of 8 are 16 ranks, not 32. Unchanged (``g``) when
    no node count was named or ``ws`` is None. Shared by :func:`checked_ranks_per_node` (estimate,
    checkpoint, report, check's launch) and check after its probes (:func:`advisor.views.check.run_check`)."""
    from advisor.errors import AdvisorError
    if hardware is None or not getattr(hardware, "nodes_given", False) or ws is None:
        return g
    n, w = hardware.nodes, ws.value
    label = hw_label or f"--hardware {hardware.name}"
    base = label.rpartition(":")[0] or label
    per = hardware.node_accelerators
    if g is None:
        if per:
            g = Found(per, f"{label} (accelerators per node)")
        elif w % n == 0:
            return Found(w // n, f"world size {w} ({ws.source}) / the {n} nodes of {label}")
        else:
            raise AdvisorError(f"world size {w} ({ws.source}) does not split over the {n} nodes of {label} "
                               f"(each node runs the same number of ranks): give a world size that is a multiple "
                               f"of {n}, or --gpus-per-node and the node count the job runs on")
    if w == n * g.value:
        return g
    spec_g = g.source.startswith(label)
    fixes = []  # the node count these ranks per node need; for the spec's own count, fewer ranks per node too
    if w % g.value == 0:
        fixes.append(f"{base}:{w // g.value} ({w // g.value} node{'s' if w // g.value != 1 else ''} of {g.value})")
    if spec_g and w % n == 0 and (not per or w // n <= per):
        fixes.append(f"--gpus-per-node {w // n} ({w // n} rank{'s' if w // n != 1 else ''} on each of the {n} nodes)")
    fixes.append(f"a world size of {n * g.value}")
    what = (f"the {n} nodes x {g.value} accelerators per node of {label} = {n * g.value} ranks" if spec_g
            else f"the {n} nodes of {label} x {g.value} ranks per node ({g.source}) = {n * g.value}")
    raise AdvisorError(f"world size {w} ({ws.source}) is not {what}: the job runs on the nodes --hardware names; "
                       f"give {', or '.join(fixes)}")


def checked_ranks_per_node(ws: Found | None, g: Found | None, hardware: Any = None,
                           hw_label: str | None = None) -> Found | None:
    """The one validation of a job's ranks per node ``g`` against its world size ``ws`` and the
    hardware spec, shared by :func:`job_shape` (estimate, checkpoint, report) and check
    (:func:`advisor.views.check.run_check`, on the shape :func:`discover_launch` read), so a launch
    one command refuses no other accepts. Returns ``g`` (capped at the world size, said in its
    source, and bounded by :func:`bounded_ranks_per_node`); raises AdvisorError (exit 2, one line):

    - more ranks per node than the spec's accelerators per node, unless the count is the spec's own
      (:meth:`advisor.cluster.hardware.Hardware.ranks_per_node_problem`);
    - LOCAL_WORLD_SIZE above a world size the launcher also states (WORLD_SIZE / SLURM_NTASKS):
      torchrun sets LOCAL_WORLD_SIZE to the ranks it starts on this node, every one of them counted in
      WORLD_SIZE (torch 2.13.0: torch/distributed/elastic/agent/server/api.py ``_assign_worker_ranks``
      l.585, the world size is the sum of every node's local_world_size, l.620 / l.647; both variables
      set from it in local_elastic_agent.py l.420-421), so a node with more ranks than the job is a
      malformed launch, not a shape to model. A world size given as a flag (``--world-size``) is the
      job the user asks about: there the launcher's count is capped at it.
    - a world size that is not the nodes ``--hardware NAME:N`` names x ``g`` (:func:`checked_node_count`).
    ``ws`` None (check before its probes give a world size): only the spec's count is checked."""
    from advisor.errors import AdvisorError
    if g is None:
        return None
    g = checked_node_count(ws, g, hardware, hw_label)  # a world size other than the named nodes x g: refused
    if hardware is not None and not g.source.startswith(hw_label or "\0"):
        problem = hardware.ranks_per_node_problem(g.value, g.source, hw_label)
        if problem:
            raise AdvisorError(problem)
    if ws is not None and g.value > ws.value:
        if g.source == "LOCAL_WORLD_SIZE" and ws.source in LAUNCHER_WORLD_SOURCES:
            raise AdvisorError(
                f"LOCAL_WORLD_SIZE={g.value} is more ranks on this node than the whole job's {ws.source}={ws.value}: "
                "the launcher starts LOCAL_WORLD_SIZE ranks per node, all of them counted in the world size, so the "
                "launch environment is malformed; run under the launcher that sets both, or give --world-size and "
                "--gpus-per-node")
        g = Found(ws.value, f"{g.source}, capped at the world size {ws.value}")
    return bounded_ranks_per_node(g)


@dataclass
class JobShape:
    """World size, ranks per node and nodes of the job one command models, each with its source
    (:func:`job_shape`). ``gpus_per_node`` / ``nodes`` are None when nothing says them."""

    world_size: Found
    gpus_per_node: Found | None = None
    nodes: Found | None = None
    #: What the launch leaves open and the report must say (estimate prints each as a note on stderr):
    #: :func:`slurm_task_ranks_per_node`.
    notes: list[str] = field(default_factory=list)


def job_shape(*, world_size: int | None = None, gpus_per_node: int | None = None, nodes: int | None = None,
              launch: Any = None, hardware: Any = None, hardware_label: str | None = None,
              env: Mapping[str, str] | None = None, default_gpus_per_node: int | None = None,
              recorded: tuple[Mapping[str, int], str] | None = None) -> JobShape:
    """The one place estimate and checkpoint take the job's shape from (check adds its probes on top,
    :func:`discover_launch`; lint takes a world size from its flag, the accelerate file or the sidecar's
    recorded world, ``cli._sidecar_dp``).

    World size: ``--world-size``; else an accelerate config's launch (``launch``, an
    :class:`advisor.config.hf.AccelerateLaunch`: num_processes // num_machines x num_machines,
    what ``accelerate launch`` starts); else WORLD_SIZE / SLURM_NTASKS (:func:`launcher_world_size`,
    as check reads it: one launcher task per node under Slurm is nodes x the ranks per node the launch states, never
    the visible devices); else the launch's nodes (--nodes, SLURM_JOB_NUM_NODES / SLURM_NNODES) or the hardware spec's
    x ranks per node (--gpus-per-node or the launcher's where given, else the spec's accelerators per node:
    :func:`unlaunched_world_size`, as check counts it; an accelerator preset alone with ``:N`` and nothing that
    states its ranks per node is refused after the sidecar, :func:`accelerator_alone_problem`); else the world shape the config's workload sidecar records
    (``recorded``: its ``world`` record and the sidecar's file name; ``generate`` planned the config's
    batch for it, :data:`advisor.views.workload.WORLD_KEYS`), with its ranks per node unless a flag or
    the launch gives them; else 1. ``notes``: what the launch leaves open (:func:`slurm_task_ranks_per_node`).
    Every input of this run wins over the sidecar, as in ``check``
    (which never reads its world: it runs in the launch it checks), so a run given another shape is
    rule W003 in both. Ranks per node: ``--gpus-per-node``; else the launch's
    num_processes // num_machines; else LOCAL_WORLD_SIZE / SLURM_GPUS_* (the launcher's, as
    WORLD_SIZE beats the spec for the world size: :func:`launcher_ranks_per_node`); else 1 where SLURM_NTASKS
    tasks run one per node (:func:`slurm_task_ranks_per_node`); else the spec's
    accelerators per node (not an accelerator preset alone,
    :attr:`advisor.cluster.hardware.Hardware.node_known` False: it says nothing about the node); else
    the visible devices; else ``default_gpus_per_node``; capped at the world size.
    Nodes: ``--nodes``; else the launch's num_machines; else ceil(world size / ranks per node).
    A node count the user names (``--hardware NAME:N``) is the job's: a world size other than N x ranks
    per node is refused (:func:`checked_node_count`); a preset or spec file without ``:N`` only sizes the
    default world size (a 16-rank job on ``--hardware dgx-h100`` is on 2 nodes).
    Raises AdvisorError (exit 2) for a malformed launcher variable, a spec too large for
    MAX_WORLD_SIZE, more nodes than ranks, nodes x ranks per node below the world size, a world size that is
    not the named nodes x ranks per node, or more ranks per node than
    the hardware spec's accelerators per node (:meth:`advisor.cluster.hardware.Hardware.ranks_per_node_problem`)."""
    from advisor.config.validation import world_size as bounded_world_size
    from advisor.errors import AdvisorError

    env = os.environ if env is None else env
    spec_shape = False
    per_task: Found | None = None  # 1 rank per node: SLURM_NTASKS tasks, one per node (slurm_task_ranks_per_node)
    notes: list[str] = []
    from_launch = launch is not None and launch.world_size
    hw_label = hardware_label or (f"--hardware {hardware.name}" if hardware is not None else None)
    if world_size is not None:
        ws = Found(world_size, "--world-size")
    elif from_launch:
        ws = Found(launch.world_size, launch.world_size_source)
    else:
        # the derivation check's discover_launch shares (launcher_world_size), with the ranks per node the
        # launch states: not this machine's visible devices, which are not the job's (check, run on the job's
        # node, probes them for its ranks per node, not for the world)
        wg = Found(gpus_per_node, "--gpus-per-node") if gpus_per_node is not None else launcher_ranks_per_node(env)
        wn = Found(nodes, "--nodes") if nodes is not None else launch_nodes_from_env(env)
        ws = world_size_from_env(env, gpus_per_node=wg, nodes=wn)
        per_task, note = slurm_task_ranks_per_node(ws, wn, wg, env, hardware, hw_label)
        if note:
            notes.append(note)
        if ws is None:
            # the fallback check shares (unlaunched_world_size): the launch's nodes (--nodes, SLURM_JOB_NUM_NODES)
            # or the spec's x the job's ranks per node (--gpus-per-node, else the launcher's: an sbatch script
            # before torchrun, SLURM_GPUS_ON_NODE=4 on 2 nodes is 8 ranks), else x the spec's accelerators per
            # node; nothing on the nodes: those ranks on one node
            ws = unlaunched_world_size(hardware, wg, hw_label, wn)
            spec_shape = ws is not None and wg is None  # the spec's own nodes x accelerators: the spec is the shape
        side_ws = recorded[0].get("world_size") if recorded is not None else None
        if ws is None and side_ws:
            ws = Found(bounded_world_size(side_ws, recorded[1]), f"{recorded[1]}, the world generate planned")
        if ws is None and hardware is not None and hardware.nodes_given:
            # --hardware h100-sxm-80gb:4 alone: 4 nodes of an unknown size are no world size (not 1 rank)
            raise AdvisorError(accelerator_alone_problem(hardware, hw_label))
        ws = ws or Found(1, "default 1")
    if gpus_per_node is not None:
        g = Found(gpus_per_node, "--gpus-per-node")
    elif nodes is not None:
        g = Found(-(-ws.value // nodes), f"world size {ws.value} / --nodes {nodes}")
    elif from_launch and (launch.num_machines > 1 or world_size is None):
        g = Found(launch.ranks_per_node, launch.ranks_per_node_source)
    elif recorded is not None and ws.source.startswith(recorded[1]) and recorded[0].get("gpus_per_node"):
        g = Found(recorded[0]["gpus_per_node"], f"{recorded[1]}, the world generate planned")
    elif per_task is not None:
        g = per_task  # the launch's one task per node wins over a spec's accelerators, as in check
    elif not spec_shape and (lg := launcher_ranks_per_node(env)) is not None:
        # the launcher's variable is the job's shape, the spec only its capacity: it wins over the spec
        # as WORLD_SIZE does above (a preset of 8 per node run with LOCAL_WORLD_SIZE=4 is 4 ranks per node)
        g = lg
    elif hardware is not None and hardware.node_accelerators:
        # an accelerator preset alone (node_known False) says nothing about the node: its one
        # accelerator per node is a placeholder, so the ranks per node come from what follows
        g = Found(hardware.accelerators_per_node, f"{hw_label} (accelerators per node)")
    elif hardware is not None and hardware.nodes_given:
        # an accelerator preset alone on N named nodes: world size / N (checked_node_count), not the
        # visible devices of the machine the tool runs on
        g = checked_node_count(ws, None, hardware, hw_label)
    else:
        g = gpus_per_node_from_env(env)
        if g is None and default_gpus_per_node:
            g = Found(default_gpus_per_node, f"default {default_gpus_per_node}")
    g = checked_ranks_per_node(ws, g, hardware, hw_label)
    if nodes is not None:
        n = Found(nodes, "--nodes")
        if nodes > ws.value:  # every node of the job runs at least one rank (one process per GPU)
            raise AdvisorError(f"--nodes {nodes} is more nodes than the world size {ws.value} ({ws.source}): each node "
                               f"runs at least one rank; give --nodes at most {ws.value}, or a world size of at least {nodes}")
        if g is not None and nodes * g.value < ws.value:
            raise AdvisorError(f"--nodes {nodes} x {g.value} ranks per node ({g.source}) = {nodes * g.value} is below "
                               f"the world size {ws.value} ({ws.source})")
    elif from_launch and world_size is None and gpus_per_node is None:
        n = Found(launch.num_machines, f"num_machines in {launch.source}")
    elif g is not None:
        n = Found(-(-ws.value // g.value), f"world size {ws.value} / {g.value} ranks per node")
    else:
        n = None
    return JobShape(world_size=ws, gpus_per_node=g, nodes=n, notes=notes)
