"""The ``ds-advisor`` command line. Thin: it turns flags into calls of the library.

Exit codes (every command; see advisor.errors): 0 ok, 1 findings at or above --fail-on
(check: no-go), 2 bad usage or unreadable input, 3 environment could not be probed
(check --strict), 4 check only: tight (see --allow-tight), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import click

from advisor import DEEPSPEED_VERSION, __version__
from advisor.errors import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, AdvisorError

CONFIG_SUFFIXES = (".json", ".hjson", ".conf", ".jsonc", ".yml", ".yaml")
FAIL_ON = ("error", "warning", "info", "never")


def _fail(message: str, code: int = EXIT_USAGE) -> "click.exceptions.Exit":
    """Print an error (``ds-advisor: MESSAGE``) on stderr and return the Exit (``code``, by default
    exit 2) to raise. Piped, it is one line (the contract for bad input: scripts and tests read it
    whole); on a terminal it is folded at word boundaries like every message (:func:`_say`)."""
    from advisor.errors import cut_numbers
    message = cut_numbers(message)  # a config value of thousands of digits is echoed cut
    if _stderr_is_terminal():
        _say(f"ds-advisor: {message}")
    else:
        from advisor.render.escape import safe_text
        click.echo(safe_text(f"ds-advisor: {message}"), err=True)
    return click.exceptions.Exit(code)


def _interrupted() -> "click.exceptions.Exit":
    """Ctrl-C (KeyboardInterrupt) anywhere in a command: one line on stderr and the Exit with
    :data:`advisor.errors.EXIT_INTERRUPTED` (130, 128 + SIGINT), not click's "Aborted!" and exit 1.
    A file being written has removed its temporary file by then (advisor.files.write_atomic's
    ``finally``), so nothing is left behind."""
    return _fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)


def _cannot_write(output: str, e: OSError) -> str:
    """The one line for an ``--output`` that could not be written: the option, the path (cut past
    :data:`advisor.errors.MAX_PATH_ECHO_CHARS`) and the system's reason."""
    from advisor.errors import MAX_PATH_ECHO_CHARS, cut
    return f"--output {cut(output, MAX_PATH_ECHO_CHARS)}: cannot write: {e.strerror or e}" if e.strerror else \
        _cut_echoes(str(e), output)


def _stderr_is_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def _expand_paths(paths: tuple[str, ...]) -> list[str]:
    """Files as given; folders expand to the config files directly inside them, sorted."""
    out: list[str] = []
    for p in paths:
        if p != "-" and os.path.isdir(p):
            kids = sorted(str(c) for c in Path(p).iterdir()  # special files too: each gets its error line
                          if not c.is_dir() and c.suffix.lower() in CONFIG_SUFFIXES)
            out.extend(kids)
        else:
            out.append(p)
    return out


def _inventory(model: str | None, params: int | None, activations: str | None = None, architecture: bool = False):
    """--model (preset, HF config.json or inventory JSON) or --params N -> Inventory, or None.
    With ``activations == "trace"``, a config.json of a model type without a built-in
    architecture is built by transformers on fake tensors (advisor.engine.trace). ``architecture``
    (generate): an inventory file without the architecture is refused before its tensors are built."""
    if model and params:
        raise click.UsageError("give --model or --params, not both")
    if params is not None:
        from advisor.model.inventory import from_param_count
        return from_param_count(params)
    if model:
        from advisor.model.specs import resolve_model
        build = None
        if activations == "trace":
            def build(d, path):
                from advisor.engine.trace import inventory_from_hf_config  # torch: only when asked
                return inventory_from_hf_config(d, path)
        inv = resolve_model(model, build_unknown=build, architecture=architecture)
        if len(inv.tensors) > GC_FREEZE_TENSORS:
            # The inventory lives until the process ends and holds no cycles: keep the cyclic GC
            # from walking its objects on every collection the ledger triggers (a 1e5-layer
            # model's 9e5 tensors made each full collection a pass over them).
            import gc
            gc.freeze()
        return inv
    return None


#: Inventories of more tensors than this are moved out of the cyclic GC's reach (gc.freeze).
GC_FREEZE_TENSORS = 100_000


class CheckpointingType(click.ParamType):
    """``--checkpointing``: none, full, selective or a number of layers k (the first k layers of
    each pipeline stage checkpointed), as :func:`advisor.model.activations.parse_checkpointing`
    reads it, or ``sac[:BUDGET]`` (op-level selective checkpointing, trace mode only:
    :func:`advisor.model.activations.parse_sac`; BUDGET a fraction of each layer, or a size, the
    whole model's activation budget: :func:`~advisor.model.activations.parse_sac_bytes`). The
    value stays a string ("none", "full", "selective", k's digits, "sac:BUDGET" or "sac:<bytes>B")."""

    name = "none|full|selective|K|sac[:BUDGET|:SIZE]"

    def convert(self, value, param, ctx):
        from advisor.model.activations import parse_checkpointing

        from advisor.model.activations import parse_sac, parse_sac_bytes

        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        try:
            budget = parse_sac(value)
            size = parse_sac_bytes(value)
        except ValueError as e:
            self.fail(str(e).removeprefix("checkpointing: "), param, ctx)
        if size is not None:
            return f"sac:{size}B"
        if budget is not None:
            return f"sac:{budget:g}"
        try:
            mode, k = parse_checkpointing(value)
        except ValueError:
            self.fail(f"{value!r} is not none, full, selective, a number of layers (e.g. 16), sac[:BUDGET] "
                      "(a fraction of a layer) or sac:SIZE (e.g. sac:24GiB)",
                      param, ctx)
        if mode == "layers":
            if k < 0:
                self.fail(f"{value!r}: a number of layers is at least 0", param, ctx)
            return "none" if k == 0 else str(k)
        return mode


class FiniteFloat(click.FloatRange):
    """click's FloatRange, plus the one validation layer's finiteness: NaN and infinities are
    refused (FloatRange lets them through) by :func:`advisor.config.validation.as_float`, and a
    number past the float range (400 nines, ``1e999``) is "too large", not "not finite"."""

    name = "number"

    def _describe_range(self) -> str:
        """The bounds for --help ("x>=0", "0<=x<1"); "" when there are none (click would print
        "x<=None" for an unbounded range, and --help shows no bracket for "")."""
        return "" if self.min is None and self.max is None else super()._describe_range()

    def convert(self, value, param, ctx):
        from advisor.config.validation import InputValueError, as_float
        try:
            as_float(value, "x", hi=self.max)
        except InputValueError as e:  # "'1e999' is too large (at most 1e+09)", "'nan' is not a finite number"
            self.fail(e.problem, param, ctx)
        return super().convert(value, param, ctx)


class Count(click.IntRange):
    """click's IntRange for a count (parameters, ranks, tokens), also read in scientific or
    decimal notation when the value is a whole number: ``20e9``, ``1.5e9``, ``6.7E9`` (exactly, by
    ``decimal.Decimal``, not through a float). ``1.5``, ``nan``, ``inf`` and non-numbers are
    refused in one line naming the option; past the range, click's range message."""

    #: Decimal exponents beyond this are past every count's range: refused before building the int.
    MAX_DIGITS = 40

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip().lstrip("+-").isdigit():
            import decimal
            text = value.strip()
            try:
                d = decimal.Decimal(text)
            except (decimal.InvalidOperation, ValueError):
                self.fail(f"{value!r} is not a whole number (e.g. 7000000000 or 7e9)", param, ctx)
            if not d.is_finite():
                self.fail(f"{value!r} is not a finite whole number", param, ctx)
            if d.adjusted() > self.MAX_DIGITS:
                self.fail(f"{value!r} is not in the range {self._describe_range()}", param, ctx)
            if d != d.to_integral_value():
                self.fail(f"{value!r} is not a whole number", param, ctx)
            value = int(d)
        return super().convert(value, param, ctx)


def _targs(trainer_args: dict | None, hidden_size: int | None) -> dict | None:
    """Trainer arguments given on the command line (None when none were: "auto" is then
    accepted but not resolved). --bf16 with --fp16 is a usage error: TrainingArguments.__post_init__
    raises 'At most one of fp16 and bf16 can be True, but not both' (transformers
    training_args.py) before the Trainer reads the DeepSpeed config."""
    if trainer_args and trainer_args.get("bf16") and trainer_args.get("fp16"):
        raise click.UsageError("--bf16 and --fp16 together: transformers' TrainingArguments raises 'At most one of "
                               "fp16 and bf16 can be True, but not both' (training_args.py __post_init__); pass one")
    if not trainer_args and hidden_size is None:
        return None
    return {**(trainer_args or {}), **({"hidden_size": hidden_size} if hidden_size else {})}


def _load_inputs(config: str, model: str | None, params: int | None, hardware: str | None = None):
    """The config, the model inventory and the hardware spec a command needs, or exit 2 with
    one line naming the file/preset and the problem. Returns (loaded, inventory, hardware);
    for an accelerate config file, ``loaded`` is the DeepSpeed config accelerate builds from it
    (:func:`_load_config_input` gives the launch too)."""
    inp, inv, hw = _load_config_input(config, model, params, hardware)
    return inp.loaded, inv, hw


def _load_config_input(config: str, model: str | None, params: int | None, hardware: str | None = None, *,
                       trainer_args: dict | None = None, world_size: int | None = None,
                       overrides: tuple[str, ...] = (), activations: str | None = None):
    """:func:`_load_inputs` with the config read by its content (advisor.config.inputs): returns
    (ConfigInput, inventory, hardware)."""
    from advisor.config.inputs import read_input

    try:
        inv = _inventory(model, params, activations)
        loaded = read_input(config, trainer_args=trainer_args, world_size=world_size, inventory=inv,
                            overrides=overrides)
        hw = None
        if hardware:
            from advisor.cluster.hardware import resolve_hardware
            hw = resolve_hardware(hardware)
    except AdvisorError as e:
        raise _fail(str(e))
    return loaded, inv, hw


def _omp_threads(flag: int | None):
    """OpenMP threads per rank (``--omp-threads`` > OMP_NUM_THREADS, :func:`advisor.cluster.launch.omp_threads`),
    a ``Found`` or None; a malformed variable is a one-line error (exit 2)."""
    from advisor.cluster.launch import omp_threads
    try:
        return omp_threads(flag)
    except AdvisorError as e:
        raise _fail(str(e))


def _job_shape(world_size, gpus_per_node, nodes, launch, hardware, hardware_label=None, default_gpus_per_node=None,
               wl=None, warnings: list[str] | None = None):
    """:func:`advisor.cluster.launch.job_shape` (the world size, ranks per node and nodes every
    command models), or exit 2 with its one line. ``wl``: the resolved workload
    (:func:`advisor.views.workload.resolve`), whose sidecar's recorded world shape stands in for a world
    size nothing else gives. The shape's notes (what the launch leaves open: SLURM_NTASKS kept as the world)
    go to stderr as ``ds-advisor: note:``, or into ``warnings`` when given (``report``)."""
    from advisor.cluster.launch import job_shape
    world = (getattr(wl, "recorded", None) or {}).get("world") if wl is not None else None
    recorded = (world, os.path.basename(wl.sidecar)) if world and getattr(wl, "sidecar", None) else None
    try:
        shape = job_shape(world_size=world_size, gpus_per_node=gpus_per_node, nodes=nodes, launch=launch,
                          hardware=hardware, hardware_label=hardware_label, default_gpus_per_node=default_gpus_per_node,
                          recorded=recorded)
    except AdvisorError as e:
        raise _fail(str(e))
    for note in shape.notes:
        if warnings is not None:
            warnings.append(note)
        else:
            _say(f"ds-advisor: note: {note}")
    return shape


def _world(world_size: int | None) -> tuple[int | None, str | None]:
    """(world size, its source): the flag, else WORLD_SIZE / SLURM_NTASKS (bounded by
    MAX_WORLD_SIZE; a malformed variable is exit 2 naming it), else (None, None)."""
    if world_size is not None:
        return world_size, "--world-size"
    from advisor.cluster.launch import world_size_from_env
    try:
        f = world_size_from_env()
    except AdvisorError as e:
        raise _fail(str(e))
    return (f.value, f.source) if f else (None, None)


def _settings_defaults(config: str, model: str | None, params: int | None, world_size: int | None):
    """(model, params, world_size, world_size_source) with the settings file found by walking up from CONFIG
    (advisor.config.settings, as lint uses it) filling what no flag gave: flags win, and a world
    size from the launcher's environment (WORLD_SIZE, SLURM_NTASKS) beats the file's. A bad
    settings file is exit 2 naming it."""
    from advisor.config.settings import load_settings
    try:
        s = load_settings(os.getcwd() if config == "-" else config)
    except AdvisorError as e:
        raise _fail(str(e))
    if s is None:
        return model, params, world_size, "--world-size"
    src = "--world-size"
    if not model and params is None:
        model, params = s.model, s.params
        if s.model and not os.path.exists(s.model):  # a preset name; a file is read (and named) later
            from advisor.model.specs import resolve_model
            try:
                resolve_model(s.model, flag=None)  # a bad value names the settings file, not a flag
            except AdvisorError as e:
                raise _fail(f"{s.source}: model: {e}")
    if world_size is None and s.world_size is not None and _world(None) == (None, None):
        world_size, src = s.world_size, f"world-size in {s.source}"
    return model, params, world_size, src


# --- options shared by several commands: declared once here -----------------------------------

#: The largest --world-size / --gpus-per-node any command accepts (ranks; a sanity bound, not a
#: DeepSpeed limit). ``measure`` launches its ranks on this machine and has its own bound.
from advisor.config.validation import (MAX_DIM, MAX_GLOBAL_BATCH, MAX_GPUS_PER_NODE, MAX_KEEP,  # noqa: E402
                                       MAX_MOE_CAPACITY_FACTOR, MAX_NODES, MAX_SEQ_LEN, MAX_WORLD_SIZE)
from advisor.config.validation import MAX_PARAMS, MAX_SECONDS, MIN_SECONDS  # noqa: E402

MODEL_HELP = "Model preset (see `ds-advisor models`), HF config.json or inventory JSON."
HARDWARE_HELP = ("Hardware preset (see `ds-advisor hardware`, e.g. dgx-h100:4) or JSON spec "
                 "(schemas/hardware.schema.json; FILE:N for N nodes, e.g. hw.json:2).")


