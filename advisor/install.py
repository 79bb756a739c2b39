"""How this copy of the advisor is installed, for messages that tell the user what to run.

A source checkout (the running ``advisor`` package sits next to a ``pyproject.toml`` naming
``deepspeed-advisor``: ``pip install -e .`` or ``PYTHONPATH``) gets ``pip install -e
'<checkout>[extra]'``; an installed wheel (site-packages) gets ``pip install
'deepspeed-advisor[extra]'`` (PyPI).
"""

from __future__ import annotations

from pathlib import Path

DIST = "deepspeed-advisor"


def source_checkout() -> Path | None:
    """The checkout the running package comes from, or None when it is an installed wheel."""
    root = Path(__file__).resolve().parents[1]
    py = root / "pyproject.toml"
    try:
        return root if py.is_file() and f'name = "{DIST}"' in py.read_text(errors="replace") else None
    except OSError:
        return None


def extra_command(extra: str) -> str:
    """The pip command that installs the optional dependencies ``extra`` (report, trace, engine)
    for this install: ``pip install -e '/path/to/checkout[report]'`` in a source checkout, else
    ``pip install 'deepspeed-advisor[report]'``."""
    root = source_checkout()
    return f"pip install -e '{root}[{extra}]'" if root else f"pip install '{DIST}[{extra}]'"
