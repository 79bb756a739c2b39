"""Model parallelism: which tensors a tensor-, pipeline- and expert-parallel rank holds.

The ledger (``advisor.ledger.state``) accounts ZeRO over the *data-parallel* group of one rank
role; this module turns the whole-model inventory into the inventory one role holds, from the
model's structure (Hugging Face tensor names, as :func:`advisor.model.specs.expand` and
:func:`advisor.model.inventory.from_module` produce them). Sizes are elements, never bytes.

Tensor parallelism t (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053 section 3;
``megatron/core/tensor_parallel/layers.py``):

* column-parallel linears (``ColumnParallelLinear``: q/k/v, fused qkv, MLP gate/up, fc1) split
  their *output* features by t, and so does their bias;
* row-parallel linears (``RowParallelLinear``: attention output, MLP down, fc2) split their
  *input* features by t; their bias is added after the all-reduce and is replicated;
* the token embedding (``VocabParallelEmbedding``) and the output layer (column-parallel over
  the vocabulary) split the vocabulary by t: ceil(V / t) rows per rank (Megatron pads V to a
  multiple of ``make_vocab_size_divisible_by`` x t, 128 x t by default; a Hugging Face model
  keeps its own V, so the padding here is only to a multiple of t);
* norms, position embeddings, MoE routers and every tensor this rule does not recognise are
  replicated on every tensor-parallel rank (:func:`tp_rule` says which rule applied);
* GPT-2's ``Conv1D`` stores weights (in, out), so its column/row split dimensions swap.
* Megatron requires the attention heads, the key/value heads and the MLP width to divide by t
  (``megatron/core/utils.py:divide`` asserts ``numerator % denominator == 0``);
  :class:`ParallelismError` says which one does not.
* MLA (DeepSeek): the low-rank down projections (``q_a_proj``, ``kv_a_proj_with_mqa``) and their
  norms are replicated, ``q_b_proj`` / ``kv_b_proj`` are column-parallel, ``o_proj`` row-parallel
  (Megatron-core ``transformer/multi_latent_attention.py``: the up projections are
  ColumnParallelLinear, the down projections are not split).

Expert parallelism e (DeepSpeed MoE, ``deepspeed/moe/layer.py:MoE``, ``moe/experts.py``,
``utils/groups.py:_create_expert_and_data_parallel``): each expert-parallel rank holds
num_experts / e experts of every MoE layer; routed experts are *not* split by tensor
parallelism (DeepSpeed's default ``enable_expert_tensor_parallelism=False``). Expert tensors are
the ones under ``.experts.`` (fused ``experts.gate_up_proj`` (E, 2m, h) or per-expert modules
``experts.{i}.``); shared experts are dense.

Pipeline parallelism p (DeepSpeed ``runtime/pipe/module.py:PipelineModule``, Megatron-DeepSpeed
``GPTModelPipe`` with ``partition_method='type:transformer'``): the transformer layers are split
into p contiguous stages by ``runtime/utils.py:partition_uniform`` (the first L mod p stages get
one layer more); the first stage also holds everything before the first layer (embeddings), the
last stage everything after the last one (final norm, output head, MTP modules). A tied
embedding (``tie_word_embeddings``) is a ``TiedLayerSpec``: the first and the last stage each
hold a copy (``PipelineModule._index_tied_modules``), its gradients all-reduced between them.
"""

from __future__ import annotations

import itertools
import operator
import re
from dataclasses import dataclass

from advisor.errors import AdvisorError
from advisor.model.inventory import Inventory, TensorSpec


class ParallelismError(AdvisorError):
    """The model cannot be split this way (a size that Megatron requires to divide does not)."""


#: Output (dim 0 of an (out, in) weight) split: Megatron ColumnParallelLinear.
_COLUMN = ("q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "gate_proj", "up_proj",
           "gate_up_proj", "dense_h_to_4h", "w1", "w3", "q_b_proj", "kv_b_proj", "c_attn", "c_fc", "fc1")
#: Input (dim 1) split: Megatron RowParallelLinear (bias replicated).
_ROW = ("o_proj", "down_proj", "dense", "dense_4h_to_h", "w2", "c_proj", "fc2", "out_proj")
_VOCAB = ("embed_tokens", "wte", "word_embeddings", "lm_head")
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_EXPERT_RE = re.compile(r"(?:^|\.)experts\.(?:(\d+)\.)?")