def _check_sets(ctx, param, value):
    """--set: each KEY.PATH=VALUE well-formed (advisor.config.overrides.parse_override), else exit 2
    with one line naming the --set argument (the values' validation comes with the config:
    advisor.config.overrides.check_overrides)."""
    from advisor.config.overrides import parse_override
    for v in value:
        try:
            parse_override(v)
        except AdvisorError as e:
            raise _fail(str(e))
    return value


#: name -> (declarations, click.option keywords). :func:`option` adds one, with per-command
#: overrides of its help (where a command's default differs) or ``required``.

class _SpelledChoice(click.Choice):
    """A case-insensitive Choice shown and named as its choices are spelled ("[GiB|GB]", "is not
    GiB or GB"): click lower-cases them ("[gib|gb]"), which reads as another unit."""

    def get_metavar(self, param, ctx=None):  # noqa: D102 - click's hook
        return "[" + "|".join(self.choices) + "]"

    def get_invalid_choice_message(self, value, ctx):  # noqa: D102 - click's hook
        return f"{value!r} is not {' or '.join(self.choices)}"

OPTIONS: dict[str, tuple[tuple[str, ...], dict]] = {
    "model": (("--model",), dict(help=MODEL_HELP)),
    "params": (("--params",), dict(type=Count(min=1, max=MAX_PARAMS),
                                   help="Model size in parameters, instead of --model.")),
    "world_size": (("--world-size",), dict(type=Count(min=1, max=MAX_WORLD_SIZE),
                                           help="Total ranks (default: WORLD_SIZE, SLURM_NTASKS, nodes x ranks "
                                                "per node, --hardware, else 1: the order in README.md, "
                                                "'World size, ranks per node and nodes').")),
    "gpus_per_node": (("--gpus-per-node",), dict(type=Count(min=1, max=MAX_GPUS_PER_NODE),
                                                 help="Ranks per node (host memory is per node).")),
    "hardware": (("--hardware", "hardware"), dict(help=HARDWARE_HELP)),
    "hf": (("--hf",), dict(is_flag=True, help='Config is used through the HF Trainer/accelerate ("auto" is filled in).')),
    "tensor_parallel": (("--tensor-parallel",), dict(type=Count(min=1, max=MAX_WORLD_SIZE), default=1, show_default=True)),
    "pipeline_parallel": (("--pipeline-parallel",), dict(type=Count(min=1, max=MAX_WORLD_SIZE), default=1, show_default=True)),
    "sequence_parallel": (("--sequence-parallel",), dict(
        type=Count(min=1, max=MAX_WORLD_SIZE), default=None,
        help="DeepSpeed-Ulysses sequence_parallel_size: its own ranks, ZeRO partitions over DP x SP "
             "(default: the config's sequence_parallel_size, else 1).")),
    "megatron_sp": (("--megatron-sp", "megatron_sp"), dict(
        is_flag=True, help="Megatron sequence parallelism: reuses the tensor-parallel ranks and shards the "
                           "norm/residual activations by TP.")),
    "expert_parallel": (("--expert-parallel",), dict(
        type=Count(min=1, max=MAX_WORLD_SIZE), default=1, show_default=True,
        help="MoE expert parallelism (DeepSpeed ep_size): experts split over it, their ZeRO over the "
             "expert-data-parallel group.")),
    "moe_capacity_factor": (("--moe-capacity-factor",), dict(
        type=FiniteFloat(min=0, min_open=True, max=MAX_MOE_CAPACITY_FACTOR), default=None,
        help="MoE through DeepSpeed's MoE layer (deepspeed.moe.layer.MoE capacity_factor): each expert gets "
             "max(ceil(tokens / experts x factor x top-k), min_capacity 4) slots (moe/sharded_moe.py:_capacity). "
             "Default: dropless routing, as transformers' MoE blocks do it (the config's workload sidecar, else none).")),
    "seq_len": (("--seq-len",), dict(type=Count(min=1, max=MAX_SEQ_LEN), help="Sequence length (default: the model's maximum).")),
    "micro_batch": (("--micro-batch",), dict(type=Count(min=1, max=MAX_GLOBAL_BATCH),
                                             help="Micro-batch per rank, a what-if (default: the one DeepSpeed runs: train_micro_batch_size_per_gpu, "
                                                  "else derived from train_batch_size and gradient_accumulation_steps; 1 if it refuses them).")),
    "checkpointing": (("--checkpointing",), dict(
        type=CheckpointingType(), default="none", show_default=True,
        help="Activation checkpointing (recompute; not a durable checkpoint): none; full (every layer, HF "
             "gradient_checkpointing / Megatron --recompute-granularity full); K (the first K layers of each "
             "pipeline stage, Megatron --recompute-method block --recompute-num-layers K); selective (the "
             "attention core only, Megatron --recompute-granularity selective); sac[:BUDGET] (with "
             "--activations trace: every layer checkpointed, keeping the ops torch's SACEstimator/ILP picks "
             "within BUDGET, a fraction 0-1 of a layer's op-output bytes; default 0.5).")),
    "attention": (("--attention",), dict(type=click.Choice(["flash", "eager"]), default="flash", show_default=True)),
    "activations": (("--activations",), dict(
        type=click.Choice(["formula", "trace"]), default="formula", show_default=True,
        help="formula: per-op formulas (no torch); trace: run transformers' own model for one forward and "
             "backward on fake tensors (no weights, no memory; needs the trace extra: torch + transformers).")),
    "gpu_memory": (("--gpu-memory",), dict(help="Accelerator memory per rank, e.g. 80GB or 141GB (GB = 1e9 bytes).")),
    "host_memory": (("--host-memory",), dict(help="Host memory per node, e.g. 512GB.")),
    "nvme_capacity": (("--nvme-capacity",), dict(help="NVMe space per node for swap files, e.g. 3.84TB.")),
    "omp_threads": (("--omp-threads", "omp_threads"), dict(
        type=Count(min=1, max=4096), default=None,
        help="OpenMP threads per rank for the CPU optimizer step (default: OMP_NUM_THREADS, else the launcher's "
             "default: torchrun 1 with several ranks per node, the physical cores with one).")),
    "step_time_s": (("--step-time", "step_time_s"), dict(type=FiniteFloat(min=MIN_SECONDS, max=MAX_SECONDS),
                                         help="Seconds per optimizer step.")),
    "save_dir": (("--save-dir",), dict(help="Absolute path checkpoints are saved to (save_checkpoint's save_dir).")),
    "save_interval": (("--save-interval",), dict(type=FiniteFloat(min=MIN_SECONDS, max=MAX_SECONDS),
                                                 help="Seconds between saves, for writes per day.")),
    "set": (("--set", "overrides"), dict(
        multiple=True, metavar="KEY.PATH=VALUE", callback=_check_sets,
        help="Override a config value before it is read, without editing the file (repeatable), e.g. --set "
             "zero_optimization.stage=3 to try a finding's fix. VALUE is read JSON-like: numbers (3, 5e8, 0.5), "
             "true/false/null, \"quoted strings\", {objects} and [arrays] as JSON; anything else is the string "
             "as written (AdamW); nan/inf (any case) and 1e999 are refused. Each value is validated as the "
             "config file's would be (types, ranges, unknown keys, limits): one that is not is exit 2.")),
    "units": (("--units",), dict(type=_SpelledChoice(["GiB", "GB"], case_sensitive=False), default="GiB",
                                 show_default=True, help="Unit of every byte figure in the text report: GiB = 2^30 "
                                                         "bytes (what PyTorch and nvidia-smi count), GB = 1e9 bytes.")),
    "color": (("--color",), dict(type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
                                 help="Colour severities and verdicts: auto = on a terminal unless NO_COLOR is set.")),
    "runtime_overhead": (("--runtime-overhead", "runtime_overhead"), dict(
        metavar="SIZE|TERM=SIZE,...",
        help="Per-rank runtime overhead on the accelerator, replacing the cited defaults: one SIZE for all of it "
             "(e.g. 3GiB), or per term cuda_context=, nccl=, allocator=, deepspeed= (e.g. "
             "cuda_context=600MiB,nccl=512MiB); a term given has no band left. NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS, "
             "CUDA_MODULE_LOADING and PYTORCH_CUDA_ALLOC_CONF are read when set.")),
    "fragmentation": (("--fragmentation",), dict(
        type=FiniteFloat(0, 1), default=None,
        help="Deprecated: the allocator reserve is now its own overhead row (a fraction of the peak, with its band). A "
             "fraction given here replaces that row (with a warning); prefer --runtime-overhead allocator=SIZE.")),
    "output": (("-o", "--output"), dict(help="The file to write.")),
    "force": (("--force",), dict(is_flag=True, help="Overwrite an existing --output file.")),
}


def option(name: str, **overrides):
    """The shared option ``name`` (:data:`OPTIONS`), with ``overrides`` (help, required, ...)."""
    decls, kw = OPTIONS[name]
    return _opt(*decls, **{**kw, **overrides})


def options(*names: str, **overrides_by_name: dict):
    """Decorator adding the shared options ``names`` in this order in --help;
    ``overrides_by_name[name]`` are that option's overrides."""
    def deco(f):
        for n in reversed(names):
            f = option(n, **overrides_by_name.get(n, {}))(f)
        return f
    return deco


def display_options(*names: str):
    """Decorator adding the shared display options ``names`` ("units", "color"); the command
    does not receive them: :func:`_render` passes them to the renderer (click's context keeps them)."""
    import functools

    def deco(f):
        @functools.wraps(f)
        def wrapper(*a, **kw):
            click.get_current_context().meta["ds_advisor.display"] = {n: kw.pop(n) for n in names}
            return f(*a, **kw)
        return options(*names)(wrapper)
    return deco


def _display() -> dict:
    """The running command's display options (:func:`display_options`): {"units": ..., "color": ...}."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get("ds_advisor.display", {})) if ctx else {}


def _echo(text: str, err: bool = False) -> None:
    """click.echo of a rendered report (:func:`_render`: a text report is already folded to the
    stream's width there), keeping the colour codes when --color always (click strips them off a
    pipe). Empty text prints nothing (``lint -q`` with no findings is silent, not a blank line)."""
    _flush_notes()
    if text:
        click.echo(text, err=err, color=True if _display().get("color") == "always" else None)


def _say(message: str) -> None:
    """A message for the user on stderr (a warning, resolve's findings, progress), folded
    to stderr's width like every text report (:func:`advisor.render.style.width`: the terminal's,
    else ``COLUMNS``, else 100; :func:`advisor.render.style.wrap`): continuation lines hang 4
    columns, and a path or other single word is never split."""
    from advisor.errors import cut_numbers
    from advisor.render.escape import safe_text
    from advisor.render.style import width, wrap
    click.echo(wrap(safe_text(cut_numbers(message)), width(sys.stderr)), err=True)


def _render(view: str, fmt: str, result, **kw) -> str:
    """:func:`advisor.render.render` with the command's --units / --color (:func:`display_options`)."""
    from advisor.render import render

    return render(view, fmt, result, **{**_display(), **kw})


#: Overrides for commands that read the workload sidecar (advisor.views.workload): "not given"
#: must be visible, so the defaults move to the resolution (flag > sidecar > default).
UNSET_WORKLOAD = {n: dict(default=None, show_default=False) for n in
                  ("tensor_parallel", "pipeline_parallel", "expert_parallel", "checkpointing", "attention")}
for _n, _d in (("checkpointing", "none"), ("attention", "flash")):
    UNSET_WORKLOAD[_n]["help"] = (OPTIONS[_n][1].get("help", "") + f" Default: the config's workload sidecar, "
                                  f"else {_d}.").strip()

#: Option groups: the model, the cluster's shape, model parallelism, the workload, capacities.
MODEL_OPTIONS = ("model", "params")
PARALLEL_OPTIONS = ("tensor_parallel", "pipeline_parallel", "sequence_parallel", "megatron_sp", "expert_parallel")
WORKLOAD_OPTIONS = ("seq_len", "micro_batch", "checkpointing", "attention", "moe_capacity_factor")
CAPACITY_OPTIONS = ("gpu_memory", "host_memory", "nvme_capacity")


def format_option(view: str):
    """``--format`` with exactly the formats :mod:`advisor.render` registers for ``view``."""
    from advisor.render import FORMAT_HELP, formats

    choices = formats(view)
    return _opt("--format", "fmt", type=click.Choice(choices), default="text", show_default=True,
                        help="; ".join(f"{c}: {FORMAT_HELP[c]}" for c in choices) + ".")


#: The HF Trainer arguments every command with --hf takes: (option, TrainerArgs field, type, help);
#: the ranges are what torch.optim's AdamW / torch's DataLoader refuse at startup (a negative
#: batch size, lr, weight decay or epsilon; betas outside [0, 1)), refused here as exit 2.
#: Declared here, not in advisor.config.hf, so building the CLI does not import the HF replay.
TRAINER_OPTS: list[tuple[str, str, type, str]] = [
    ("--per-device-train-batch-size", "per_device_train_batch_size", click.IntRange(min=1, max=MAX_GLOBAL_BATCH), "Trainer per_device_train_batch_size (default 8)."),
    ("--gradient-accumulation-steps", "gradient_accumulation_steps", click.IntRange(min=1, max=MAX_GLOBAL_BATCH), "Trainer gradient_accumulation_steps (default 1)."),
    ("--learning-rate", "learning_rate", FiniteFloat(min=0), "Trainer learning_rate (default 5e-5)."),
    ("--weight-decay", "weight_decay", FiniteFloat(min=0), "Trainer weight_decay (default 0)."),
    ("--adam-beta1", "adam_beta1", FiniteFloat(min=0, max=1, max_open=True), "Trainer adam_beta1 (default 0.9)."),
    ("--adam-beta2", "adam_beta2", FiniteFloat(min=0, max=1, max_open=True), "Trainer adam_beta2 (default 0.999)."),
    ("--adam-epsilon", "adam_epsilon", FiniteFloat(min=0), "Trainer adam_epsilon (default 1e-8)."),
    ("--max-grad-norm", "max_grad_norm", float, "Trainer max_grad_norm (default 1.0)."),
    ("--warmup-steps", "warmup_steps", FiniteFloat(min=0), "Trainer warmup_steps: steps, or a ratio below 1 (default 0)."),
    ("--warmup-ratio", "warmup_ratio", FiniteFloat(min=0, max=1), "Older Trainer warmup_ratio (a fraction of the steps)."),
    ("--max-steps", "max_steps", int, "Optimizer steps (num_training_steps) for the scheduler's \"auto\"."),
    ("--lr-scheduler-type", "lr_scheduler_type", str, "Trainer lr_scheduler_type (default linear; a DeepSpeed "
                                                      "scheduler block replaces it)."),
    ("--resume-from-checkpoint", "resume_from_checkpoint", click.Path(exists=True, file_okay=False),
     "Trainer resume_from_checkpoint: the checkpoint folder (output_dir/checkpoint-N) the run resumes from; "
     "lint compares its saved ZeRO stage and world size with this run's (rule H009)."),
]


