"""Worker for test_moe_checkpoint_engine.py: real DeepSpeed 0.19.8 ZeRO-1/2 with a native MoE layer
(deepspeed.moe.layer.MoE, ep_size EP, no tensor parallelism), CPU / gloo: one step, then
``engine.save_checkpoint(SAVE_DIR, tag="t")``.

argv: EP, the DeepSpeed config (JSON), H, F, E, SAVE_DIR."""

import json
import sys

import torch

import deepspeed

from moe_toy import net_and_param_groups


def main() -> None:
    ep, cfg, h, f, e, save = int(sys.argv[1]), json.loads(sys.argv[2]), *map(int, sys.argv[3:6]), sys.argv[6]
    deepspeed.init_distributed(dist_backend="gloo")

    torch.manual_seed(0)
    m, pg = net_and_param_groups(h, f, e, ep)
    eng, _, _, _ = deepspeed.initialize(model=m, optimizer=torch.optim.AdamW(pg, lr=1e-3), config=cfg)
    x = torch.randn(4, h, dtype=torch.bfloat16)
    eng.backward(eng(x).float().pow(2).mean())
    eng.step()
    eng.save_checkpoint(save, tag="t")


if __name__ == "__main__":
    main()
