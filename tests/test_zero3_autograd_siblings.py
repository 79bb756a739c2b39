"""ZeRO-3's autograd siblings (state.zero3_autograd_siblings): a GPT-2 Conv1D (torch.addmm) or a LayerNorm keeps
torch's node at ZeRO-3 (only F.linear becomes LinearFunctionForZeroStage3), so its bias's hook fires with its
weight's gradient whole. Figures by hand from stage3.py's bucket (flush before the arriving gradient joins,
l. 1583; reduce_scatter_coalesced's flat buffer sum ceil(n_i/W) x W x C; one unpadded tensor a view); the engine:
tests/engine/test_peak_parity.py z3_bf16_gpt_smallbucket_w2."""
import os
import sys

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.model.inventory import from_dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402


def _ec(**zero):
    return effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                             "zero_optimization": {"stage": 3, "reduce_bucket_size": 10000, **zero}})


def test_gpt_mlp_flush_holds_the_sibling():
    inv = from_dict(parity.TINY_GPT, "gpt")
    # backward order (a module's parameters in reverse): ln_f.bias, ln_f.weight, c_proj.bias, c_proj.weight,
    # c_fc.bias, c_fc.weight, ln_1.bias, ln_1.weight. c_fc.bias's arrival (301) flushes c_proj.weight (23,177, held
    # whole): flat ceil(23,177 / 2) x 2 x 2 + whole 23,177 x 2 + arriving 301 x 2 + c_fc.weight whole 19,264 x 2
    got = state.zero3_reduce_flush_bytes(_ec(), inv, 2)
    assert got[0] == 46356 + 46354 + 602 + 38528 == 131840, got
    assert "autograd sibling's whole gradient 38,528 B" in got[1]
    # the sibling of every pair goes to the one arriving first (the bias): LayerNorms' too, Conv1D's
    sib = state.zero3_autograd_siblings(inv)
    assert sib == [0, 64, 0, 19264, 0, 23177, 0, 77]


def test_linear_pairs_have_no_sibling_under_memory_efficient_linear():
    # TINY's nn.Linears: LinearFunctionForZeroStage3 (weight first, the bias's 154 B not counted)
    assert state.zero3_autograd_siblings(from_dict(parity.TINY, "tiny")) is None
    # with memory_efficient_linear off F.linear is torch's: the bias first, the weight whole beside it
    assert state.zero3_autograd_siblings(from_dict(parity.TINY, "tiny"), linear=False) == [0, 19264, 0, 23177, 0, 385]


def test_measure_builds_the_nodes():
    # measure's proxy runs each pair as the node the ledger assumes (worker Leaf kinds)
    inv = from_dict(parity.TINY_GPT, "gpt")
    assert state.autograd_node_pairs(inv, 3) == {0: (1, "layer_norm"), 2: (3, "conv1d"), 4: (5, "conv1d"),
                                                 6: (7, "layer_norm")}
    assert state.autograd_node_pairs(from_dict(parity.TINY, "tiny"), 2) == {0: (1, "linear"), 2: (3, "linear"),
                                                                          4: (5, "linear")}