def _trainer_options(f):
    """Click decorator adding the Trainer-argument options (``--per-device-train-batch-size``,
    ``--gradient-accumulation-steps``, ``--learning-rate``, ``--weight-decay``, ``--adam-beta1/2``,
    ``--adam-epsilon``, ``--max-grad-norm``, ``--warmup-steps``, ``--warmup-ratio``,
    ``--max-steps``/``--num-train-steps``, ``--bf16``, ``--fp16``, ``--hidden-size``) to a command.
    The command receives them as one keyword argument ``trainer_args``: a dict for
    :meth:`TrainerArgs.from_mapping` (None values = not given), plus ``hidden_size``."""
    import functools

    names = [n for _, n, _, _ in TRAINER_OPTS] + ["bf16", "fp16"]

    @functools.wraps(f)
    def wrapper(*a, **kw):
        targs = {n: kw.pop(n, None) for n in names}
        # not given: None (a value option) or False (an unset flag); a given 0 is a value (0 == False in
        # Python: `v not in (None, False)` dropped --max-steps 0, --learning-rate 0, --max-grad-norm 0)
        targs = {k: v for k, v in targs.items() if v is not None and v is not False}
        kw["trainer_args"] = targs
        return f(*a, **kw)

    deco = wrapper
    deco = _opt("--hidden-size", type=click.IntRange(min=1, max=MAX_DIM),
                        help="Model hidden size for the bucket-size \"auto\" values (default: from --model).")(deco)
    deco = _opt("--fp16", is_flag=True, help="Trainer --fp16.")(deco)
    deco = _opt("--bf16", is_flag=True, help="Trainer --bf16.")(deco)
    for opt, name, typ, hlp in reversed(TRAINER_OPTS):
        decls = [opt, name] + (["--num-train-steps", "--num-training-steps"] if name == "max_steps" else [])
        deco = _opt(*decls, type=FiniteFloat() if typ is float else typ, default=None, help=hlp)(deco)
    return deco


@dataclass
class EstimateArgs:
    """The model, cluster, workload and capacity options ``estimate`` and ``report`` share
    (:func:`_estimate_options`); :func:`_build_estimate` turns them into an estimate."""

    model: str | None
    params: int | None
    world_size: int | None
    gpus_per_node: int | None
    tensor_parallel: int
    pipeline_parallel: int
    sequence_parallel: int | None
    megatron_sp: bool
    expert_parallel: int
    seq_len: int | None
    micro_batch: int | None
    checkpointing: str
    attention: str
    moe_capacity_factor: float | None
    activations: str
    gpu_memory: str | None
    host_memory: str | None
    nvme_capacity: str | None
    hardware: str | None
    step_time_s: float | None
    omp_threads: int | None
    fragmentation: float | None
    runtime_overhead: str | None
    hf: bool
    zero_init: bool | None
    load_dtype: str | None
    low_cpu_mem_usage: bool | None
    pipeline_build: str | None
    trainer_args: dict | None
    hidden_size: int | None
    overrides: tuple[str, ...] = ()
    save_dir: str | None = None
    save_interval: float | None = None


#: The load-phase options (:func:`advisor.views.estimate.load_assumption`), in EstimateArgs' order.
LOAD_OPTION_NAMES = ("zero_init", "load_dtype", "low_cpu_mem_usage", "pipeline_build")


def _load_options(f):
    """Click decorator: the load-phase options estimate, report, check and generate share
    (``--zero-init/--no-zero-init``, ``--load-dtype``, ``--low-cpu-mem-usage/--no-low-cpu-mem-usage``,
    ``--pipeline-build``; each None when not given), with one meaning:
    :func:`advisor.views.estimate.load_assumption` (:func:`advisor.ledger.timeline.resolve_load`) turns
    them into the load phase."""
    from advisor.plan import PIPELINE_BUILDS
    deco = _opt("--pipeline-build", "pipeline_build", type=click.Choice(list(PIPELINE_BUILDS)), default=None,
                help="Load phase under pipeline parallelism: stage = a PipelineModule from LayerSpecs, each rank "
                     "building only its stage's layers (default); whole = the model built whole on every rank and "
                     "its modules given to PipelineModule, which keeps the other stages' layers referenced "
                     "(runtime/pipe/module.py _layer_specs): the whole model per rank at load, the other stages' "
                     "layers in host memory after it.")(f)
    deco = _opt("--low-cpu-mem-usage/--no-low-cpu-mem-usage", "low_cpu_mem_usage", default=None,
                help="Load phase: one copy of the weights while loading (default yes; no = a random-init "
                     "model plus the loaded state dict, twice the bytes).")(deco)
    from advisor.config.dtypes import TRAINING_DTYPE_BYTES
    deco = _opt("--load-dtype", type=click.Choice(list(TRAINING_DTYPE_BYTES)), default=None,
                help="Load phase: dtype the weights are built/loaded in. Default: with --hf the checkpoint's "
                     "(config.json dtype/torch_dtype, as from_pretrained's dtype=\"auto\"), else fp32 (torch's "
                     "default dtype).")(deco)
    return _opt("--zero-init/--no-zero-init", "zero_init", default=None,
                help="Load phase: the model is built under deepspeed.zero.Init (ZeRO-3 only). Default: yes at "
                     "ZeRO-3 (what the HF Trainer does), else no; without it every rank builds the whole model in "
                     "host memory and initialize holds it whole on each accelerator.")(deco)


def _estimate_options(f):
    """Click decorator: the options of :class:`EstimateArgs` (plus the Trainer arguments). The
    command receives them as one keyword argument ``est`` (an EstimateArgs); its own options
    (written below this decorator) come after these in --help."""
    import functools
    from dataclasses import fields

    names = [x.name for x in fields(EstimateArgs)]

    @functools.wraps(f)
    def collect(*a, **kw):
        kw["est"] = EstimateArgs(**{n: kw.pop(n) for n in names})
        return f(*a, **kw)

    deco = _trainer_options(collect)  # the Trainer arguments last in --help
    deco = _load_options(deco)
    deco = option("hf", help='Config is used through the HF Trainer ("auto" is filled in).')(deco)
    deco = option("fragmentation")(deco)
    return options(
        *MODEL_OPTIONS, "world_size", "gpus_per_node", *PARALLEL_OPTIONS, *WORKLOAD_OPTIONS, "activations",
        *CAPACITY_OPTIONS, "runtime_overhead", "hardware", "step_time_s", "omp_threads", "set", "save_dir",
        "save_interval",
        hardware=dict(help=HARDWARE_HELP + " Capacities, bandwidths and storage tiers (flags above win)."),
        save_dir=dict(help="Absolute path checkpoints are saved to (save_checkpoint's save_dir): with --hardware, "
                           "when it lies on the NVMe swap's storage tier, that tier's writes per day and drive life "
                           "count the saves too (the checkpoint section's count the swap)."),
        save_interval=dict(help="Seconds between checkpoint saves (with --save-dir), for their writes per day."),
        step_time_s=dict(help="Seconds per optimizer step, for bytes written per day and drive endurance."),
        **UNSET_WORKLOAD,
    )(deco)


def _workload(config: str, a, data=None) -> "ResolvedWorkload":  # noqa: F821 (advisor.views.workload)
    """The workload for CONFIG: each flag (the attributes of ``a`` named as the workload's FIELDS; a
    command passes ``SimpleNamespace(**locals())`` of its click parameters), else the sidecar generate wrote next to it
    (advisor.views.workload), else the default; what the config ``data`` holds itself (its
    micro-batch, sequence_parallel_size) is never the sidecar's. Raises click errors (exit 2) on a
    bad sidecar."""
    from advisor.views.workload import FIELDS, resolve

    try:
        return resolve(config, {k: getattr(a, k, None) for k in FIELDS}, data)
    except AdvisorError as e:
        raise _fail(str(e))


def _check_checkpointing(wl, inv) -> None:
    """Exit 2 (one line naming --checkpointing, or the sidecar it came from, the value and the
    model's layer count) when K checkpointed layers exceed what a pipeline stage holds
    (:func:`advisor.model.activations.checkpointing_problem`); it is never clamped to "full"."""
    from advisor.model.activations import checkpointing_problem
    v = wl.values
    problem = checkpointing_problem(v.get("checkpointing"), inv, v.get("pipeline_parallel") or 1)
    if problem:
        origin = wl.origin.get("checkpointing", "flag")
        src = "--checkpointing" if origin == "flag" else f"checkpointing ({origin})"
        raise _fail(f"{src} {v['checkpointing']}: {problem}")


def _warn_load_ignored(load) -> None:
    """Warn on stderr for each load option given where it does nothing (``--zero-init`` below ZeRO-3,
    ``--pipeline-build`` without pipeline parallelism; :func:`advisor.ledger.timeline.load_ignored_warnings`)."""
    from advisor.ledger.timeline import load_ignored_warnings
    for w in load_ignored_warnings(load):
        _say(f"ds-advisor: warning: {w}")


def _seq_len_warning(wl, inv) -> str | None:
    """The loud line when activations fall back to the model's maximum context."""
    mx = (inv.meta or {}).get("max_seq_len")
    if wl.values.get("seq_len") is None and mx:
        return (f"no --seq-len (and no workload sidecar): activations are for the model's maximum "
                f"context, {mx:,} tokens (max_position_embeddings); give --seq-len for the sequence you train on")
    return None


def _workload_cluster(ws: int, gpus_per_node: int | None, v: dict, data: Any, omp_flag: int | None):
    """(the Cluster, the sequence-parallel size lint checks) of a command's resolved workload
    values ``v`` (:func:`_workload`) at world size ``ws``: the one reading of the parallel sizes
    for estimate, report and checkpoint. The parallel sizes given as flags (or in the sidecar)
    must divide the world size: a usage error (exit 2). The config's own sequence_parallel_size
    is input, not usage: when it is what does not divide, G002 reports it (exit 1) and the plan
    falls back to SP = 1 (as check does). OpenMP threads: ``omp_flag`` > OMP_NUM_THREADS."""
    from advisor.plan import Cluster
    sp = v["sequence_parallel"]
    sp_from_config = sp is None
    if sp_from_config:
        from advisor.config.effective import config_sequence_parallel
        sp = config_sequence_parallel(data)
    given_par = v["tensor_parallel"] * v["pipeline_parallel"] * (1 if sp_from_config else sp)
    if ws % given_par:
        raise click.UsageError(f"world size {ws} is not a multiple of tensor x pipeline x sequence parallel = "
                               f"{given_par}: DeepSpeed asserts \"{ws} is not divisible by {given_par}\" "
                               "(utils/groups.py:_ensure_divisibility; rule G002)")
    lint_sp = sp
    # only the config's sequence_parallel_size is left to blame (a flag's or the sidecar's is in
    # given_par already: multiplying it in again turned a valid SP 8 on 8 ranks into SP 1)
    if sp_from_config and ws % (given_par * sp):
        sp = 1
    omp = _omp_threads(omp_flag)
    cluster = Cluster(world_size=ws, gpus_per_node=gpus_per_node, tensor_parallel=v["tensor_parallel"],
                      pipeline_parallel=v["pipeline_parallel"], sequence_parallel=sp,
                      expert_parallel=v["expert_parallel"], megatron_sequence_parallel=v["megatron_sp"],
                      omp_threads=omp.value if omp else None, omp_threads_source=omp.source if omp else "")
    return cluster, lint_sp


