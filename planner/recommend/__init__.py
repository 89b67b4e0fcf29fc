"""Recommendations per SLO class: the classes, the search over engine settings, the plan over TP degrees, caps and
preemption modes, and the diagnosis."""
