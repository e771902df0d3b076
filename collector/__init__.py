"""Collector: runs a workload under torch.profiler and writes a trace bundle."""
