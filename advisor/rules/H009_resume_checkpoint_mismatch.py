"""H009 resume-checkpoint-mismatch: the checkpoint given to --resume-from-checkpoint cannot be loaded by this run.

What happens (transformers 5.24.0 ``deepspeed_load_checkpoint``; DeepSpeed 0.19.8
``engine.load_checkpoint`` / ``_load_checkpoint`` / ``_load_zero_checkpoint``): the Trainer calls
``engine.load_checkpoint(folder, load_optimizer_states=True, load_lr_scheduler_states=True)``.
Read from the folder's file names (``advisor.ledger.checkpoint.read_saved_checkpoint``), against
the config and world size of the run about to start:

* no ``latest`` file: ``load_checkpoint`` warns and returns (None, None); the Trainer raises
  "[deepspeed] failed to resume from checkpoint" (or "Can't find a valid checkpoint" when there
  is no ``global_step*`` folder either). Checkpoints saved with ``save_latest=False`` or copied
  without ``latest`` hit this.
* a different ZeRO weight layout: stage 3 reads ``zero_pp_rank_{r}_mp_rank_00_model_states.pt``,
  stages 0-2 ``mp_rank_00_model_states.pt`` (``_get_ckpt_name``). A stage-3 checkpoint resumed
  at stage 0-2, or the reverse, finds no file and fails in ``state_dict_factory.py`` ``load``
  (``self.ckpt_list[idx]`` on an empty list: IndexError).
* more ranks at stage 3 than the checkpoint has: rank r >= the saved ZeRO world size finds no
  model-states file of its own: the same IndexError on those ranks.
* a different ZeRO world size (data-parallel x sequence-parallel ranks) at stages 1-3:
  ``_load_zero_checkpoint`` raises ZeRORuntimeException "The checkpoint being loaded used a DP
  world size of A but the current world size is B. Automatic adjustment of ZeRO's optimizer state
  partitioning with a new world size is not currently supported." Not raised for a universal
  checkpoint (``checkpoint.load_universal``: it reads ``latest_universal``; not judged here) nor with
  ``offload_optimizer: nvme`` (its state is
  copied from ``offloaded_tensors/``; not judged here).

Anti-pattern: a run saved on 8 GPUs at ZeRO-3, resumed on 4 with the same config.

Fix: resume with the saved world size (and stage), or convert the checkpoint first: DeepSpeed's
``ds_to_universal.py`` then ``"checkpoint": {"load_universal": true}``, or ``zero_to_fp32.py``
for the weights alone (the optimizer state is then lost).
"""

from __future__ import annotations

from advisor.findings import pointer
from advisor.rules import LintContext, Rule, register
from advisor.rules._util import section, zptr


def _resume_folder(ctx: LintContext) -> str | None:
    t = ctx.trainer_args
    if t is None and isinstance(ctx.hf, dict):
        t = ctx.hf
    v = (t or {}).get("resume_from_checkpoint")
    return v if isinstance(v, str) and v else None


@register
class ResumeCheckpointMismatch(Rule):
    code = "H009"
    name = "resume-checkpoint-mismatch"
    severity = "error"
    reads_stage = True

    def check(self, ctx: LintContext):
        folder = _resume_folder(ctx)
        if not ctx.hf or folder is None:
            return
        if section(ctx.raw, "checkpoint").get("load_universal") is True:
            return  # a universal checkpoint: read from latest_universal and repartitioned on load
        from advisor.ledger.checkpoint import read_saved_checkpoint
        from advisor.errors import cut

        try:
            sc = read_saved_checkpoint(folder)
        except OSError as e:
            yield self.finding(pointer(), f"--resume-from-checkpoint {folder}: cannot be read ({e.strerror or e})",
                               "pass the Trainer's checkpoint folder (output_dir/checkpoint-N)", severity="warning")
            return
        if sc.latest_problem is not None:
            yield self.finding(
                pointer(), f"--resume-from-checkpoint {folder}: latest: {sc.latest_problem}, so DeepSpeed's "
                           "load_checkpoint cannot read the tag to load",
                "make latest a small regular file holding the tag (e.g. global_step500)", folder=folder)
            return
        if sc.tag is None:
            how = ("it has global_step folders (" + ", ".join(sc.tags[-3:]) + ") but") if sc.tags else "it has"
            yield self.finding(
                pointer(), f"--resume-from-checkpoint {folder}: {how} no 'latest' file, so DeepSpeed's load_checkpoint "
                           "loads nothing and the Trainer raises "
                           + ("'[deepspeed] failed to resume from checkpoint'" if sc.tags
                              else "\"Can't find a valid checkpoint\""),
                (f"write the tag into {folder}/latest (e.g. echo {sc.tags[-1]} > {folder}/latest)" if sc.tags
                 else "pass the folder that holds latest and global_stepN/ (the Trainer's checkpoint-N)"),
                folder=folder)
            return
        fam = sc.stage_family
        if fam is None:
            yield self.finding(pointer(), f"--resume-from-checkpoint {folder}: {cut(sc.tag)}/ has no model-states file "
                                          "(mp_rank_00_model_states.pt or zero_pp_rank_*_model_states.pt): "
                                          "load_checkpoint fails (IndexError in state_dict_factory)",
                               "check that the save finished on every rank", folder=folder, tag=sc.tag)
            return
        stage = ctx.effective.zero.stage
        planned = "3" if stage == 3 else "0-2"
        if fam != planned:
            yield self.finding(
                zptr("stage"),
                f"--resume-from-checkpoint {folder}: the checkpoint was saved at ZeRO stage {fam} "
                f"({'zero_pp_rank_*_model_states.pt' if fam == '3' else 'mp_rank_00_model_states.pt'}) but this run is "
                f"stage {stage}, which reads "
                f"{'zero_pp_rank_{r}_mp_rank_00_model_states.pt' if planned == '3' else 'mp_rank_00_model_states.pt'}: "
                "load_checkpoint finds no file (IndexError in state_dict_factory.py load)",
                f"resume at stage {'3' if fam == '3' else '0, 1 or 2'}, or convert with ds_to_universal.py and set "
                '"checkpoint": {"load_universal": true}', saved_stage=fam, stage=stage)
            return
        w = self._zero_world(ctx)
        if w is None or stage == 0 or not sc.zero_ranks:
            return
        if ctx.effective.offload_optimizer_effective == "nvme":
            return
        if w == sc.zero_ranks:
            return
        what = ("ranks {0}..{1} find no zero_pp_rank_{{r}}_mp_rank_00_model_states.pt (IndexError in "
                "state_dict_factory.py load)".format(sc.zero_ranks, w - 1)) if stage == 3 and w > sc.zero_ranks else (
            f"_load_zero_checkpoint raises ZeRORuntimeException 'The checkpoint being loaded used a DP world size of "
            f"{sc.zero_ranks} but the current world size is {w}'")
        yield self.finding(
            pointer(), f"--resume-from-checkpoint {folder}: saved by {sc.zero_ranks} ZeRO ranks "
                       f"({sc.zero_ranks} optimizer-state files in {cut(sc.tag)}/), resumed by {w}: {what}",
            f"resume on {sc.zero_ranks} data-parallel ranks, or convert with ds_to_universal.py and set "
            '"checkpoint": {"load_universal": true}', saved_world=sc.zero_ranks, world=w)

    @staticmethod
    def _zero_world(ctx: LintContext) -> int | None:
        """Ranks ZeRO partitions over (DP x SP): the cluster's when given, else the data-parallel size."""
        if ctx.cluster is not None:
            return ctx.cluster.zero_world_size
        return ctx.dp_world_size
