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
import pathlib
import subprocess
import sys
import tarfile
from typing import Any

#: The releases checked: the last patch of every minor from 0.9 to 0.19 (public configs in the
#: corpus date from 2021 to 2025, i.e. DeepSpeed 0.5-0.18; releases before 0.9 predate the
#: pydantic config models), plus the releases on both sides of the behaviour changes in
#: ``BEHAVIOUR`` below.
RELEASES = ("0.9.5", "0.10.3", "0.11.2", "0.12.6", "0.13.5", "0.14.5", "0.15.4", "0.16.9",
            "0.17.1", "0.17.2", "0.17.6", "0.18.9", "0.19.2", "0.19.3", "0.19.8")

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
    else:
        f["default"] = _literal(v)
    return f


def read_models(src: pathlib.Path) -> dict[str, dict[str, Any]]:
    """Every class under ``src/deepspeed`` (inference excluded): bases and pydantic fields."""
    classes: dict[str, dict[str, Any]] = {}
    for p in sorted((src / "deepspeed").rglob("*.py")):
        if "inference" in p.parts or "ops" in p.parts:
            continue
        try:
            tree = ast.parse(p.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            fields = [_field(s) for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                      and not s.target.id.startswith("_") and "ClassVar" not in ast.unparse(s.annotation)]
            classes.setdefault(node.name, {"bases": [ast.unparse(b).split(".")[-1] for b in node.bases],
                                           "fields": fields, "file": str(p.relative_to(src))})
    return classes


def _is_model(name: str, classes: dict[str, Any], seen: frozenset = frozenset()) -> bool:
    if name == "DeepSpeedConfigModel":
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
            for k in ("deprecated", "new_param"):
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
    return keys


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
    to 0.19.3. The ``optimizer_name() == CONST`` constants are resolved from runtime/config.py."""
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


def release_names(src: pathlib.Path) -> dict[str, list[str]]:
    """Scheduler types (runtime/lr_schedules.py VALID_LR_SCHEDULES), the optimizer names
    DeepSpeed builds itself (runtime/config.py DEEPSPEED_OPTIMIZERS) and those of them it
    refuses with ZeRO (:func:`_zero_refused`)."""
    return {"scheduler_types": _names_list(src, "deepspeed/runtime/lr_schedules.py", "VALID_LR_SCHEDULES"),
            "optimizer_types": _names_list(src, "deepspeed/runtime/config.py", "DEEPSPEED_OPTIMIZERS"),
            "zero_refused_optimizers": _zero_refused(src)}


def compress(per_release: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per key: ``first``/``last`` checked release defining it, and ``defaults`` as
    ``[[release, default], ...]`` at every change (the first entry is the default at ``first``)."""
    order = list(per_release)
    out: dict[str, dict[str, Any]] = {}
    for path in sorted({p for keys in per_release.values() for p in keys}):
        present = [r for r in order if path in per_release[r]]
        latest = per_release[present[-1]][path]
        row: dict[str, Any] = {"first": present[0], "last": present[-1], "source": latest["source"]}
        gaps = [r for r in order[order.index(present[0]):order.index(present[-1]) + 1] if r not in present]
        if gaps:
            row["absent_in"] = gaps
        for k in ("section", "type", "field", "deprecated", "new_param"):
            if k in latest:
                row[k] = latest[k]
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
    """The extracted sdist of ``release`` in ``folder`` (downloaded with pip when missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    tgz = folder / f"deepspeed-{release}.tar.gz"
    root = folder / f"deepspeed-{release}"
    if not (root / "deepspeed").is_dir():
        if not tgz.is_file():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            f"deepspeed=={release}", "-d", str(folder)], check=True, timeout=600)
        with tarfile.open(tgz) as t:
            members = [m for m in t.getmembers() if m.name.startswith(f"deepspeed-{release}/deepspeed/")
                       and m.name.endswith(".py") and m.isfile()]
            t.extractall(folder, members=members, filter="data")
    return root


def build(folder: pathlib.Path) -> dict[str, Any]:
    """The whole table for :data:`RELEASES`, from sdists in (or downloaded to) ``folder``."""
    per_release, names = {}, {}
    for r in RELEASES:
        src = fetch(r, folder)
        per_release[r] = release_keys(src)
        names[r] = release_names(src)
    name_rows: dict[str, dict[str, list[str]]] = {}
    for kind in ("scheduler_types", "optimizer_types", "zero_refused_optimizers"):
        every = sorted({n for r in RELEASES for n in names[r][kind]})
        name_rows[kind] = {n: [r for r in RELEASES if n in names[r][kind]] for n in every}
    return {"generated_by": "python -m advisor.config._versiongen (AST of each release's sdist; nothing imported)",
            "releases": list(RELEASES), "roots": ROOTS, "keys": compress(per_release), "names": name_rows}


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
