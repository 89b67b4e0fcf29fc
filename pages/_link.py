"""A shared link's settings that the page could not take, said at the top of the page.

Streamlit drops a URL-bound widget's value that the widget cannot hold (an option it does not offer, a number past
its range, text where a number goes) and shows the widget's default instead, without a word. Someone who opens a
link to compare views would then compare different scenarios. So the frame keeps the parameters a session arrived
with and, the first time each one's widget is drawn, checks that the widget holds the link's value.
"""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

ARRIVED = "link_arrived_with"   # session key: the link's parameters whose widgets have not been drawn yet


def remember_link():
    """Keep the URL's parameters on a session's first run; returns the slot at the top of the page where
    :func:`show_unapplied` writes."""
    if ARRIVED not in st.session_state:
        st.session_state[ARRIVED] = st.query_params.to_dict()
    return st.container()


def same(link_value: str, value) -> bool:
    """Whether a widget holding ``value`` took the URL text ``link_value`` (as Streamlit writes it back)."""
    if value is None:
        return link_value == ""
    if isinstance(value, bool):
        return link_value.lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return float(link_value) == float(value)
        except ValueError:
            return False
    return link_value == str(value)


def shown(value) -> str:
    """A widget's value as the notice names it."""
    if value is None:
        return "empty (auto)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def unapplied(pending: dict[str, str], state: Mapping) -> list[tuple[str, str, object]]:
    """``(key, link value, value held)`` for each pending link parameter whose widget ``state`` now holds and
    holds another value. Every parameter found in ``state`` is checked once: it leaves ``pending``."""
    found = [key for key in pending if key in state]
    out = [(key, pending[key], state[key]) for key in found if not same(pending[key], state[key])]
    for key in found:
        del pending[key]
    return out


def show_unapplied(slot) -> None:
    """Say, in ``slot``, which of the link's settings the widgets drawn in this run did not take."""
    pending = st.session_state.get(ARRIVED)
    if not pending:
        return
    missed = unapplied(pending, st.session_state)
    if missed:
        listed = ", ".join(f"`{key}={value}` (showing {shown(held)})" for key, value, held in missed)
        slot.warning(f"Not applied from this link: {listed}. A control takes only the choices it offers, within "
                     "its range, and shows its own value otherwise: compare views only once these are set.",
                     icon=":material/link_off:")
