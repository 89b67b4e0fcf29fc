"""Errors meant for the user: the CLI prints them as one ``error:`` line, pages show them as messages."""


class PlannerError(Exception):
    """A problem with the user's input or request, with a message that names what was expected."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (DuckDB's messages can run to many lines)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
