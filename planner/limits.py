"""Bounds every layer checks its input against, defined once.

The compiled simulator keeps counts and token positions in 64-bit integers and multiplies them (pairs of
attention, tokens times bytes); a count or length past 2³¹−1 is far beyond any real trace or model yet small
enough that no product of two overflows. The CLI's flags, synthetic specs, step specs and config.json fields
all stop there.
"""

MAX_COUNT = 2**31 - 1
