"""The analyzer's base: the trace model and its vocabulary, array and interval helpers, call sites and the
error hierarchy. Imports nothing else of the analyzer."""
