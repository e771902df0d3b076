"""Trace files -> ``TraceModel``: typed and streamed decoding, the decode workers, the columnar build and
its links, other accelerators, counters, the collector's sidecar, and the Parquet cache of built models."""
