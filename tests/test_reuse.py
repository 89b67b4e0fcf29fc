import json
from collections import OrderedDict
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlannerError
from planner.sim.prefix import declared, from_hash_ids, from_sessions
from planner.workload.reuse import analyse_reuse, no_identity

B = 16


def reference(identity, prompt, output, block_size, capacity=None):
    """The rules read literally, with an OrderedDict (least recently used first): per-request hit tokens and the
    distinct blocks ever cached."""
    runs = identity.runs(np.asarray(prompt) + np.asarray(output), block_size)
    cache, ever, hits = OrderedDict(), set(), []
    for r, (p, o) in enumerate(zip(prompt, output, strict=True)):
        keys = [int(k) for k in runs.keys(r)]
        cap, publish = max((p - 1) // block_size, 0), max((p + o - 1) // block_size, 0)
        h = 0
        while h < cap and keys[h] in cache:
            h += 1
        hits.append(h * block_size)
        for k in reversed(keys[:publish]):
            cache[k] = None
            cache.move_to_end(k)
            ever.add(k)
        while capacity is not None and len(cache) > capacity:
            cache.popitem(last=False)
    return np.array(hits), len(ever)


def families(order, prompt=512, output=1):
    """One 512-token hash id per family letter: ``prompt + output`` tokens publish ⌊(prompt + output − 1)/16⌋
    blocks (32 for 512 + 1) and a lookup hits at most ⌊(prompt − 1)/16⌋ (31)."""
    ids = [[ord(c)] for c in order]
    p = np.full(len(order), prompt)
    o = np.full(len(order), output)
    return from_hash_ids(ids, p), p, o


def lru_hit_tokens(analysis, blocks):
    return round(analysis.hit_rate_at(blocks * analysis.block_size) * analysis.prompt_tokens)


def test_identical_prompts_hit_all_but_the_last_block():
    n, p, o = 5, 1024, 10
    ids = [[1, 2]] * n
    a = analyse_reuse(from_hash_ids(ids, np.full(n, p)), np.full(n, p), np.full(n, o), B)
    # each later request finds all 64 prompt blocks cached but recomputes the last prompt token's block
    per_request = (p - 1) // B * B           # 63 blocks, 1,008 tokens
    assert a.ideal_hit_tokens == (n - 1) * per_request == 4 * 63 * 16
    assert a.prompt_tokens == n * p
    assert a.ideal_hit_rate == pytest.approx(4 * 63 * 16 / (5 * 1024))
    assert list(a.request_ideal_hit_tokens) == [0] + [per_request] * (n - 1)
    # 1,033 tokens fed back publish ⌊1033/16⌋ = 64 blocks, the same 64 for every request
    assert a.working_set_blocks == 64 and a.working_set_tokens == 64 * B
    assert a.groups["by"] == "prefix tree" and a.groups["groups"] == 1
    assert a.groups["hit_rate_p50"] == pytest.approx(a.ideal_hit_rate)


def test_session_turns_hit_the_previous_context_rounded_down():
    # turn 1: 100 + 50; turn 2: 170 (≥ 150) + 40; turn 3: 250 (≥ 210) + 6; turn 4: 256 (= 256, the whole context)
    prompt = np.array([100, 170, 250, 256])
    output = np.array([50, 40, 6, 3])
    identity = from_sessions(np.zeros(4, np.int64), prompt, output)
    a = analyse_reuse(identity, prompt, output, B, group=np.zeros(4, np.int64))
    # a turn shares its predecessor's prompt + answer, of which ⌊(context − 1)/16⌋ blocks were computed: the last
    # answer token is never fed back, which costs turn 4 a block (context 256 is 16 blocks, 15 were computed)
    expected = [0, (150 - 1) // B * B, (210 - 1) // B * B, (256 - 1) // B * B]
    assert expected == [0, 144, 208, 240]
    assert list(a.request_ideal_hit_tokens) == expected
    assert a.ideal_hit_tokens == sum(expected)
    assert a.groups == {"by": "session", "groups": 1, "grouped_requests": 4, "multi_request_groups": 1,
                        "mean_requests_per_group": 4.0, "hit_rate_p50": pytest.approx(592 / 776),
                        "hit_rate_p90": pytest.approx(592 / 776)}
    # the tree root groups the same way when no session codes are given
    assert analyse_reuse(identity, prompt, output, B).groups["hit_rate_p50"] == pytest.approx(592 / 776)


def test_cap_on_a_prompt_inside_a_cached_sequence():
    # request 1's prompt is request 0's first 96 tokens (a partial id covers the whole prompt): all 6 blocks are
    # cached but a lookup stops at ⌊95/16⌋ = 5
    ids = [[7], [7]]
    prompt, output = np.array([512, 96]), np.array([1, 1])
    a = analyse_reuse(from_hash_ids(ids, prompt), prompt, output, B)
    assert list(a.request_ideal_hit_tokens) == [0, 5 * B]


def test_declared_prefix_hits_exactly_the_prefix():
    n = 6
    prompt, output = np.full(n, 200), np.full(n, 20)
    a = analyse_reuse(declared(n, prompt, 160, 1.0), prompt, output, B)
    # 160 tokens are 10 whole blocks of the virtual sequence; the 11th block is each request's own
    assert list(a.request_ideal_hit_tokens) == [0] + [160] * (n - 1)
    assert a.ideal_hit_tokens == 160 * (n - 1)
    # the system prompt once, then each request's own ⌊219/16⌋ − 10 = 3 blocks
    assert a.working_set_blocks == 10 + 3 * n
    # a virtual sequence joins no tree: every request is its own group
    assert a.groups["groups"] == n and a.groups["multi_request_groups"] == 0
    assert a.groups["hit_rate_p50"] is None and a.groups["mean_requests_per_group"] == 1.0


def test_a_cache_too_small_to_keep_anything_hits_nothing():
    identity, p, o = families("ABABAB")
    a = analyse_reuse(identity, p, o, B, cache_blocks=[0, 1])
    assert [pt.hit_rate for pt in a.curve] == [0.0, 0.0]
    # one block keeps the last request's first block: the same family again hits exactly it
    identity, p, o = families("AAAA")
    assert lru_hit_tokens(analyse_reuse(identity, p, o, B), 0) == 0
    assert lru_hit_tokens(analyse_reuse(identity, p, o, B), 1) == 3 * B


def test_alternating_families_need_room_for_both():
    identity, p, o = families("ABABAB")
    a = analyse_reuse(identity, p, o, B, cache_blocks=[32, 64])
    # one family's 32 blocks fit, but each request evicts the other family before it returns
    assert a.curve[0].hit_rate == 0.0
    # both fit: every request after the first two hits its 31 capped blocks
    assert a.curve[1].hit_rate == pytest.approx(4 * 31 * B / (6 * 512))
    assert a.curve[1].hit_rate == pytest.approx(a.ideal_hit_rate)
    # with 32 + k blocks the other family's tail goes first and its first k blocks survive
    for k in (0, 1, 5, 17, 31, 32):
        assert lru_hit_tokens(a, 32 + k) == 4 * min(k, 31) * B


def test_release_order_evicts_a_chains_tail_first():
    identity, p, o = families("AAAA")
    a = analyse_reuse(identity, p, o, B, cache_blocks=[30])
    # 32 blocks published, 30 kept: blocks 30 and 31 (released first, so least recent) go, 0 … 29 stay and the
    # next request hits all 30 (released prefix first, every one would have missed at block 0)
    assert round(a.curve[0].hit_rate * a.prompt_tokens) == 3 * 30 * B


def test_curve_spans_the_working_set_and_ends_at_the_ideal():
    rng = np.random.default_rng(3)
    n = 400
    ids = [list(rng.integers(0, 6, 1)) + list(rng.integers(6, 40, rng.integers(0, 4))) for _ in range(n)]
    prompt = np.array([512 * len(x) - int(rng.integers(0, 300)) for x in ids])
    output = rng.integers(0, 300, n)
    a = analyse_reuse(from_hash_ids(ids, prompt), prompt, output, B)
    sizes = [pt.cache_blocks for pt in a.curve]
    assert sizes == sorted(set(sizes)) and sizes[-1] == a.working_set_blocks
    assert sizes[0] == max(1, round(a.working_set_blocks / 512))
    assert 14 <= len(sizes) <= 17
    assert a.curve[-1].hit_rate == a.ideal_hit_rate
    assert all(pt.cache_tokens == pt.cache_blocks * B for pt in a.curve)
    # hit_rate_at runs the same pass: equal at every grid size, whole blocks of a token count
    for pt in a.curve[::4]:
        assert a.hit_rate_at(pt.cache_tokens) == pt.hit_rate
        assert a.hit_rate_at(pt.cache_tokens + B - 1) == pt.hit_rate


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 60), block_size=st.sampled_from([16, 32, 64]),
       sessions=st.booleans())
