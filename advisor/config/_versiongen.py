"""Generate ``advisor/data/deepspeed_versions.json``: which config keys, defaults, scheduler and
optimizer names each checked DeepSpeed release has, read from the releases' own sources.

Nothing is imported from the releases: each sdist is fetched with ``pip download --no-binary``
(or read from a folder of already extracted sdists) and its pydantic config models are read with
:mod:`ast`. A key's "spellings" are its field name and its ``alias`` (DeepSpeedConfigModel sets
``populate_by_name`` / ``allow_population_by_field_name``, so both are accepted by every release
checked). Pydantic sections forbid extra keys (``extra="forbid"`` in
deepspeed/runtime/config_utils.py:DeepSpeedConfigModel), so a key a release does not define is
rejected at ``deepspeed.initialize``; sections a release still parses as a dict ignore it.

The table is compressed: per key, the first and last checked release that define it and the
releases where its default changes; not one schema per release.

usage: python -m advisor.config._versiongen [--sdists DIR] [--check]
  --sdists DIR  a folder holding deepspeed-X.Y.Z.tar.gz (downloaded there when missing)
  --check       exit 1 when the checked-in table differs from a fresh one (the drift test)
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
from typing import Any

#: The releases checked: every final release from 0.9.0 to 0.19.8 (``pip index versions
#: deepspeed``; DeepSpeed has published no post-releases in this span). Public configs and user
#: reports span 0.9 to 0.19 (issue 20), users pin any patch (x.y.0 included), and a patch can add
#: keys (0.10.0 -> 0.10.1 ...), so no release of the span is left to a neighbour's facts. Releases
#: before 0.9 are outside the table (``--deepspeed-version`` refuses them).
RELEASES = (
    "0.9.0", "0.9.1", "0.9.2", "0.9.3", "0.9.4", "0.9.5",
    "0.10.0", "0.10.1", "0.10.2", "0.10.3",
    "0.11.1", "0.11.2",
    "0.12.0", "0.12.1", "0.12.2", "0.12.3", "0.12.4", "0.12.5", "0.12.6",
    "0.13.0", "0.13.1", "0.13.2", "0.13.3", "0.13.4", "0.13.5",
    "0.14.0", "0.14.1", "0.14.2", "0.14.3", "0.14.4", "0.14.5",
    "0.15.0", "0.15.1", "0.15.2", "0.15.3", "0.15.4",
    "0.16.0", "0.16.1", "0.16.2", "0.16.3", "0.16.4", "0.16.5", "0.16.6", "0.16.7", "0.16.8", "0.16.9",
    "0.17.0", "0.17.1", "0.17.2", "0.17.3", "0.17.4", "0.17.5", "0.17.6",
    "0.18.0", "0.18.1", "0.18.2", "0.18.3", "0.18.4", "0.18.5", "0.18.6", "0.18.7", "0.18.8", "0.18.9",
    "0.19.0", "0.19.1", "0.19.2", "0.19.3", "0.19.4", "0.19.5", "0.19.6", "0.19.7", "0.19.8",
)

#: Releases of the span whose sdist pip cannot fetch here, so the table has no facts of theirs:
#: release -> (the release checked instead, why). ``pip download deepspeed==0.11.0`` fails in its
#: metadata step in both build modes (isolated: its setup.py imports torch; not isolated: its
#: pydantic-1 config code under pydantic 2) and, unlike 0.13.0's, keeps no archive. The selection
#: states the mapping in a warning and in every output.
UNREADABLE = {"0.11.0": ("0.11.1", "pip cannot fetch its sdist (its setup.py fails in pip's metadata step), so "
                                   "the table has no facts of its own")}

#: JSON path of each pydantic section -> its model class (same name in every release that has it).
ROOTS = {
    "zero_optimization": "DeepSpeedZeroConfig",
    "fp16": "DeepSpeedFP16Config",
    "bf16": "DeepSpeedBF16Config",
    "tensorboard": "TensorBoardConfig",
    "wandb": "WandbConfig",
    "csv_monitor": "CSVConfig",
    "comet": "CometConfig",
    "comms_logger": "CommsLoggerConfig",
    "compile": "CompileConfig",
    "hybrid_engine": "HybridEngineConfig",
    "tensor_parallel": "TPTrainingConfig",
    "timers/throughput": "DeepSpeedThroughputTimerConfig",
}

TABLE_PATH = pathlib.Path(__file__).resolve().parents[1] / "data" / "deepspeed_versions.json"


def _literal(node: ast.AST | None) -> Any:
    """A JSON-able default: a literal, ``pp_int(x)`` as int(x), else the source text prefixed '='."""
    if node is None:
        return None
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "pp_int" and node.args:
        try:
            return int(ast.literal_eval(node.args[0]))
        except (ValueError, TypeError, SyntaxError):
            return "=" + ast.unparse(node.args[0])
    try:
        v = ast.literal_eval(node)
        return v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else "=" + ast.unparse(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return "=" + ast.unparse(node)


def _field(stmt: ast.AnnAssign) -> dict[str, Any]:
    """name, annotation, default, alias, deprecated, new_param of one pydantic field."""
    f: dict[str, Any] = {"name": stmt.target.id, "type": ast.unparse(stmt.annotation)}  # type: ignore[union-attr]
    v = stmt.value
    if isinstance(v, ast.Call) and getattr(v.func, "id", None) == "Field":
        kw = {k.arg: k.value for k in v.keywords if k.arg}
        f["default"] = _literal(v.args[0] if v.args else kw.get("default"))
        if "alias" in kw:
            f["alias"] = _literal(kw["alias"])
        extra = kw.get("json_schema_extra")
        extra_d = _literal(extra) if extra is not None else {}
        if not isinstance(extra_d, dict):
            extra_d = {}
        dep = kw.get("deprecated")
        if (dep is not None and _literal(dep) is True) or extra_d.get("deprecated") is True:
            f["deprecated"] = True
        new = _literal(kw["new_param"]) if "new_param" in kw else extra_d.get("new_param")
        if isinstance(new, str) and new:
            f["new_param"] = new
        bounds = {k: _literal(kw[k]) for k in ("ge", "gt", "le", "lt") if k in kw}
        bounds = {k: v for k, v in bounds.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if bounds:
            f["bounds"] = bounds
    else:
        f["default"] = _literal(v)
    return f


def read_models(src: pathlib.Path) -> dict[str, dict[str, Any]]:
    """Every class that may be a config model under ``src/deepspeed`` (inference and ops
    excluded): bases and pydantic fields.

    Only files that can matter are parsed (a tenth of them): those naming ``DeepSpeedConfigModel``,
    then, until nothing changes, those naming a class found so far whose bases lead there. A file
    naming none of them can neither define such a class nor subclass one, so the result is what
    parsing every file gives (classes kept in path order, the first definition of a name winning)."""
    files = [p for p in sorted((src / "deepspeed").rglob("*.py")) if "inference" not in p.parts and "ops" not in p.parts]
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in files}
    parsed: dict[pathlib.Path, list[ast.ClassDef]] = {}
    names = {"DeepSpeedConfigModel"}
    # Before 0.15.0 comm/config.py's CommsConfig is a plain pydantic BaseModel whose own
    # ``class Config: extra = 'forbid'`` makes it refuse unknown keys like DeepSpeedConfigModel.
    forbid = re.compile(r"""extra\s*=\s*['"]forbid['"]""")
    for p in files:
        if forbid.search(texts[p]):
            try:
                parsed[p] = [n for n in ast.parse(texts[p]).body if isinstance(n, ast.ClassDef)]
            except SyntaxError:
                parsed[p] = []
            names.update(n.name for n in parsed[p] if _forbids_extra(n))
    while True:
        word = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, names))) + r")\b")
        new = [p for p in files if p not in parsed and word.search(texts[p])]
        if not new:
            break
        for p in new:
            try:
                parsed[p] = [n for n in ast.parse(texts[p]).body if isinstance(n, ast.ClassDef)]
            except SyntaxError:
                parsed[p] = []
        grew = True
        while grew:  # every class whose bases name a candidate is a candidate
            grew = False
            for nodes in parsed.values():
                for n in nodes:
                    if n.name not in names and any(ast.unparse(b).split(".")[-1] in names for b in n.bases):
                        names.add(n.name)
                        grew = True
    classes: dict[str, dict[str, Any]] = {}
    for p in files:
        for node in parsed.get(p, []):
            fields = [_field(s) for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                      and not s.target.id.startswith("_") and "ClassVar" not in ast.unparse(s.annotation)]
            classes.setdefault(node.name, {"bases": [ast.unparse(b).split(".")[-1] for b in node.bases],
                                           "fields": fields, "file": str(p.relative_to(src)),
                                           **({"forbid": True} if _forbids_extra(node) else {})})
    return classes


