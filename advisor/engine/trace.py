"""Trace mode: activations measured on transformers' own modeling code, on a fake device.

The Hugging Face model is built from its ``config.json`` (``transformers.AutoConfig.for_model``
plus ``AutoModelForCausalLM.from_config``) inside torch's ``FakeTensorMode``: every tensor has
its real shape, dtype and storage size but no data and no memory, so a 70B-shaped layer costs
nothing. One training forward and backward (``labels`` = ``input_ids``: transformers' own
``ForCausalLMLoss``) runs under ``torch.distributed._tools.mem_tracker.MemTracker``, which
follows every tensor storage from creation to release (distinct storages counted once) and
snapshots the live bytes per module before/after forward and at each module's forward and
backward peak. Parameter gradients are dropped as soon as they are accumulated (a
``post_accumulate_grad_hook``): gradient memory is the ledger's business (ZeRO partitions and
buckets it), so what the tracker sees on top of the parameters is activations (``ACT``: what
forward left alive for backward, recomputed tensors included) and temporaries (``TEMP``:
activation gradients and the gradient being computed).

Read from the snapshots (bytes; see :class:`TraceResult`):

* per layer: live activation bytes a decoder layer adds during forward (``POST_FW - PRE_FW``
  of the layer): its saved tensors plus the output it hands on, minus its input when nothing
  keeps that alive;
* end of forward: activations alive when the loss is returned (saved tensors + the logits);
* loss spike: the forward peak on top of that (the fp32 logits copy inside the loss);
* backward peak: the largest ACT + TEMP instant of backward, and the module it falls in; with
  checkpointing it includes the recompute of one layer.

The fake device is the CPU, so ops run their CPU kernels' shapes and dtypes. Two differ from
CUDA in what they keep for backward, and the result says so when they occur: dropout keeps its
mask in the model dtype (aten ``_dropout_impl``: input x noise; CUDA's fused ``native_dropout``
keeps a bool mask, 1 byte), and LayerNorm keeps mean/rstd in the model dtype (CUDA: fp32,
``layer_norm_kernel.cu``; b x s elements each, negligible).

Models too large to trace whole are traced with a few layers (``max_layers``) and the rest
extrapolated from the last traced layer (identical layers: their bytes add linearly); the
result says so (``extrapolated``).

Imports torch and transformers lazily; raises :class:`TraceUnavailable` naming the extra to
install when they are missing. Nothing in lint/estimate/check/generate imports this module
unless ``--activations trace`` is asked for.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from advisor.errors import AdvisorError

#: The install extra that brings torch and transformers.
EXTRA = "deepspeed-advisor[trace]"

#: Config keys holding dropout probabilities, per transformers' config classes (GPT-2
#: ``attn_pdrop``/``resid_pdrop``/``embd_pdrop``, Llama family ``attention_dropout``, BLOOM
#: ``attention_dropout``/``hidden_dropout``, Phi-3 ``resid_pdrop``/``embd_pdrop``).
DROPOUT_KEYS = ("attn_pdrop", "resid_pdrop", "embd_pdrop", "attention_dropout", "hidden_dropout",
                "summary_first_dropout", "classifier_dropout", "mlp_dropout", "dropout")
#: The dropout keys a causal-LM training forward uses: GPT-2's ``summary_first_dropout`` belongs
#: to its double-heads summary and ``classifier_dropout`` to sequence classification heads, never
#: run by ``*ForCausalLM`` (GPT-2's config defaults summary_first_dropout to 0.1).
FORWARD_DROPOUT_KEYS = tuple(k for k in DROPOUT_KEYS if k not in ("summary_first_dropout", "classifier_dropout"))
#: The attention-dropout keys (GPT-2 ``attn_pdrop``; Llama-like ``attention_dropout``).
ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop")


def _dropout_on(cfg: Any, keys: tuple[str, ...]) -> bool:
    """Whether any of ``keys`` is a positive float on the transformers config ``cfg``."""
    return any(isinstance(getattr(cfg, k, None), float) and getattr(cfg, k) > 0 for k in keys)


def refuse_flash_stand_in(cfg: Any, attention: str, source: str) -> None:
    """Raise TraceUnavailable where a CPU trace asked for ``flash`` would run a different kernel
    and report its bytes as flash's: torch's CPU sdpa takes its math kernel when dropout_p > 0
    (measured with torch.profiler: ``_scaled_dot_product_attention_math`` instead of
    ``_scaled_dot_product_flash_attention_for_cpu``), which keeps the s^2 probabilities and mask
    that CUDA's fused kernels regenerate (GPT-2 with its default attn_pdrop 0.1: +178% per layer,
    issue #16). The formula counts the fused kernel, so it is the figure to use."""
    if attention == "flash" and _dropout_on(cfg, ATTENTION_DROPOUT_KEYS):
        raise TraceUnavailable(f"{source}: the trace cannot stand for flash attention with attention dropout "
                               "(torch's CPU sdpa runs its math kernel, keeping the s^2 probabilities): use "
                               "--activations formula (it counts the fused kernel), or --attention eager to trace eager")