def _build_estimate(config: str, a: EstimateArgs, warnings: list[str] | None = None):
    """The estimate for CONFIG and the shared options: lint findings, the HF Trainer's resolution
    of "auto" (with --hf or Trainer arguments), capacities from the flags and --hardware. The one
    code path of ``estimate`` and ``report``. Raises click errors (exit 2) on bad input.
    Warnings go to stderr at once, or into ``warnings`` when given (``report`` prints them only
    once its file is written, so a failed write is one line)."""
    from advisor.cluster.hardware import Capacity
    from advisor.plan import Cluster, Workload
    from advisor.planning import build_plan
    from advisor.views.estimate import estimate as run_estimate, load_assumption
    from advisor.views.lint import lint_config

    m, n, ws, _ = _settings_defaults(config, a.model, a.params, a.world_size)
    a = replace(a, model=m, params=n, world_size=ws)
    if not a.model and a.params is None:
        raise click.UsageError("give --model NAME (see `ds-advisor models`) or --params N")
    if a.save_interval is not None and not a.save_dir:
        raise click.UsageError("--save-interval: the saves' writes per day need --save-dir (the tier they go to)")
    cap = Capacity(*(_size_flag(f, v) for f, v in (("--gpu-memory", a.gpu_memory), ("--host-memory", a.host_memory),
                                                   ("--nvme-capacity", a.nvme_capacity))))
    ovh = _overhead(a.runtime_overhead, a.fragmentation, warnings)
    targs = _targs(a.trainer_args, a.hidden_size)
    # --hf: the Trainer runs with TrainingArguments' defaults for every argument not given, as in
    # lint --hf: a config the Trainer refuses with them (H001) gets no estimate (issue #19)
    hf_targs = targs if targs is not None else ({} if a.hf else None)
    inp, inv, hw = _load_config_input(config, a.model, a.params, a.hardware, trainer_args=targs,
                                      world_size=a.world_size, overrides=a.overrides, activations=a.activations)
    ovh = ovh.for_hardware(hw)  # the accelerator preset's own CUDA-context / allocator defaults
    loaded = inp.loaded
    wl = _workload(config, a, loaded.data)
    _check_checkpointing(wl, inv)
    v = wl.values
    shape = _job_shape(a.world_size, a.gpus_per_node, None, inp.launch, hw, f"--hardware {a.hardware}", wl=wl,
                       warnings=warnings)
    warn = _seq_len_warning(wl, inv)  # after the shape: a refused shape is one line
    if warn and warnings is not None:
        warnings.append(warn)
    elif warn:
        _say(f"ds-advisor: warning: {warn}")
    ws, ws_src = shape.world_size.value, shape.world_size.source
    gpus_per_node = shape.gpus_per_node.value if shape.gpus_per_node else None
    cluster, lint_sp = _workload_cluster(ws, gpus_per_node, v, loaded.data, a.omp_threads)
    sp = cluster.sequence_parallel
    if str(v["checkpointing"]).startswith("sac") and a.activations != "trace":
        raise click.UsageError("--checkpointing sac (op-level selective checkpointing) needs --activations trace")
    workload = Workload(v["seq_len"], v["micro_batch"], v["checkpointing"], v["attention"], activations=a.activations,
                        moe_capacity_factor=v["moe_capacity_factor"])
    lint_cluster = cluster if lint_sp == sp else replace(cluster, sequence_parallel=lint_sp)
    if inp.launch is not None:  # the DeepSpeed config accelerate builds, resolved already
        from advisor.views.lint import lint_accelerate
        findings = lint_accelerate(inp, trainer_args_given=hf_targs is not None, world_size=ws, inventory=inv,
                                   trainer_args=hf_targs)
        aplan = replace(build_plan(loaded, inv, cluster, workload=workload, hf_model=True),
                        trainer_written=getattr(inp.resolution, "base", None),
                        accelerate_fields=not inp.launch.deepspeed_config_file)
        cap = _hardware_capacity(cap, hw, aplan)
        load = load_assumption(aplan, a.zero_init, a.load_dtype, a.low_cpu_mem_usage, config_input=inp,
                               pipeline_build=a.pipeline_build)
        _warn_load_ignored(load)
        res = run_estimate(aplan, cap, findings, overhead=ovh, hardware=hw,
                           step_time_s=a.step_time_s, load=load, save_dir=a.save_dir, save_interval_s=a.save_interval)
        res.world_size_source = ws_src
        return res
    if hf_targs is not None:  # the sidecar's Trainer arguments where the config says "auto" and no flag does
        from advisor.views.workload import trainer_args_for
        hf_targs = trainer_args_for(wl, hf_targs, loaded.data)
        if wl.trainer_assumed:  # said, as check lists them with its assumptions
            msg = (f"HF Trainer arguments from {os.path.basename(wl.sidecar or '')} for the config's \"auto\" keys "
                   f"(no flag gives them): " + ", ".join(f"{k}={v}" for k, v in wl.trainer_assumed.items()))
            if warnings is not None:
                warnings.append(msg)
            else:
                _say(f"ds-advisor: warning: {msg}")
    # the one plan of this command: effective config, HF resolution, cluster, workload
    plan = build_plan(loaded, inv, cluster, hf=a.hf, trainer_args=hf_targs, workload=workload)
    if plan.cluster is not cluster:  # the config's AutoTP / AutoEP size (advisor.planning.config_parallel)
        cluster = plan.cluster
        lint_cluster = cluster if lint_sp == sp else replace(cluster, sequence_parallel=lint_sp)
    cap = _hardware_capacity(cap, hw, plan)
    findings = lint_config(loaded, world_size=ws, world_size_source=ws_src or "default 1",
                           dp_world_size=cluster.dp_world_size, inventory=inv, hf=plan.hf is not None,
                           trainer_args=hf_targs, hardware=hw, step_time_s=a.step_time_s if hw is not None else None,
                           cluster=lint_cluster, plan=plan, keep_refusals=True, workload=wl,
                           save_dir=a.save_dir, save_interval_s=a.save_interval)
    load = load_assumption(plan, a.zero_init, a.load_dtype, a.low_cpu_mem_usage, pipeline_build=a.pipeline_build)
    _warn_load_ignored(load)
    res = run_estimate(plan, cap, findings, overhead=ovh, hardware=hw, step_time_s=a.step_time_s,
                       load=load, save_dir=a.save_dir, save_interval_s=a.save_interval)
    res.world_size_source = ws_src  # the report says a world nothing of this run gave (the sidecar's, the default)
    return res




def _hardware_capacity(cap, hw, plan):
    """``cap`` (the --gpu-memory / --host-memory / --nvme-capacity sizes) with each size it lacks
    taken from the --hardware spec ``hw``: accelerator memory, host memory per node, and the space
    of the storage tier holding the plan's nvme_path (``Hardware.capacity``). For an accelerate
    file too (it ignored the spec: accelerator "unknown" under --hardware dgx-h100)."""
    if hw is None:
        return cap
    from advisor.cluster.hardware import Capacity

    z = plan.config.zero
    hcap = hw.capacity(z.offload_optimizer.nvme_path or z.offload_param.nvme_path)
    # --nvme-capacity is the space one node's swap may take; the spec's tier may be one shared filesystem
    return Capacity(cap.accelerator or hcap.accelerator, cap.host or hcap.host, cap.nvme or hcap.nvme,
                    nvme_shared=cap.nvme_shared if cap.nvme else hcap.nvme_shared)


def _overhead(runtime_overhead: str | None, fragmentation: float | None = None, warnings: list[str] | None = None):
    """The :class:`advisor.cluster.overhead.OverheadSettings` of ``--runtime-overhead`` (and the
    deprecated ``--fragmentation``), the environment read for the terms' variables. A value
    that does not parse, or a malformed NCCL_BUFFSIZE / NCCL_MAX_NCHANNELS, is exit 2 naming it."""
    from advisor.cluster.overhead import OverheadError, OverheadSettings
    try:
        ov = parse_overrides_or_none(runtime_overhead)
        settings = OverheadSettings(env=os.environ, overrides=ov, allocator_fraction=fragmentation)
        settings.terms(0, world_size=2)  # the environment's variables parse
    except OverheadError as e:
        raise _fail(str(e))
    for part in (runtime_overhead or "").split(",") if ov else ():  # each size said in the other unit system
        term, eq, value = part.partition("=")
        key, value = (term.strip(), value.strip()) if eq else ("total", part.strip())
        if ov.get(key):
            _echo_other_units("--runtime-overhead", part.strip(), ov[key], value=value)
    if fragmentation is not None:
        msg = ("--fragmentation is deprecated: the allocator's reserve is now its own row of the fit table "
               "(10% of the peak by default); " + ("ignored: --runtime-overhead gives the allocator term"
                                                   if ov and "allocator" in ov else
                                                   f"{fragmentation:.0%} of the peak is used for it") +
               "; use --runtime-overhead allocator=SIZE")
        if warnings is not None:
            warnings.append(msg)
        else:
            _say(f"ds-advisor: warning: {msg}")
    return settings


def parse_overrides_or_none(text: str | None):
    """``--runtime-overhead``'s value parsed (None when not given)."""
    from advisor.cluster.overhead import parse_overrides
    return None if text is None else parse_overrides(text)


def _size_flag(flag: str, value: str | None) -> int | None:
    """A memory flag's value in bytes (None when not given); a bare number or a bad size is a
    one-line usage error naming the flag (exit 2)."""
    from advisor.units import parse_size
    if not value:
        return None
    try:
        n = parse_size(value)
    except ValueError as e:
        raise _fail(f"{flag}: {e}")
    _echo_other_units(flag, value, n)
    return n


def _echo_other_units(flag: str, shown: str, n: int | float, value: str | None = None, per: str = "") -> None:
    """When a size flag is written in the other unit system than the text report's ``--units``
    (80GB = 80 x 10^9 bytes read by a GiB report, 141GiB by a GB one), say once on stderr what it
    was read as: ``--gpu-memory 80GB = 80,000,000,000 bytes = 74.51 GiB``. ``shown``: the flag's
    text as written (``cuda_context=600MB``: one part of ``--runtime-overhead``), ``value`` the
    size in it (default ``shown``), ``n`` its bytes; ``per`` "/s" for a bandwidth
    (``--write-bandwidth 2GB/s = 2,000,000,000 bytes/s = 1.86 GiB/s``). Machine formats
    (``--format json`` ...) stay quiet: their sizes are bytes."""
    from advisor.units import check_units, size, unit_note, unit_system
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.params.get("fmt", "text") != "text" or ctx.params.get("quiet"):
        return
    value = shown if value is None else value
    if per and value.lower().endswith(per):
        value = value[:-len(per)]
    units, given = check_units(_display().get("units") or "GiB"), unit_system(value)
    if given is not None and given != units:  # said with the report (_echo): a bad-input error stays one line
        ctx.meta.setdefault("ds_advisor.notes", []).append(
            f"ds-advisor: {flag} {shown} = {int(n):,} bytes{per} = {size(n, units)}{per} ({unit_note(given)}; the "
            f"report is in {units})")


def _flush_notes() -> None:
    """Print the notes held for the report (:func:`_echo_other_units`) on stderr, once."""
    ctx = click.get_current_context(silent=True)
    for note in (ctx.meta.pop("ds_advisor.notes", []) if ctx else []):
        _say(note)


def _release_option(f):
    """``--deepspeed-version``: resolves the release once (advisor.config.versions.target_release),
    makes it the command's release (``use_release``: every view reads it) and passes it as
    ``release`` to commands that take that argument."""
    import functools
    import inspect

    takes = "release" in inspect.signature(f).parameters

    @functools.wraps(f)
    def wrapper(*a, **kw):
        from advisor.config.versions import target_release, use_release
        try:
            rel = target_release(kw.pop("deepspeed_version", None))
        except AdvisorError as e:
            raise _fail(str(e))
        if rel.warning:
            _say(f"ds-advisor: warning: {rel.warning}")
        use_release(rel)
        if takes:
            kw["release"] = rel
        return f(*a, **kw)

    return _opt("--deepspeed-version", "deepspeed_version", metavar="X.Y.Z",
                        help="DeepSpeed release the job runs (default: the installed deepspeed, read from package "
                             "metadata; else 0.19.8). Findings name the release.")(wrapper)


def _release_independent(fmt: str, what: str) -> None:
    """For commands whose output does not depend on the release (explain, models, hardware): name
    the command's release anyway, with ``what`` (a clause saying what does not depend on it). Text:
    a last ``release:`` line on stdout; JSON: one line on stderr (the JSON's shape stays as it was)."""
    from advisor.config.versions import release_note
    line = f"release: {release_note()}; {what}"
    if fmt == "text":
        from advisor.render.style import width, wrap
        _echo(wrap(line, width(sys.stdout)))  # folded like the report above it
    else:
        _say(f"ds-advisor: {line}")


# ---------------------------------------------------------------------------------------------
# Lazy commands: a command's click objects (one Option per flag, ~190 in all) are built only when
# the command is invoked (or --help lists them), so `lint` does not pay for the other ten.


def _cut_echoes(message: str, value) -> str:
    """``message`` with every echo of ``value`` (a string, or each string of a ``multiple`` /
    ``nargs`` tuple) longer than :data:`advisor.errors.MAX_ECHO_CHARS` cut by
    :func:`advisor.errors.cut`: its ``repr`` (how click.Choice, IntRange, FloatRange, Path and our
    ParamTypes quote it) and its text as written."""
    from advisor.errors import MAX_ECHO_CHARS, cut
    for v in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(v, str) and len(v) > MAX_ECHO_CHARS:
            message = message.replace(repr(v), cut(repr(v))).replace(v, cut(v))
    return message


class _EchoCut:
    """Every option and argument the CLI declares (:func:`_opt`, :func:`_arg`) is built with this
    mixin: the one place a value meets click's conversion. click's own messages (Choice,
    IntRange, FloatRange, Path, and ours raised through ``self.fail``) echo the value whole -- a
    120,000-character value made a 120 KB error line -- so a refusal's message is cut here
    (:func:`_cut_echoes`). A whole number written with more digits than Python converts, given to
    an option that reads a count (an int type, ``--checkpointing``'s K), is refused here in the
    project's words (:func:`advisor.errors.digits_problem`), not as click's "is not a valid
    integer" (it is one) or Python's "Exceeds the limit (4300 digits)"."""

    def type_cast_value(self, ctx, value):  # noqa: D102 - click's hook
        if isinstance(self.type, (click.types.IntParamType, CheckpointingType)):
            from advisor.errors import cut, digits_problem
            for v in value if isinstance(value, (tuple, list)) else (value,):
                problem = digits_problem(v) if isinstance(v, str) else None
                if problem:
                    raise click.BadParameter(f"{cut(repr(v))} is {problem}", ctx=ctx, param=self)
        try:
            return super().type_cast_value(ctx, value)
        except click.BadParameter as e:
            e.message = _cut_echoes(e.message, value)
            raise


class _Option(_EchoCut, click.Option):
    """click.Option with :class:`_EchoCut`."""


class _Argument(_EchoCut, click.Argument):
    """click.Argument with :class:`_EchoCut`."""


def _opt(*decls, **attrs):
    """``click.option`` (an :class:`_Option`), recorded on the function and built when its command is
    first used."""
    def deco(f):
        f.__dict__.setdefault("__lazy_params__", []).append((attrs.pop("cls", _Option), decls, attrs))
        return f
    return deco


def _arg(*decls, **attrs):
    """``click.argument`` (an :class:`_Argument`), recorded like :func:`_opt`."""
    def deco(f):
        f.__dict__.setdefault("__lazy_params__", []).append((attrs.pop("cls", _Argument), decls, attrs))
        return f
    return deco


