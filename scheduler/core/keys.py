"""The only module that formats Redis key names.

Layout. Every key of one shard shares the hash tag `{sNN}`, so each Lua script,
which only ever touches one shard, maps to a single Redis Cluster slot:

    <ns>:meta                     hash    shard count, creation time, layout version, the
                                          retention of finished work and `strict_tasks`
                                          (namespace.py)
    <ns>:queues                   set     queue names, as versions before `lanes` listed them:
                                          the queue cleaner moves them into `lanes` and drops it
    <ns>:workers                  zset    worker id -> last heartbeat (ms)
    <ns>:schedulers               zset    scheduler node id -> last heartbeat (ms)
    <ns>:worker:<id>              hash    one worker's details (host, pid, concurrency, in-flight,
                                          rates, the tasks it serves: `tasks`, JSON task ->
                                          digest of its defaults, core/catalog.py)
    <ns>:verify:<run>:log         list    a `sched verify` run's canary records (core/canary.py)
    <ns>:verify:runs              list    the last RUNS_KEPT verify runs' summaries, newest
                                          first (JSON, core/canary.py): the one key a run
                                          leaves, what the console's Verify page lists
    <ns>:limits                   hash    queue -> its limit (JSON, limits.py): what is listed and
                                          what workers read to pick their readers; the
                                          scripts read the copies below
    <ns>:tasks                    hash    task name -> its catalog entry (JSON, core/catalog.py):
                                          its defaults, as the last worker to start with it
                                          registered them (worker/catalog.py)
    <ns>:declared                 hash    schedule name -> the app that declares it in code and
                                          its job id (JSON, sdk/declared.py): what a start of
                                          that app deletes when it no longer declares the name
    <ns>:outbox                   hash    the outbox relays' last report (scheduler/outbox/):
                                          rows waiting, the oldest one's age, when (ms)
    <ns>:{lim:<queue>}:permits    zset    a limited queue's permits: one per run in flight
                                          anywhere, scored by expiry (ms); lua/acquire.lua
    <ns>:{lim:<queue>}:bucket     hash    a rate-limited queue's token bucket (same hash tag)
    <ns>:{lim:<queue>}:limit      hash    the queue's queue-wide limit as acquire.lua reads it:
                                          concurrency, rate (absent: none); limits.py
    <ns>:{sNN}:job:<job_id>       hash    job definition
    <ns>:{sNN}:slot:<slot_id>     hash    slot state, lease, fencing token, attempts (`a:<n>`)
    <ns>:{sNN}:due                zset    slot ids scored by available-at (ms)
    <ns>:{sNN}:cron               zset    recurring job ids scored by next fire time
    <ns>:{sNN}:jobs               zset    ids of jobs with a schedule (not immediate) by creation (ms)
    <ns>:{sNN}:runs:<job_id>      zset    a recurring job's slot ids scored by fire time (ms)
    <ns>:{sNN}:fires:<job_id>     zset    its fire ledger: occurrences that did not run, and
                                          why, scored by fire time (ledger.py)
    <ns>:{sNN}:ontime:<job_id>    hash    its occurrences decided in the recent past, counted
                                          by kind in time buckets (objective.py)
    <ns>:{sNN}:behind             zset    recurring job ids behind their objective, scored by
                                          when the node saw it fall behind (objectives.py)
    <ns>:{sNN}:stats              hash    shard counters (missed occurrences, owner epoch,
                                          orphans recovered, `retired_ms`: the latest finish
                                          time of the work retention removed)
    <ns>:{sNN}:config             hash    the namespace's settings its scripts enforce, copied
                                          into each shard (max_payload_bytes)
    <ns>:{sNN}:q:<queue>          stream  dispatch of priority 3 (the default); group `workers`
    <ns>:{sNN}:q:<queue>:p<N>     stream  dispatch of priority N (1, 2, 4, 5): a queue's "lanes"
    <ns>:{sNN}:lanes              zset    the shard's lanes that may hold entries, scored by the
                                          last write (ms): every script that adds an entry names
                                          its lane here (_lib.lua index_lane); status and the
                                          reclaimer read only these; queue_cleaner.py drops idle
                                          empty ones
    <ns>:{sNN}:events             stream  lifecycle events (capped); consumer group `history`
    <ns>:{sNN}:dlq                zset    dead slot ids scored by time of death (ms)
    <ns>:{sNN}:leases             zset    running at_most_once slot ids scored by lease_until (ms):
                                          they have no pending stream entry for the reclaimer
    <ns>:{sNN}:owner              string  scheduler-node lease on the shard
    <ns>:{sNN}:retain             zset    terminal slot ids already in the history store, scored
                                          by when their hash may leave Redis (ms)
    <ns>:{sNN}:finished           zset    terminal slot ids by finished_ms, written by every
                                          transition that ends a slot but a success: with
                                          `done`, what the node's expirer bounds
                                          (lua/expire.lua, node/expirer.py)
    <ns>:{sNN}:done               list    "<finished_ms>:<slot id>" of each success, in commit
                                          order (complete.lua appends, expire.lua pops)
    <ns>:{sNN}:dedupe:<key_id>    string  a windowed dedupe key's job id (dedupe_ttl, debounce),
                                          expiring with the window; key_id is the key's
                                          dedupe_job_id, and the job it names is in the
                                          same shard (jobspec.window_job_id)
    <ns>:{sNN}:kq:<queue>:<ckey>  zset    a concurrency key's queued slots (jobs submitted with
                                          concurrency_key): slot ids scored by priority, then
                                          dispatch time (keys.key_score). A keyed slot has no
                                          dispatch-stream entry: lua/take.lua claims it
    <ns>:{sNN}:kring:<queue>      list    the queue's concurrency keys with queued slots in
                                          this shard, in turn order (a key at most once)
    <ns>:{sNN}:kruns:<queue>      zset    the queue's running keyed attempts (their keys'
                                          permits: one per run, "<ckey> <slot id>#<attempt>",
                                          given back when the attempt ends: _lib.lua end_lease;
                                          complete.lua fences a commit by removing it), every
                                          score 0, so a key's runs are one range by member
                                          (ZLEXCOUNT "[<ckey> " "(<ckey>!")
    <ns>:{sNN}:krun:<queue>:<ckey> zset   the older form of a key's permits, one set per key,
                                          "<slot id>#<attempt>" or the slot id alone: written
                                          by older versions' takes, still counted and given
                                          back, never written
    <ns>:{sNN}:kbucket:<queue>:<ckey> hash the token bucket of a key's rate (per_key_rate), as
                                          acquire.lua's of a queue: tokens, at_ms
    <ns>:{sNN}:kwake:<queue>      stream  the last key to enter the queue's ring (one entry, MAXLEN
                                          1: _lib.lua's key_enqueue): workers with nothing
                                          keyed to take block on it (XREAD), so a free key's
                                          first job starts at once rather than at a poll
    <ns>:{sNN}:kweight:<queue>    hash    concurrency key -> its weight in the turns (turns per
                                          round; 1 when absent); written to the key's own shard
    <ns>:{sNN}:limited            set     queues with a queue-wide limit, copied into each
                                          shard: claim.lua and take.lua refuse a claim of
                                          theirs that comes without a permit (limits.py)
    <ns>:{sNN}:klimit:<queue>     hash    the queue's per-key limit as take.lua reads it:
                                          concurrency, rate (absent: none); in every shard
    <ns>:{sNN}:kqueues            zset    queues with keyed slots in this shard, scored by the
                                          last keyed dispatch (ms): status reads only these;
                                          clean_lanes.lua drops idle ones with an empty ring
                                          All of a concurrency key's jobs live in one shard, its
                                          home (key_shard): the job ids the client draws for
                                          them land there (jobspec.keyed_job_id), so the key's
                                          count and turns are one script's, also on a Cluster
    <ns>:{sNN}:submitted:<job_id> string  "this submit call ran" marker, named by the call's
                                          first job, expiring after 10 min (lua/submit.lua)

The Lua scripts receive a shard's prefix (`<ns>:{sNN}:`) as KEYS[1] and append the suffixes
below; `SUFFIX_*` are the single source of those suffixes (tests/lua/test_keys_and_states.py
checks that the keys the scripts create are the keys this module names).
"""