def _forbids_extra(node: ast.ClassDef) -> bool:
    """A pydantic v1 model refusing unknown keys on its own: a nested ``class Config`` with
    ``extra = 'forbid'`` (comm/config.py CommsConfig before 0.15.0)."""
    for c in node.body:
        if isinstance(c, ast.ClassDef) and c.name == "Config":
            for a in c.body:
                if isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "extra" for t in a.targets) \
                        and isinstance(a.value, ast.Constant) and a.value.value == "forbid":
                    return True
    return False


def _is_model(name: str, classes: dict[str, Any], seen: frozenset = frozenset()) -> bool:
    if name == "DeepSpeedConfigModel" or classes.get(name, {}).get("forbid"):
        return True
    c = classes.get(name)
    return bool(c) and name not in seen and any(_is_model(b, classes, seen | {name}) for b in c["bases"])


def _all_fields(name: str, classes: dict[str, Any]) -> list[dict[str, Any]]:
    c = classes[name]
    out: list[dict[str, Any]] = []
    for b in c["bases"]:
        if b in classes and b != "DeepSpeedConfigModel" and _is_model(b, classes):
            out += _all_fields(b, classes)
    return out + c["fields"]


def release_keys(src: pathlib.Path) -> dict[str, dict[str, Any]]:
    """``{json path: {default, type, deprecated?, new_param?, source}}`` for one extracted release.
    Both spellings (field name and alias) get a row; the alias row names its field."""
    classes = read_models(src)
    keys: dict[str, dict[str, Any]] = {}

    def walk(path: str, cls: str, depth: int = 0) -> None:
        if depth > 4 or cls not in classes or not _is_model(cls, classes):
            return
        for f in _all_fields(cls, classes):
            row = {"default": f.get("default"), "type": f["type"], "source": f"{classes[cls]['file']}:{cls}"}
            for k in ("deprecated", "new_param", "bounds"):
                if k in f:
                    row[k] = f[k]
            spellings = [f["name"]] + ([f["alias"]] if isinstance(f.get("alias"), str) else [])
            for s in spellings:
                keys[f"/{path}/{s}"] = dict(row, **({"field": f["name"]} if s != f["name"] else {}))
            for other in classes:
                if other in f["type"].replace("[", " ").replace("]", " ").replace(",", " ").split() \
                        and _is_model(other, classes):
                    for s in spellings:
                        walk(f"{path}/{s}", other, depth + 1)

    for path, cls in ROOTS.items():
        if cls in classes and _is_model(cls, classes):
            keys[f"/{path}"] = {"section": "pydantic", "source": f"{classes[cls]['file']}:{cls}"}
            walk(path, cls)
    for path, row in dict_keys(src).items():
        keys.setdefault(path, row)  # a pydantic field of the same path (bf16 from 0.17.1) is what is read
    return keys


