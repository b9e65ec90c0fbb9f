"""Jepsen-style fault-injection harness: real processes, nemeses, a queue workload, a checker, reports."""
