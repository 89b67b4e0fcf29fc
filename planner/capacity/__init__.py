"""Memory and capacity: vLLM's KV budget, startup-log fits, reservation policies, trace concurrency, padding and
preemption cost."""