#: Keys DeepSpeed reads from a plain dict (no pydantic model) whose default or existence changes
#: between releases: JSON path -> (the reader in deepspeed/runtime/config.py, the constant in
#: deepspeed/runtime/constants.py holding its default, or None). A release reads the key when its
#: config.py defines the reader; the default is the constant's value there. A key the table has
#: as a pydantic field in a release (bf16.immediate_grad_update from 0.17.1) is read from that.
DICT_KEYS = {
    "/gradient_clipping": ("get_gradient_clipping", "GRADIENT_CLIPPING_DEFAULT"),
    "/bf16/immediate_grad_update": ("get_bfloat16_immediate_grad_update", "BFLOAT16_IMMEDIATE_GRAD_UPDATE_DEFAULT"),
    "/torch_autocast": ("get_torch_autocast_enabled", None),
    "/torch_autocast/enabled": ("get_torch_autocast_enabled", "TORCH_AUTOCAST_ENABLED_DEFAULT"),
}


def dict_keys(src: pathlib.Path) -> dict[str, dict[str, Any]]:
    """The :data:`DICT_KEYS` one extracted release reads: ``{path: {default, type: "dict", read:
    "dict", source}}``, the default being the constant's literal in runtime/constants.py."""
    cfg, const = src / "deepspeed/runtime/config.py", src / "deepspeed/runtime/constants.py"
    if not cfg.is_file():
        return {}
    defs = {n.name for n in ast.parse(cfg.read_text(encoding="utf-8", errors="replace")).body
            if isinstance(n, ast.FunctionDef)}
    consts: dict[str, Any] = {}
    if const.is_file():
        for n in ast.parse(const.read_text(encoding="utf-8", errors="replace")).body:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        consts[t.id] = _literal(n.value)
    out: dict[str, dict[str, Any]] = {}
    for path, (reader, name) in DICT_KEYS.items():
        if reader in defs:
            out[path] = {"default": consts.get(name) if name else None, "type": "dict", "read": "dict",
                         "source": f"deepspeed/runtime/config.py:{reader}"
                                   + (f" (default: deepspeed/runtime/constants.py {name})" if name else "")}
    return out


