"""The recommendation search's controls (Recommend and Report pages share them, and the URL)."""

from __future__ import annotations

import streamlit as st

from pages._scenario import SHARED
from planner.errors import PlannerError


def search_controls():
    """SLO classes, headroom and the compared options of a recommendation (Recommend and Report pages share them,
    and the URL). A malformed SLO class or TP list is shown as an error and stops the page, before any search."""
    from pages._prefix import shared_prefix
    from planner.recommend.fleet import GROWTH, RESAMPLES
    from planner.recommend.plan import RecommendOptions, slo_classes, with_throughput_class
    from planner.recommend.slo import MAX_QUEUE_S
    from planner.sim.routers import ROUTERS

    c = st.columns([3, 1])
    slo_text = c[0].text_input("SLO classes", "ttft:ttft_p99<200; tpot:tpot_p99<50", key="slos", **SHARED,
                               help="Separated by ';': NAME:METRIC<VALUE (METRIC ttft_pNN, tpot_pNN or e2e_pNN, in "
                                    "ms), or an attainment share such as chat:ttft<200,tpot<50@90% (90% of "
                                    "requests meet both); a throughput class (no latency bound) is added unless "
                                    "one is given")
    headroom = c[1].number_input("Headroom ×", 1.0, 5.0, 1.0, 0.1, key="headroom", **SHARED,
                                 help="size the fleet for the trace at its own rate times this")
    c = st.columns(4)
    routers = ["auto", *ROUTERS]
    router = c[0].selectbox("Fleet router", routers, key="fleet_router", **SHARED,
                            help="the router the fleet sizing assumes; auto: least-loaded (round-robin for engines "
                                 "whose loop runs one replica). " + " ".join(f"{r.name}: {r.help}"
                                                                           for r in ROUTERS.values()))
    max_queue = c[1].number_input("Max p99 queueing (s)", 0.1, 600.0, MAX_QUEUE_S, 0.5, key="max_queue_s",
                                  **SHARED, help="every class's bound on p99 queueing delay, throughput included "
                                                 "(Vidur's capacity search bounds it at 5 s)")
    resamples = c[2].number_input("Bootstrap resamples", 0, 200, RESAMPLES, 5, key="resamples", **SHARED,
                                  help="whole-minute block-bootstrap resamples of the trace behind the replica "
                                       "count's 90% confidence (0: none)")
    growth = c[3].number_input("Growth what-if ×", 1.0, 10.0, GROWTH, 0.25, key="growth", **SHARED,
                               help="replicas for the traffic grown by this")
    c = st.columns(2)
    tp_text = c[0].text_input("Compare TP degrees", "", key="tp_search", placeholder="e.g. 1,2,4", **SHARED,
                              help="by requests/s per GPU; empty: the scenario's TP")
    caps_text = c[1].text_input("Compare max_new_tokens caps", "", key="caps", placeholder="e.g. none,p95", **SHARED,
                                help="none, integers, or pNN percentiles of the trace's output lengths")
    try:
        slos = with_throughput_class(tuple(t.strip() for t in slo_text.split(";") if t.strip()))
        slo_classes(slos)
        tp_options = tuple(int(t) for t in tp_text.replace(" ", "").split(",") if t)
        return RecommendOptions(slos=slos, headroom=float(headroom), tp_options=tp_options,
                                max_new_tokens_options=tuple(t.strip() for t in caps_text.split(",") if t.strip()),
                                router=None if router == "auto" else router, max_queue_s=float(max_queue),
                                resamples=int(resamples), growth=float(growth), shared_prefix=shared_prefix())
    except PlannerError as exc:
        st.error(str(exc))
        st.stop()
    except ValueError:
        st.error(f"Compare TP degrees {tp_text!r}: expected integers such as 1,2,4")
        st.stop()
