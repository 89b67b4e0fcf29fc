"""Bounds (and the one fixed block size of a trace format) every layer checks its input against, defined once.

The compiled simulator keeps counts and token positions in 64-bit integers and multiplies them (pairs of
attention, tokens times bytes); a count or length past 2³¹−1 is far beyond any real trace or model yet small
enough that no product of two overflows. The CLI's flags, synthetic specs, step specs and config.json fields
all stop there.
"""

MAX_COUNT = 2**31 - 1
# requests a synthetic spec may hold in memory at once; its lengths stop at MAX_COUNT, far past any model's context
# (a longer prompt is rejected by the engine like any too long for max_model_len)
MAX_REQUESTS = 10**7
# tokens per prefix block id: a request's hash_ids hold ceil(input_tokens / 512) ids, as ingest checks and the
# simulator maps them. Mooncake (kvcache-ai/Mooncake, FAST25-release/README.md): "The block size is 512 tokens".
MOONCAKE_BLOCK_TOKENS = 512
