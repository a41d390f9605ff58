"""Seeing into a namespace: `sched status`'s records and reads, capacity advice, Prometheus
metrics and their exporter, OpenTelemetry spans."""
