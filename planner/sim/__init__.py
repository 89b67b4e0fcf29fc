"""Scheduler simulation: workloads, engines, the step loop and its results."""