#: Layer-count keys of the config classes (GPT-2 and BLOOM map num_hidden_layers to n_layer).
_LAYER_LIST_KEYS = ("layer_types", "mlp_only_layers")


class TraceUnavailable(AdvisorError):
    """torch or transformers is not installed, or transformers cannot build the model type."""


class _NoSelective(Exception):
    """Internal: the model never called the selective-recompute attention wrapper."""


@dataclass
class TraceResult:
    """Activation bytes of one micro-batch on one rank (no tensor/pipeline parallelism),
    measured on transformers' modeling code. All sizes in bytes (not GiB)."""

    model_type: str
    layers_total: int
    layers_traced: int
    #: True when layers_total > layers_traced: totals add (layers_total - layers_traced) copies
    #: of the last traced layer.
    extrapolated: bool
    seq_len: int
    micro_batch: int
    dtype: str
    attention: str
    checkpointing: str
    #: Live activation bytes each traced decoder layer adds in forward (POST_FW - PRE_FW).
    per_layer: list[int]
    #: Activations alive at the end of forward (saved for backward + the logits), all layers.
    end_of_forward: int
    #: Of end_of_forward: everything outside the decoder layers (embedding output, final norm,
    #: lm_head input, logits, the loss' saved log-softmax).
    outside_layers: int
    #: Forward peak minus end_of_forward: the transient at the loss (fp32 logits copy).
    loss_spike: int
    #: Largest activation + temporary bytes live at one instant of backward, all layers.
    backward_peak: int
    #: The innermost module whose backward peak is the global one (e.g. ``lm_head`` or a layer).
    backward_peak_module: str
    #: backward_peak minus the activations alive at the end of forward.
    backward_extra: int
    seconds: float
    #: The largest backward instant inside a decoder layer (its recompute under checkpointing,
    #: its activation gradients) minus end_of_forward; negative when the layers freed after
    #: the loss outweigh it. Measured on the traced layers (as backward_extra).
    layer_backward_extra: int = 0
    #: The largest backward instant outside the decoder layers (the loss, the lm_head, the
    #: embedding) minus end_of_forward. max(layer_backward_extra, outside_backward_extra) is
    #: backward_extra.
    outside_backward_extra: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> int:
        """Largest activation footprint of the step (bytes): forward or backward peak."""
        return max(self.end_of_forward + self.loss_spike, self.backward_peak)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["peak"] = self.peak
        return d


def _imports():
    from advisor.install import extra_command

    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise TraceUnavailable(f"--activations trace needs torch and transformers ({e.name} is missing): "
                               f"{extra_command('trace')}") from None
    return torch


