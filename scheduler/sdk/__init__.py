"""The SDK: `Client` and `AsyncClient`, and the operations they drive (jobs, schedules,
queues, results, browsing)."""