from __future__ import annotations

import re
import zlib

from scheduler.core.errors import ValidationError

# A new namespace's shard count when its creator gives none (namespace.py), by where it is
# created. Shards are the unit of spread over a Redis Cluster's masters. On one Redis
# (standalone, or a Sentinel-managed primary) they spread nothing, and every round trip of a
# worker pays a claim and a commit script call per shard its batch touches, so fewer shards
# run the burn-down faster and start a burst sooner (bench burndown, bench burst); two still
# let two scheduler nodes share the promotion work, and a namespace meant to move to a
# Cluster later is made with the count it will need there.
DEFAULT_SHARDS = 2
DEFAULT_CLUSTER_SHARDS = 8
DISPATCH_GROUP = "workers"
HISTORY_GROUP = "history"

SUFFIX_JOB = "job:"
SUFFIX_SLOT = "slot:"
SUFFIX_QUEUE = "q:"
SUFFIX_RUNS = "runs:"
SUFFIX_FIRES = "fires:"
SUFFIX_ONTIME = "ontime:"
SUFFIX_SUBMITTED = "submitted:"
SUFFIX_DEDUPE = "dedupe:"
SUFFIX_KEY_QUEUE = "kq:"
SUFFIX_KEY_RING = "kring:"
SUFFIX_KEY_RUNS = "kruns:"
SUFFIX_KEY_RUNNING = "krun:"  # the older form of kruns:, read and removed, never written
SUFFIX_KEY_WEIGHT = "kweight:"
SUFFIX_KEY_BUCKET = "kbucket:"
SUFFIX_KEY_LIMIT = "klimit:"
SUFFIX_KEY_WAKE = "kwake:"

