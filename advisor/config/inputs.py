"""What a config file given to any command is, told by its content: a DeepSpeed config, an
accelerate config (YAML or JSON; ``accelerate launch --config_file`` takes both), or neither.

Every command reads its CONFIG through :func:`read_input`: a DeepSpeed file loads as DeepSpeed
loads it (``advisor.config.loading``); an accelerate file is read as ``accelerate launch`` reads it
(``advisor.config.hf.read_accelerate_config``) and stands for the DeepSpeed config accelerate
builds from it (``resolve_accelerate``), with the launch's world size (``num_processes``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from advisor.config.loading import LoadedConfig, load_config
from advisor.errors import AdvisorError, ConfigLoadError

YAML_SUFFIXES = (".yml", ".yaml")


class NotAConfig(ConfigLoadError):
    """The file is readable but is neither a DeepSpeed nor an accelerate config (or is an
    accelerate config that does not use DeepSpeed). ``reason`` says which."""

    def __init__(self, source: str, reason: str):
        super().__init__(source, reason)
        self.reason = reason


@dataclass
class ConfigInput:
    """One CONFIG argument, read. ``loaded``: the DeepSpeed config DeepSpeed receives (for an
    accelerate file, the dict accelerate builds, without positions). ``launch``: the accelerate
    launch when the file is an accelerate config, else None."""

    loaded: LoadedConfig
    launch: Any = None
    #: accelerate's resolution (advisor.config.hf.Resolution) for an accelerate file.
    resolution: Any = None
    #: Positions and text of the file itself (an accelerate JSON file), for locating findings.
    file_positions: dict = field(default_factory=dict)
    file_text: str = ""

    @property
    def kind(self) -> str:
        return "accelerate" if self.launch is not None else "deepspeed"


def _is_accelerate(data: Any) -> bool:
    """accelerate's ``load_config_from_file`` needs ``compute_environment`` or reads
    ``distributed_type``; a DeepSpeed config has neither key."""
    return isinstance(data, dict) and "distributed_type" in data


def deepspeed_keys(data: dict) -> list[str]:
    """The top-level keys of ``data`` that DeepSpeed 0.19.8's config defines (our schema's
    properties): none, in a non-empty object, means the file is not a DeepSpeed config (a folder
    lint skips it; an empty config is DeepSpeed's defaults)."""
    from advisor.config.schema import load_schema

    props = load_schema().get("properties", {})
    return [k for k in data if k in props]


def read_input(source: str, *, trainer_args: Any = None, world_size: int | None = None,
               hidden_size: int | None = None, inventory: Any = None,
               overrides: "list[str] | tuple[str, ...]" = (), lenient: bool = False) -> ConfigInput:
    """Read CONFIG by its content. Raises ConfigLoadError (unreadable or invalid as DeepSpeed
    reads it), NotAConfig (an accelerate config without DeepSpeed) or AdvisorError (an accelerate file accelerate itself
    would refuse to read, or a malformed ``overrides`` entry). A YAML file that is not an accelerate config is read as DeepSpeed
    reads every config, as JSON/HJSON (``deepspeed/runtime/config.py`` DeepSpeedConfig).
    ``overrides``: ``--set KEY.PATH=VALUE`` strings (:mod:`advisor.config.overrides`), applied to
    the DeepSpeed config before it is read; for an accelerate file, to the DeepSpeed config
    accelerate starts from, before "auto" is filled (:func:`advisor.config.hf.accelerate_overrides`:
    a key of the accelerate file itself is refused).
    An accelerate field that accelerate launch refuses (``mixed_precision: bf17``, ``zero_stage: 5``)
    raises AdvisorError naming the file, the key, the problem and the allowed values; with
    ``lenient`` (lint) it is an H004 finding of the input instead."""
    inp = _read_input(source, trainer_args, world_size, hidden_size, inventory, overrides)
    if inp.launch is not None and inp.launch.refusals and not lenient:
        f = inp.launch.refusals[0]
        raise AdvisorError(f"{inp.loaded.source}: {f.message}")
    if overrides and inp.launch is None:
        from advisor.config.overrides import apply_overrides, check_overrides
        check_overrides(inp.loaded, overrides)  # a value a file would be reported for: exit 2 naming the --set
        from advisor.config.overrides import written_pointers
        inp.loaded = dataclasses.replace(inp.loaded, data=apply_overrides(inp.loaded.data, overrides),
                                         overrides=written_pointers(inp.loaded.data, overrides))
    return inp


def _read_input(source, trainer_args, world_size, hidden_size, inventory, overrides=()) -> ConfigInput:
    is_file = source != "-" and os.path.isfile(source)
    yaml_file = is_file and source.lower().endswith(YAML_SUFFIXES)
    if is_file and not yaml_file and not source.endswith(".json"):
        # accelerate reads every config file not named *.json with yaml.safe_load
        # (accelerate/commands/config/config_args.py load_config_from_file): an accelerate config
        # in YAML under another name (acc.cfg) is read as YAML, as `resolve` always did
        from advisor.config.hf import is_accelerate_config
        from advisor.config.readers import MAX_YAML_BYTES, read_text
        try:
            yaml_file = is_accelerate_config(read_text(source, limit=MAX_YAML_BYTES, what="config"))
        except ConfigLoadError:
            yaml_file = False  # DeepSpeed's own reading reports it below
    if yaml_file:
        from advisor.config.readers import MAX_YAML_BYTES, parse_yaml, read_text

        yaml_error: ConfigLoadError | None = None
        text = ""
        positions: dict = {}
        try:
            text = read_text(source, limit=MAX_YAML_BYTES, what="YAML file")
            data = parse_yaml(text, source, what="YAML file", positions=positions)
        except ConfigLoadError as e:
            data, yaml_error = None, e  # not YAML accelerate reads; DeepSpeed's own reading decides below
        if _is_accelerate(data):
            inp = _accelerate(source, text, trainer_args, world_size, hidden_size, inventory, overrides)
            # findings at the YAML key's line:column; one about a key the file lacks at the document's
            # start, 1:1, as a JSON config's (advisor.config.loading: positions[""])
            positions.setdefault("", (1, 1))
            inp.file_positions, inp.file_text = positions, text
            return inp
        if yaml_error is not None:
            try:
                loaded = load_config(source)
            except ConfigLoadError:
                # neither YAML nor JSON/HJSON: a .yml/.yaml file that does not read as JSON either is
                # reported as the YAML it claims to be (file, line, column), unless it opens like JSON
                if text.lstrip().startswith(("{", "[")):
                    raise
                raise yaml_error from None
    # DeepSpeed reads any file as JSON/HJSON whatever its suffix (a GPT-NeoX .yml config is one).
    loaded = load_config(source)
    if _is_accelerate(loaded.data):
        inp = _accelerate(loaded.source, loaded.text, trainer_args, world_size, hidden_size, inventory, overrides)
        inp.file_positions, inp.file_text = loaded.positions, loaded.text
        return inp
    return ConfigInput(loaded=loaded)


def _accelerate(source, text, trainer_args, world_size, hidden_size, inventory, overrides=()) -> ConfigInput:
    from advisor.config import hf

    try:
        launch = hf.read_accelerate_config(source, text)
    except AdvisorError as e:
        msg = str(e)
        if "not DEEPSPEED" in msg:
            raise NotAConfig(source, msg.split(": ", 1)[-1])
        raise
    args = trainer_args if isinstance(trainer_args, hf.TrainerArgs) else hf.TrainerArgs.from_mapping(trainer_args or {})
    h, meta = hf._hidden_from_inventory(inventory)
    res = hf.resolve_accelerate(launch, args, hidden_size=hidden_size if hidden_size is not None else h,
                                model_config=meta if h is not None else None, world_size=world_size,
                                overrides=overrides)
    loaded = LoadedConfig(source=source, data=res.config, positions={}, text="")
    return ConfigInput(loaded=loaded, launch=launch, resolution=res)

