"""Analysis passes: each a function of the trace model, the graph and earlier passes, with a frozen typed
result (window and device usage, critical path, gaps, syncs, replay and what-if, pipeline, verdict, tops)."""
