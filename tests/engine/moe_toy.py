"""The toy model both native-MoE engine workers build (moe_groups_worker.py, moe_ckpt_worker.py): a dense
Linear(H, H) then DeepSpeed's own MoE layer (``deepspeed.moe.layer.MoE``, top-1) of E experts, each
Linear(H, F) -> Linear(F, H), no biases, ep_size EP; with the optimizer param groups DeepSpeed's MoE needs
(``split_params_into_different_moe_groups_for_optimizer``: the dense and the expert parameters apart)."""

import torch.nn as nn
from deepspeed.moe.layer import MoE
from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer


class Net(nn.Module):
    def __init__(self, h: int, f: int, e: int, ep: int):
        super().__init__()
        self.dense = nn.Linear(h, h, bias=False)
        self.moe = MoE(hidden_size=h, expert=nn.Sequential(nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)),
                       num_experts=e, ep_size=ep, k=1)

    def forward(self, x):
        return self.moe(self.dense(x))[0]


def net_and_param_groups(h: int, f: int, e: int, ep: int) -> tuple[Net, list]:
    """The toy model (built after deepspeed.init_distributed: MoE makes its groups then) and its param groups."""
    m = Net(h, f, e, ep)
    return m, split_params_into_different_moe_groups_for_optimizer({"params": list(m.parameters()), "name": "p"})
