"""Errors meant for the user: the CLI prints them as one ``error:`` line, pages show them as messages."""


class PlannerError(Exception):
    """A problem with the user's input or request, with a message that names what was expected."""