_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def build_config(hf_config: dict[str, Any], layers: int | None = None, dropout: float | None = None,
                 source: str = "config.json"):
    """A transformers ``PretrainedConfig`` from a parsed ``config.json`` dict, optionally cut to
    ``layers`` decoder layers and with every dropout probability set to ``dropout``.

    Raises TraceUnavailable, one short line naming ``source``, when transformers does not know
    the ``model_type`` or its config class refuses a value (transformers' own validation:
    ValueError, AttributeError from a read-only property such as Falcon's head_dim, or
    huggingface_hub's StrictDataclassError); the message points to ``--params N``."""
    _imports()
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    d = dict(hf_config)
    mt = d.pop("model_type", None)
    if not mt:
        raise TraceUnavailable(f"{source}: no model_type: transformers cannot build it; "
                               "give --params N for the model states only")
    if mt not in CONFIG_MAPPING:  # its ValueError lists every known type (~12,000 characters)
        raise TraceUnavailable(f"{source}: transformers does not know model_type {mt!r} "
                               f"(see transformers' CONFIG_MAPPING); give --params N for the model states only")
    for k in ("architectures", "auto_map", "quantization_config", "torch_dtype", "dtype", "transformers_version"):
        d.pop(k, None)
    from transformers.utils import logging as hf_logging

    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # an older huggingface_hub: transformers' configs are not strict dataclasses
        StrictDataclassError = ValueError  # noqa: N806
    # token-id / loss_type notices about a config built in code; and the whole config dumped
    # with logger.error before a refused value is re-raised (we report the error ourselves)
    hf_logging.set_verbosity(hf_logging.CRITICAL)
    try:
        cfg = AutoConfig.for_model(mt, **d)
    except (ValueError, KeyError, TypeError, AttributeError, StrictDataclassError) as e:
        first = " ".join(str(e).split()).replace(": ;", ":") or type(e).__name__  # a validator's detail follows its first line
        if len(first) > 160:
            first = first[:157] + "..."
        raise TraceUnavailable(f"{source}: transformers refuses this {mt} config: {first}; "
                               "fix the value or give --params N for the model states only") from None
    finally:
        hf_logging.set_verbosity_error()
    if layers is not None and layers < cfg.num_hidden_layers:
        cfg.num_hidden_layers = layers
        for k in _LAYER_LIST_KEYS:
            v = getattr(cfg, k, None)
            if isinstance(v, list) and len(v) > layers:
                setattr(cfg, k, v[:layers])
    if dropout is not None:
        for k in DROPOUT_KEYS:
            if isinstance(getattr(cfg, k, None), (int, float)) and not isinstance(getattr(cfg, k), bool):
                setattr(cfg, k, float(dropout))
    cfg.use_cache = False
    return cfg