# Priorities: 1 runs first, 5 last (Temporal's convention). Each priority of a queue has its
# own dispatch stream (a "lane") so a worker can read the better ones first; the default keeps
# the plain stream name, so a namespace that never uses priorities has the keys it always had.
PRIORITIES = (1, 2, 3, 4, 5)
DEFAULT_PRIORITY = 3
# Every suffix a shard's keys have after its prefix (tests/lua/test_lua_contracts.py checks that
# the Lua scripts append no other and that each Keys method builds one of these).
SHARD_SUFFIXES = frozenset({SUFFIX_JOB, SUFFIX_SLOT, SUFFIX_QUEUE, SUFFIX_RUNS, SUFFIX_FIRES,
                            SUFFIX_ONTIME,
                            SUFFIX_SUBMITTED, SUFFIX_DEDUPE, SUFFIX_KEY_QUEUE,
                            SUFFIX_KEY_RING, SUFFIX_KEY_RUNS, SUFFIX_KEY_RUNNING,
                            SUFFIX_KEY_WEIGHT, SUFFIX_KEY_BUCKET, SUFFIX_KEY_LIMIT, "limited", SUFFIX_KEY_WAKE, "kqueues", "due", "cron",
                            "jobs", "stats", "config", "events", "dlq", "leases", "owner",
                            "retain", "finished", "done", "lanes", "behind"})

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
# A concurrency key: a tenant, customer, account, domain... It ends a key name and reaches
# terminals: printable ASCII without spaces or braces (a brace could look like a hash tag).
_CONCURRENCY_KEY = re.compile(r"[A-Za-z0-9_.@+=/:\-]{1,128}")
_ID = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
# C0, DEL and C1: refused in every name a caller gives (task and queue names reach terminals
# and log lines; ESC starts a terminal escape sequence). submit.lua refuses the same bytes.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {0x00: "NUL", 0x09: "tab", 0x0A: "newline", 0x0D: "carriage return",
                  0x1B: "ESC", 0x7F: "DEL"}


def control_character(value: str) -> str | None:
    """The first control character of `value`, named for a message ("U+001B (ESC)"); None
    when it has none."""
    m = _CONTROL.search(value)
    if m is None:
        return None
    code = ord(m.group())
    name = _CONTROL_NAMES.get(code)
    return f"U+{code:04X}" + (f" ({name})" if name else "")


def check_name(field: str, value: str) -> str:
    """Namespaces and queue names end up inside key names: no braces, colons or spaces."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        control = isinstance(value, str) and control_character(value)
        raise ValidationError(
            field, f"{value!r} is not allowed" + (f": it holds the control character "
                                                  f"{control}" if control else "")
            + "; use 1-64 characters from A-Z a-z 0-9 _ . -")
    return value


def check_job_id(value: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ValidationError("job_id", f"{value!r} is not a job id")
    return value


def shard_of(job_id: str, shards: int) -> int:
    """Stable across processes and Python versions (unlike hash())."""
    return zlib.crc32(job_id.encode()) % shards


def shards_of(job_ids: list[str], shards: int) -> list[int]:
    """shard_of of each id (submit_many: no function call per job)."""
    crc32 = zlib.crc32
    return [crc32(job_id.encode()) % shards for job_id in job_ids]


def slot_id(job_id: str, fire_ms: int) -> str:
    return f"{job_id}:{fire_ms}"


MAX_FIRE_DIGITS = 19  # an int64 of ms


def split_slot_id(slot: str) -> tuple[str, int]:
    job_id, sep, fire = slot.rpartition(":")
    # ASCII digits, as many as a time in ms can have: int() refuses other digits ("²") and
    # more than 4300 of them, which no caller should have to catch.
    if (not sep or not (fire.isascii() and fire.isdigit()) or len(fire) > MAX_FIRE_DIGITS
            or not _ID.fullmatch(job_id)):
        raise ValidationError("slot_id", f"{slot!r} is not a slot id (expected JOB_ID:FIRE_MS)")
    return job_id, int(fire)


def lane(queue: str, priority: int) -> str:
    """The dispatch stream name (after `q:`) of a queue's priority; _lib.lua's lane() is the
    same rule. Queue names hold no ':', so a lane names one (queue, priority)."""
    return queue if priority == DEFAULT_PRIORITY else f"{queue}:p{priority}"


def queue_of(lane_name: str) -> str:
    """The queue a lane belongs to."""
    return lane_name.partition(":")[0]


def lanes(queue: str) -> list[str]:
    """A queue's lanes, best priority first."""
    return [lane(queue, p) for p in PRIORITIES]


