"""The `sched` command line: a thin layer over the `scheduler` SDK."""
