"""A shared link's settings that the page could not take, said at the top of the page.

Streamlit drops a URL-bound widget's value that the widget cannot hold (an option it does not offer, a number past
its range, text where a number goes) and shows the widget's default instead, without a word. Someone who opens a
link to compare views would then compare different scenarios. So the frame keeps the parameters a session arrived
with and, once the page the link opens is drawn, checks that each widget drawn holds the link's value. Only that
first run is checked: a parameter no widget of that page takes is one the app never writes into a link of it, and
navigating on drops it from the URL anyway.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import streamlit as st

ARRIVED = "link_arrived_with"   # session key: the parameters of the link a session opened, until checked
# a trace the link names but this workspace does not hold is not repeated: the page prints no trace name or id
# that is not the viewer's own (tests/e2e/test_signin.py)
UNSAID = frozenset({"trace"})
ECHO_CHARS = 40


def remember_link():
    """Keep the URL's parameters on a session's first run; returns the slot at the top of the page where
    :func:`show_unapplied` writes."""
    if ARRIVED not in st.session_state:
        st.session_state[ARRIVED] = st.query_params.to_dict()
    return st.container()


def same(link_value: str, value) -> bool:
    """Whether a widget holding ``value`` took the URL text ``link_value`` (as Streamlit writes it back: a
    selectbox with a ``format_func`` writes its label, which this app's labels begin with ``"{option}: "``)."""
    if value is None:
        return link_value == ""
    if isinstance(value, bool):
        return link_value.lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return float(link_value) == float(value)
        except ValueError:
            return False
    return link_value == str(value) or link_value.startswith(f"{value}: ")


def echoed(text: str) -> str:
    """A link's text as the notice repeats it: letters, digits and ``. , : / + -`` only, at most
    :data:`ECHO_CHARS` of them, so a crafted link cannot make the page's Markdown draw a link or fetch an image."""
    kept = re.sub(r"[^\w.,:/+\- ]", "", text)
    return kept if len(kept) <= ECHO_CHARS else kept[:ECHO_CHARS] + "…"


def shown(value) -> str:
    """A widget's value as the notice names it."""
    if value is None:
        return "empty (auto)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def unapplied(link: dict[str, str], state: Mapping) -> list[tuple[str, str, object]]:
    """``(key, link value, value held)`` for each link parameter whose widget ``state`` holds another value
    (parameters ``state`` does not hold, whose widgets were not drawn, are not judged)."""
    return [(key, value, state[key]) for key, value in link.items() if key in state and not same(value, state[key])]


def show_unapplied(slot) -> None:
    """Say, in ``slot``, which of the link's settings the widgets of the page it opened did not take (once: the
    first run's end consumes the link)."""
    link = st.session_state.get(ARRIVED)
    if not link:
        return
    st.session_state[ARRIVED] = {}
    missed = unapplied(link, st.session_state)
    if missed:
        listed = ", ".join(f"`{echoed(key)}`" + ("" if key in UNSAID else f" = `{echoed(value)}`")
                           + f" (showing `{echoed(shown(held))}`)" for key, value, held in missed)
        slot.warning(f"Not applied from this link: {listed}. A control takes only the choices it offers, within "
                     "its range, and shows its own value otherwise: compare views only once these are set.",
                     icon=":material/link_off:")


def given_int(key: str) -> int | None:
    """A whole-number widget's value before it is drawn this run: its state, else (a link's first run, before any
    widget took it) the URL's; None where neither holds a whole number."""
    value = st.session_state.get(key, st.query_params.get(key))
    try:
        return None if value is None else int(value)
    except ValueError:
        return None
