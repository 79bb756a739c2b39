"""B001 batch-triple: train_batch_size = micro-batch x gradient accumulation x data-parallel size.

What DeepSpeed does (0.19.8, ``runtime/config.py`` ``_set_batch_related_parameters`` and
``_batch_assertion``, run while the config is constructed inside ``deepspeed.initialize``), with
W the data-parallel world size (total ranks / (tensor x pipeline x sequence parallel)):

* all three given: ``train_batch_size == train_micro_batch_size_per_gpu x
  gradient_accumulation_steps x W`` must hold, else ``AssertionError: Check batch related
  parameters``;
* two given: the third is derived with *floor* division and the equality is then re-checked,
  so ``train_batch_size: 7, train_micro_batch_size_per_gpu: 2`` at W = 1 derives 3 accumulation
  steps and fails (6 != 7); a train_batch_size smaller than micro x W derives 0 and fails the
  "> 0" check;
* only train_batch_size: accumulation 1, micro = train_batch_size // W;
* only the micro-batch: accumulation 1, train_batch_size = micro x W;
* neither train_batch_size nor the micro-batch: ``AssertionError``.

Why it matters: the same file is usually reused at several world sizes. A triple that holds on
8 GPUs fails on 16 after the job has waited in the queue.

The rule needs W. It comes from ``--world-size`` or the launcher's environment (WORLD_SIZE,
SLURM_NTASKS). Without it the rule still reports what fails at *every* world size, and otherwise
says (info) that the triple cannot be checked and at which world size it would hold.

Anti-pattern (8 ranks)::

    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}

4 x 4 x 8 = 128, not 64. The fix offered first keeps the global batch written: the accumulation
64 / (4 x 8) = 2 (else the micro-batch, when the accumulation does not divide)::

    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}

Or give only two of the three, usually the micro-batch and the accumulation steps, and let
DeepSpeed derive train_batch_size::

    {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}

With the HF Trainer ("auto" values, ``--hf``) the Trainer fills the triple in and the rule
checks only values that are not "auto".
"""

from __future__ import annotations

from advisor.config.effective import derive_batch, keep_train_batch
from advisor.config.validation import batch_limit_problem
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import is_auto

TB, MB, GA = "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"


def _keeping(tb: int, w: int, mb: int | None, ga: int | None, given: list[str]) -> tuple[str, list[str]] | None:
    """(fix words, --set strings) of the change that keeps the written train_batch_size ``tb`` at
    ``w`` data-parallel ranks (``config.effective.keep_train_batch``: the accumulation
    tb / (micro x W) first, else the micro-batch), only the keys that change; None when no micro x
    accumulation gives tb (tb not a multiple of W). An unwritten key stays unwritten: DeepSpeed
    derives it from tb and the other, exactly once tb / W is their product
    (``_set_batch_related_parameters``, runtime/config.py l.607-648)."""
    kept = keep_train_batch(tb, w, mb, ga)
    if kept is None:
        return None
    m2, g2 = kept
    # the written keys that change; an unwritten one DeepSpeed then derives exactly (tb // m2 // W = g2)
    changes = [(k, v) for k, v, old in ((MB, m2, mb), (GA, g2, ga)) if old is not None and v != old]
    if not changes:  # the written ones already give tb: the triple held
        return None
    said = " and ".join(f"{k} to {v}" for k, v in changes)
    return (f"set {said} to keep {TB} {tb} ({m2} x {g2} x {w} ranks)", [f"{k}={v}" for k, v in changes])


