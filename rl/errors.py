"""The one exception type for user errors: ``ragym`` prints its message as one line and exits non-zero."""

from __future__ import annotations


class UsageError(ValueError):
    """Something the user gave (a flag, a file, a recipe, a row) is wrong; the message says what and what to do.

    ``ragym.rl.cli`` prints ``ragym COMMAND: <message>`` without a traceback (``--debug`` shows it); library errors
    that mean the same (a missing file, a malformed recipe) are converted to it at the command's edge. A message
    of several lines is several problems found at once (``ragym submit``'s size checks): one printed line each.
    """


def one_line(err: BaseException) -> str:
    """``Type: first line of the message``: an error as one line, for events, logs and bad-row reasons.

    >>> one_line(FileNotFoundError("no such file: a.jpg\\nmore"))
    'FileNotFoundError: no such file: a.jpg'
    """
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")