def cron_in(prefix: str) -> str:
    """A shard's `cron` zset, from its prefix (services that hold prefixes, not shards)."""
    return f"{prefix}cron"


def check_concurrency_key(value: str) -> str:
    if not isinstance(value, str) or not _CONCURRENCY_KEY.fullmatch(value):
        control = isinstance(value, str) and control_character(value)
        raise ValidationError(
            "concurrency_key", f"{value!r} is not allowed" + (
                f": it holds the control character {control}" if control else "")
            + "; use 1-128 characters from A-Z a-z 0-9 _ . @ + = / : -")
    return value


def key_shard(concurrency_key: str, shards: int) -> int:
    """The home shard of a concurrency key: every job with that key lives there, whatever
    its queue (jobspec.keyed_job_id draws their ids so), so the key's running count, its
    queued slots and its turn are in one script's reach, on one Redis Cluster slot."""
    return zlib.crc32(concurrency_key.encode()) % shards


def key_score(priority: int, dispatched_ms: int) -> int:
    """A keyed slot's score in its key's queue (`kq:`): better priority first, then the
    oldest dispatch. _lib.lua's keyed_dispatch is the same rule."""
    return priority * 10**13 + dispatched_ms


def job_in(prefix: str, job_id: str) -> str:
    """A job's hash, from its shard's prefix."""
    return f"{prefix}{SUFFIX_JOB}{job_id}"


