"""Synthetic Kineto traces for the tests and ``sample_traces/``: a discrete-event simulation of host work,
launches, copies and syncs that writes the events torch.profiler would, and knows the exact answers.

- ``simulation``: the timing rules, the simulation state and its ground-truth records
- ``trace``: the script builder of one single-rank trace, and the Kineto document it writes
- ``library``: ready-made traces (the stalls the analyzer must find, their clean twins) and their answers
- ``job``: multi-rank jobs joined by collectives, with planted stragglers

Not shipped: it lives beside the tests, which import it as ``synth`` (``tests/`` is on pytest's path;
``sample_traces/make_samples.py`` adds it itself). Pure stdlib.
"""
