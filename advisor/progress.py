"""A progress indicator for long work (measure, generate's search), on stderr, only on a terminal.

Usage::

    from advisor.progress import progress

    with progress("searching configs", total=len(candidates)) as bar:
        for c in candidates:
            ...
            bar.advance()

When stderr is not a TTY (CI logs, pipes, tests) or ``DS_ADVISOR_NO_PROGRESS`` is set, the bar
is a no-op object with the same methods, and rich is not imported: nothing is written, so
stdout and stderr stay machine-readable. rich is imported lazily, only when a bar is shown.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import IO, Iterable, Iterator, TypeVar

T = TypeVar("T")


class _NullBar:
    """The bar's interface, doing nothing (used when stderr is not a terminal)."""

    def advance(self, n: float = 1) -> None:
        """Mark ``n`` more units done."""

    def update(self, completed: float | None = None, total: float | None = None,
               description: str | None = None) -> None:
        """Set the units done, the total, or the description."""


class _RichBar:
    def __init__(self, prog, task) -> None:
        self._p, self._t = prog, task

    def advance(self, n: float = 1) -> None:
        self._p.advance(self._t, n)

    def update(self, completed: float | None = None, total: float | None = None,
               description: str | None = None) -> None:
        kw = {k: v for k, v in (("completed", completed), ("total", total), ("description", description))
              if v is not None}
        self._p.update(self._t, **kw)


def enabled(stream: IO[str] | None = None) -> bool:
    """True when a bar would be drawn: ``stream`` (default stderr) is a TTY and
    ``DS_ADVISOR_NO_PROGRESS`` is not set."""
    stream = stream if stream is not None else sys.stderr
    if os.environ.get("DS_ADVISOR_NO_PROGRESS"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


@contextmanager
def progress(description: str, total: float | None = None, stream: IO[str] | None = None,
             transient: bool = True) -> Iterator[_NullBar | _RichBar]:
    """A context manager yielding a bar with ``advance(n=1)`` and ``update(completed=, total=,
    description=)``. ``total`` None draws a spinner with elapsed time. The bar is drawn on
    ``stream`` (default stderr) only when :func:`enabled`; it is removed when done
    (``transient``)."""
    stream = stream if stream is not None else sys.stderr
    if not enabled(stream):
        yield _NullBar()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, \
        TimeElapsedColumn, TimeRemainingColumn

    cols = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        cols += [BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    cols.append(TimeElapsedColumn())
    # the terminal's size given, not read by rich from COLUMNS / LINES (its int() of any
    # str.isdigit() text raised on "²" or 5,000 digits; issue 21, fuzz round c)
    import shutil
    size = shutil.get_terminal_size((80, 25))  # falls back on a COLUMNS int() cannot read
    with Progress(*cols, console=Console(file=stream, width=size.columns, height=size.lines),
                  transient=transient) as p:
        yield _RichBar(p, p.add_task(description, total=total))


def track(items: Iterable[T], description: str, total: float | None = None,
          stream: IO[str] | None = None) -> Iterator[T]:
    """Iterate over ``items``, advancing a :func:`progress` bar by one per item (``total``
    defaults to ``len(items)`` when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress(description, total=total, stream=stream) as bar:
        for x in items:
            yield x
            bar.advance()
