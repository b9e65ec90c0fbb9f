"""kraftpy inside a test suite: the fault harness's process faults and TCP proxy."""
