"""Whole jobs: many ranks analysed independently, reduced to tables, then joined across collectives."""