class _LazyCommands(dict):
    """``Group.commands``: name -> click.Command, each built on first access from the function and
    the parameters :func:`_opt` / :func:`_arg` recorded (in the order click would have built them)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.pending: dict[str, tuple] = {}

    def _build(self, name: str) -> None:
        f, kwargs = self.pending.pop(name)
        # a plain @click.option on a lazy command still counts (never silently dropped)
        f.__click_params__ = [*f.__dict__.get("__click_params__", []),
                              *(cls(decls, **attrs) for cls, decls, attrs in f.__dict__.pop("__lazy_params__", []))]
        super().__setitem__(name, click.command(name, **kwargs)(f))

    def _build_all(self) -> None:
        for name in list(self.pending):
            self._build(name)

    def __getitem__(self, name):
        if name in self.pending:
            self._build(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        if name in self.pending:
            self._build(name)
        return super().get(name, default)

    def __contains__(self, name) -> bool:
        return name in self.pending or super().__contains__(name)

    def __iter__(self):
        self._build_all()
        return super().__iter__()

    def __len__(self) -> int:
        return super().__len__() + len(self.pending)

    def keys(self):
        self._build_all()
        return super().keys()

    def items(self):
        self._build_all()
        return super().items()

    def values(self):
        self._build_all()
        return super().values()


def _usage_error(e: "click.UsageError") -> "click.exceptions.Exit":
    """click's usage error ``e`` printed as one bad-input line naming the command, the option and
    the problem (:func:`_fail`), with a pointer to ``--help``; the Exit (code 2) to raise."""
    msg = " ".join(e.format_message().split()).rstrip(".")
    msg = msg[:1].lower() + msg[1:]  # "Invalid value for '--x': ..." -> "invalid value for '--x': ..."
    msg = msg.replace(". Did you mean", "; did you mean")
    cmd = e.ctx.info_name if e.ctx is not None and e.ctx.parent is not None else None
    see = "" if "(see " in msg else f" (see ds-advisor {cmd + ' ' if cmd else ''}--help)"  # ours name their way out
    return _fail(f"{cmd + ': ' if cmd else ''}{msg}{see}")


class _LazyGroup(click.Group):
    """A click group whose ``@group.command()`` defers building the command (see above)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.commands = _LazyCommands(self.commands)

    def invoke(self, ctx):
        """The command, with click's own usage errors (a bad option value, an unknown option or
        command, a missing argument) as every bad-input error: one line on stderr,
        ``ds-advisor: estimate: invalid value for '--world-size': 0 is not in the range ...``,
        exit 2 (:data:`advisor.errors.EXIT_USAGE`), folded on a terminal (:func:`_fail`), not
        click's "Usage: ... Try ... Error: ..." block."""
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _usage_error(e) from None
        except KeyboardInterrupt:  # before click's standalone handler turns it into "Aborted!", exit 1
            raise _interrupted() from None

    def parse_args(self, ctx, args):
        """The group's own options, with their usage errors as one line too (``ds-advisor --bogus``);
        no arguments still prints the help."""
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as e:
            raise _usage_error(e) from None
        except KeyboardInterrupt:
            raise _interrupted() from None

    def command(self, *args, **kwargs):  # type: ignore[override]
        def deco(f):
            name = args[0] if args and isinstance(args[0], str) else kwargs.pop("name", None)
            name = name or f.__name__.lower().replace("_", "-")
            self.commands.pending[name] = (f, kwargs)
            return f
        return deco


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name=f"ds-advisor (DeepSpeed {DEEPSPEED_VERSION} accounting)")
def main() -> None:
    """Lint DeepSpeed configs and account for every byte of training state per rank.

    Exit codes: 0 ok; 1 findings at or above --fail-on (check: no-go); 2 bad usage or
    unreadable input; 3 environment could not be probed (check --strict); 4 check: tight
    (fits only inside the runtime overhead's uncertainty; --allow-tight: 0); 130 interrupted
    (Ctrl-C).
    """


def _sidecar_dp(path: str, data: object, world_size: int | None,
                source: str | None) -> tuple[int | None, int | None, str | None]:
    """(world size, data-parallel world size, its source) for lint's batch check (rule B001). The world
    size is ``world_size``, else the one the workload sidecar records (``world``, the world generate
    planned: as estimate and checkpoint take it, ``advisor.cluster.launch.job_shape``), else None. The
    data-parallel world size is given when the workload
    sidecar generate wrote next to ``path`` records tensor/pipeline parallelism: with Megatron's mpu,
    DeepSpeed checks train_batch_size over mpu.get_data_parallel_world_size() ranks
    (runtime/config.py DeepSpeedConfig.__init__), :attr:`advisor.plan.Cluster.dp_world_size`.
    The sizes are read as estimate and check read them (:func:`advisor.views.workload.resolve`).
    (None, source) -- lint_config's own default -- without a sidecar, a world size, or model
    parallelism. A sidecar is read whenever there is one, as estimate, check and checkpoint read it
    (:func:`advisor.views.workload.resolve`), so a malformed one is refused here with their one-line
    error (ConfigLoadError naming the sidecar, the key and the problem; lint exits 2 for that file
    as for an unreadable config): lint used to skip it without a world size and ignore its errors
    (issue 21). Raises ConfigLoadError too when something that is not a regular file (a FIFO, a
    device, a directory) has its name (:func:`advisor.views.workload.find_sidecar`)."""
    from advisor.config.effective import config_sequence_parallel
    from advisor.plan import Cluster
    from advisor.views.workload import find_sidecar, resolve, sidecar_path
    if find_sidecar(path) is None:
        return world_size, None, source
    wl = resolve(path, {}, data)  # a bad sidecar: AdvisorError, the caller's error for this file
    v = wl.values
    recorded = (wl.recorded or {}).get("world") or {}
    if world_size is None and recorded.get("world_size"):
        world_size = recorded["world_size"]
        source = f"{os.path.basename(sidecar_path(path))}, the world generate planned"
    if world_size is None:
        return None, None, source
    tp, pp = v["tensor_parallel"], v["pipeline_parallel"]
    sp = v["sequence_parallel"] or config_sequence_parallel(data)
    if tp * pp == 1 or world_size % (tp * pp * sp):
        return world_size, None, source
    dp = Cluster(world_size=world_size, tensor_parallel=tp, pipeline_parallel=pp, sequence_parallel=sp).dp_world_size
    return world_size, dp, (f"{source or 'world size'}; tensor parallel {tp} x pipeline parallel {pp}"
                            + (f" x sequence parallel {sp}" if sp > 1 else "")
                            + f" from {os.path.basename(sidecar_path(path))}")


@main.command()
@_arg("paths", nargs=-1, required=True)
@options("world_size", *MODEL_OPTIONS, "hf", "set",
         world_size=dict(help="Total ranks (default: WORLD_SIZE or SLURM_NTASKS): enables the batch-size check."),
         model=dict(help=MODEL_HELP + " Enables model-dependent rules."))
@_opt("--fail-on", type=click.Choice(FAIL_ON), default=None,
              help="Exit 1 when a finding at or above this severity exists (default: the settings file's "
                   "fail-on, else error).")
@_opt("--select", multiple=True, help="Rule codes or names to run (default: all), comma-separated and/or repeated "
                                     "(their union), e.g. B001,auto-top-level. Replaces the settings file's select.")
@_opt("--ignore", multiple=True, help="Rule codes or names not to run, comma-separated and/or repeated (their "
                                     "union): added to the settings file's ignore.")
@_opt("-q", "--quiet", is_flag=True, help="Print the findings only (no summary line), then the DeepSpeed release they "
     "were checked against; nothing when there are none.")
@format_option("lint")
@_release_option
@_trainer_options
@display_options("units", "color")
def lint(paths, world_size, model, params, hf, fail_on, select, ignore, quiet, fmt, release, trainer_args,
         hidden_size, overrides):
    """Lint DeepSpeed config files (JSON/HJSON, base64, or - for stdin) and folders of them.

    \b
    Settings: the closest [tool.ds-advisor] table in a pyproject.toml, or .ds-advisor.toml,
    above each file gives select, ignore, world-size, model/params and fail-on; flags win.

    \b
    In-config suppression: a top-level "ds_advisor": {"ignore": ["B001", "batch-triple"]}
    in the DeepSpeed config drops those rules' findings for that file; an entry "RULE:KEY"
    ("S002:cuda_visible_devices", "S002:aio.block_sizee") drops only that rule's findings
    about that key. DeepSpeed ignores unknown top-level keys and the HF Trainer passes them
    on, so the section can stay in the file you launch with (not inside zero_optimization:
    DeepSpeed refuses it there). An entry naming no rule or no key is an S007 finding.
    """
    from advisor.findings import SEVERITY_RANK, worst
    from advisor.rules import rule_codes
    from advisor.views.lint import internal_error, lint_accelerate, lint_guarded, lint_options
    from advisor.render.lint import FileResult

    if model and params:
        raise click.UsageError("give --model or --params, not both")
    try:
        sel = rule_codes(",".join(select), "--select") if select else None
        ign = rule_codes(",".join(ignore), "--ignore") if ignore else None
    except ValueError as e:
        raise click.UsageError(str(e))
    env_world = _world(None) if world_size is None else (None, None)
    inventories: dict = {}

    def opts(p: str):
        try:
            return lint_options(p, select=sel, ignore=ign, model=model, params=params, world_size=world_size,
                                env_world=env_world, fail_on=fail_on, inventories=inventories)
        except AdvisorError as e:
            raise _fail(str(e))
    files = _expand_paths(paths)
    if not files:
        raise _fail(f"no config files ({', '.join(CONFIG_SUFFIXES)}) in {', '.join(paths)}")
    from advisor.config.inputs import NotAConfig, deepspeed_keys, read_input
    from advisor.errors import NotAnObjectError

    in_folder = set(files) - set(paths)
    targs = _targs(trainer_args, hidden_size)
    # --hf: the Trainer runs, with TrainingArguments' defaults for every argument not given -- what
    # `resolve` replays (it has to fill each "auto"), so lint --hf and resolve report the same findings
    hf_args = targs if targs is not None else ({} if hf else None)
    read: list[tuple[str, object]] = []  # (path, ConfigInput | FileResult)

    def read_one(p: str, **kw):
        """ConfigInput, or the FileResult of a file that is skipped, unreadable or broke the reader
        (X001: one bad file must not lose the batch)."""
        try:
            return read_input(p, **kw)
        except NotAConfig as e:
            return FileResult(file=p, skipped=e.reason) if p in in_folder else FileResult(file=p, error=str(e))
        except NotAnObjectError as e:  # in a folder, like a JSON object without DeepSpeed keys: skipped
            return (FileResult(file=p, skipped=f"{e.problem.split(',')[0]}: not a DeepSpeed config") if p in in_folder
                    else FileResult(file=p, error=str(e)))
        except AdvisorError as e:
            if str(e).startswith("--set "):  # the flag's problem, not the file's: one usage line, exit 2
                raise _fail(str(e))
            return FileResult(file=p, error=str(e))
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001
            if os.environ.get("DS_ADVISOR_DEBUG"):
                raise
            return FileResult(file=p, findings=[internal_error(e).located({}, p)])

    per_file = {p: opts(p) for p in files}
    for p in files:  # one bad file is an error line or an X001 finding; the others' results are kept
        read.append((p, read_one(p, trainer_args=targs, world_size=per_file[p].world_size,
                                 inventory=per_file[p].inventory, overrides=overrides, lenient=True)))
    # A deepspeed_config_file an accelerate config names goes through accelerate: linted as --hf,
    # and linted even when it is not among the paths given; its world size is the launch's
    # (accelerate_world: num_processes // num_machines x num_machines) unless --world-size is given.
    named: dict[str, str] = {}
    launch_world: dict[str, tuple[int, str]] = {}
    for n, (yaml_path, i) in enumerate(read):
        if isinstance(i, FileResult) or i.launch is None:
            continue
        from advisor.config.hf import deepspeed_config_file_at
        try:  # read once already; a FIFO or device swapped in since is refused naming the YAML, not skipped
            if deepspeed_config_file_at(i.launch) is None:
                continue
        except AdvisorError as e:
            read[n] = (yaml_path, FileResult(file=yaml_path, error=str(e)))
            continue
        real = os.path.realpath(i.launch.deepspeed_config_file)
        named.setdefault(real, i.launch.deepspeed_config_file)
        if i.launch.world_size and real not in launch_world:
            launch_world[real] = (i.launch.world_size, i.launch.world_size_source)
    given = {os.path.realpath(p) for p in files}
    for real, path in named.items():
        if real not in given:
            per_file[path] = opts(path)
            read.append((path, read_one(path, overrides=overrides)))
    for p in list(per_file):
        lw = launch_world.get(os.path.realpath(p))
        if lw and world_size is None:
            per_file[p] = replace(per_file[p], world_size=lw[0], world_size_source=lw[1])
    results: list[FileResult] = []
    thresholds: list[tuple[FileResult, str]] = []
    for p, inp in read:
        o = per_file[p]
        codes, inv, ws, ws_src = o.codes, o.inventory, o.world_size, o.world_size_source
        if isinstance(inp, FileResult):
            results.append(inp)
        elif inp.launch is not None:
            results.append(FileResult(file=inp.loaded.source, kind="accelerate", findings=lint_accelerate(
                inp, trainer_args_given=hf_args is not None, select=codes, world_size=inp.resolution.world_size,
                inventory=inv, trainer_args=hf_args)))
        elif p in in_folder and isinstance(inp.loaded.data, dict) and inp.loaded.data \
                and not deepspeed_keys(inp.loaded.data):
            keys = ", ".join(list(inp.loaded.data)[:4]) or "none"
            results.append(FileResult(file=p, skipped=f"no DeepSpeed key at the top level (keys: {keys}): "
                                                      "not a DeepSpeed config"))
        else:
            try:
                ws, dp, ws_src = _sidecar_dp(p, inp.loaded.data, ws, ws_src)
            except AdvisorError as e:  # a malformed sidecar, or a FIFO / device / folder by its name: the file's error
                results.append(FileResult(file=p, error=str(e)))
                thresholds.append((results[-1], o.fail_on))
                continue
            results.append(FileResult(file=inp.loaded.source, findings=lint_guarded(
                inp.loaded, world_size=ws, world_size_source=ws_src, dp_world_size=dp, inventory=inv,
                hf=hf or bool(trainer_args) or os.path.realpath(p) in named, select=codes, trainer_args=hf_args,
                release=release)))
        thresholds.append((results[-1], o.fail_on))
    # A finding about the DeepSpeed config a deepspeed_config_file holds (H001, H008 ...) comes from
    # the accelerate file's resolution and from the named file's own lint: reported once, on the
    # named file (where it has a line), as `resolve` reports it once.
    by_real = {os.path.realpath(r.file): r for r in results if r.file and r.kind != "accelerate"}
    for (_, inp), r in zip(read, results):
        if r.kind != "accelerate" or isinstance(inp, FileResult) or not inp.launch.deepspeed_config_file:
            continue
        named_r = by_real.get(os.path.realpath(inp.launch.deepspeed_config_file))
        if named_r is not None:
            from advisor.views.lint import drop_named_duplicates
            r.findings = drop_named_duplicates(r.findings, named_r.findings)
    if fmt == "text":  # an unreadable file is an error, on stderr (one line piped); the report counts it
        for r in results:
            if r.error:
                _fail(r.error)
    _echo(_render("lint", fmt, results, release=release, quiet=quiet))
    if any(r.error for r in results):
        sys.exit(EXIT_USAGE)
    failed = any(worst(r.findings) >= (99 if fo == "never" else SEVERITY_RANK[fo]) for r, fo in thresholds)
    sys.exit(EXIT_FINDINGS if failed else EXIT_OK)


