"""A stdout that says it is a terminal, for the commands' progress bars."""

from __future__ import annotations

from io import StringIO

from django.core.management.base import OutputWrapper

__all__ = ["Terminal", "terminal"]


class Terminal(StringIO):
    """A ``StringIO`` whose ``isatty()`` is true: progress draws its bar."""

    def isatty(self) -> bool:
        return True


def terminal() -> tuple[Terminal, OutputWrapper]:
    """The screen (read it with ``getvalue()``) and the command's stdout over it."""
    screen = Terminal()
    return screen, OutputWrapper(screen)