def _names_list(src: pathlib.Path, rel: str, var: str) -> list[str]:
    """The string values of list ``var`` in module ``rel`` (names resolved to module constants)."""
    p = src / rel
    if not p.is_file():
        return []
    tree = ast.parse(p.read_text(encoding="utf-8", errors="replace"))
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in n.targets) \
                and isinstance(n.value, (ast.List, ast.Tuple)):
            return [e.value if isinstance(e, ast.Constant) else consts.get(getattr(e, "id", ""), "?")
                    for e in n.value.elts]
    return []


def _zero_refused(src: pathlib.Path) -> list[str]:
    """Optimizer names whose branch of ``DeepSpeedEngine._configure_basic_optimizer``
    (runtime/engine.py) asserts ``not self.zero_optimization()`` (true whenever ZeRO stage >= 1:
    runtime/config.py ``zero_enabled = zero_optimization_stage > 0``): the 1-bit optimizers up
    to 0.19.6. The ``optimizer_name() == CONST`` constants are resolved from runtime/config.py."""
    eng, cfg = src / "deepspeed/runtime/engine.py", src / "deepspeed/runtime/config.py"
    if not eng.is_file() or not cfg.is_file():
        return []
    consts = {t.id: n.value.value for n in ast.parse(cfg.read_text(encoding="utf-8", errors="replace")).body
              if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
              for t in n.targets if isinstance(t, ast.Name)}
    out: list[str] = []
    for node in ast.walk(ast.parse(eng.read_text(encoding="utf-8", errors="replace"))):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.comparators) == 1
                and isinstance(node.test.ops[0], ast.Eq) and "optimizer_name()" in ast.unparse(node.test.left)):
            continue
        refuses = any(isinstance(s, ast.Assert) and ast.unparse(s.test) == "not self.zero_optimization()"
                      for s in node.body)
        const = node.test.comparators[0]
        name = consts.get(const.id) if isinstance(const, ast.Name) else getattr(const, "value", None)
        if refuses and isinstance(name, str) and name not in out:
            out.append(name)
    return sorted(out)


