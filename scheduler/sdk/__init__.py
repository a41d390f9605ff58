"""The SDK: `Client` and `AsyncClient` (client.py), and the operations they drive, one
module a topic: jobs, schedules, queues, results, history, status, browse, and state (the
namespace a client works in). requests.py says what an operation is; batching.py
validates and packs a submit's batch."""
