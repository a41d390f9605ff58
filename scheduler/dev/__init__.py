"""For a laptop: a private `redis-server` for `sched dev`, and example tasks."""