def in_layer_flags(inv: Inventory) -> bytes:
    """Per tensor of ``inv.tensors``: 1 when its name is a decoder layer's (``layers.i.`` / ``h.i.`` /
    ``blocks.i.``, :data:`_LAYER_RE`), else 0. Once per tensor list (``Inventory.memo``), the regex
    mapped at C level (a Python expression per tensor before: ~0.3 s at 1e5 layers, issue 21)."""
    return inv.memo(("in_layer_flags",), lambda: bytes(map(bool, map(_LAYER_RE.search, map(
        operator.attrgetter("name"), inv.tensors)))))


@dataclass(frozen=True)
class LayerRepeat:
    """An inventory whose decoder layers are identical (issue 21: a model built from a config.json
    is N copies of one layer): tensors ``[head, head + unit x count)`` are ``count`` layers of ``unit``
    tensors each, and tensor ``head + t x unit + j`` is tensor ``head + j`` with its layer number
    ``first + t`` in place of ``first`` in its name (``{prefix}{first + t}.{suffix_j}``) and the same
    shape, numel, trainable flag, param group and dtype. Every tensor after the layers is outside any
    layer (:func:`in_layer_flags` 0); the tensors before ``head`` are outside any layer too, or (with
    :data:`LEADING_LAYERS`) end with leading layers unlike the repeating ones, numbered apart from them
    (:attr:`lead`: an MoE's first dense layers, issue 21's per-expert Kimi-K2 / DeepSeek-V3). The ledger's
    passes over identical layers use it to walk a few layers and repeat the rest (``advisor.ledger.state``);
    only names and sizes are compared, so an inventory file with identical layers qualifies too."""

    head: int
    unit: int
    count: int
    prefix: str
    first: int
    #: tensors of the leading layers just before ``head`` (in_layer_flags 1), 0 where ``head`` is the
    #: first layer tensor
    lead: int = 0

    @property
    def end(self) -> int:
        """The first tensor after the last layer."""
        return self.head + self.unit * self.count


def layer_repeat(inv: Inventory) -> "LayerRepeat | None":
    """The :class:`LayerRepeat` of ``inv`` when its layer tensors are contiguous, numbered
    ``first, first + 1, ...`` from their first one, and identical but for that number (names and
    every field compared, C-level column comparisons) -- with :data:`LEADING_LAYERS` the longest such run
    of layers ending at the last layer, after leading layers unlike them (``lead`` tensors) -- else None;
    once per tensor list (``Inventory.memo``)."""
    return inv.memo(("layer_repeat",), lambda: _layer_repeat(inv))


#: Whether :func:`layer_repeat` also finds identical layers after leading layers unlike them (an MoE's
#: ``first_dense_layers``: Kimi-K2's 60 MoE layers after 1 dense one, issue 21); False: only a model whose
#: layers are all identical (the passes then walk every tensor of such an MoE). The shortcut's switch:
#: tests/test_moe_leading_layers_identity.py compares the ledgers both ways.
LEADING_LAYERS = True


def _layer_repeat(inv: Inventory) -> "LayerRepeat | None":
    flags = in_layer_flags(inv)
    a = flags.find(1)
    if a < 0:
        return None
    b = flags.rfind(1) + 1
    if flags.find(0, a, b) >= 0:
        return None
    rep = _repeat_from(inv, a, b)
    if rep is not None or not LEADING_LAYERS:
        return rep
    # leading layers unlike the others: the unit is the last layer's tensors, and the repeating layers the
    # longest run of identical ones ending at b -- found by bisection on k, the layers counted back from b
    # (the last k layers identical implies the last k - 1 are), each probe C-level column comparisons
    ts = inv.tensors
    m = _LAYER_RE.search(ts[b - 1].name)
    p_last = ts[b - 1].name[:m.end()]
    u = 0
    while b - u > a and ts[b - 1 - u].name.startswith(p_last):
        u += 1

    def probe(k: int) -> "LayerRepeat | None":
        r = _repeat_from(inv, b - k * u, b)
        return r if r is not None and r.unit == u and r.count == k else None
    lo, hi = 1, (b - a) // u  # probe(lo) holds or lo == 1; probe(hi + 1) fails
    if (b - a) % u == 0:
        hi -= 1  # all layers identical was _repeat_from(a, b), which failed
    while lo < hi:
        k = (lo + hi + 1) // 2
        if probe(k) is not None:
            lo = k
        else:
            hi = k - 1
    rep = probe(lo) if lo >= 2 else None
    if rep is None:
        return None
    # the leading layers numbered apart from the repeating ones: a container name (``model.layers.i``) is then
    # new in each repeating layer, as the passes assume
    nums = set(map(int, (mm.group(1) for mm in map(_LAYER_RE.search, map(operator.attrgetter("name"),
                                                                             ts[a:rep.head])))))
    if any(rep.first <= x < rep.first + rep.count for x in nums):
        return None
    return LayerRepeat(rep.head, rep.unit, rep.count, rep.prefix, rep.first, rep.head - a)


