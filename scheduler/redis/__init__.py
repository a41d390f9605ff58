"""Talking to Redis: URLs and clients (standalone, Sentinel, Cluster), error translation,
Cluster routing, the commands packed by hiredis, the Redis clock, and the loop every
background service runs in."""
