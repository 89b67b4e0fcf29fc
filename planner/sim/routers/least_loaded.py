"""Least-loaded: the replica with the fewest requests waiting for a batch slot, then the fewest outstanding tokens.

llm-d's default scheduler weighs its queue scorer (waiting requests, min-max normalised over the replicas) and its
KV-utilization scorer equally (reference/prefix-cache-and-routing.md §3): any difference in waiting requests swings
the first by its whole weight, while KV usage differs by fractions of a pool, so the queue decides and the KV held
breaks its ties. Outstanding tokens alone sent every request to a replica with max_num_seqs requests running and 26
waiting while another, holding one long request, had free slots (a 20-s queue).
"""

from planner.sim.routers.base import LEAST_LOADED, Router

ROUTER = Router("least-loaded", LEAST_LOADED, "Each request goes to the replica with the fewest requests waiting "
                "for a batch slot and, among those, the fewest outstanding tokens (the context of every request it "
                "holds and has not finished: waiting prompts, queued prefill, the KV of running requests), as llm-d's "
                "queue and KV-utilization scorers rank them, read fresh at every arrival (no metrics staleness) and "
                "blind to the outputs still to come. Ties go to the next replica in rotation.")