def test_lru_matches_the_reference_and_grows_with_the_cache(seed, n, block_size, sessions):
    rng = np.random.default_rng(seed)
    if sessions:
        group = rng.integers(-1, 4, n)
        prompt = np.zeros(n, np.int64)
        output = rng.integers(0, 200, n)
        context = {}
        for r in range(n):
            g = int(group[r])
            # mostly extend the session's context, sometimes fall short of it
            base = context.get(g, 0) if g >= 0 and rng.random() < 0.8 else 0
            prompt[r] = base + int(rng.integers(1, 300))
            context[g] = prompt[r] + output[r]
        identity = from_sessions(group, prompt, output)
    else:
        group = None
        ids = [list(rng.integers(0, 3, 1)) + list(rng.integers(3, 8, rng.integers(0, 3))) for _ in range(n)]
        prompt = np.array([512 * len(x) - int(rng.integers(0, 512)) for x in ids])
        output = rng.integers(0, 100, n)
        identity = from_hash_ids(ids, prompt)
    a = analyse_reuse(identity, prompt, output, block_size, group=group)
    hits, working_set = reference(identity, list(prompt), list(output), block_size)
    assert list(a.request_ideal_hit_tokens) == list(hits)
    assert a.working_set_blocks == working_set
    rates = [pt.hit_rate for pt in a.curve]
    assert all(x <= y for x, y in pairwise(rates))
    assert all(x <= a.ideal_hit_rate for x in rates)
    assert rates[-1] == a.ideal_hit_rate
    for c in {0, 1, working_set // 3, working_set // 2, max(working_set - 1, 0)}:
        expected, _ = reference(identity, list(prompt), list(output), block_size, c)
        assert lru_hit_tokens(a, c) == expected.sum()


def test_to_dict_is_plain_json():
    identity, p, o = families("ABAB")
    a = analyse_reuse(identity, p, o, B)
    d = a.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert set(d) == {"source", "describe", "block_size", "requests", "prompt_tokens", "ideal_hit_tokens",
                      "ideal_hit_rate", "working_set_blocks", "working_set_tokens", "curve", "groups"}
    assert d["curve"][-1] == {"cache_tokens": a.working_set_tokens, "cache_blocks": a.working_set_blocks,
                              "hit_rate": a.ideal_hit_rate}
    assert d["source"] == "hash_ids" and d["describe"] == identity.describe()
    assert "_trace" not in repr(a)


def test_progress_reports_every_size():
    identity, p, o = families("ABAB")
    calls = []
    analyse_reuse(identity, p, o, B, cache_blocks=[8, 16, 64], progress=lambda f, m: calls.append((f, m)))
    assert calls[0][0] == 0.0 and len(calls) == 4
    assert [f for f, _ in calls[1:]] == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_without_identity():
    prompt = np.array([100, 200])
    a = no_identity(prompt)
    assert a.source == "none" and a.prompt_tokens == 300 and a.ideal_hit_tokens == 0 and a.curve == ()
    assert a.hit_rate_at(10_000) == 0.0
    assert json.loads(json.dumps(a.to_dict())) == a.to_dict()
    with pytest.raises(PlannerError):
        analyse_reuse(None, prompt, prompt, B)


def test_rejects_bad_input():
    identity, p, o = families("AB")
    with pytest.raises(PlannerError):
        analyse_reuse(identity, p[:1], o[:1], B)
    with pytest.raises(PlannerError):
        analyse_reuse(identity, p, o, 0)
    with pytest.raises(PlannerError):
        analyse_reuse(identity, p, o, B, cache_blocks=[-1])
    with pytest.raises(PlannerError):
        analyse_reuse(identity, p, o, B).hit_rate_at(-16)