@main.command()
@_arg("code", required=False)
@_release_option
@display_options("color")
def explain(code):
    """Explain a rule, by code or name (explain B001, explain batch-triple), or list all rules."""
    from advisor.rules import all_rules, find_rule, rule_codes

    rules = all_rules()
    if not code:
        _echo("\n".join(f"{c}  {r.severity:<7}  {r.name}" for c, r in rules.items()))
        _release_independent("text", "the list of rules does not depend on it")
        return
    r = find_rule(code)
    if r is None:
        try:
            rule_codes(code, "explain")
        except ValueError as e:
            raise _fail(str(e).replace("explain: unknown rule code(s) or name(s)", "unknown rule"))
    from advisor.render.explain import rst_text
    from advisor.render.style import use_color, width

    color = use_color(sys.stdout, _display().get("color", "auto"))
    also = f"; {r.severity_also}" if r.severity_also else ""
    _echo(f"[{r.code} | {r.name} | severity: {r.severity}{also}]\n"
          + rst_text(r.explanation(), color, cols=width(sys.stdout)))  # prose folded like every text report
    _release_independent("text", "this explanation does not depend on it" if not r.code.startswith("V") else
                         "this explanation does not depend on it; the rule's findings are about the release "
                         "lint checks against (--deepspeed-version)")


@main.command()
@_arg("config")
@_estimate_options
@_opt("--explain", "explain_", is_flag=True, help="Show every item with its formula and DeepSpeed source.")
@_opt("--compare-deepspeed", is_flag=True,
              help="Also show DeepSpeed's own estimate_zero2/zero3 figures (imports deepspeed: slow).")
@format_option("estimate")
@_release_option
@display_options("units", "color")
def estimate(config, est, explain_, compare_deepspeed, fmt):
    """Per-rank training state by class and tier for CONFIG on a model and cluster.

    Exit 0 when every tier with a known capacity fits, 1 when one does not or on any error finding
    (a config DeepSpeed would refuse before training starts, e.g. zero_optimization.stage 7, gets
    no estimate at all: only its findings), 2 on bad input.
    """

    result = _build_estimate(config, est)
    if compare_deepspeed and result.roles:
        from advisor.engine.compare import deepspeed_estimate
        result.sections["deepspeed_estimate"] = deepspeed_estimate(result.plan)
    _echo(_render("estimate", fmt, result, explain=explain_))
    # 1: a tier does not fit, DeepSpeed would refuse the config, or any other error finding
    sys.exit(EXIT_FINDINGS if any(f.severity == "error" for f in result.findings) else EXIT_OK)


@main.command()
@click.option("--types", "types", is_flag=True,
              help="List the built-in model types (config.json model_type) and which have activation formulas.")
@format_option("models")
@_release_option
def models(types, fmt):
    """List built-in model presets with their exact parameter counts (--types: the model types
    the formulas cover; any other type needs --activations trace or --params)."""
    from advisor.model.specs import list_presets

    if types:
        from advisor.model.activations import coverage
        from advisor.model.specs import FAMILIES

        _echo(_render("model_types", fmt, coverage(FAMILIES)))
        _release_independent(fmt, "the model types do not depend on it")
        return
    _echo(_render("models", fmt, list_presets()))
    _release_independent(fmt, "the presets' parameter counts do not depend on it")


#: measure builds a proxy with the inventory's real shapes; beyond this it needs a big machine.
MEASURE_MAX_PARAMS = 200_000_000
#: measure launches every rank as a process on this machine.
MEASURE_MAX_RANKS = 64


@main.command()
@_arg("config")
@options(*MODEL_OPTIONS, "world_size",
         model=dict(help=MODEL_HELP + " Its real tensor shapes are built."),
         world_size=dict(type=click.IntRange(min=1, max=MEASURE_MAX_RANKS), default=1, show_default=True,
                         help="Ranks to launch on this machine (torch.distributed.run)."))
@_opt("--steps", type=click.IntRange(min=1, max=100), default=2, show_default=True)
@_opt("--timeout", "timeout_s", type=FiniteFloat(min=1, max=MAX_SECONDS), default=600, show_default=True,
              help="Seconds before the launch is stopped.")
@_opt("--allow-large", is_flag=True, help=f"Measure models over {MEASURE_MAX_PARAMS:,} parameters anyway.")
@format_option("measure")
@_release_option
def measure(config, model, params, world_size, steps, timeout_s, allow_large, fmt, release):
    """Run the real DeepSpeed engine on CONFIG and put its bytes beside the ledger's.

    Launches WORLD_SIZE ranks with torch's own launcher (DS_ACCELERATOR=cpu and gloo when no GPU
    is present), builds a model with the inventory's tensor shapes, runs --steps training steps
    and takes censuses of the engine's tensors after backward, inside the optimizer step and
    after the last step. Needs the [engine] extra (torch, deepspeed). Exit 0 when every item
    matches to the byte and every phase's high-water mark is within 1% of the ledger timeline's,
    1 when one differs or a rank failed, 2 on bad input, 5 when the run passed --timeout (its
    processes are ended).
    """
    if not model and params is None:
        raise click.UsageError("give --model or --params")
    from advisor.config.versions import installed_release, release_dict
    inst = installed_release()
    if release.origin == "--deepspeed-version" and inst and release.requested != inst:
        raise _fail(f"--deepspeed-version {release.requested}: measure runs the installed deepspeed ({inst}); "
                    f"install {release.requested} to measure it, or leave the flag out")
    loaded, inv, _ = _load_inputs(config, model, params)
    if inv.numel > MEASURE_MAX_PARAMS and not allow_large:
        raise _fail(f"{inv.name} has {inv.numel:,} parameters: measuring builds them for real on this machine; "
                    f"use a smaller model or --allow-large")
    from advisor.views.lint import lint_config
    errors = [f for f in lint_config(loaded, world_size=world_size, world_size_source="--world-size", inventory=inv,
                                          keep_refusals=True)
              if f.severity == "error"]
    if errors:  # DeepSpeed would refuse or crash: say so now rather than after a minute of launching
        for f in errors:
            _say(f"{loaded.source}: error {f.code} {f.pointer}: {f.message}")
        raise _fail(f"not launching the engine: {len(errors)} error finding(s) above (see `ds-advisor lint`)")
    try:
        from advisor.engine.measure import (MeasureError, MeasureTimeout, Terminated, measure_phases,
                                            measure_verdict, measure_vs_ledger, run_measure)
    except ImportError as e:
        from advisor.install import extra_command
        raise _fail(f"measure needs torch and deepspeed (pip install torch==2.13.0 && {extra_command('engine')}): {e}")
    try:
        ranks = run_measure(loaded.data, inv, world_size, steps=steps, timeout_s=timeout_s,
                            progress=lambda words: _say(f"ds-advisor: measure: {words}"))
    except MeasureTimeout as e:  # one line: the launcher's traceback is only the SIGTERM it was sent
        from advisor.errors import EXIT_TIMEOUT
        raise _fail(f"measure: {e}", EXIT_TIMEOUT)
    except MeasureError as e:
        raise _fail(f"the engine run failed: {e}")
    except Terminated as e:  # the launch's process group is ended and its temp folder removed
        _say(f"ds-advisor: measure: stopped by signal {e.signum}: the engine's processes were ended")
        raise
    rows = measure_vs_ledger(loaded.data, inv, world_size, ranks)
    phases = measure_phases(loaded.data, inv, world_size, ranks)
    verdict = measure_verdict(rows, phases)
    _echo(_render("measure", fmt, {"config": loaded.source, "model": inv.name, "world_size": world_size,
                                       "steps": steps, "rows": rows, **verdict, "phases": phases,
                                       "deepspeed_release": release_dict(release)}))
    sys.exit(EXIT_OK if verdict["matches"] else EXIT_FINDINGS)


def run() -> None:
    """Console-script entry: ``main`` with a last guard so no input ever ends in a traceback.

    AdvisorError (bad input) -> its one-line message, exit 2. Anything unexpected -> one line
    naming the exception, exit 2; set DS_ADVISOR_DEBUG=1 to see the traceback.
    """
    try:
        main(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:  # outside the command (the group handles it inside): the same line, 130
        sys.exit(_interrupted().exit_code)
    except AdvisorError as e:
        _fail(str(e))
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - the contract is: no traceback for any input
        if os.environ.get("DS_ADVISOR_DEBUG"):
            raise
        _fail(f"internal error: {type(e).__name__}: {e} (set DS_ADVISOR_DEBUG=1 for details)")
        sys.exit(EXIT_USAGE)


@main.command()
@_arg("config")
@options(*MODEL_OPTIONS, "world_size", "gpus_per_node", *PARALLEL_OPTIONS, *WORKLOAD_OPTIONS,
         "gpu_memory", "host_memory", "runtime_overhead", "fragmentation", "hardware", "hf", "set", **UNSET_WORKLOAD,
         world_size=dict(help="Total ranks (default: WORLD_SIZE, SLURM_NTASKS, or this node's visible GPUs)."),
         gpus_per_node=dict(help="Ranks per node (default: LOCAL_WORLD_SIZE, SLURM_GPUS_ON_NODE/PER_NODE, visible GPUs)."),
         gpu_memory=dict(help="Accelerator memory per rank, e.g. 80GB (beats the nvidia-smi/rocm-smi probe)."),
         host_memory=dict(help="Host memory per node, e.g. 512GB (beats /proc/meminfo MemAvailable)."),
         hardware=dict(help=HARDWARE_HELP + " Used where flags, the environment and the probes say nothing."),
         hf=dict(help='Config is used through the HF Trainer ("auto" is filled in).'))
@_opt("--strict", is_flag=True, help="Exit 3 when the environment cannot be probed (default: warn and "
              "use the flags).")
@click.option("--allow-tight", is_flag=True, help="Exit 0 (with a warning) instead of 4 when the verdict is tight.")
@_load_options
@format_option("check")
@_opt("-q", "--quiet", is_flag=True, help="Print nothing when the verdict is go.")
@_release_option
@display_options("units", "color")
@_trainer_options  # estimate's Trainer arguments (TRAINER_OPTS), last in --help
def check(config, model, params, world_size, gpus_per_node, tensor_parallel, pipeline_parallel, sequence_parallel,
          megatron_sp, expert_parallel, seq_len, micro_batch, checkpointing, attention, moe_capacity_factor, gpu_memory,
          host_memory, runtime_overhead, fragmentation, hardware, hf, overrides, strict, allow_tight, zero_init,
          load_dtype, low_cpu_mem_usage, pipeline_build, fmt, quiet, trainer_args, hidden_size):
    """Pre-launch gate: will CONFIG fit on this node? Run it first in a job script, on each node.

    \b
    Reads the launch shape from flags, else the launcher's environment (WORLD_SIZE, RANK,
    LOCAL_WORLD_SIZE, GROUP_RANK; SLURM_NTASKS, SLURM_JOB_NUM_NODES, SLURM_NODEID,
    SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE; CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES),
    probes GPU memory (nvidia-smi, rocm-smi), host memory (/proc/meminfo) and every NVMe
    nvme_path ZeRO-3 swaps to (exists, writable, free space, libaio), then runs lint and the
    estimate and prints a go / no-go verdict per tier with the headroom.

    \b
    The workload (--seq-len, --micro-batch, --checkpointing, --attention, the parallel sizes)
    comes from the flags, else from CONFIG's sidecar CONFIG.workload.json that `generate`
    writes, else the defaults; the verdict lists every value it assumed. With --hf the Trainer
    arguments (--per-device-train-batch-size ..., as estimate's) fill the config's "auto" keys,
    else the sidecar's record of them (generate --hf), else TrainingArguments' defaults.

    \b
    Exit codes:
      0  go: every tier fits and no error finding
      1  no-go: a tier does not fit, or an error finding (e.g. nvme_path missing); a
         config DeepSpeed would refuse before training starts gets no verdict per tier
      2  bad usage or unreadable input (config, model)
      3  --strict only: the environment could not be probed (without --strict: a
         warning, and --gpu-memory / --host-memory / --hardware are used)
      4  tight: a tier fits only inside the uncertainty of the runtime overhead
         (CUDA context, NCCL buffers, allocator reserve; rule M102); --allow-tight
         makes it a warning with exit 0

    \b
    The accelerator need is the tracked peak plus the runtime overhead rows, each
    with its cited default and band; --runtime-overhead replaces them with what
    you measured on the node (e.g. cuda_context=520MiB,nccl=300MiB).
    """
    from advisor.views.check import run_check

    model, params, world_size, ws_source = _settings_defaults(config, model, params, world_size)
    if not model and params is None:
        raise click.UsageError("give --model NAME (see `ds-advisor models`) or --params N")
    if str(checkpointing).startswith("sac"):
        raise click.UsageError("--checkpointing sac needs --activations trace, which check does not run: "
                               "use estimate --activations trace")
    gpu_b, host_b = (_size_flag(f, v) for f, v in (("--gpu-memory", gpu_memory), ("--host-memory", host_memory)))
    ovh = _overhead(runtime_overhead, fragmentation)
    targs = _targs(trainer_args, hidden_size)  # the Trainer arguments given, as estimate takes them
    inp, inv, hw = _load_config_input(config, model, params, hardware, world_size=world_size, overrides=overrides,
                                      trainer_args=targs)
    ovh = ovh.for_hardware(hw)
    loaded = inp.loaded
    from types import SimpleNamespace
    wl = _workload(config, SimpleNamespace(**locals()), loaded.data)
    _check_checkpointing(wl, inv)
    # --hf alone is TrainingArguments' defaults; the sidecar's Trainer arguments (generate --hf) fill
    # the config's "auto" keys no flag gives (advisor.views.workload.trainer_args_for), as in estimate
    if hf and targs is None:
        targs = {}
    if targs is not None and inp.launch is None:
        from advisor.views.workload import trainer_args_for
        targs = trainer_args_for(wl, targs, loaded.data)
    result = run_check(loaded, inv, world_size=world_size, world_size_source=ws_source,
                       gpus_per_node=gpus_per_node, gpu_memory=gpu_b, trainer_args=targs,
                       host_memory=host_b, hardware=hw, hf=hf or targs is not None, strict=strict, workload=wl,
                       config_input=inp, overhead=ovh, allow_tight=allow_tight, zero_init=zero_init,
                       load_dtype=load_dtype, low_cpu_mem_usage=low_cpu_mem_usage, pipeline_build=pipeline_build)
    warn = _seq_len_warning(wl, inv)
    if warn:
        result.warnings.insert(0, warn)
    if result.verdict == "tight" and allow_tight:
        result.warnings.append("verdict tight: exit 0 because of --allow-tight (4 without it)")
    code = result.exit_code
    if not (quiet and code == EXIT_OK and result.verdict == "go"):
        _echo(_render("check", fmt, result))
    sys.exit(code)


@main.command()
@_arg("config")
@option("hf", help="Resolve as the HF Trainer does (implied for an accelerate config YAML).")
@_trainer_options
@options("model", "world_size",
         model=dict(help=MODEL_HELP + " Gives hidden_size for the bucket sizes."),
         world_size=dict(help="Total ranks (default: the accelerate YAML's num_processes, WORLD_SIZE, else 1)."))
@_opt("--show-filled", is_flag=True, help="Also list every filled key with its source, on stderr.")
@_release_option
def resolve(config, hf, trainer_args, hidden_size, model, world_size, show_filled):
    """Print the DeepSpeed config the HF Trainer / accelerate hand to DeepSpeed, "auto" resolved.

    CONFIG is a DeepSpeed JSON/HJSON config (with --hf) or an accelerate config YAML
    (distributed_type: DEEPSPEED). The resolved JSON goes to stdout (accelerate's infinite
    steps_per_print is written as 2^63-1, which DeepSpeed reads back); to stderr, the findings
    `lint --hf` gives with the same Trainer arguments (TrainingArguments' defaults for the rest):
    what the Trainer or accelerate would report at launch, and every lint rule's finding on the
    config (and on the deepspeed_config_file an accelerate YAML names). Exit 1 when the launch
    would fail (an error finding).
    """
    import json

    from advisor.config import hf as hfmod
    from advisor.findings import sort_findings

    try:
        text = None
        if config != "-" and os.path.lexists(config):  # the guarded reader: regular files only, bounded
            from advisor.config.readers import MAX_CONFIG_BYTES, read_text
            text = read_text(config, limit=MAX_CONFIG_BYTES, what="config")
        inv = _inventory(model, None) if model else None
        h, meta = hfmod._hidden_from_inventory(inv)
        args = hfmod.TrainerArgs.from_mapping(trainer_args)
        if text is not None and hfmod.is_accelerate_config(text):
            # the one path lint, estimate and check read an accelerate file by (read_input) and
            # the same findings (lint_accelerate), all of them: resolve fills every Trainer argument
            from advisor.config.inputs import read_input
            from advisor.views.lint import lint_accelerate
            inp = read_input(config, trainer_args=args, world_size=world_size, hidden_size=hidden_size or h,
                             inventory=inv if h else None, lenient=True)
            if inp.launch is None:
                raise AdvisorError(f"{config}: not an accelerate config as accelerate reads it")
            res = inp.resolution
            res.findings = lint_accelerate(inp, trainer_args_given=True, inventory=inv,
                                           trainer_args=_targs(trainer_args, hidden_size) or {})
            # the deepspeed_config_file it names, linted as `lint --hf` lints it (S001 ...), each finding once
            from advisor.views.lint import drop_named_duplicates, lint_named_config
            named = lint_named_config(inp, trainer_args=_targs(trainer_args, hidden_size) or {}, inventory=inv,
                                      world_size=world_size, world_size_source="--world-size" if world_size else None)
            res.findings = drop_named_duplicates(res.findings, named) + named
        else:
            if not hf:
                raise click.UsageError("give --hf to resolve a DeepSpeed config as the HF Trainer does "
                                       "(an accelerate config YAML needs no flag)")
            from advisor.config.loading import load_config
            from advisor.views.lint import lint_guarded
            loaded = load_config(config)
            ws, ws_src = _world(world_size)
            # the sidecar's Trainer arguments (generate --hf) for the config's "auto" keys no flag gives,
            # by the one function estimate and check use (advisor.views.workload.trainer_args_for)
            from types import SimpleNamespace
            from advisor.views.workload import trainer_args_for
            wl = _workload(config, SimpleNamespace(), loaded.data)
            given = dict(trainer_args or {})
            targs = trainer_args_for(wl, given, loaded.data)
            if wl.trainer_assumed:  # said, as estimate and check say it
                _say(f"ds-advisor: warning: HF Trainer arguments from {os.path.basename(wl.sidecar or '')} for the "
                     "config's \"auto\" keys (no flag gives them): "
                     + ", ".join(f"{k}={v}" for k, v in wl.trainer_assumed.items()))
                args = hfmod.TrainerArgs.from_mapping(targs)
            args.world_size = ws or 1
            res = hfmod.resolve_trainer(loaded.data, args, hidden_size=hidden_size or h,
                                        model_config=meta if h else None)
            # the findings by lint's one path (every rule on the written config, the Trainer's replay
            # with these arguments): `lint --hf` with the same arguments says the same (S001 included)
            res.findings = lint_guarded(loaded, world_size=ws, world_size_source=ws_src, inventory=inv, hf=True,
                                        trainer_args=_targs(targs or None, hidden_size) or {})
    except AdvisorError as e:
        raise _fail(str(e))
    # JSON has no Infinity and hjson (DeepSpeed's loader) cannot read 1e999 back: accelerate's
    # in-memory steps_per_print=inf ("never print") is written as the largest int64 instead.
    def finite(v):
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, list):
            return [finite(x) for x in v]
        if isinstance(v, float) and v in (float("inf"), float("-inf")):
            return (1 << 63) - 1 if v > 0 else -((1 << 63) - 1)
        return v
    click.echo(json.dumps(finite(res.config), indent=2))
    from advisor.render.lint import finding_lines
    for f in sort_findings(res.findings):  # located as lint locates them: file:line:col and the JSON pointer
        _say("\n".join(finding_lines(f, config)))
    if show_filled:
        for k, (old, new, who) in res.filled.items():
            _say(f"filled {k}: {json.dumps(old)} -> {json.dumps(new)} ({who})")
    from advisor.config.versions import release_note
    _say(f"ds-advisor: resolved for {release_note()}")  # stdout stays the config alone
    sys.exit(EXIT_FINDINGS if any(f.severity == "error" for f in res.findings) else EXIT_OK)