def _dict_keys(src: pathlib.Path, rel: str, var: str) -> list[str]:
    """The string keys of the module-level dict ``var`` in module ``rel`` ([] when absent)."""
    p = src / rel
    if not p.is_file():
        return []
    for n in ast.parse(p.read_text(encoding="utf-8", errors="replace")).body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in n.targets) \
                and isinstance(n.value, ast.Dict):
            return sorted(k.value for k in n.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return []


def release_names(src: pathlib.Path) -> dict[str, list[str]]:
    """Scheduler types (runtime/lr_schedules.py VALID_LR_SCHEDULES), the optimizer names
    DeepSpeed builds itself (runtime/config.py DEEPSPEED_OPTIMIZERS) and those of them it
    refuses with ZeRO (:func:`_zero_refused`)."""
    return {"scheduler_types": _names_list(src, "deepspeed/runtime/lr_schedules.py", "VALID_LR_SCHEDULES"),
            "optimizer_types": _names_list(src, "deepspeed/runtime/config.py", "DEEPSPEED_OPTIMIZERS"),
            "zero_refused_optimizers": _zero_refused(src),
            # keys deepspeed.initialize refuses as removed features (runtime/config.py:
            # _reject_removed_config_keys; from 0.19.7): top level, and under zero_optimization
            "removed_top_level_keys": _dict_keys(src, "deepspeed/runtime/config.py", "_REMOVED_TOP_LEVEL_CONFIG_KEYS"),
            "removed_zero_keys": _dict_keys(src, "deepspeed/runtime/config.py", "_REMOVED_ZERO_CONFIG_KEYS")}


def compress(per_release: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per key: ``first``/``last`` checked release defining it, and ``defaults`` as
    ``[[release, default], ...]`` at every change (the first entry is the default at ``first``)."""
    order = list(per_release)
    out: dict[str, dict[str, Any]] = {}
    for path in sorted({p for keys in per_release.values() for p in keys}):
        present = [r for r in order if path in per_release[r]]
        latest = per_release[present[-1]][path]
        row: dict[str, Any] = {**_ranges(present), "source": latest["source"]}
        for k in ("section", "type", "field", "deprecated", "new_param"):
            if k in latest:
                row[k] = latest[k]
        plain = [r for r in present if per_release[r][path].get("read") == "dict"]
        if plain:  # the releases that read it from a plain dict (no model refuses or coerces it)
            row["plain_dict_in"] = _ranges(plain)
        sources = sorted({per_release[r][path]["source"] for r in present})
        if len(sources) > 1:  # read from a plain dict in some releases, a model in others
            row["sources"] = sources
        if any("bounds" in per_release[r][path] for r in present):
            bounds: list[list[Any]] = []
            for r in present:
                b = per_release[r][path].get("bounds", {})
                if not bounds or bounds[-1][1] != b:
                    bounds.append([r, b])
            row["bounds"] = bounds
        defaults: list[list[Any]] = []
        for r in present:
            d = per_release[r][path].get("default")
            if not defaults or defaults[-1][1] != d:
                defaults.append([r, d])
        if "section" not in latest:
            row["defaults"] = defaults
        out[path] = row
    return out


def fetch(release: str, folder: pathlib.Path) -> pathlib.Path:
    """The extracted sdist of ``release`` in ``folder`` (downloaded with pip when missing).

    ``pip download`` prepares the sdist's metadata, i.e. runs its setup.py, which in some releases
    (e.g. 0.11.0) imports torch: when that fails in pip's isolated build environment it is retried
    with ``--no-build-isolation`` (the torch installed here). Some setup.py fail even so (0.13.0
    imports its pydantic-1 config code), but pip has saved the archive by then, which is all
    that is read (nothing is built or imported). Raises ``subprocess.SubprocessError``
    or ``OSError`` when the sdist cannot be had (no registry, no torch)."""
    folder.mkdir(parents=True, exist_ok=True)
    tgz = folder / f"deepspeed-{release}.tar.gz"
    root = folder / f"deepspeed-{release}"
    if not (root / "deepspeed").is_dir():
        if not tgz.is_file():
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                   f"deepspeed=={release}", "-d", str(folder)]
            # no DS_ACCELERATOR: 0.11-0.13's CPU accelerator needs intel_extension_for_pytorch
            env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
            env["DS_BUILD_OPS"] = "0"
            for extra in ([], ["--no-build-isolation"]):
                p = subprocess.run(cmd + extra, capture_output=True, timeout=600, env=env)
                if p.returncode == 0 or tgz.is_file():  # pip keeps the archive even when its metadata step fails
                    break
            if not tgz.is_file():
                raise subprocess.CalledProcessError(p.returncode, cmd + extra, p.stdout, p.stderr)
        part = folder / f".deepspeed-{release}.partial"
        shutil.rmtree(part, ignore_errors=True)
        with tarfile.open(tgz) as t:
            members = [m for m in t.getmembers() if m.name.startswith(f"deepspeed-{release}/deepspeed/")
                       and m.name.endswith(".py") and m.isfile()]
            t.extractall(part, members=members, filter="data")
        (part / f"deepspeed-{release}").rename(root)  # whole or absent: a killed run leaves no half tree
        part.rmdir()
    return root


def fetch_all(folder: pathlib.Path, releases: "tuple[str, ...] | list[str]" = RELEASES,
              jobs: int = 4) -> dict[str, pathlib.Path]:
    """:func:`fetch` of every release, ``jobs`` pip downloads at a time (each spends most of its
    time in pip's metadata step). Raises the first fetch's error."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        return dict(zip(releases, ex.map(lambda r: fetch(r, folder), releases)))


def _ranges(present: list[str]) -> dict[str, Any]:
    """``first``/``last`` of ``present`` (in :data:`RELEASES` order) and ``absent_in``: the
    releases between them that lack it."""
    row: dict[str, Any] = {"first": present[0], "last": present[-1]}
    gaps = [r for r in RELEASES[RELEASES.index(present[0]):RELEASES.index(present[-1]) + 1] if r not in present]
    if gaps:
        row["absent_in"] = gaps
    return row


def build(folder: pathlib.Path) -> dict[str, Any]:
    """The whole table for :data:`RELEASES`, from sdists in (or downloaded to) ``folder``."""
    srcs = fetch_all(folder)
    per_release = {r: release_keys(srcs[r]) for r in RELEASES}
    names = {r: release_names(srcs[r]) for r in RELEASES}
    name_rows: dict[str, dict[str, dict[str, Any]]] = {}
    for kind in ("scheduler_types", "optimizer_types", "zero_refused_optimizers", "removed_top_level_keys",
                 "removed_zero_keys"):
        every = sorted({n for r in RELEASES for n in names[r][kind]})
        name_rows[kind] = {n: _ranges([r for r in RELEASES if n in names[r][kind]]) for n in every}
    return {"generated_by": "python -m advisor.config._versiongen (AST of each release's sdist; nothing imported)",
            "releases": list(RELEASES), "unreadable": {r: {"checked": c, "why": w} for r, (c, w) in UNREADABLE.items()},
            "roots": ROOTS, "keys": compress(per_release), "names": name_rows}


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m advisor.config._versiongen")
    ap.add_argument("--sdists", default=str(pathlib.Path.home() / ".cache" / "ds-advisor-sdists"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    table = build(pathlib.Path(a.sdists))
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    if a.check:
        same = TABLE_PATH.is_file() and TABLE_PATH.read_text(encoding="utf-8") == text
        print("deepspeed_versions.json is up to date" if same else "deepspeed_versions.json differs: regenerate it")
        return 0 if same else 1
    TABLE_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {TABLE_PATH} ({len(table['keys'])} keys, {len(RELEASES)} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
