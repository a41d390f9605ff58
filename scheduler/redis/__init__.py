"""Talking to Redis: URLs (urls), clients (clients), failures and their translation (failures),
Cluster routing (cluster), the one module that sends every round trip (transport) and the
redis-py internals it needs (redispy_internals), the commands packed by hiredis (packing),
the Redis clock (clock), and the loop every background service runs in (service)."""
