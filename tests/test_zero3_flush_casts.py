"""ZeRO-3's reduce flush with a communication_data_type or grad_accum_dtype unlike the model's, and
gradient_predivide_factor's copies without reduce_scatter (state._zero3_flush_copies, state._zero3_predivide_copies). Figures by hand from DeepSpeed 0.19.8 ``stage3.py``: the ipg bucket is of the
communication dtype C (l. 782-784) and takes each gradient by a casting copy_ (l. 1637); a gradient too large for
the bucket stays whole in the model's dtype D and __avg_scatter_grads casts it to C (l. 1919-1920) before
``coalesced_collectives.py`` reduce_scatter_coalesced's flat buffer (sum ceil(n_i/W) x W x C); its outputs (rank 0:
ceil(n_i/W) elements each) are cast to grad_accum_dtype G where G differs from C (l. 1943-1944). The engine's
tracker saw exactly these sites at that flush (TINY, bf16, communication_data_type fp32, W = 2, 2026-12-06):
reduce_scatter_coalesced's torch.cat 92,712 B, l. 1920 92,708 B, l. 1944 23,178 B, linear.py l. 134 (l2.weight
whole) 46,354 B, l. 141 (l2.bias) 154 B; the engine cell is tests/engine/test_peak_parity.py
z3_bf16_oo_cpu_linear_commfp32_smallbucket_w2."""
import os
import sys

from advisor.config.effective import effective_config
from advisor.ledger import state
from advisor.model.inventory import from_dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine"))
import parity  # noqa: E402

TINY = from_dict(parity.TINY, "tiny")


def _ec(top=None, **zero):
    return effective_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                             "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                             "zero_optimization": {"stage": 3, "reduce_bucket_size": 10000, **zero}, **(top or {})})