@register
class BatchTriple(Rule):
    code = "B001"
    name = "batch-triple"
    severity = "error"
    refuses = True

    def check(self, ctx: LintContext):
        raw = ctx.raw
        if any(is_auto(raw.get(k)) for k in (TB, MB, GA)):
            return  # HF fills them in (--hf), or A001 reports them
        ec = ctx.effective
        # A value given but not an integer is the schema's (type) finding.
        for k in (TB, MB, GA):
            if raw.get(k) is not None and getattr(ec, k) is None:
                return
        tb, mb, ga = ec.train_batch_size, ec.train_micro_batch_size_per_gpu, ec.gradient_accumulation_steps
        if tb is None and mb is None:
            yield self.finding(
                "", "neither train_batch_size nor train_micro_batch_size_per_gpu is set: deepspeed.initialize "
                    "asserts 'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided'",
                f"add \"{MB}\": <per-GPU micro-batch> (and \"{GA}\"); DeepSpeed derives {TB}")
            return
        for k, v in ((TB, tb), (MB, mb), (GA, ga)):
            if v is not None and v <= 0:
                # S004 (the schema's minimum 1) reports it: one fault, one finding (issue #19)
                return
        if batch_limit_problem(raw) is not None:
            # B002 reports a batch value over 2^40: one fault, one finding; the triple's arithmetic
            # on it echoed products of thousands of digits uncut (issue 21, fuzz round c)
            return
        w = ctx.dp_world_size
        src = ctx.world_size_source or "--world-size"
        if ec.autotp and ctx.cluster is not None:
            # AutoTP: DeepSpeedConfig has no mpu, its batch rule runs over W / SP (effective.batch_world_size)
            from advisor.config.effective import batch_world_size
            w = batch_world_size(ec, ctx.cluster)
            src = f"{src}; AutoTP (tensor_parallel.autotp_size {ec.autotp_size}) gives DeepSpeedConfig no mpu"
        if w is None:
            yield from self._without_world(tb, mb, ga)
            return
        dtb, dmb, dga, err = derive_batch(ec, w)
        if err is None:
            return
        given = [k for k, v in ((TB, tb), (MB, mb), (GA, ga)) if v is not None]
        where = f"at data-parallel world size {w} (from {src})"
        if len(given) == 3:
            msg = f"{TB} {tb} != {mb} x {ga} x {w} = {mb * ga * w} {where}"
            fix = (f"set {TB} to {mb * ga * w}, or remove it and let DeepSpeed derive it from the micro-batch "
                   f"and {GA}")
            new_tb = mb * ga * w
        elif given == [TB, MB]:
            unit = mb * w
            msg = (f"{TB} {tb} is not a multiple of micro-batch {mb} x {w} ranks = {unit} {where}: DeepSpeed "
                   f"derives {GA} = {tb} // {mb} // {w} = {dga} and then fails ({dmb} x {dga} x {w} = {dmb * dga * w} != {tb})")
            new_tb = max(1, round(tb / unit)) * unit
            fix = f"set {TB} to a multiple of {unit} (e.g. {new_tb}), or replace it by {GA}"
        elif given == [TB, GA]:
            unit = ga * w
            msg = (f"{TB} {tb} is not a multiple of {GA} {ga} x {w} ranks = {unit} {where}: DeepSpeed derives "
                   f"the micro-batch {tb} // {w} // {ga} = {dmb} and then fails")
            new_tb = max(1, round(tb / unit)) * unit
            fix = f"set {TB} to a multiple of {unit} (e.g. {new_tb})"
        else:  # train_batch_size alone
            msg = (f"{TB} {tb} is not a multiple of the {w} ranks {where}: DeepSpeed derives micro-batch "
                   f"{tb} // {w} = {dmb} with 1 accumulation step and then fails")
            new_tb = max(1, round(tb / w)) * w
            fix = f"set {TB} to a multiple of {w} (e.g. {new_tb}), or give {MB} instead"
        sets = [f"{TB}={new_tb}"]
        keep = _keeping(tb, w, mb, ga, given)
        if keep is not None:  # the user's train_batch_size kept comes first (issue ncb21)
            words, sets = keep
            fix = f"{words}; or {fix}"
        yield self.finding(f"/{TB}", msg, fix, tb=dtb, micro=dmb, grad_accum=dga, dp_world_size=w, set=sets)

    def _without_world(self, tb, mb, ga):
        how = ("pass --world-size N (total ranks; data-parallel = ranks / (tensor x pipeline x sequence "
               "parallel)) or run under a launcher that sets WORLD_SIZE")
        if tb is None:
            return  # micro (and accumulation) only: train_batch_size is derived, always consistent
        if mb is not None and ga is not None:
            if tb % (mb * ga):
                yield self.finding(f"/{TB}", f"{TB} {tb} is not a multiple of {mb} x {ga} = {mb * ga}: the triple "
                                             "fails at every world size",
                                   f"set {TB} to {mb * ga} x <data-parallel world size>, or remove it")
            else:
                k = tb // (mb * ga)
                yield self.finding(f"/{TB}", f"batch triple not checked: world size unknown; {tb} = {mb} x {ga} x W "
                                             f"holds only at data-parallel world size {k}", how, severity="info",
                                   holds_at=k)
            return
        other, v = (MB, mb) if mb is not None else ((GA, ga) if ga is not None else (None, None))
        if other is not None and tb % v:
            yield self.finding(f"/{TB}", f"{TB} {tb} is not a multiple of {other} {v}: DeepSpeed's derivation fails "
                                         "at every world size", f"set {TB} to a multiple of {v} x <world size>")
            return
        yield self.finding(f"/{TB}", f"batch triple not checked: world size unknown and {TB} is given, so DeepSpeed "
                                     "derives the rest from the world size", how, severity="info")
