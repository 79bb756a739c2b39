"""DeepSpeed's own memory estimators, for ``estimate --compare-deepspeed``.

DeepSpeed ships ``estimate_zero2_model_states_mem_needs`` (``runtime/zero/stage_1_and_2.py``)
and ``estimate_zero3_model_states_mem_needs`` (``runtime/zero/stage3.py``): parameter count
times a bytes-per-parameter constant, with a 1.5x ``additional_buffer_factor`` on host memory.
Showing them beside the ledger lets users see what the rule of thumb misses (buckets, pinned
buffers, padding) or over-counts. Imports deepspeed, so only this flag pays that cost.
"""

from __future__ import annotations

import os
from typing import Any

from advisor.ledger.state import Plan


def deepspeed_estimate(plan: Plan, largest_layer_params: int | None = None) -> dict[str, Any]:
    """Run DeepSpeed's estimator matching the plan's stage (stage 0-2 -> the ZeRO-2 one,
    stage 3 -> the ZeRO-3 one) with the plan's offload settings.

    Returns {"function", "arguments", "gpu_bytes_per_rank", "cpu_bytes_per_node"}, or
    {"error": why} when deepspeed cannot be imported.
    """
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    except Exception as e:  # noqa: BLE001 - any import failure means "not available here"
        return {"error": f"deepspeed is not importable here ({type(e).__name__}: {e}); install the [engine] extra"}
    ec, inv, cl = plan.config, plan.inventory, plan.cluster
    n = inv.trainable_numel
    g = cl.gpus_per_node or min(cl.world_size, 8)
    nodes = max(1, cl.dp_world_size // g)
    if ec.zero.stage == 3:
        largest = largest_layer_params or max((t.numel for t in inv.tensors), default=0)
        args = dict(total_params=n, largest_layer_params=largest, num_gpus_per_node=g, num_nodes=nodes,
                    cpu_offload=ec.offload_optimizer_effective != "none",
                    cpu_offload_params=ec.offload_param_effective != "none", zero_init=True)
        cpu, gpu, *_ = estimate_zero3_model_states_mem_needs(**args)
        fn = "deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs"
    else:
        args = dict(total_params=n, num_gpus_per_node=g, num_nodes=nodes,
                    cpu_offload=ec.offload_optimizer_effective != "none")
        cpu, gpu, *_ = estimate_zero2_model_states_mem_needs(**args)
        fn = "deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs"
    return {"function": fn, "arguments": args, "gpu_bytes_per_rank": int(gpu), "cpu_bytes_per_node": int(cpu)}
