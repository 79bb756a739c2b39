"""The per-file aio term of the NVMe seconds (advisor.ledger.movement.AIO_PER_FILE_S): DeepSpeed
swaps one file per tensor, and each file is its own aio op (stat/open, hand-off, close), so the
same bytes as many files take longer. Figures by hand from the files DeepSpeed 0.19.8 opens:
``partitioned_param_swapper.py`` l.148-161 (one ``{ds_id}_param.tensor.swp`` per parameter whose
partition is >= max(1 MiB, aio.block_size), ``swap_tensor/utils.py`` l.14-16), ``optimizer_utils.py``
l.256-287 (one gradient file per swapped piece)."""

from __future__ import annotations

import pytest

from advisor.cluster.hardware import from_dict
from advisor.config.effective import effective_config
from advisor.ledger.movement import AIO_PER_FILE_S, NVME, movement_roles
from advisor.ledger.state import Cluster, Plan, zero3_grad_swap_files_by_rank
from advisor.ledger.steptime import step_time
from advisor.model.inventory import Inventory, TensorSpec

MIB = 2 ** 20


def _hw():
    return from_dict({"nodes": 1, "accelerators_per_node": 1, "host_memory_bandwidth_bytes_per_s": 1e10,
                      "accelerator": {"name": "toy", "memory_bytes": 1e11, "peak_bf16_flops": 1e12,
                                      "host_link": {"bytes_per_s": 1e10}},
                      "storage": [{"name": "n", "mounts": ["/nvme"], "capacity_bytes": 1e13, "read_bytes_per_s": 1e9,
                                   "write_bytes_per_s": 1e9, "access": "read-write"}]})


def _param_plan(numels: list[int]) -> Plan:
    inv = Inventory("m", [TensorSpec(f"layers.{i}.w", (n,), trainable=True) for i, n in enumerate(numels)])
    raw = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0,
                                 "offload_param": {"device": "nvme", "nvme_path": "/nvme", "max_in_cpu": 0}}}
    return Plan(effective_config(raw), inv, Cluster(world_size=1, gpus_per_node=1))


def _nvme_rows(plan: Plan) -> list:
    (_, ms), = movement_roles(plan, _hw())
    return [m for m in ms if m.link == NVME]


def test_many_small_partitions_pay_a_file_each_by_hand():
    """64 MiB of bf16 parameters as 64 partitions of 2^19 elements (1 MiB, the smallest DeepSpeed
    swaps) against one of 2^25: the bytes are equal, so every NVMe row's seconds differ by 63 files x
    66 us reading (forward and backward pass each) and 63 x 91 us writing after the step. At the
    tier's 1e9 B/s limited by the aio defaults (R = 1e9 x 8,388,608 / 8,473,608 B/s), one pass's read
    is 64 MiB / R + 66 us = 67.85 ms as one file; as 64 files 63 x 66 us = 4.16 ms more (x 1.0613); the
    write (W = 1e9 x 8,388,608 / 8,408,608 B/s, 67.27 ms) 63 x 91 us = 5.73 ms more."""
    small, big = _nvme_rows(_param_plan([2 ** 19] * 64)), _nvme_rows(_param_plan([2 ** 25]))
    key = lambda m: (m.direction, m.phase, m.item)  # noqa: E731
    sb, bb = {key(m): m for m in small}, {key(m): m for m in big}
    assert set(sb) == set(bb) == {("read", "forward", "lp_param_partitions"), ("read", "backward", "lp_param_partitions"),
                                  ("write", "after_step", "lp_param_partitions")}
    R, W = 1e9 * 8_388_608 / 8_473_608, 1e9 * 8_388_608 / 8_408_608
    for k, m in sb.items():
        assert m.bytes == bb[k].bytes == 64 * MIB and (m.files, bb[k].files) == (64, 1)
        rate, c = (R, 66e-6) if k[0] == "read" else (W, 91e-6)
        assert bb[k].seconds == pytest.approx(64 * MIB / rate + c, rel=1e-12)
        assert m.seconds == pytest.approx(64 * MIB / rate + 64 * c, rel=1e-12)
    assert AIO_PER_FILE_S == {"read": 66e-6, "write": 91e-6}
    assert sb[("read", "forward", "lp_param_partitions")].seconds / bb[("read", "forward", "lp_param_partitions")].seconds \
        == pytest.approx(1.0613, abs=1e-4)
    # the step time carries the difference: reads in two windows larger than their compute, the write synchronous
    d = step_time(_param_plan([2 ** 19] * 64), _hw(), seq_len=16).total - step_time(_param_plan([2 ** 25]), _hw(), seq_len=16).total
    assert d == pytest.approx(2 * 63 * 66e-6 + 63 * 91e-6, rel=1e-6)