class Keys:
    """Key names of one namespace."""

    __slots__ = ("ns", "meta", "queues", "workers", "schedulers", "limits", "outbox",
                 "tasks", "declared", "_slot_head", "_slot_mid")

    def __init__(self, namespace: str) -> None:
        self.ns = check_name("namespace", namespace)
        self.meta = f"{namespace}:meta"  # hash
        self._slot_head = f"{namespace}:{{s".encode()
        self._slot_mid = f"}}:{SUFFIX_SLOT}".encode()
        self.queues = f"{namespace}:queues"  # set
        self.workers = f"{namespace}:workers"  # zset
        self.schedulers = f"{namespace}:schedulers"  # zset
        self.limits = f"{namespace}:limits"  # hash
        self.outbox = f"{namespace}:outbox"  # hash
        self.tasks = f"{namespace}:tasks"  # hash
        self.declared = f"{namespace}:declared"  # hash

    def worker(self, worker_id: str) -> str:
        return f"{self.ns}:worker:{worker_id}"  # hash

    def permits(self, queue: str) -> str:
        return f"{self.ns}:{{lim:{queue}}}:permits"  # zset

    def bucket(self, queue: str) -> str:
        return f"{self.ns}:{{lim:{queue}}}:bucket"  # hash

    def limit(self, queue: str) -> str:
        return f"{self.ns}:{{lim:{queue}}}:limit"  # hash: concurrency, rate

    def prefix(self, shard: int) -> str:
        return f"{self.ns}:{{s{shard:02d}}}:"

    def job(self, shard: int, job_id: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_JOB}{job_id}"  # hash

    def slot(self, shard: int, slot: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_SLOT}{slot}"  # hash

    def verify_log(self, run: str) -> str:
        """A verify run's canary log (list of JSON records, scheduler/core/canary.py)."""
        return f"{self.ns}:verify:{run}:log"  # list

    def verify_runs(self) -> str:
        """The last verify runs' summaries, newest first (list of JSON, core/canary.py)."""
        return f"{self.ns}:verify:runs"  # list, capped at canary.RUNS_KEPT

    def pattern(self) -> str:
        """SCAN MATCH pattern of every key of the namespace (a name has no glob character,
        and the colon keeps out a namespace whose name merely starts with this one)."""
        return f"{self.ns}:*"

    def slot_pattern(self) -> str:
        """SCAN MATCH pattern of every slot hash of every shard."""
        return f"{self.ns}:{{s*}}:{SUFFIX_SLOT}*"

    def parse_slot_key(self, key: bytes) -> tuple[int, bytes] | None:
        """(shard, slot id) of a key `slot()` made, as SCAN returns it, or None for any other
        key. Works on bytes: the sweeper calls it for every slot hash of the namespace."""
        head = self._slot_head
        if not key.startswith(head):
            return None
        shard, sep, rest = key[len(head):].partition(self._slot_mid)
        if not sep or not shard.isdigit():
            return None
        return int(shard), rest

    def dedupe(self, shard: int, key_id: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_DEDUPE}{key_id}"  # string: the window's job id

    def due(self, shard: int) -> str:
        return f"{self.prefix(shard)}due"  # zset

    def key_queue(self, shard: int, queue: str, concurrency_key: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_KEY_QUEUE}{queue}:{concurrency_key}"  # zset

    def key_ring(self, shard: int, queue: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_KEY_RING}{queue}"  # list

    def queue_running(self, shard: int, queue: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_KEY_RUNS}{queue}"  # zset

    def key_running(self, shard: int, queue: str, concurrency_key: str) -> str:
        """A key's permits of the older form (queue_running holds them now)."""
        return f"{self.prefix(shard)}{SUFFIX_KEY_RUNNING}{queue}:{concurrency_key}"  # zset

    def key_bucket(self, shard: int, queue: str, concurrency_key: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_KEY_BUCKET}{queue}:{concurrency_key}"  # hash

    def key_wake(self, shard: int, queue: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_KEY_WAKE}{queue}"  # stream

    def key_weights(self, shard: int, queue: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_KEY_WEIGHT}{queue}"  # hash

    def key_limit(self, shard: int, queue: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_KEY_LIMIT}{queue}"  # hash: concurrency, rate

    def limited(self, shard: int) -> str:
        return f"{self.prefix(shard)}limited"  # set of queue names

    def keyed_queues(self, shard: int) -> str:
        return f"{self.prefix(shard)}kqueues"  # zset

    def cron(self, shard: int) -> str:
        return f"{self.prefix(shard)}cron"  # zset

    def behind(self, shard: int) -> str:
        return f"{self.prefix(shard)}behind"  # zset: job ids behind their objective, by since (ms)

    def jobs(self, shard: int) -> str:
        return f"{self.prefix(shard)}jobs"  # zset

    def runs(self, shard: int, job_id: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_RUNS}{job_id}"  # zset

    def fires(self, shard: int, job_id: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_FIRES}{job_id}"  # zset: ledger.py's entries

    def ontime(self, shard: int, job_id: str) -> str:
        return f"{self.prefix(shard)}{SUFFIX_ONTIME}{job_id}"  # hash: objective.py's counts

    def stats(self, shard: int) -> str:
        return f"{self.prefix(shard)}stats"  # hash

    def config(self, shard: int) -> str:
        return f"{self.prefix(shard)}config"  # hash

    def queue(self, shard: int, queue: str, priority: int = DEFAULT_PRIORITY) -> str:
        return self.lane_stream(shard, lane(queue, priority))

    def lane_stream(self, shard: int, lane_name: str) -> str:
        """A lane's dispatch stream, from its name as the lane index holds it."""
        return f"{self.prefix(shard)}{SUFFIX_QUEUE}{lane_name}"  # stream

    def lane_index(self, shard: int) -> str:
        return f"{self.prefix(shard)}lanes"  # zset

    def events(self, shard: int) -> str:
        return f"{self.prefix(shard)}events"  # stream

    def dlq(self, shard: int) -> str:
        return f"{self.prefix(shard)}dlq"  # zset

    def leases(self, shard: int) -> str:
        return f"{self.prefix(shard)}leases"  # zset

    def owner(self, shard: int) -> str:
        return f"{self.prefix(shard)}owner"  # string

    def retain(self, shard: int) -> str:
        return f"{self.prefix(shard)}retain"  # zset

    def finished(self, shard: int) -> str:
        return f"{self.prefix(shard)}finished"  # zset: ended slots but successes, by finished_ms

    def done(self, shard: int) -> str:
        return f"{self.prefix(shard)}done"  # list: "<finished_ms>:<slot id>" of successes