# TINY's backward order under memory_efficient_linear (weight first): l3.weight, l3.bias, l2.weight (23,177: larger
# than the bucket, held whole), l2.bias (77; its arrival flushes l2.weight alone), l1.weight, l1.bias. The largest
# moment is that flush: l2.weight whole 23,177 x D + l2.bias arriving 77 x D + the flush's buffers
L2W, L2B = 23177, 77
FLAT = -(-L2W // 2) * 2   # reduce_scatter_coalesced's flat buffer, elements (23,178)
Q = -(-L2W // 2)          # rank 0's output, elements (11,589)


def test_model_dtype_throughout_is_flat_plus_whole():
    # C = D = G = 2: flat + l2.weight whole + l2.bias arriving (the figure of z3_bf16_linear_smallbucket_w2)
    got = state.zero3_reduce_flush_bytes(_ec(), TINY, 2)
    assert got[0] == FLAT * 2 + L2W * 2 + L2B * 2 == 92864, got


def test_fp32_communication_casts_the_whole_gradient_and_the_outputs_back():
    got = state.zero3_reduce_flush_bytes(_ec({"communication_data_type": "fp32"}), TINY, 2)
    assert got[0] == FLAT * 4 + L2W * 4 + Q * 2 + L2W * 2 + L2B * 2 == 255106, got
    # the same path without reduce_scatter: l2.weight's bucket is over reduce_bucket_size, so __avg_scatter_grads
    # runs too (l. 1674-1678; measured: the same 514,513 B at backward:1 as with reduce_scatter)
    got = state.zero3_reduce_flush_bytes(_ec({"communication_data_type": "fp32"}, reduce_scatter=False), TINY, 2)
    assert got[0] == 255106, got


def test_fp32_grad_accum_casts_only_the_outputs():
    got = state.zero3_reduce_flush_bytes(_ec({"data_types": {"grad_accum_dtype": "fp32"}}), TINY, 2)
    assert got[0] == FLAT * 2 + Q * 4 + L2W * 2 + L2B * 2 == 139220, got
    # C = G = 4: the whole gradient's cast, the outputs are views of the flat buffer
    got = state.zero3_reduce_flush_bytes(_ec({"communication_data_type": "fp32",
                                              "data_types": {"grad_accum_dtype": "fp32"}}), TINY, 2)
    assert got[0] == FLAT * 4 + L2W * 4 + L2W * 2 + L2B * 2 == 231928, got


def test_offload_norm_copy_comes_after_the_casts():
    # partition_grads (l. 2006) runs on the cast outputs, the flat buffer and the C copy freed: q x G + the
    # fp64 norm copy (11,589 x 8), below the moment of the casts
    ec = _ec({"communication_data_type": "fp32"}, offload_optimizer={"device": "cpu"})
    assert Q * 2 + Q * 8 < FLAT * 4 + L2W * 4 + Q * 2
    assert state.zero3_reduce_flush_bytes(ec, TINY, 2)[0] == 255106


def test_predivide_factor_copies_without_reduce_scatter():
    # __avg_scatter_grads (l2.weight's bucket is over reduce_bucket_size): each gradient divided into a copy when the
    # factor is not 1 (l. 1922-1923: 23,177 x 2), the rank's output multiplied into another when it is not the world
    # size either (l. 1933-1935: 11,589 x 2). Engine (2026-12-06): sites l. 1923 46,354 B and 1935 23,178 B
    base = FLAT * 2 + L2W * 2 + L2B * 2
    pre4 = state.zero3_reduce_flush_bytes(_ec({"gradient_predivide_factor": 4.0}, reduce_scatter=False), TINY, 2)
    assert pre4[0] == base + L2W * 2 + Q * 2 == 162396, pre4
    pre2 = state.zero3_reduce_flush_bytes(_ec({"gradient_predivide_factor": 2.0}, reduce_scatter=False), TINY, 2)
    assert pre2[0] == base + L2W * 2 == 139218, pre2
    # prescale_gradients: postscale_gradients off (engine.py l. 1736-1737), stage3.py scales nothing into a copy
    pres = state.zero3_reduce_flush_bytes(_ec({"gradient_predivide_factor": 4.0, "prescale_gradients": True},
                                              reduce_scatter=False), TINY, 2)
    assert pres[0] == base, pres


def test_all_reduce_path_multiplies_the_bucket_into_a_copy():
    # reduce_bucket_size 50,000 holds all of TINY (43,209 elements): no flush until the epilogue's, which takes
    # __avg_scatter_contiguous_grads (contiguous, within the bucket, no reduce_scatter): the bucket is divided in
    # place and multiplied back into a copy since the factor (1) is not the world size (l. 1882-1883): 43,209 x 2,
    # above any arrival (l2.weight whole 23,177 x 2)
    n = sum(t.numel for t in TINY.tensors)
    got = state.zero3_reduce_flush_bytes(_ec(reduce_bucket_size=50000, reduce_scatter=False), TINY, 2)
    assert got[0] == n * 2 == 86418, got
    # with reduce_scatter the epilogue's flat buffer (sum ceil(n_i/W) x W x 2) instead
    got = state.zero3_reduce_flush_bytes(_ec(reduce_bucket_size=50000), TINY, 2)
    assert got[0] == sum(-(-t.numel // 2) * 2 for t in TINY.tensors) * 2 == 86428, got


def test_excluded_names_only_what_the_plan_has():
    one = from_dict({"name": "one", "tensors": [{"name": "params.0", "shape": [200000]}]}, "one")
    assert state.zero3_backward_copies_excluded(_ec({"communication_data_type": "fp32"}), [(one, 2)]) == ""
    # without reduce_scatter: the short ranks' zero-padded partitions (l. 1898-1902), not in rank 0's walk, only
    # for a gradient within the bucket (l. 1674: __avg_scatter_contiguous_grads) whose n % W != 0
    odd = from_dict({"name": "odd", "tensors": [{"name": "params.0", "shape": [9999]}]}, "odd")
    assert "zero-padded" in state.zero3_backward_copies_excluded(_ec(reduce_scatter=False), [(odd, 2)])
    assert state.zero3_backward_copies_excluded(_ec(reduce_scatter=False), [(one, 2)]) == ""  # over the bucket
    # TINY's nn.Linears under memory_efficient_linear: the bias whole at its weight's hook
    assert "bias gradient" in state.zero3_backward_copies_excluded(_ec(), [(TINY, 2)])
    assert state.zero3_backward_copies_excluded(_ec(memory_efficient_linear=False), [(TINY, 2)]) == ""
    # qgZ in the ledger's config (across nodes: state.ledger_config keeps it only there)
    assert state.zero3_reduce_flush_bytes(_ec(zero_quantized_gradients=True), TINY, 2) is None
    assert "qgZ" in state.zero3_backward_copies_excluded(_ec(zero_quantized_gradients=True), [(one, 2)])