def _checkpointing_enable(model) -> None:
    """transformers' own activation checkpointing on every decoder layer, non-reentrant
    ``torch.utils.checkpoint`` (``activation_checkpointing_enable``; before transformers 5.x
    ``gradient_checkpointing_enable``, which 5.x keeps with a FutureWarning)."""
    on = getattr(model, "activation_checkpointing_enable", None)
    if on is not None:
        on(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # pragma: no cover - transformers 4.x
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _decoder_layers(model) -> list:
    """The repeated decoder blocks, in order: modules whose class is in ``_no_split_modules``
    (transformers' own list of blocks not to split), else the longest ModuleList."""
    import torch.nn as nn

    names = set(getattr(model, "_no_split_modules", None) or [])
    found = [m for m in model.modules() if type(m).__name__ in names]
    if found:
        return found
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


#: Calls of the selective-recompute attention wrapper (a model whose attention does not go
#: through transformers' AttentionInterface, BLOOM's ALiBi, never calls it).
_SELECTIVE_CALLS = [0]


def _selective_attention(attn_impl: str):
    """Register (once) an attention implementation that wraps transformers' own ``attn_impl``
    function in ``torch.utils.checkpoint``: Megatron's selective recompute (the attention core
    -- scores, softmax, dropout, weighted sum -- is recomputed in backward; projections are kept).
    Returns its registered name."""
    from torch.utils.checkpoint import checkpoint
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = f"advisor_selective_{attn_impl}"
    if name in ALL_ATTENTION_FUNCTIONS:
        return name
    if attn_impl == "eager":
        inner = None  # eager is each model's own eager_attention_forward: resolved per module below
    else:
        inner = ALL_ATTENTION_FUNCTIONS[attn_impl]

    def fn(module, query, key, value, attention_mask, **kw):
        _SELECTIVE_CALLS[0] += 1
        f = inner
        if f is None:
            import sys
            f = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
        return checkpoint(lambda q, k, v: f(module, q, k, v, attention_mask, **kw), query, key, value,
                          use_reentrant=False)

    AttentionInterface.register(name, fn)
    return name


@contextlib.contextmanager
def _real_mask_skip():
    """transformers skips building the causal mask for sdpa (``is_causal=True`` instead, and
    k/v are then not repeated for GQA) when the position ids show one unpadded sequence per
    row -- but it cannot read that from a fake tensor (``masking_utils.find_packed_sequence_indices``
    treats it as possibly packed), so under FakeTensorMode it would build an s x s mask and
    repeat k and v, which the real run does not. Our trace passes ``input_ids`` only: the
    position ids are ``arange(s)`` in every row, never packed. This gives transformers that
    answer (None: not packed) for the trace's duration."""
    try:
        from transformers import masking_utils
    except ImportError:  # pragma: no cover - older transformers
        yield
        return
    orig = getattr(masking_utils, "find_packed_sequence_indices", None)
    if orig is None:  # pragma: no cover
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = orig


def _checked_dtype_attention(dtype: str, attention: str) -> str:
    """The attention implementation transformers is asked for ("flash" traces as "sdpa": the
    same saved tensors on CPU). Raises ValueError on a dtype or attention the trace cannot run."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    attn = {"flash": "sdpa"}.get(attention, attention)
    if attn not in ("sdpa", "eager"):
        raise ValueError(f"attention must be sdpa, flash or eager, got {attention!r}")
    return attn


def trace_activations(hf_config: dict[str, Any], seq_len: int, micro_batch: int, dtype: str = "bf16",
                      attention: str = "sdpa", checkpointing: str | int = "none", max_layers: int = 4,
                      dropout: float | None = None, sac=None, source: str = "config.json") -> TraceResult:
    """Trace one training forward + backward of the model ``hf_config`` describes (a parsed
    ``config.json`` dict) on a fake device and measure its activations (see the module docstring).

    ``attention``: ``sdpa`` (``flash`` is taken as sdpa: the fused kernel, no s^2 scores) or
    ``eager``. ``checkpointing``: ``none``, ``full`` (every layer, transformers' gradient
    checkpointing = ``torch.utils.checkpoint``, non-reentrant), an int k (the first k layers,
    Megatron's ``block`` method, through transformers' per-layer ``gradient_checkpointing``
    flag; of the traced layers the first min(k, max_layers - 1) are checkpointed and the last is
    not, so both kinds are measured, and the totals add k checkpointed and L - k whole layers)
    or ``selective`` (attention core only). ``dropout``: None keeps the config's probabilities; a number sets
    them all. ``max_layers``: decoder layers actually traced (the rest are extrapolated).
    ``sac``: an :class:`advisor.engine.sac.SACPolicy` (with ``checkpointing="sac"``): every
    layer checkpointed with that op-level selective policy.

    Raises TraceUnavailable (torch/transformers missing, model type unknown to transformers, or
    a model that cannot run on fake tensors) and ValueError on bad arguments.
    """
    torch = _imports()
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import AutoModelForCausalLM

    attn = _checked_dtype_attention(dtype, attention)
    t0 = time.perf_counter()
    full_cfg = build_config(hf_config, dropout=dropout, source=source)
    L = int(full_cfg.num_hidden_layers)
    first_dense = int(getattr(full_cfg, "first_k_dense_replace", 0) or 0)
    n = min(L, max(max_layers, first_dense + 2))
    k_ckpt = None  # k of L layers checkpointed (Megatron's block method: the first k)
    if isinstance(checkpointing, int) and not isinstance(checkpointing, bool):
        if not 0 <= checkpointing <= L:
            raise ValueError(f"checkpointing: {checkpointing} layers of {L}")
        k_ckpt = checkpointing
        checkpointing = "none" if k_ckpt == 0 else "full" if k_ckpt == L else k_ckpt
    if (checkpointing == "sac") != (sac is not None):
        raise ValueError("checkpointing='sac' needs a SAC policy (advisor.engine.sac.sac_policy) and the reverse")
    cfg = build_config(hf_config, layers=n, dropout=dropout, source=source)
    refuse_flash_stand_in(cfg, attention, source)
    impl = _selective_attention(attn) if checkpointing == "selective" else attn
    tdt = getattr(torch, _DTYPES[dtype])
    notes: list[str] = []
    mode = FakeTensorMode()
    kw: dict[str, Any] = {"dtype": tdt, "attn_implementation": impl}
    if getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None) or getattr(cfg, "n_routed_experts", None):
        # static shapes: each token's k experts as one grouped matmul (the training kernel);
        # the eager loop over experts has data-dependent shapes fake tensors cannot follow
        kw["experts_implementation"] = "grouped_mm"

    def build():
        with mode:
            try:
                return AutoModelForCausalLM.from_config(cfg, **kw)
            except TypeError:  # a transformers without experts_implementation
                kw.pop("experts_implementation", None)
                return AutoModelForCausalLM.from_config(cfg, **kw)

    try:
        try:
            model = build()
        except ValueError as e:
            if attn != "sdpa" or "does not support" not in str(e):
                raise
            if attention == "flash":
                # tracing eager (s^2 scores kept) and reporting it as flash misleads (Gemma 2: 2x
                # per layer, issue #16); transformers' flash_attention_2 path is CUDA-only
                raise TraceUnavailable(f"{source}: {cfg.model_type} has no sdpa attention in transformers, so the "
                                       "trace would run eager and cannot stand for flash attention: use "
                                       "--activations formula, or --attention eager to trace eager") from None
            # the model has only its eager attention (BLOOM's ALiBi, Gemma 2's logit soft-capping)
            notes.append(f"{cfg.model_type} has no sdpa attention in transformers: traced with eager")
            attn = "eager"
            kw["attn_implementation"] = _selective_attention(attn) if checkpointing == "selective" else attn
            model = build()
    except (ValueError, KeyError) as e:
        raise TraceUnavailable(f"{source}: transformers cannot build a causal LM for model_type {cfg.model_type!r}: "
                               f"{str(e).splitlines()[0]}") from None
    model.train()
    layers = _decoder_layers(model)
    if sac is not None:
        sac.apply(model)
    elif checkpointing not in ("none", "selective", 0):
        _checkpointing_enable(model)
        if isinstance(checkpointing, int):
            # traced: the first j layers checkpointed, the last traced layer not (both kinds measured)
            j = min(checkpointing, n - 1)
            for i, layer in enumerate(layers):
                layer.gradient_checkpointing = i < j
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
    vocab = int(cfg.get_text_config().vocab_size)
    with mode:
        ids = torch.randint(0, vocab, (micro_batch, seq_len))
    after, handles = _after_last_layer(model, layers)
    mt = MemTracker()
    mt.track_external(model, ids)  # the input ids: the data loader's, not activations (category OTH)
    try:
        with mode, mt, _real_mask_skip(), warnings.catch_warnings():
            # MemTracker warns on every None gradient slot; the model's outputs are what we read
            warnings.simplefilter("ignore", UserWarning)
            calls = _SELECTIVE_CALLS[0]
            out = model(input_ids=ids, labels=ids, use_cache=False)
            if checkpointing == "selective" and _SELECTIVE_CALLS[0] == calls:
                raise _NoSelective()
            out.loss.backward()
    except _NoSelective:
        raise TraceUnavailable(f"{source}: {cfg.model_type}'s attention does not go through transformers' attention "
                               "interface: selective recompute cannot be traced for it") from None
    except TraceUnavailable:  # the SAC policy's op sequence differs (advisor.engine.sac.SACMismatch)
        raise
    except Exception as e:  # a model whose forward cannot run on fake tensors
        raise TraceUnavailable(f"{source}: tracing {cfg.model_type} on fake tensors failed: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
    for h in handles:
        h.remove()
    res = _read(mt, model, layers, after[0] if after else None, torch)
    per_layer = res["per_layer"]
    extra_layers = L - n
    add = extra_layers * (per_layer[-1] if per_layer else 0)
    if isinstance(checkpointing, int) and per_layer:
        j = min(checkpointing, n - 1)
        more_kept = checkpointing - j  # checkpointed layers beyond the traced ones
        add = more_kept * per_layer[0] + (extra_layers - more_kept) * per_layer[-1]
    if sac is None and checkpointing != "full":
        # transformers' Trainer runs the forward with use_cache=False (trainer.py sets
        # model.config.use_cache = args.use_cache; TrainingArguments.use_cache defaults to False,
        # transformers 5.25) and checkpointed layers drop the cache anyway; a plain loop calling
        # model(...) takes config.use_cache (True for most models), and then autograd keeps other
        # tensors: a real CPU Phi-3 (hidden 256, head_dim 64, s 256, b 2, sdpa) saves 5,320,704 B
        # per layer with use_cache=True against 5,713,920 B without (issue #16)
        notes.append("traced with use_cache=False, as transformers' Trainer runs training; a plain forward with "
                     "use_cache=True (the config's default) can save a few % fewer bytes (Phi-3 with sdpa: 7% per layer)")
    if _dropout_on(cfg, FORWARD_DROPOUT_KEYS):
        notes.append("dropout masks measured as the CPU kernel keeps them (model dtype); CUDA keeps 1 byte per element")
        if attn == "sdpa" and _dropout_on(cfg, ATTENTION_DROPOUT_KEYS):
            # torch's CPU sdpa takes its math kernel when dropout_p > 0 (measured with torch.profiler:
            # _scaled_dot_product_attention_math instead of _scaled_dot_product_flash_attention_for_cpu)
            notes.append("sdpa with attention dropout runs torch's math kernel on CPU, which keeps the s^2 "
                         "probabilities and mask; CUDA's fused kernels keep none: the traced attention is an "
                         "overstatement (the formula counts the fused kernel)")
    if extra_layers:
        notes.append(f"traced {n} of {L} layers; the other {extra_layers} are taken as copies of layer {n - 1}")
    if res["peak_module_layer"] == 0 and extra_layers:
        notes.append("the backward peak falls in the first layer: the extrapolation may overstate it")
    return TraceResult(
        model_type=str(cfg.model_type), layers_total=L, layers_traced=n, extrapolated=extra_layers > 0,
        seq_len=seq_len, micro_batch=micro_batch, dtype=dtype, attention=attn, checkpointing=str((f"sac:{sac.budget_bytes}B" if sac.budget_bytes else f"sac:{sac.budget:g}") if sac is not None else checkpointing if k_ckpt is None
                                                                         else f"{k_ckpt} of {L}"),
        per_layer=per_layer, end_of_forward=res["end_of_forward"] + add, outside_layers=res["outside_layers"],
        loss_spike=res["loss_spike"], backward_peak=res["backward_peak"] + add,
        backward_peak_module=res["peak_module"], backward_extra=res["backward_peak"] - res["end_of_forward"],
        layer_backward_extra=res["layer_backward_extra"], outside_backward_extra=res["outside_backward_extra"],
        seconds=round(time.perf_counter() - t0, 3), notes=notes)


def _read(mt, model, layers, after_last, torch) -> dict[str, Any]:
    """Activation bytes out of MemTracker's per-module snapshots (ACT and TEMP, all devices).

    A layer's bytes are the growth of live activations from its pre-forward to the next
    layer's pre-forward (for the last layer: to the pre-forward of ``after_last``, the module
    that runs next): what it leaves alive, net of its input when that is released -- the
    quantity that adds up when layers are stacked."""
    from torch.distributed._tools.mem_tracker import _MemRefType, _ModState

    def act(snap: dict, temp: bool = False) -> int:
        tot = 0
        for dev in snap.values():
            tot += dev.get(_MemRefType.ACT, 0) + (dev.get(_MemRefType.TEMP, 0) if temp else 0)
        return tot

    stats = mt.memory_tracking
    root = stats[model]
    pre_root = act(root.snapshots[_ModState.PRE_FW][0])
    eof = act(root.snapshots[_ModState.POST_FW][0]) - pre_root
    fwd_peak = act(root.snapshots[_ModState.PEAK_FW][0]) - pre_root
    marks = [act(stats[m].snapshots[_ModState.PRE_FW][0]) for m in layers]
    nxt = stats.get(after_last) if after_last is not None else None
    marks.append(act(nxt.snapshots[_ModState.PRE_FW][0]) if nxt is not None
                 else act(stats[layers[-1]].snapshots[_ModState.POST_FW][0]) if layers else 0)
    per_layer = [b - a for a, b in zip(marks, marks[1:])]
    # the global backward peak and the innermost module holding it; and the largest backward
    # instant inside a decoder layer (a module of a layer or the layer itself) vs outside them
    best, where = 0, ""
    names = {id(m): n for n, m in model.named_modules()}
    layer_names = [names.get(id(m), "") for m in layers]

    def layer_of(nm: str) -> int | None:
        for i, ln in enumerate(layer_names):
            if ln and (nm == ln or nm.startswith(ln + ".")):
                return i
        return None

    in_layer: int | None = None
    outside: int | None = None
    for mod, st in stats.items():
        for snap in st.snapshots.get(_ModState.PEAK_BW, []):
            v = act(snap, temp=True) - pre_root
            nm = names.get(id(mod), st.mod_fqn)
            if v > best or (v == best and len(nm) > len(where)):
                best, where = v, nm
            if layer_of(nm) is not None:
                in_layer = v if in_layer is None else max(in_layer, v)
            elif mod is not model and not any(ln.startswith(nm + ".") for ln in layer_names if nm):
                # not the root nor a module holding the layers (the decoder stack): their peaks
                # cover the layers' backward too
                outside = v if outside is None else max(outside, v)
    where_layer = layer_of(where) if where else None
    if outside is None or (in_layer is not None and best > max(in_layer, outside)):
        outside = best  # the peak fell in no module of its own: at the loss (root level)
    return {"per_layer": per_layer, "end_of_forward": eof, "outside_layers": eof - sum(per_layer),
            "loss_spike": fwd_peak - eof, "backward_peak": best, "peak_module": where or "(the loss)",
            "peak_module_layer": where_layer,
            "layer_backward_extra": (in_layer if in_layer is not None else 0) - eof,
            "outside_backward_extra": outside - eof}


def _after_last_layer(model, layers):
    """Forward pre-hooks that find the first module to run after the last decoder layer
    returns (the final norm, usually). Returns (holder list, hook handles)."""
    found: list = []
    state = {"done": False}
    handles = []
    last = layers[-1] if layers else None
    inside = {id(m) for m in last.modules()} if last is not None else set()

    def post(mod, args, out):
        state["done"] = True

    def pre(mod, args):
        if state["done"] and not found and id(mod) not in inside:
            found.append(mod)

    if last is not None:
        handles.append(last.register_forward_hook(post))
        for m in model.modules():
            if m is not model:
                handles.append(m.register_forward_pre_hook(pre))
    return found, handles


def inventory_from_hf_config(hf_config: dict[str, Any], source: str = "config.json"):
    """The advisor Inventory of the model transformers builds from ``hf_config`` (a parsed
    config.json), for a model type without a built-in architecture: built on fake tensors (no
    memory), its parameters exported with :func:`advisor.model.inventory.from_module` (shared
    tensors once, as ``named_parameters``), the architecture sizes the estimate needs read from
    transformers' config (``get_text_config()``). Raises TraceUnavailable (torch/transformers
    missing, a type transformers cannot build)."""
    torch = _imports()
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForCausalLM

    from advisor.model.inventory import from_module

    cfg = build_config(hf_config, source=source)
    try:
        with FakeTensorMode():
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    except (ValueError, KeyError, TypeError) as e:
        raise TraceUnavailable(f"{source}: transformers cannot build a causal LM for model_type {cfg.model_type!r}: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    inv = from_module(model, name=str(hf_config.get("_name_or_path") or cfg.model_type))
    inv.source = source
    tc = cfg.get_text_config()
    h = int(tc.hidden_size)
    inv.meta.update({"hidden_size": h, "num_layers": int(tc.num_hidden_layers), "num_heads": int(tc.num_attention_heads),
                "intermediate_size": int(getattr(tc, "intermediate_size", None) or 4 * h),
                "vocab_size": int(tc.vocab_size), "family": str(cfg.model_type), "built_by": "transformers"})
    mpe = getattr(tc, "max_position_embeddings", None)
    if mpe:
        inv.meta["max_seq_len"] = int(mpe)
    inv.hf_config = dict(hf_config)
    return inv
