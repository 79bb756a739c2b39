"""Worker for test_moe_groups_engine.py: real DeepSpeed ZeRO-1/2 with a native MoE layer (deepspeed.moe.layer.MoE,
no expert tensor parallelism) under a tensor-parallel grid (PipelineParallelGrid as the mpu), CPU / gloo. Prints
per rank, after one "MOEG " marker, each optimizer param group's 16-bit numel, DeepSpeed's partition count and
the fp32 partition's numel, the expert-data / expert-parallel group ranks DeepSpeed built and how many
ipg buckets the optimizer keeps (one per communication dtype, for every param group).

argv: TP, EP, the DeepSpeed config (JSON), H, F, E."""

import json
import sys

import torch

import deepspeed
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology, PipelineParallelGrid
from deepspeed.utils import groups as G

from moe_toy import net_and_param_groups


def main() -> None:
    tp, ep, cfg, h, f, e = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), *map(int, sys.argv[4:7])
    deepspeed.init_distributed(dist_backend="gloo")
    world = torch.distributed.get_world_size()
    grid = PipelineParallelGrid(topology=PipeModelDataParallelTopology(num_pp=1, num_mp=tp, num_dp=world // tp))

    m, pg = net_and_param_groups(h, f, e, ep)
    _, o, _, _ = deepspeed.initialize(model=m, optimizer=torch.optim.AdamW(pg, lr=1e-3), config=cfg, mpu=grid)
    name = f"ep_size_{ep}"
    rec = dict(rank=torch.distributed.get_rank(),
               groups=[dict(moe=bool(g.get("moe")), numel=sum(p.numel() for p in o.bit16_groups[i]),
                            partition_count=o.partition_count[i], fp32_part=o.single_partition_of_fp32_groups[i].numel())
                       for i, g in enumerate(o.optimizer.param_groups)],
               edp=list(G._EXPERT_DATA_PARALLEL_GROUP_RANKS[name]), ep=list(G._EXPERT_PARALLEL_GROUP_RANKS[name]),
               ipg_buckets=len(o.ipg_buckets))
    print("MOEG " + json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
