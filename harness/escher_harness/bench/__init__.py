"""Benchmarks: `escher-extender bench extender` (verb latency and scheduling throughput).

Each benchmark prints what it is doing, measures in one run everything it compares, and
writes DIR/results.json, a table and PNG plots. Called by extender.cli.
"""