@main.command()
@options("model", "hardware",
         model=dict(help=MODEL_HELP + " Required unless the settings file ([tool.ds-advisor] in pyproject.toml "
                    "or .ds-advisor.toml, found walking up from --output, else the current folder) names one."),
         hardware=dict(required=True, help=HARDWARE_HELP + " --nodes and --gpus-per-node set the shape; without "
                       "them it is the spec's (dgx-h100:4: 4 nodes x 8)."))
@_opt("--nodes", type=Count(min=1, max=MAX_NODES),
      help="Number of nodes (default: the --hardware spec's: NAME:N, a spec file's nodes, else 1).")
@options("gpus_per_node", gpus_per_node=dict(
    help="Ranks per node (default: the --hardware spec's accelerators per node; required with an accelerator "
         "preset alone, which says nothing about the node)."))
@_opt("--global-batch", type=Count(min=1, max=MAX_GLOBAL_BATCH), required=True,
              help="Sequences per optimizer step (= micro-batch x accumulation x data-parallel ranks).")
@options(*WORKLOAD_OPTIONS, "tensor_parallel", "pipeline_parallel", "sequence_parallel", "output", "force", "hf",
         seq_len=dict(required=True, help="Tokens per sequence."),
         micro_batch=dict(help="Micro-batch per rank: fixed instead of searched (default: searched)."),
         checkpointing=dict(default=None, show_default=False,
                            help="Activation checkpointing, as for estimate (none, full, selective, K layers of each "
                                 "stage): fixed instead of searched (default: the cheapest recompute that fits)."),
         tensor_parallel=dict(default=None, show_default=False,
                              help="Tensor-parallel size: fixed instead of searched (default: searched)."),
         pipeline_parallel=dict(default=None, show_default=False,
                                help="Pipeline-parallel size: fixed instead of searched (default: searched)."),
         sequence_parallel=dict(help="DeepSpeed-Ulysses sequence_parallel_size: fixed instead of searched "
                                     "(default: searched where activations bind)."),
         output=dict(help="Write the best config here (default: stdout; the table then goes to stderr)."),
         hf=dict(help='Write "auto" where the HF Trainer fills values in.'))
@_opt("--margin", default=None, help="Deprecated and ignored: generate uses estimate's fit (the timeline "
     "peak plus the runtime overhead rows; only plans that fit, not tight ones); use --runtime-overhead.")
