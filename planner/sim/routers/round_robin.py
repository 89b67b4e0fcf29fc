"""Round-robin: request i goes to replica i mod N (inference-sim's CLI default, ``--routing-policy round-robin``)."""

from planner.sim.routers.base import ROUND_ROBIN, Router

ROUTER = Router("round-robin", ROUND_ROBIN, "The i-th request (of those that fit max_model_len) goes to replica i mod "
                "N, whatever their load (inference-sim's default). Blind to surges and long prompts: one replica "
                "can queue while another idles.",
                uses_state=False)