def _repeat_from(inv: Inventory, a: int, b: int) -> "LayerRepeat | None":
    """The :class:`LayerRepeat` of tensors [a, b) (all in a layer) when they are identical layers, else None."""
    ts = inv.tensors
    m = _LAYER_RE.search(ts[a].name)
    prefix, first = ts[a].name[:m.start(1)], int(m.group(1))
    p0 = f"{prefix}{first}."
    u = 0
    while a + u < b and ts[a + u].name.startswith(p0):
        u += 1
    count, rest = divmod(b - a, u)
    if rest or count < 2:
        return None
    layer = ts[a:b]
    for f in ("numel", "shape", "trainable", "group", "dtype"):
        col = list(map(operator.attrgetter(f), layer))
        if col != col[:u] * count:
            return None
    names = list(map(operator.attrgetter("name"), layer))
    suffixes = [n[len(p0):] for n in names[:u]]
    want = list(map(operator.add, itertools.chain.from_iterable(map(itertools.repeat, map(
        f"{prefix}{{}}.".format, range(first, first + count)), itertools.repeat(u, count))), suffixes * count))
    if names != want:
        return None
    return LayerRepeat(a, u, count, prefix, first)


def tp_rule(t: TensorSpec) -> tuple[str, int | None]:
    """Which tensor-parallel rule applies to ``t``: (kind, split dimension or None).

    kind is ``vocab`` (dim 0), ``column`` (output features; bias too), ``row`` (input features;
    a row-parallel bias is replicated: dim None), ``expert`` (split by expert parallelism, not
    TP) or ``replicated``. Decided from the Hugging Face module name (see the module docstring)."""
    name = t.name
    parts = name.split(".")
    leaf = parts[-1]
    mod = parts[-2] if len(parts) >= 2 else ""
    if "experts." in name and _EXPERT_RE.search(name):  # the substring test first: no regex per dense tensor
        return "expert", None
    conv1d = mod in ("c_attn", "c_fc", "c_proj")  # GPT-2 Conv1D: weight (in, out)
    if mod in _VOCAB and leaf == "weight" and len(t.shape) == 2:
        return "vocab", 0
    if mod in _COLUMN and len(t.shape) >= 1:
        if leaf == "bias":
            return "column", 0
        if len(t.shape) == 2:
            return "column", 1 if conv1d else 0
    if mod in _ROW and len(t.shape) >= 1:
        if leaf == "bias":
            return "row", None
        if len(t.shape) == 2:
            return "row", 0 if conv1d else 1
    return "replicated", None