@options("runtime_overhead", "fragmentation", "omp_threads")
@_opt("--optimizer", type=click.Choice(["adamw", "adam"]), default="adamw", show_default=True)
@_opt("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@_opt("--top", type=click.IntRange(min=1, max=100), default=5, show_default=True, help="Plans to list.")
@_opt("--model-parallel/--no-model-parallel", "model_parallel", default=True, show_default=True,
      help="Search tensor x pipeline parallel layouts too (Megatron-DeepSpeed: TP within a node dividing the "
           "heads, KV heads and MLP width; PP dividing the layers; ZeRO-0/1 with PP; Megatron SP with TP), ranked "
           "by the same step time (TP all-reduces, stage sends, the 1F1B bubble). A layout is evaluated only when "
           "its step-time lower bound could beat the best plan found, so a model ZeRO fits fast stays data "
           "parallel; --no-model-parallel: data parallelism only.")
@_load_options
@format_option("generate")
@_release_option
@display_options("units", "color")
def generate(model, hardware, nodes, gpus_per_node, global_batch, seq_len, micro_batch, checkpointing, attention,
             moe_capacity_factor, tensor_parallel, pipeline_parallel, sequence_parallel, output, force, hf, margin,
             runtime_overhead, fragmentation, omp_threads, optimizer, precision, top, model_parallel, zero_init,
             load_dtype, low_cpu_mem_usage, pipeline_build, fmt):
    """Search ZeRO stage x offload x micro-batch x accumulation x checkpointing (and tensor x
    pipeline parallelism where it could be faster, or where ZeRO alone does not fit) for the plans
    that fit, rank them by estimated step time and write the best as a DeepSpeed config. A plan fits
    when `estimate` says "fits" for it (the timeline peak plus the runtime overhead rows; "tight"
    plans are rejected), so the config written is one estimate and check accept -- except for a
    model whose activations have no formula (`models --types`): its needs leave them out and print
    as ">=" (a lower bound), the plan is micro-batch 1 with every layer checkpointed unless
    --micro-batch / --checkpointing fix them, a warning names `estimate CONFIG --activations trace`
    to measure them, and check says TIGHT (M104) until then.

    \b
    Exit codes: 0 a config was chosen (and written); 1 nothing fits (the smallest change that
    would is printed); 2 bad usage, unreadable input, a --seq-len past the model's learned
    position table (every plan would carry error W001), or --output exists without --force.
    """
    from dataclasses import replace

    from advisor.cluster.hardware import resolve_hardware
    from advisor.views import generate as gen

    if margin is not None:
        _say("ds-advisor: warning: --margin is deprecated and ignored: a plan is kept when estimate's fit says "
             "it fits (tracked peak + runtime overhead rows, not tight); give measured overhead with "
             "--runtime-overhead")
    # the one world-size cap every command applies (advisor.config.validation.MAX_WORLD_SIZE), as
    # estimate/check/checkpoint apply it to a --hardware spec's nodes x accelerators (cluster/launch.job_shape)
    from advisor.config.validation import world_size as bounded_world_size
    try:
        hw = resolve_hardware(hardware)
    except AdvisorError as e:
        raise _fail(str(e))
    # the shape: the flags, else the spec's (advisor.cluster.hardware: NAME:N nodes, the preset's or spec
    # file's accelerators per node); an accelerator preset alone states no node (Hardware.node_accelerators)
    nodes_from = "--nodes" if nodes is not None else f"--hardware {hardware}"
    gpus_from = "--gpus-per-node" if gpus_per_node is not None else f"--hardware {hardware}"
    if gpus_per_node is None:
        from advisor.cluster.launch import accelerator_alone_problem
        from advisor.config.validation import shown as _shown
        gpus_per_node = hw.node_accelerators
        if not gpus_per_node:  # the words estimate, check and checkpoint refuse it with (cluster/launch.py)
            raise click.UsageError(accelerator_alone_problem(hw, f"--hardware {_shown(hardware)}", "--gpus-per-node"))
    if nodes is None:
        nodes = hw.nodes or 1
    try:
        bounded_world_size(nodes * gpus_per_node,
                           (f"--nodes {nodes}" if nodes_from == "--nodes" else f"{nodes} node(s) of {nodes_from}")
                           + " x " + (f"--gpus-per-node {gpus_per_node}" if gpus_from == "--gpus-per-node"
                                      else f"{gpus_per_node} accelerators per node of {gpus_from}"))
    except AdvisorError as e:
        raise _fail(str(e))
    ovh = _overhead(runtime_overhead, fragmentation)
    from advisor.files import output_problem
    if output == "-":  # -o - is standard output, as without -o
        output = None
    from advisor.views.workload import sidecar_path
    for path in (output, sidecar_path(output) if output else None):  # the sidecar obeys --force too
        if output_problem(path, force):
            raise _fail(output_problem(path, force))
    # the project settings, as estimate/check/report read them (flags win): found walking up from
    # where the config is written (ruff's rule), else from the current folder
    model, params, _, _ = _settings_defaults(output or os.getcwd(), model, None, nodes * gpus_per_node)
    if not model and params is None:
        raise click.UsageError("give --model (or model = ... in a [tool.ds-advisor] table of pyproject.toml or "
                               "a .ds-advisor.toml above --output or the current folder)")
    try:
        inv = _inventory(model, params, architecture=True)
    except AdvisorError as e:
        raise _fail(str(e))
    problem = hw.ranks_per_node_problem(gpus_per_node, gpus_from, f"--hardware {hardware}")
    if problem:
        raise _fail(problem)
    hw = replace(hw, nodes=nodes, accelerators_per_node=gpus_per_node)
    if hw.accelerator is None:
        raise _fail(f"--hardware {hardware}: no accelerator in the spec")
    ovh = ovh.for_hardware(hw)
    if checkpointing is not None and str(checkpointing).startswith("sac"):
        raise click.UsageError("--checkpointing sac needs --activations trace (torch), which generate does not run: "
                               "use estimate --activations trace on the written config")
    if hf and checkpointing not in (None, "none", "full"):
        raise click.UsageError(f"--checkpointing {checkpointing} with --hf: the HF Trainer's gradient_checkpointing "
                               "checkpoints every layer (none or full)")
    if not model_parallel and ((tensor_parallel or 1) > 1 or (pipeline_parallel or 1) > 1 or (sequence_parallel or 1) > 1):
        raise click.UsageError("--no-model-parallel with a tensor-, pipeline- or sequence-parallel size above 1")
    omp = _omp_threads(omp_threads)
    req = gen.Request(global_batch=global_batch, seq_len=seq_len, nodes=nodes, gpus_per_node=gpus_per_node,
                      optimizer=optimizer, precision=precision, hf=hf, overhead=ovh, model_parallel=model_parallel,
                      attention=attention, moe_capacity_factor=moe_capacity_factor, micro_batch=micro_batch,
                      checkpointing=checkpointing, tensor_parallel=tensor_parallel,
                      pipeline_parallel=pipeline_parallel, sequence_parallel=sequence_parallel,
                      zero_init=zero_init, load_dtype=load_dtype, low_cpu_mem_usage=low_cpu_mem_usage,
                      pipeline_build=pipeline_build, omp_threads=omp.value if omp else None, omp_threads_source=omp.source if omp else "")
    try:
        res = gen.run(inv, hw, req, top=top)
    except gen.NothingFits as e:
        res = e.result
        res.model_arg = model  # the activations warning's command (gen.activations_warning): no config written
        if fmt == "text":
            _echo(_render("generate", fmt, res, top=top, stream=sys.stderr), err=True)
            _say(f"ds-advisor: {e}")
        else:
            _echo(_render("generate", fmt, res, top=top))
        sys.exit(EXIT_FINDINGS)
    except AdvisorError as e:
        raise _fail(str(e))
    text = gen.config_text(res.best.config)
    b = res.best
    res.output, res.model_arg = output, model  # the activations warning names the config written (its command)
    # what the plan assumed, for check / estimate to read back (advisor.views.workload)
    workload = {"seq_len": seq_len, "micro_batch": b.micro, "checkpointing": b.checkpointing,
                "attention": attention, "tensor_parallel": b.tp, "pipeline_parallel": b.pp,
                "sequence_parallel": b.sp, "expert_parallel": 1, "megatron_sp": b.tp > 1,
                "moe_capacity_factor": moe_capacity_factor}
    # --hf: the Trainer arguments the plan assumed, for the config's "auto" batch and precision keys (the
    # "HF Trainer:" line)
    trainer = ({"per_device_train_batch_size": b.micro, "gradient_accumulation_steps": b.ga,
                **({precision: True} if precision != "fp32" else {})} if hf else {})
    if output:
        try:
            gen.write_atomic(output, text, force=force)
            import json as _json
            from advisor.views.workload import config_record, write_sidecar
            # with the config it was written for (its digest and batch keys: rule W002)
            # and the world shape it was planned for (rule W003 when check / estimate run with another)
            world = {"world_size": nodes * gpus_per_node, "nodes": nodes, "gpus_per_node": gpus_per_node,
                     "tensor_parallel": b.tp, "pipeline_parallel": b.pp}
            side = write_sidecar(output, {**workload, **config_record(_json.loads(text)), "world": world,
                                          **({"trainer": trainer} if trainer else {})}, force=force)
        except FileExistsError as e:
            raise _fail(str(e))
        except OSError as e:
            raise _fail(_cannot_write(output, e))
    if fmt != "text":
        _echo(_render("generate", fmt, res, top=top))
    else:
        from advisor.render.escape import safe_text
        from advisor.render.style import width, wrap
        # the paths escaped as the "exists" error escapes them (_fail: safe_text), so a control
        # character or undecodable byte in -o reaches the terminal as \xNN / \udcNN, not raw
        report = _render("generate", fmt, res, top=top, stream=sys.stdout if output else sys.stderr) + (
            "\n" + wrap(safe_text(f"wrote {output} and its workload sidecar {side} "
                                   "(check and estimate read it back)"),
                        width(sys.stdout)) if output else "")
        if output:
            click.echo(report)
        else:
            click.echo(report, err=True)
            click.echo(text, nl=False)
    if not output:  # a later check / estimate of the config would assume its workload: say which flags give it
        _say(_no_sidecar_words(workload, trainer))
    sys.exit(EXIT_OK)


def _no_sidecar_words(workload: dict, trainer: dict | None = None) -> str:
    """generate's stderr line when the config goes to standard output (no ``-o``, or ``-o -``): no
    workload sidecar (:func:`advisor.views.workload.write_sidecar`) is written, so a later check or
    estimate of the config assumes its workload (``ResolvedWorkload.assumed``) unless given the flags that
    carry the plan's (``workload``: the sidecar's fields; the micro-batch is the config's own), under --hf
    with the Trainer arguments the plan assumed (``trainer``, the sidecar's ``trainer``) as their flags."""
    flags = []
    for k, v in workload.items():  # the flags whose value is not already the commands' default
        if k == "micro_batch" or v is None or v is False or v == OPTIONS[k][1].get("default") or (
                k == "sequence_parallel" and v == 1):
            continue
        flag = OPTIONS[k][0][0]
        flags.append(flag if v is True else f"{flag} {v}")
    # --hf: the Trainer arguments (TRAINER_OPTS: --per-device-train-batch-size ...; the precision, --bf16 / --fp16)
    flags += [f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in (trainer or {}).items()]
    head = "ds-advisor: the config went to standard output, so no workload sidecar was written: "
    if not flags:
        return head + "a later check or estimate of it assumes the default workload, which is this plan's"
    return (head + "a later check or estimate of it assumes its workload unless given " + " ".join(flags)
            + " (with -o NAME.json they go in NAME.workload.json beside it)")


@main.command()
@_arg("config")
@_estimate_options
@options("output", "force", output=dict(required=True, help="The HTML file to write (e.g. report.html)."),
         force=dict(help="Overwrite --output when it exists."))
@_release_option
@display_options("units")
def report(config, est, output, force):
    """Write a self-contained HTML report for CONFIG: state per tier (chart), movement per step,
    findings, fit, assumptions and checkpoint. No network needed to view it. Takes the options
    of `estimate` and draws exactly what it computes for them.

    Exit 0 when written (whatever the findings: for a config DeepSpeed would refuse before
    training starts the page has no estimate, only why and the findings), 2 on bad input or when
    --output exists without --force.
    """
    m, n, ws, _ = _settings_defaults(config, est.model, est.params, est.world_size)
    est = replace(est, model=m, params=n, world_size=ws)
    if not est.model and est.params is None:
        raise click.UsageError("give --model NAME (see `ds-advisor models`) or --params N")
    from advisor.files import output_problem
    if output_problem(output, force):
        raise _fail(output_problem(output, force))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from advisor.install import extra_command
        raise _fail(f"the HTML report needs matplotlib: {extra_command('report')}")
    from advisor.render.html import render_html, write_atomic

    warnings: list[str] = []
    result = _build_estimate(config, est, warnings)
    try:
        from advisor.errors import cut_numbers  # as render.render does for every other report
        write_atomic(output, cut_numbers(render_html(result, units=_display().get("units", "GiB"))), force=force)
    except FileExistsError as e:
        raise _fail(str(e))
    except OSError as e:
        raise _fail(_cannot_write(output, e))
    for w in warnings:
        _say(f"ds-advisor: warning: {w}")
    if output != "-":
        _flush_notes()
        _say(f"wrote {output}")
    sys.exit(EXIT_OK)


@main.command()
@_arg("config")
@options(*MODEL_OPTIONS, "world_size", "gpus_per_node", *PARALLEL_OPTIONS, *WORKLOAD_OPTIONS, "omp_threads",
         **UNSET_WORKLOAD, gpus_per_node=dict(help="Ranks per node (default 8, at most world size)."))
@_opt("--nodes", type=Count(min=1, max=MAX_NODES), help="Nodes in the job (default: world size / gpus per node).")
@_opt("--write-bandwidth", help="Aggregate write bandwidth of the checkpoint storage, e.g. 2GB/s.")
@_opt("--read-bandwidth", help="Aggregate read bandwidth (default: the write bandwidth).")
@_opt("--node-mtbf-hours", type=FiniteFloat(min=MIN_SECONDS, max=MAX_SECONDS),
              help="Mean time between failures of one node, hours (enables the Young/Daly interval).")
@_opt("--restart-seconds", type=FiniteFloat(min=0, max=MAX_SECONDS), default=300.0, show_default=True,
              help="Time from a failure to the job running again, before reloading the checkpoint.")
@option("step_time_s")
@_opt("--keep", type=click.IntRange(min=1, max=MAX_KEEP), default=1, show_default=True, help="Checkpoints kept on disk.")
@option("hardware", help=HARDWARE_HELP + " With --save-dir, the tier holding it gives the bandwidth defaults and "
        "its wear; without --world-size its nodes x accelerators per node are the job (as estimate and check read it).")
@option("save_dir", help="Absolute path checkpoints are saved to (save_checkpoint's save_dir): with --hardware, when "
        "it lies on the config's NVMe swap tier, the wear counts the swap's writes too (at the step time).")
@option("save_interval", help="Seconds between saves, for writes per day (default: the Young/Daly interval).")
@option("set")
@format_option("checkpoint")
@_release_option
@display_options("units", "color")
def checkpoint(config, model, params, world_size, gpus_per_node, tensor_parallel, pipeline_parallel,
               sequence_parallel, megatron_sp, expert_parallel, seq_len, micro_batch, checkpointing, attention,
               moe_capacity_factor, omp_threads, nodes, write_bandwidth, read_bandwidth,
               node_mtbf_hours, restart_seconds, step_time_s, keep, hardware, save_dir, save_interval, overrides,
               fmt):
    """Durable checkpoints of CONFIG: files save_checkpoint writes, bytes, save/load time, save interval.

    With --hardware and --save-dir the save dir's storage tier supplies the bandwidths (flags win)
    and a read-oriented tier is a T003 finding; exit 1 when a finding is an error. With --hardware
    the save interval is also given in steps at the step-time model's seconds (estimate's, on the
    same workload: the flags, else CONFIG's workload sidecar, else the defaults; the report names
    it), unless --step-time gives a measured one."""
    from types import SimpleNamespace

    from advisor.plan import Workload
    from advisor.planning import build_plan
    from advisor.render import render
    from advisor.views.estimate import checkpoint_with_step_time
    import re

    from advisor.units import parse_size

    if not model and params is None:
        raise click.UsageError("give --model NAME (see `ds-advisor models`) or --params N")

    def _bw(v, opt):
        if not v:
            return None
        try:
            n = float(parse_size(v[:-2] if v.lower().endswith("/s") else v))
        except ValueError as e:  # a bandwidth: its examples per second
            raise _fail(f"{opt}: " + re.sub(r"(\b[0-9.,eE]+ ?(?:GB|GiB|B)\b)(?!/s)", r"\1/s", str(e)))
        _echo_other_units(opt, v, n, per="/s")
        return n

    wbw, rbw = _bw(write_bandwidth, "--write-bandwidth"), _bw(read_bandwidth, "--read-bandwidth")
    inp, inv, hw = _load_config_input(config, model, params, hardware, world_size=world_size, overrides=overrides)
    loaded = inp.loaded
    # the workload as estimate reads it (flag > sidecar > default): the step time behind the save
    # interval's steps is estimate's on the same inputs
    wl = _workload(config, SimpleNamespace(**locals()), loaded.data)
    _check_checkpointing(wl, inv)
    v = wl.values
    if str(v["checkpointing"]).startswith("sac"):
        raise click.UsageError("--checkpointing sac needs --activations trace, which checkpoint does not run: "
                               "use estimate --activations trace")
    shape = _job_shape(world_size, gpus_per_node, nodes, inp.launch, hw, default_gpus_per_node=8, wl=wl)
    cl, _ = _workload_cluster(shape.world_size.value, shape.gpus_per_node.value, v, loaded.data, omp_threads)
    workload = Workload(v["seq_len"], v["micro_batch"], v["checkpointing"], v["attention"],
                        moe_capacity_factor=v["moe_capacity_factor"])
    if hw is not None and step_time_s is None:
        warn = _seq_len_warning(wl, inv)
        if warn:
            _say(f"ds-advisor: warning: {warn} (the step time behind the save interval's steps)")
    bplan = build_plan(loaded, inv, cl, workload=workload, hf_model=inp.launch is not None)
    cl = bplan.cluster  # the config's AutoTP / AutoEP size (advisor.planning.config_parallel)
    # estimate's refusal gate (advisor.rules.refusals over the lint findings): a config DeepSpeed
    # refuses gets no file table, exit 1
    if inp.launch is not None:
        from advisor.views.lint import lint_accelerate
        found = lint_accelerate(inp, trainer_args_given=False, world_size=cl.world_size, inventory=inv)
    else:
        from advisor.views.lint import lint_config
        found = lint_config(loaded, world_size=cl.world_size,
                            world_size_source=shape.world_size.source or "default 1",
                            dp_world_size=cl.dp_world_size, inventory=inv, cluster=cl, plan=bplan,
                            keep_refusals=True, workload=wl)
    plan = checkpoint_with_step_time(bplan, findings=found, keep=keep, write_bandwidth=wbw, read_bandwidth=rbw,
                           nodes=shape.nodes.value, node_mtbf_hours=node_mtbf_hours,
                           step_time_s=step_time_s, restart_s=restart_seconds, hardware=hw, save_dir=save_dir,
                           save_interval_s=save_interval, workload=wl)
    plan.world_size_source = shape.world_size.source  # a default world size is said so (issue 21)
    _echo(_render("checkpoint", fmt, plan, source=loaded.source))
    sys.exit(EXIT_FINDINGS if any(f.severity == "error" for f in plan.findings) else EXIT_OK)


@main.command()
@_arg("spec", required=False)
@format_option("hardware")
@_release_option
@display_options("units")
def hardware(spec, fmt):
    """List built-in hardware presets, or show one preset / JSON spec file (SPEC) in full."""
    from advisor.cluster.hardware import list_hardware, resolve_hardware

    try:
        hws = [resolve_hardware(spec)] if spec else list_hardware()
    except AdvisorError as e:
        raise _fail(str(e))
    _echo(_render("hardware", fmt, hws, one=bool(spec)))
    _release_independent(fmt, "the hardware specs do not depend on it")
