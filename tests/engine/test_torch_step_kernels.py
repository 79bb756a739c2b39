"""torch 2.13's optimizer step temporaries, measured on torch itself (no DeepSpeed): the allocation tracker of the
engine worker (advisor.engine.worker.StorageTracker) around one ``step()`` of torch's AdamW / Adam / Adagrad on
TINY's tensors (fp32, CPU), its high-water mark of the storages the step makes, against
advisor.ledger.state.torch_step_temporaries. The single-tensor loop is what a CPU run takes by default; the foreach
path (a GPU's default) is forced here with ``foreach=True``: on the CPU torch runs _multi_tensor_adam /
_multi_tensor_adagrad with its per-tensor fallback kernels, which return the same lists of new tensors
(``_foreach_sqrt``: N_call elements) as a GPU's fused list kernels -- the lists measured, not a GPU's allocator.
Measured 2026-12-06 (torch 2.13.0+cpu), each equal to the formula to the byte: AdamW single 186,620 B / foreach
172,836; Adam with coupled weight decay single 279,328 / foreach 172,836; Adagrad single 93,912 / foreach 345,672."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity  # noqa: E402

from advisor.config.effective import effective_config  # noqa: E402
from advisor.ledger.state import torch_step_temporaries  # noqa: E402

SHAPES = [t["shape"] for t in parity.TINY["tensors"]]


def _measure(cls, **kw):
    import torch
    from advisor.engine.worker import StorageTracker
    torch.manual_seed(0)
    tr = StorageTracker()
    with tr.mode:  # every storage from the start: an in-place op's output is then a known storage, not a new one
        tr.set_phase("setup")
        ps = [torch.nn.Parameter(torch.randn(*s)) for s in SHAPES]
        for p in ps:
            p.grad = torch.randn_like(p)
        opt = cls(ps, lr=1e-3, **kw)
        opt.step()  # the state (moments, step tensors) made before the step measured
        tr.set_phase("step")
        base = tr.total
        opt.step()
        tr.end_phase()
    return tr.peaks["step"]["bytes"] - base


CASES = [
    # (torch class name, kwargs, config optimizer, the basic optimizer's name, path)
    ("AdamW", {"foreach": False}, {"type": "AdamW", "params": {"torch_adam": True}}, "AdamW", "single"),
    ("AdamW", {"foreach": True}, {"type": "AdamW", "params": {"torch_adam": True}}, "AdamW", "foreach"),
    ("Adam", {"foreach": False, "weight_decay": 0.1},
     {"type": "Adam", "params": {"torch_adam": True, "adam_w_mode": False, "weight_decay": 0.1}}, "Adam", "single"),
    ("Adam", {"foreach": True, "weight_decay": 0.1},
     {"type": "Adam", "params": {"torch_adam": True, "adam_w_mode": False, "weight_decay": 0.1}}, "Adam", "foreach"),
    ("Adagrad", {"foreach": False}, {"type": "Adagrad", "params": {}}, "Adagrad", "single"),
    ("Adagrad", {"foreach": True}, {"type": "Adagrad", "params": {}}, "Adagrad", "foreach"),
]


@pytest.mark.engine
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[4]}" + ("-wd" if "weight_decay" in c[1] else "") for c in CASES])
def test_torch_step_temporaries_match_torch(case):
    torch = pytest.importorskip("torch")
    name, kw, opt_cfg, basic, path = case
    got = _measure(getattr(torch.optim, name), **kw)
    ec = effective_config({"train_micro_batch_size_per_gpu": 1, "optimizer": opt_cfg})
    want = torch_step_temporaries(ec, basic, [tuple(int(torch.Size(s).numel()) for s in SHAPES)], path)[0]
    # the step's 0-dim scalars (a CPU step increment, bias corrections) are a few bytes beside the lists
    assert want <= got <= want + 256, (got, want)