def test_partitions_below_the_swap_threshold_are_no_files_by_hand():
    """A partition under max(1 MiB, aio.block_size) stays on the host (``swappable_tensor``): 2^19 - 512
    bf16 elements (1 MiB - 1 KiB) add neither bytes nor a file beside one 1 MiB partition."""
    rows = _nvme_rows(_param_plan([2 ** 19, 2 ** 19 - 512]))
    assert rows and all(m.files == 1 and m.bytes == MIB for m in rows)


def _grad_files(numels: list[int], W: int) -> list[int]:
    inv = Inventory("m", [TensorSpec(f"w{i}", (n,), trainable=True) for i, n in enumerate(numels)])
    raw = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}}
    f = zero3_grad_swap_files_by_rank(effective_config(raw), inv, W)
    return [f[r] for r in range(W)]


def test_gradient_files_follow_the_pieces_by_hand():
    """ZeRO-3 optimizer swap at W = 2, one sub-group (sub_group_size 1e9): a rank's fp32 gradient piece of a
    parameter is a file when its aligned part (multiples of 1024 B / 4 = 256 elements) is >= 1 MiB.
    2^20 elements: pieces of 2^19 (2 MiB); 2^19 + 2^18: pieces of 393,216 (1.5 MiB); 2^19 + 1024: pieces
    of 262,656 (1,050,624 B); 2^18 + 4096: pieces of 133,120 (532,480 B, no file). 3 files on each rank;
    at W = 4 only the first two are (partitions of 262,144 and 196,608 elements: 1 MiB and 0.75 MiB):
    1 file each."""
    numels = [2 ** 20, 2 ** 19 + 2 ** 18, 2 ** 19 + 1024, 2 ** 18 + 4096]
    assert _grad_files(numels, 2) == [3, 3]
    assert _grad_files(numels, 4) == [1, 1, 1, 1]


def test_a_last_rank_with_a_short_piece_writes_one_file_fewer_by_hand():
    """n = 2^21 + 1 at W = 8: p = ceil(n / 8) = 262,145 elements; ranks 0-6 hold p, aligned part
    floor(262,145 / 256) x 256 = 262,144 elements = 1 MiB, a file each; rank 7 holds n - 7 p = 262,138
    elements, 1,048,552 B < 1 MiB: no file. The movement rows of rank 7 carry 0 gradient files."""
    assert _grad_files([2 ** 21 + 1], 8) == [1] * 7 + [0]


def test_the_text_names_the_files_and_their_seconds_by_hand():
    """The newcomer found the file counts only inside the JSON terms' formulas: the step-time text's NVMe line now
    says them. 64 partitions of 1 MiB: 64 files written after the step and 64 read in each of forward and backward,
    192 files, 64 x 91 us + 128 x 66 us = 14.272 ms of the busy time."""
    from advisor.ledger.steptime import breakdown_lines
    st = step_time(_param_plan([2 ** 19] * 64), _hw(), seq_len=16)
    assert st.assumptions["nvme_files"] == {"files": 192, "seconds": pytest.approx(64 * 91e-6 + 128 * 66e-6)}
    text = " ".join(" ".join(breakdown_lines(st)).split())
    assert "192 aio files per step" in text and f"{64 * 91e-6 + 128 * 66e-6:,.3f} s of the busy time" in text
    one = step_time(_param_plan([2 ** 25]), _hw(), seq_len=16)  # one file a pass: 3 files, 91 + 2 x 66 us
    assert one.assumptions["nvme_files"]["files"] == 3 and "3 aio files per step" in " ".join(breakdown_lines(one))
