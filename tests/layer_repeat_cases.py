"""Shared pieces of the layer-repeat identity tests (tests/test_layer_repeat_identity.py,
tests/test_moe_leading_layers_identity.py): the seeded random DeepSpeed config both compare estimate on, and a
fresh copy of an inventory (nothing memoised). One generator, so the two files cannot drift apart; each file
passes its own draw weights, so its seeds give the configs they always gave."""

from __future__ import annotations

import random

from advisor.model.inventory import Inventory


def fresh_copy(inv: Inventory) -> Inventory:
    """``inv`` with a fresh tensor list: no layer repeat or flag memoised on it."""
    return Inventory(inv.name, list(inv.tensors))


def random_zero_config(rng: random.Random, *, stages: tuple[int, ...] = (0, 1, 2, 3, 3, 3), bucket_p: float = 0.5,
                       zero12_flags: bool = False) -> dict:
    """A random DeepSpeed config (a dict as a user writes it): ZeRO stage drawn from ``stages`` (repeats weight
    it), ``reduce_bucket_size`` set with probability ``bucket_p``, ``overlap_comm`` / ``contiguous_gradients``
    drawn at ZeRO-1/2 when ``zero12_flags``; ZeRO-3's persistence, prefetch, live-parameter and reuse-distance
    knobs, CPU/NVMe optimizer (and, at ZeRO-3, parameter) offload, bf16/fp16/fp32, GA 1-2, micro-batch 1, Adam."""
    stage = rng.choice(list(stages))
    z: dict = {"stage": stage}
    if rng.random() < bucket_p:
        z["reduce_bucket_size"] = rng.choice([50, 500, 5000, 10**6])
    if zero12_flags and stage in (1, 2):
        z["overlap_comm"] = rng.random() < 0.5
        z["contiguous_gradients"] = rng.random() < 0.8
    if stage == 3:
        z["stage3_param_persistence_threshold"] = rng.choice([0, 100, 10**5])
        z["stage3_prefetch_bucket_size"] = rng.choice([0, 100, 1000, 5 * 10**7])
        z["stage3_max_live_parameters"] = rng.choice([100, 10**9])
        z["stage3_max_reuse_distance"] = rng.choice([0, 500, 10**9])
        z["contiguous_gradients"] = rng.random() < 0.8
    if stage >= 1 and rng.random() < 0.4:
        dev = rng.choice(["cpu", "nvme"]) if stage == 3 else "cpu"
        z["offload_optimizer"] = {"device": dev, **({"nvme_path": "/nvme"} if dev == "nvme" else {})}
        if stage == 3 and rng.random() < 0.5:
            z["offload_param"] = {"device": dev, **({"nvme_path": "/nvme"} if dev == "nvme" else {})}
    prec = rng.choice([{"bf16": {"enabled": True}}, {"fp16": {"enabled": True}}, {}])
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": rng.choice([1, 2]),
            "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "zero_optimization": z, **prec}
