"""The command line: ``python -m planner COMMAND … --json`` (../shared/CONTRACT.md). Nothing imports from it."""