def _split(shape: tuple[int, ...], dim: int, n: int, what: str, name: str, exact: bool) -> tuple[int, ...]:
    if exact and shape[dim] % n:
        raise ParallelismError(f"{name}: {what} {shape[dim]} is not divisible by {n} "
                               "(megatron/core/utils.py:divide asserts numerator % denominator == 0)")
    s = list(shape)
    s[dim] = -(-shape[dim] // n)
    return tuple(s)


def check_tp_divisibility(meta: dict, tp: int) -> None:
    """Raise ParallelismError when Megatron cannot split this architecture over ``tp`` ranks:
    attention heads, key/value heads (``num_query_groups``) and the MLP width must divide by tp
    (``megatron/core/transformer/attention.py`` divide(num_attention_heads, world_size),
    divide(num_query_groups, world_size); ``mlp.py`` ffn_hidden_size)."""
    if tp <= 1:
        return
    for key, what in (("num_heads", "num_attention_heads"), ("num_kv_heads", "num_key_value_heads"),
                      ("intermediate_size", "intermediate_size")):
        v = meta.get(key)
        if isinstance(v, int) and v % tp:
            raise ParallelismError(f"--tensor-parallel {tp}: {what} {v} is not divisible by {tp} "
                                   "(Megatron: megatron/core/utils.py:divide asserts numerator % denominator == 0)")


def shard_tensor(t: TensorSpec, tp: int, ep: int = 1, num_experts: int | None = None,
                 rule: "tuple[str, int | None] | None" = None) -> TensorSpec | None:
    """``t`` as one tensor- and expert-parallel rank holds it (the first of its group; every rank
    of the group holds the same shape, vocab-parallel tensors padded to a multiple of tp), or None
    when the rank holds none of it (a per-expert module of another expert-parallel rank).
    ``rule``: ``tp_rule(t)`` when the caller has it already."""
    kind, dim = tp_rule(t) if rule is None else rule
    if kind == "expert":
        if ep <= 1:
            return t
        m = _EXPERT_RE.search(t.name)
        if m and m.group(1) is not None:  # per-expert module: keep this rank's experts
            if num_experts and num_experts % ep:
                raise ParallelismError(f"num_experts {num_experts} is not divisible by ep_size {ep} "
                                       "(deepspeed/moe/layer.py: MoE asserts num_experts % ep_size == 0)")
            per = (num_experts or ep) // ep
            return t if int(m.group(1)) < per else None
        if t.shape[0] % ep:
            raise ParallelismError(f"{t.name}: {t.shape[0]} experts are not divisible by ep_size {ep} "
                                   "(deepspeed/moe/layer.py: MoE asserts num_experts % ep_size == 0)")
        return TensorSpec(t.name, (t.shape[0] // ep, *t.shape[1:]), t.trainable, t.group, t.dtype)
    if tp <= 1 or dim is None:
        return t
    shape = _split(t.shape, dim, tp, "the vocabulary" if kind == "vocab" else "the split dimension", t.name,
                   exact=kind != "vocab")
    return TensorSpec(t.name, shape, t.trainable, t.group, t.dtype)


def is_shard(inv: Inventory) -> bool:
    """True when ``inv`` is already one rank's shard (an inventory :func:`shard` made: its meta
    names the ``stage``), so it must not be split again: a fused expert tensor of E / e experts
    would be split by e a second time (8 experts at ep 8 -> 1 -> "1 experts are not divisible
    by ep_size 8"), and a per-expert layout would silently keep the same expert twice over."""
    return "stage" in (inv.meta or {})


def is_expert(t: TensorSpec) -> bool:
    """True for a routed-expert tensor (sharded by expert parallelism; ZeRO over the
    expert-data-parallel group)."""
    return "experts." in t.name and _EXPERT_RE.search(t.name) is not None


def partition_uniform(num_items: int, num_parts: int) -> list[int]:
    """Stage boundaries: part i holds items [parts[i], parts[i+1]). A copy of DeepSpeed
    ``runtime/utils.py:partition_uniform`` (the first ``num_items mod num_parts`` parts get one
    more item; with fewer items than parts the last parts are empty)."""
    if num_items <= num_parts:
        return [min(p, num_items) for p in range(num_parts + 1)]
    chunk, residual = divmod(num_items, num_parts)
    parts = [i * chunk for i in range(num_parts + 1)]
    for i in range(residual):
        for j in range(i + 1, num_parts + 1):
            parts[j] += 1
    return parts


def layer_of(t: TensorSpec) -> int | None:
    """Transformer-layer index of a tensor (``...layers.{i}.`` / ``h.{i}.``), None outside layers."""
    m = _LAYER_RE.search(t.name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class StageShard:
    """The tensors one pipeline stage x tensor-parallel rank x expert-parallel rank holds."""

    stage: int
    layers: tuple[int, int]  # [first, last) transformer layer index
    inventory: Inventory
    #: Names of tensors the tensor-parallel rule left replicated although tp > 1 (norms etc.).
    replicated: int = 0


def _tp_rules(inv: Inventory) -> tuple:
    """:func:`tp_rule` of each tensor of ``inv``. tp_rule depends on the tensor's name and shape only:
    once per tensor list, not per (tp, pp, ep) (each distinct rule held once: 9e5 equal tuples would
    cost ~50 MB at 1e5 layers)."""
    canon: dict = {}
    return inv.memo(("tp_rule",), lambda: tuple(canon.setdefault(r, r) for r in map(tp_rule, inv.tensors)))


def layer_period(inv: Inventory, rules: bool = False) -> int | None:
    """T, the tensors of each decoder layer, when every layer of ``inv`` is the same up to its index:
    :func:`layer_repeat`'s unit, where its layers are numbered from 0 (as :func:`layer_of` reads them:
    the first :data:`_LAYER_RE` match of a layer tensor's name is its layer number, and layer i's
    tensors are the i-th T of the one block of layer tensors) and, with ``rules``, the tensor at offset
    j of every layer has the same tensor-parallel rule (:func:`tp_rule`, which :func:`shard` applies
    only when tp > 1). None otherwise. Then two pipeline stages of :func:`shard` holding only layers,
    as many each (the stages between the first and the last), hold the same tensors up to the layer
    indices in their names. One detector of identical layers (:func:`layer_repeat`, issue 21; this
    was a second scan of its own, which also took a single layer, or layers whose tensors' name
    prefixes differ, for a period: there this answers None, and the ledger accounts each stage on its
    own, the same figures). Once per tensor list (:meth:`Inventory.memo`)."""
    def compute() -> int | None:
        rep = layer_repeat(inv)
        if rep is None or rep.first != 0 or rep.lead:
            return None
        if rules:
            tpr = _tp_rules(inv)
            a, b, T = rep.head, rep.end, rep.unit
            if any(tpr[a + j:b:T].count(tpr[a + j]) != rep.count for j in range(T)):
                return None
        return rep.unit
    return inv.memo(("layer_period", bool(rules)), compute)


def shard(inv: Inventory, tp: int = 1, pp: int = 1, ep: int = 1) -> list[StageShard]:
    """One :class:`StageShard` per pipeline stage (stage order) for tensor parallelism ``tp``,
    pipeline parallelism ``pp`` and expert parallelism ``ep`` (see the module docstring).

    An inventory without layer names (``--params``: synthetic chunks) has no structure to split
    by: its tensors are split by tp along dim 0 (every tensor treated as a matrix sharded by TP)
    and dealt to stages by partition_uniform over the tensors. Raises ParallelismError when a
    dimension Megatron requires to divide does not.

    Computed once per (tensor list, tp, pp, ep) (:meth:`Inventory.memo`): the ledger, movement,
    checkpoint and step time of every plan generate fits ask for the same split, an O(tensors)
    pass with a regex per tensor (84 of them made generate at 1e5 layers minutes long). Callers
    must not mutate the shards."""
    return list(inv.memo(("shard", tp, pp, ep), lambda: tuple(_shard(inv, tp, pp, ep))))


def forget_shard(inv: Inventory, tp: int = 1, pp: int = 1, ep: int = 1, split: bool = False) -> None:
    """Drop :func:`shard`'s memoised split of ``inv`` for (tp, pp, ep): its stage inventories and
    every table memoised on them (ZeRO-1/2 layouts and their flush replays, module columns) are freed
    once nothing else holds them. generate calls it when it has searched a layout. ``split``: also
    :func:`_tp_split`'s per-tensor shards for (tp, ep), which every pipeline degree's split shares
    (generate: when no layout left to search has this tp)."""
    inv.forget(("shard", tp, pp, ep))
    if split:
        for key in [k for k in inv._memo if isinstance(k, tuple) and k[:1] == ("tp_split",) and k[1:3] == (tp, ep)]:
            inv.forget(key)


def _tp_split(inv: Inventory, tp: int, ep: int, structured: bool, n_exp: "int | None") -> tuple:
    """(per tensor of ``inv``: the shard one tensor- and expert-parallel rank holds, None where it holds none;
    per tensor: whether that shard counts as replicated) for :func:`_shard` with ``tp`` > 1 or ``ep`` > 1.
    Neither depends on the pipeline degree, which only deals the shards to stages: computed once per
    (tensor list, tp, ep) (:meth:`Inventory.memo`) and shared by every pipeline degree's split, whose stages
    then hold the same TensorSpec objects (frozen). generate at the 1e5-tensor limit split each tensor for
    each (tp > 1, pp) layout: 5 splits of 1e5 tensors where 2 tp degrees need 2 (issue 21)."""
    def compute() -> tuple:
        if not structured:
            # no layer structure: every tensor sharded along dim 0 (the module docstring), none replicated
            return (tuple(TensorSpec(t.name, (-(-t.shape[0] // tp), *t.shape[1:]), t.trainable, t.group, t.dtype)
                          for t in inv.tensors), None)
        rules = _tp_rules(inv)
        sts = tuple(map(shard_tensor, inv.tensors, itertools.repeat(tp), itertools.repeat(ep),
                        itertools.repeat(n_exp), rules))
        reps = tuple(tp > 1 and st is t and rule[0] in ("replicated", "row")
                     for st, t, rule in zip(sts, inv.tensors, rules))
        return sts, reps
    return inv.memo(("tp_split", tp, ep, structured, n_exp), compute)


def _shard(inv: Inventory, tp: int, pp: int, ep: int) -> list[StageShard]:
    meta = inv.meta or {}
    structured = inv.memo(("structured",), lambda: any(layer_of(t) is not None for t in inv.tensors))
    if structured:
        check_tp_divisibility(meta, tp)
    L = int(meta.get("num_layers") or 0)
    # layer index per tensor, once per tensor list (every (tp, pp, ep) split generate tries needs it)
    idx = inv.memo(("layer_of",), lambda: tuple(layer_of(t) for t in inv.tensors))
    if structured and not L:
        L = max(i for i in idx if i is not None) + 1
    first_layer_pos = next((k for k, i in enumerate(idx) if i is not None), len(idx))
    tied = bool(meta.get("tie_word_embeddings"))
    n_exp = meta.get("num_experts") or None
    out: list[StageShard] = []
    if structured:
        bounds = partition_uniform(L, pp)
    else:
        bounds = partition_uniform(len(inv.tensors), pp)
    # one pass over the tensors, each dealt to its stage (a pass per stage made this O(pp x tensors));
    # the TP rule is decided once per tensor
    per_stage: list[list[TensorSpec]] = [[] for _ in range(pp)]
    reps = [0] * pp
    if structured:
        # stage of layer i: bounds[s] <= i < bounds[s + 1] (empty stages hold no layer)
        stage_of_layer = [0] * L
        for s in range(pp):
            for i in range(bounds[s], bounds[s + 1]):
                stage_of_layer[i] = s
        last = pp - 1
        rules = _tp_rules(inv)
        sts, rps = _tp_split(inv, tp, ep, True, n_exp) if tp > 1 or ep > 1 else (None, None)
        for k, t in enumerate(inv.tensors):
            i = idx[k]
            if i is None:
                if k < first_layer_pos:
                    s = 0
                    # TiedLayerSpec: the last stage holds its own copy of a tied vocab tensor
                    also_last = tied and last > 0 and rules[k][0] == "vocab"
                else:
                    s, also_last = last, False
            elif i >= L:  # MTP modules after the main layers
                s, also_last = last, False
            else:
                s, also_last = stage_of_layer[i], False
            if sts is None:  # tp <= 1 and ep <= 1: shard_tensor keeps every tensor whole, nothing counts as replicated
                st, rep = t, False
            else:
                st = sts[k]
                if st is None:
                    continue
                rep = rps[k]
            per_stage[s].append(st)
            reps[s] += rep
            if also_last:
                per_stage[last].append(st)
                reps[last] += rep
    else:
        split = _tp_split(inv, tp, 1, False, None)[0] if tp > 1 else inv.tensors
        for s in range(pp):
            per_stage[s].extend(split[bounds[s]:bounds[s + 1]])
    for s in range(pp):
        lo, hi = bounds[s], bounds[s + 1]
        m = dict(meta)
        m.update(tensor_parallel=tp, pipeline_parallel=pp, expert_parallel=ep, stage=s)
        name = inv.name + (f" [stage {s} of {pp}]" if pp > 1 else "") + (f" [1/{tp} TP shard]" if tp > 1 else "")
        out.append(StageShard(s, (lo, hi), Inventory(name=name, tensors=per_stage[s], source=inv.source, meta=m),
                              reps[s]))
    return out


def split_experts(inv: Inventory) -> tuple[Inventory, Inventory]:
    """(dense tensors, routed-expert tensors) of ``inv``: DeepSpeed puts expert parameters in
    their own optimizer param groups (``moe/utils.py:split_params_into_different_moe_groups_for_optimizer``),
    each partitioned over its expert-data-parallel group."""
    dense = [t for t in inv.tensors if not is_expert(t)]
    exp = [t for t in inv.tensors if is_expert(t)]
    return (Inventory(inv.name, dense, inv.source, dict(inv.meta)),
            Inventory(inv.name + " (experts)", exp, inv.source, dict(inv.meta)))
