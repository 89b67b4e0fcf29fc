"""Capacity reports: the report object, its HTML and Markdown twins, and saved reports by id."""
