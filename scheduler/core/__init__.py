"""The contracts every layer shares, with no I/O: errors, slot states, key names, event types,
records (msgspec Structs), cron and timing rules, job specs, queue limits, namespace settings."""
