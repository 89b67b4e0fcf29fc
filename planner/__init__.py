"""LLM serving capacity planner: the functional core (never imports streamlit)."""

__version__ = "0.1.0"
