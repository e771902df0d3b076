"""Findings: rules over the ``Evidence`` of the passes (``registry.RULES``), each giving problems with a
cost, a saving and advice (``advice``: every advice text)."""
