"""Worker for test_moe_checkpoint_engine.py: real DeepSpeed 0.19.8 ZeRO-1/2 with a native MoE layer
(deepspeed.moe.layer.MoE, ep_size EP, no tensor parallelism), CPU / gloo: one step, then
``engine.save_checkpoint(SAVE_DIR, tag="t")``.

argv: EP, the DeepSpeed config (JSON), H, F, E, SAVE_DIR."""

import json
import sys

import torch
import torch.nn as nn

import deepspeed
from deepspeed.moe.layer import MoE
from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer


def main() -> None:
    ep, cfg, h, f, e, save = int(sys.argv[1]), json.loads(sys.argv[2]), *map(int, sys.argv[3:6]), sys.argv[6]
    deepspeed.init_distributed(dist_backend="gloo")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(h, h, bias=False)
            self.moe = MoE(hidden_size=h, expert=nn.Sequential(nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)),
                           num_experts=e, ep_size=ep, k=1)

        def forward(self, x):
            return self.moe(self.dense(x))[0]

    torch.manual_seed(0)
    m = Net()
    pg = split_params_into_different_moe_groups_for_optimizer({"params": list(m.parameters()), "name": "p"})
    eng, _, _, _ = deepspeed.initialize(model=m, optimizer=torch.optim.AdamW(pg, lr=1e-3), config=cfg)
    x = torch.randn(4, h, dtype=torch.bfloat16)
    eng.backward(eng(x).float().pow(2).mean())
    eng.step()
    eng.save_checkpoint(save, tag="t")


if __name__ == "__main__":
    main()
