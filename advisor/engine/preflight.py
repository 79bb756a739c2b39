"""In-process preflight: will this training script's model and DeepSpeed config fit on the
device it runs on? Called in train.py just before ``deepspeed.initialize``, where torch is
already imported (``import advisor; advisor.preflight(model, ds_config)``).

It builds the inventory from the live ``nn.Module`` (real or on the meta device:
:func:`advisor.model.inventory.from_module`, plus the architecture from ``model.config`` when it
is a Hugging Face config, for the activations), runs estimate's own fit
(:func:`advisor.views.estimate.plan_fit`: ledger, activations, step timeline, runtime overhead
rows) against:

* the accelerator's free memory as the driver reports it now: ``torch.cuda.mem_get_info`` (free
  bytes) when CUDA is available, after the CUDA context exists, so the ``cuda_context`` overhead
  term is 0 here (it is already inside "used"); parameters this model already holds on that
  device are added back (the ledger counts them);
* the host's available memory (``psutil.virtual_memory().available``, else ``/proc/meminfo``
  MemAvailable) against the step's host need per node without the load phase (the model is
  already built when preflight runs).

Both can be given instead (``free_accelerator_bytes``, ``free_host_bytes``: bytes, as
``mem_get_info`` / MemAvailable would report them): what the tests do on CPU. Without CUDA and
without ``free_accelerator_bytes`` the accelerator is "unknown" (on a CPU run accelerator and
pageable host memory are one device; preflight claims no split).

Verdicts are estimate's: fits / tight / does not fit (/ unknown). A module whose activations are not
estimated -- no Hugging Face ``model.config`` of a model_type the advisor knows (a plain ``nn.Module``), a
family without an activation formula, no sequence length -- has a need that leaves them out: a lower bound,
so its verdict is at best "tight" (rule M104, whose text names the parameters, not the CLI's flags), as
estimate's and check's with ``--params``. "does not fit" raises
:class:`advisor.errors.PreflightError` (``raise_on="tight"`` raises on tight too,
``raise_on=None`` never raises) before ``deepspeed.initialize`` allocates anything; otherwise the
:class:`PreflightResult` is returned.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from advisor.errors import PreflightError

RAISE_ON = ("does not fit", "tight", None)
#: Characters of an overhead row's source :meth:`PreflightResult.summary` prints (the whole
#: source is in ``to_dict()``'s rows[].overhead[].source).
SUMMARY_SOURCE_CHARS = 100

#: The command-line flags estimate's texts name -> the parameter of :func:`preflight` that gives
#: the same input: preflight's messages, notes and findings name the parameter (a Python caller
#: has no flags). ``--load-dtype`` / ``--zero-init`` have none: the model is built already, and
#: preflight reads both from it (:func:`_load_of`).
API_NAMES = {
    "--runtime-overhead": "runtime_overhead", "--gpu-memory": "free_accelerator_bytes",
    "--host-memory": "free_host_bytes", "--seq-len": "seq_len", "--micro-batch": "micro_batch",
    "--checkpointing": "checkpointing", "--attention": "attention", "--world-size": "world_size",
    "--gpus-per-node": "gpus_per_node", "--tensor-parallel": "tensor_parallel",
    "--pipeline-parallel": "pipeline_parallel", "--hf": "hf=True",
}


def api_words(text: str) -> str:
    """``text`` with each command-line flag of :data:`API_NAMES` replaced by its parameter
    ("give --seq-len" -> "give seq_len")."""
    import re
    return re.sub(r"--[a-z][a-z-]*", lambda m: API_NAMES.get(m.group(0), m.group(0)), text)


def _api_finding(f: Any) -> Any:
    """``f`` with :func:`api_words` applied to its message and fix, and to its sized template
    (:meth:`advisor.findings.Finding.text` renders that again in another unit)."""
    from dataclasses import replace
    t = f.template and (api_words(f.template[0]), api_words(f.template[1]))
    return replace(f, message=api_words(f.message), fix=api_words(f.fix), template=t or None)


@dataclass
class PreflightRow:
    """One tier: need and capacity (bytes), headroom, verdict, where the capacity came from and
    (accelerator) the runtime overhead terms inside the need."""

    tier: str
    scope: str
    need: int
    capacity: int | None
    capacity_source: str
    verdict: str
    uncertainty: int = 0
    uncertain_terms: list[str] = field(default_factory=list)
    overhead: list[dict] = field(default_factory=list)
    #: accelerator: the need is a floor (estimate's FitRow.lower_bound, rule M104): at best "tight"
    lower_bound: bool = False

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.need

    def line(self, units: str = "GiB") -> str:
        """One line: need of capacity, headroom and verdict, sizes in ``units`` (GiB = 2^30 or
        GB = 1e9 bytes, :func:`advisor.units.size`). Raises ValueError for another ``units``."""
        from advisor.units import size

        cap = "unknown" if self.capacity is None else size(self.capacity, units)
        head = "" if self.capacity is None else f", headroom {size(self.headroom, units)}"
        tight = (f" (within {size(self.uncertainty, units)} the overhead may exceed its defaults by: "
                 f"{', '.join(self.uncertain_terms)})" if self.verdict == "tight" else "")
        if self.verdict == "tight" and self.lower_bound and not 0 <= (self.headroom or 0) < self.uncertainty:
            tight = " (the peak is a lower bound: M104)"
        ge = ">= " if self.lower_bound else ""
        return (f"{self.tier} {self.scope}: need {ge}{size(self.need, units)} of {cap} free{head}: "
                f"{self.verdict}{tight} [capacity: {self.capacity_source}]")


@dataclass
class PreflightResult:
    """What :func:`preflight` found: ``verdict`` (the worst row's: "does not fit", "tight",
    "fits", or "unknown" when no capacity is known; "refused", with no rows, on the result a
    PreflightError carries when DeepSpeed would refuse the config), the rows, the plan's findings (their codes
    are registered rules: ``ds-advisor explain CODE``) and notes on what was assumed."""

    verdict: str
    rows: list[PreflightRow]
    findings: list[Any]
    notes: list[str]
    model: str
    parameters: int

    @property
    def fits(self) -> bool:
        """True unless a tier does not fit (a tight verdict fits)."""
        return self.verdict != "does not fit"

    def summary(self, units: str = "GiB") -> str:
        """Human text: one line per tier, under it the runtime overhead rows inside that tier's
        need (``+ name BYTES (band LOW-HIGH) [source]``, the source cut to
        :data:`SUMMARY_SOURCE_CHARS`; ``to_dict()`` keeps it whole), then the notes. Sizes in
        ``units``: "GiB" = 2^30 bytes, the default, as every ds-advisor report, or "GB" = 1e9
        bytes. Raises ValueError for another ``units``."""
        from advisor.errors import cut
        from advisor.units import check_units, size

        units = check_units(units)
        lines = [f"ds-advisor preflight: {self.model} ({self.parameters:,} parameters): {self.verdict.upper()}"]
        for r in self.rows:
            lines.append(f"  {r.line(units)}")
            for o in r.overhead:
                band = ("" if o["low"] == o["high"] else
                        f" (band {size(o['low'], units)}-{size(o['high'], units)})")
                lines.append(f"    + {o['name']} {size(o['bytes'], units)}{band} "
                             f"[{cut(o['source'], SUMMARY_SOURCE_CHARS)}]")
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "model": self.model, "parameters": self.parameters,
                "rows": [{"tier": r.tier, "scope": r.scope, "need": r.need, "capacity": r.capacity,
                          "capacity_source": r.capacity_source, "headroom": r.headroom, "verdict": r.verdict,
                          "uncertainty": r.uncertainty, "uncertain_terms": r.uncertain_terms,
                          "overhead": r.overhead, "lower_bound": r.lower_bound} for r in self.rows],
                "findings": [f.to_dict() for f in self.findings], "notes": self.notes}


def _loaded(ds_config: Any):
    """A LoadedConfig from a dict, a path, or JSON text (what deepspeed.initialize's ``config``
    takes). Raises :class:`advisor.errors.ConfigLoadError` (an AdvisorError) when unreadable."""
    from advisor.config.loading import load_config, parse_text
    if isinstance(ds_config, Mapping):
        return parse_text(json.dumps(dict(ds_config)), "<ds_config dict>")
    if isinstance(ds_config, (str, os.PathLike)):
        s = os.fspath(ds_config)
        if s.lstrip().startswith("{"):
            return parse_text(s, "<ds_config text>")
        return load_config(s)
    raise PreflightError(f"ds_config must be a dict or a path to a DeepSpeed config, not {type(ds_config).__name__}")


def _architecture(model: Any) -> dict:
    """The architecture meta activations need, from a Hugging Face ``model.config`` (empty when
    the model has none or its model_type is not one the advisor knows)."""
    cfg = getattr(model, "config", None)
    to_dict = getattr(cfg, "to_dict", None)
    if not callable(to_dict):
        return {}
    from advisor.errors import AdvisorError
    from advisor.model.specs import expand, spec_from_hf_config
    try:
        return dict(expand(spec_from_hf_config(to_dict(), source="model.config")).meta)
    except AdvisorError:
        return {}


def _load_of(model: Any, ec: Any):
    """The load assumption of an already built ``model``: built under ``deepspeed.zero.Init`` iff
    a parameter has ``ds_id`` (DeepSpeed 0.19.8 ``engine.py`` _configure_distributed_model's
    is_zero_init_model test), in the dtype its parameters hold (``ds_tensor``'s under zero.Init).
    Without zero.Init, deepspeed.initialize then casts it and moves it whole to the accelerator
    (the timeline's ``initialize:cast`` / ``initialize:module``, rule M103)."""
    import torch
    from advisor.ledger.timeline import resolve_load
    names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    zi, dt = False, None
    for p in model.parameters():
        zi = zi or hasattr(p, "ds_id")
        t = getattr(p, "ds_tensor", None) if hasattr(p, "ds_id") else p
        if dt is None and t is not None and t.dtype in names:
            dt = names[t.dtype]
    return resolve_load(ec, zero_init=zi, dtype=dt)


def _inventory(model: Any, from_module: Any):
    """:func:`advisor.model.inventory.from_module`, with the full shapes of parameters that
    ``deepspeed.zero.Init`` already partitioned (their ``ds_shape``: the HF Trainer builds the
    model under zero.Init at ZeRO-3), and the architecture from ``model.config``."""
    from dataclasses import replace
    inv = from_module(model)
    full = {n: tuple(int(x) for x in p.ds_shape) for n, p in model.named_parameters() if hasattr(p, "ds_shape")}
    if full:
        inv.tensors[:] = [replace(t, shape=full.get(t.name, t.shape)) for t in inv.tensors]
    inv.meta.update(_architecture(model))
    return inv


def _held(p: Any) -> tuple[Any, int]:
    """(device, bytes) a parameter holds now: its ZeRO-3 partition (``ds_tensor``) when
    zero.Init partitioned it, else itself."""
    t = getattr(p, "ds_tensor", None)
    t = p if t is None else t
    return t.device, t.numel() * t.element_size()


def _world_size(world_size: int | None) -> tuple[int, str]:
    if world_size is not None:
        return int(world_size), "world_size="
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), "torch.distributed.get_world_size()"
    v = os.environ.get("WORLD_SIZE")
    if v and v.isdigit() and int(v) > 0:
        return int(v), "WORLD_SIZE"
    return 1, "default 1 (no torch.distributed group, no WORLD_SIZE)"


def _free_accelerator(model: Any, given: int | None, device: Any) -> tuple[int | None, str, list[str]]:
    """(free bytes, source, notes): the parameter, else torch.cuda.mem_get_info plus the bytes
    of this model's parameters already on that device, else None (no CUDA)."""
    notes: list[str] = []
    if given is not None:
        return int(given), "free_accelerator_bytes=", notes
    import torch
    if not torch.cuda.is_available():
        notes.append("no CUDA device: accelerator not checked (on a CPU run accelerator and host memory are one "
                     "device; give free_accelerator_bytes to judge a GPU)")
        return None, "unknown", notes
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    free, total = torch.cuda.mem_get_info(dev)
    on_dev = sum(b for d, b in map(_held, model.parameters())
                 if d.type == "cuda" and (d.index or 0) == (dev.index or 0))
    src = f"torch.cuda.mem_get_info({dev}): {free:,} free of {total:,}"
    if on_dev:
        notes.append(f"{on_dev:,} bytes of this model's parameters are already on {dev}: added back to the free "
                     "memory (the estimate counts them)")
        src += f" + {on_dev:,} already held by the model"
    return int(free) + on_dev, src, notes


def _free_host(given: int | None) -> tuple[int | None, str]:
    if given is not None:
        return int(given), "free_host_bytes="
    try:
        import psutil  # optional
        return int(psutil.virtual_memory().available), "psutil.virtual_memory().available"
    except ImportError:
        pass
    from advisor.views.check import probe_host
    h = probe_host()
    return h.available, (f"{h.source} MemAvailable" if h.available is not None else f"unknown ({h.error})")


def preflight(model: Any, ds_config: Any, *, world_size: int | None = None, gpus_per_node: int | None = None,
              tensor_parallel: int = 1, pipeline_parallel: int = 1, seq_len: int | None = None,
              micro_batch: int | None = None, checkpointing: str = "none", attention: str = "flash",
              free_accelerator_bytes: int | None = None, free_host_bytes: int | None = None,
              hf: bool = False, trainer_args: Any = None, runtime_overhead: str | Mapping[str, int] | None = None,
              env: Mapping[str, str] | None = None, device: Any = None,
              raise_on: str | None = "does not fit") -> PreflightResult:
    """Judge ``model`` (a torch ``nn.Module``, real or on the meta device) with ``ds_config`` (a
    dict, a path or JSON text) on this device, before ``deepspeed.initialize``.

    ``world_size`` (default: torch.distributed's, else WORLD_SIZE, else 1), ``gpus_per_node``
    (default LOCAL_WORLD_SIZE, else min(world size, 8)), the parallel degrees and the workload
    (``seq_len`` tokens, default the model's maximum; ``micro_batch``, default the config's;
    ``checkpointing`` "none"/"full"/"selective"/K layers; ``attention`` "flash"/"eager") are estimate's.
    ``free_accelerator_bytes`` / ``free_host_bytes``: bytes free now (default: measured, see the
    module docstring). ``hf`` / ``trainer_args`` (a mapping or an object with ``to_dict()``, e.g.
    TrainingArguments): resolve "auto" as the HF Trainer does. ``runtime_overhead``: as
    ``--runtime-overhead`` (text, or term -> bytes). ``env``: where NCCL_BUFFSIZE and the other
    overhead variables are read (default os.environ).

    The activations are estimated only for a module with a Hugging Face ``model.config`` of a
    model_type the advisor knows (a transformers model, real or on the meta device), a family the
    formulas cover, and a sequence length (``seq_len``, else the model's context length). Otherwise
    the accelerator need leaves them out and is a lower bound: that row's ``lower_bound`` is True,
    its verdict at best "tight" (never "fits"), and warning M104 says what is missing; so
    ``raise_on="tight"`` raises for, e.g., a plain ``nn.Sequential`` however much memory is free.

    Units: ``free_accelerator_bytes``, ``free_host_bytes`` and the byte figures of the result are
    bytes (the result's text prints GB = 1e9 bytes); ``seq_len`` is tokens, ``micro_batch``
    sequences per rank; ``runtime_overhead`` text takes sizes such as ``600MiB`` (2^20 bytes) or
    ``1GB`` (1e9 bytes), a mapping takes bytes.

    Returns a :class:`PreflightResult`; raises :class:`advisor.errors.PreflightError` (with
    ``.result``) when the verdict is ``raise_on`` or worse ("does not fit" by default; "tight";
    None: never). Whatever ``raise_on``, PreflightError is also raised (its message names the
    parameter, never a command-line flag) for: a ds_config that cannot be read; a config DeepSpeed
    would refuse at ``deepspeed.initialize`` (an error finding of a rule that
    :attr:`advisor.rules.Rule.refuses`, e.g. ``zero_optimization.stage`` 7: ``.result.verdict`` is
    "refused", ``.result.findings`` the findings, no rows); a ``free_*_bytes`` that is negative, not
    an integer or not finite; a world size, parallel degree, ``seq_len`` or ``micro_batch`` below 1;
    ``checkpointing`` K over the model's layers per pipeline stage; an overhead value that does not
    parse.
    """
    from advisor.cluster.hardware import Capacity
    from advisor.cluster.overhead import OverheadError, OverheadSettings, parse_overrides
    from advisor.errors import AdvisorError
    from advisor.model.inventory import from_module
    from advisor.plan import Cluster, Workload
    from advisor.planning import build_plan
    from advisor.views.estimate import plan_fit

    from advisor.config.validation import MAX_GPUS_PER_NODE, MAX_WORLD_SIZE, InputValueError, as_int

    if raise_on not in RAISE_ON:
        raise PreflightError(f"raise_on must be one of {RAISE_ON}, not {raise_on!r}")
    try:  # the bounds the CLI's flags have, named by parameter
        free_accelerator_bytes, free_host_bytes = (
            None if v is None else as_int(v, name, lo=0)
            for v, name in ((free_accelerator_bytes, "free_accelerator_bytes"), (free_host_bytes, "free_host_bytes")))
        world_size = None if world_size is None else as_int(world_size, "world_size", lo=1, hi=MAX_WORLD_SIZE)
        gpus_per_node = None if gpus_per_node is None else as_int(gpus_per_node, "gpus_per_node", lo=1,
                                                                  hi=MAX_GPUS_PER_NODE)
        tensor_parallel = as_int(tensor_parallel, "tensor_parallel", lo=1, hi=MAX_WORLD_SIZE)
        pipeline_parallel = as_int(pipeline_parallel, "pipeline_parallel", lo=1, hi=MAX_WORLD_SIZE)
        seq_len = None if seq_len is None else as_int(seq_len, "seq_len", lo=1)
        micro_batch = None if micro_batch is None else as_int(micro_batch, "micro_batch", lo=1)
    except InputValueError as e:
        raise PreflightError(f"ds-advisor preflight: {e}") from None
    checkpointing = str(checkpointing)
    if not (checkpointing in ("none", "full", "selective") or (checkpointing.isdigit() and int(checkpointing) > 0)) \
            or attention not in ("flash", "eager"):
        raise PreflightError(f"checkpointing must be none/full/selective/K (layers) and attention flash/eager, not "
                             f"{checkpointing!r}/{attention!r}")
    try:
        loaded = _loaded(ds_config)
        overrides = (parse_overrides(runtime_overhead, "runtime_overhead=") if isinstance(runtime_overhead, str)
                     else runtime_overhead)
    except (AdvisorError, OverheadError) as e:
        raise PreflightError(str(e)) from None
    inv = _inventory(model, from_module)
    ws, ws_src = _world_size(world_size)
    if gpus_per_node is None:
        lw = os.environ.get("LOCAL_WORLD_SIZE", "")
        gpus_per_node = int(lw) if lw.isdigit() and int(lw) > 0 else None
    cluster = Cluster(world_size=ws, gpus_per_node=gpus_per_node, tensor_parallel=tensor_parallel,
                      pipeline_parallel=pipeline_parallel)
    targs = trainer_args.to_dict() if callable(getattr(trainer_args, "to_dict", None)) else trainer_args
    plan = build_plan(loaded, inv, cluster, hf=hf, trainer_args=dict(targs) if targs is not None else None,
                      workload=Workload(seq_len, micro_batch, checkpointing, attention))
    from advisor.model.activations import checkpointing_problem
    problem = checkpointing_problem(checkpointing, inv, pipeline_parallel)
    if problem:
        raise PreflightError(f"ds-advisor preflight: checkpointing={checkpointing}: {problem}")
    from advisor.ledger.state import unsupported_reason
    why = unsupported_reason(plan.config, cluster.dp_world_size)
    if why is not None:
        raise PreflightError(f"DeepSpeed 0.19.8 will refuse this config at initialize(): {why}")
    # What lint says DeepSpeed refuses (stage 7, a batch triple it asserts on, ...): estimate's
    # refusal (advisor.views.estimate.estimate), so no "fits" for a config that never starts.
    from advisor.rules import refusals
    from advisor.views.lint import lint_config
    findings = [_api_finding(f) for f in lint_config(
        loaded, world_size=ws, world_size_source=ws_src, dp_world_size=cluster.dp_world_size, inventory=inv,
        hf=plan.hf is not None, trainer_args=dict(targs) if targs is not None else None,
        cluster=cluster, plan=plan, keep_refusals=True)]
    refused = refusals(findings)
    if refused:
        result = PreflightResult("refused", [], findings, [f"world size {ws} ({ws_src})"], inv.name, inv.numel)
        raise PreflightError("ds-advisor preflight: DeepSpeed would refuse this config at deepspeed.initialize: "
                             + "; ".join(f"{f.code} {f.pointer or '/'}: {f.message}" for f in refused), result)
    acc, acc_src, notes = _free_accelerator(model, free_accelerator_bytes, device)
    host, host_src = _free_host(free_host_bytes)
    notes.insert(0, f"world size {ws} ({ws_src})")
    # the free memory is read with the CUDA context already in "used": that term is 0 here
    settings = OverheadSettings(env=env, overrides=overrides, exclude=("cuda_context",))
    try:
        # activations not estimated (a module without a known model.config, ...): the accelerator need is a
        # floor, at best "tight", and M104 says what the module lacks, in this function's words (api)
        pf = plan_fit(plan, Capacity(accelerator=acc, host=host, nvme=None), settings, load=_load_of(model, plan.config),
                      activations_floor=True, api=True)
    except OverheadError as e:
        raise PreflightError(str(e)) from None
    if pf.activations_note:  # the CLI's ways to the activations, in this function's words (M104's)
        from advisor.rules.M104_peak_is_lower_bound import api_activations_note
        notes.append(api_words(api_activations_note(pf.activations_note)))
    rows: list[PreflightRow] = []
    for r in pf.rows:
        if r.tier == "nvme":
            continue
        if r.tier == "accelerator":
            rows.append(PreflightRow(r.tier, r.scope, r.need, r.capacity, acc_src, r.verdict, r.uncertainty,
                                     r.uncertain, [{k: api_words(v) if isinstance(v, str) else v
                                                    for k, v in t.to_dict().items()} for t in r.overhead],
                                     bool(r.lower_bound)))
        else:  # host: the step without the load phase (the model is built already)
            need = r.steady_need if r.steady_need is not None else r.need
            v = "unknown" if host is None else "fits" if need <= host else "does not fit"
            rows.append(PreflightRow(r.tier, r.scope + " (without the load phase)", need, host, host_src, v))
    vs = [r.verdict for r in rows]
    verdict = ("does not fit" if "does not fit" in vs else "tight" if "tight" in vs else
               "fits" if "fits" in vs else "unknown")
    result = PreflightResult(verdict, rows, findings + [_api_finding(f) for f in pf.findings if f.code != "M101"],
                             notes, inv.name, inv.numel)
    if raise_on is not None and (verdict == "does not fit" or (raise_on == "tight" and verdict == "tight")):
        bad = [r for r in rows if r.verdict in ("does not fit", "tight")]
        raise PreflightError("ds-advisor preflight: " + "; ".join(r.line() for r in bad) + " -- see "
                             "`ds-advisor explain M100` / `M102` / `M103` / `M104` for the ways out", result)
    return result
