"""Planted bugs the fault suite must catch: a checker is trusted only once it has been seen to
fail. Each mutant is one exact text replacement in one file; `mutate.py` applies it to a copy
of the code and runs the tests named here against the copy, which must fail.

`fast` marks the subset CI runs on every change (tests/faults/test_mutants.py); the whole
set runs from one command:

    .venv/bin/python tests/faults/mutate.py            # every mutant, its own tests
    .venv/bin/python tests/faults/mutate.py --suite    # every mutant, the whole fault suite
"""

from __future__ import annotations

from dataclasses import dataclass

SIGKILL = "tests/faults/test_faults.py::test_sigkilled_workers_lose_nothing"
FROZEN = "tests/faults/test_faults.py::test_a_frozen_workers_late_commits_are_refused"
LATE = ("tests/faults/test_redis_faults.py::"
        "test_an_outcome_that_arrives_after_its_lease_is_refused")
CHAOS = "tests/faults/test_faults.py::test_chaos_rounds"
ORPHANS = "tests/faults/test_redis_faults.py::test_orphans_are_found_and_run_again"
STALL = ("tests/faults/test_redis_faults.py::"
         "test_a_stalled_connection_stops_the_runs_before_their_lease_expires")
OOM = "tests/faults/test_redis_faults.py::test_processes_live_through_ten_seconds_of_oom"
SENTINEL = ("tests/faults/test_sentinel_failover.py::"
            "test_a_primary_killed_under_load_loses_no_acknowledged_job")
CLAIM = "tests/faults/test_redis_faults.py::test_a_failed_claim_puts_its_entries_back"
POISON = ("tests/faults/test_redis_faults.py::"
          "test_an_error_text_that_cannot_be_encoded_kills_no_worker")
NODES = ("tests/faults/test_node_faults.py::"
         "test_cron_starts_within_two_seconds_while_nodes_die_and_freeze")
MANY = "tests/faults/test_faults.py::test_many_delayed_and_cron_jobs_all_run_once"
CLUSTER = "tests/faults/test_cluster.py::test_one_namespace_runs_over_three_masters"
MIGRATING = ("tests/faults/test_cluster.py::"
             "test_a_call_to_a_migrating_shard_waits_for_its_new_node")
PRIORITIES = "tests/sdk/test_priorities.py"
EXPIRER = "tests/node/test_expirer.py::"
LIMITS = "tests/sdk/test_queue_limits.py"
SENTINEL_SLOW = ("tests/faults/test_sentinel_failover.py::test_a_primary_the_sentinels_"
                 "replaced_is_left_while_it_still_answers")
AT_ONCE = "tests/e2e/test_limits_apply_at_once.py::"
IN_SCRIPTS = "tests/lua/test_limits_in_scripts.py::"
TURN = "tests/worker/test_keyed_turn.py::"
HELD_BACK = (f"{LIMITS}::test_a_worker_held_back_by_a_slow_rate_hands_back_on_time_and_sees_"
             "the_limit_cleared")
EARLY = "tests/worker/test_early_dispatch.py"
AHEAD = "tests/lua/test_promote_ahead.py"
FENCE = ("tests/lua/test_recovery_transitions.py::"
         "test_an_entry_a_reclaim_acked_fences_out_the_old_commit")
ANNOUNCED = "tests/worker/test_heartbeat.py::test_a_run_is_announced_by_its_first_renewal_only"
SUBMITTED = ("tests/lua/test_transitions.py::"
             "test_a_submitted_entry_names_slots_by_id_and_the_rest_as_objects")
COMPACT = ("tests/lua/test_recovery_transitions.py::"
           "test_a_succeeded_entry_names_its_slots_alone_when_they_share_an_attempt")
NAMED = "tests/sdk/test_named_schedules.py::"
KEPT_DEFINITION = NAMED + "test_a_materializer_left_running_takes_the_new_cadence_in_its_next_pass"
WITHDRAWN = (NAMED + "test_a_redefinition_withdraws_what_was_dispatched_ahead_and_leaves_what_"
             "is_due")
LANE_ACK = ("tests/lua/test_recovery_transitions.py::"
            "test_cancelling_or_deleting_a_read_entry_acks_it_on_its_priority_lane")
CARRIED_OVER = ("tests/lua/test_carried.py::"
                "test_an_entry_carrying_nothing_drops_what_an_older_entry_of_its_slot_carried")
DOORS = "tests/e2e/test_console_doors.py::"
LIMITS_PAGE = "tests/e2e/test_console_limits.py::"
METRICS_ENDPOINTS = "tests/e2e/test_metrics_endpoints.py::"
SUPERVISED = "tests/cli/test_supervised_workers.py::"
HOSTILE_CLI = "tests/cli/test_hostile_cli.py::"
HOSTILE_SDK = "tests/sdk/test_hostile_input.py::"
UNKNOWN_NAMES = ("tests/worker/test_worker.py::"
                 "test_distinct_unknown_task_names_cost_a_worker_no_memory_each")
GROUPED = SUPERVISED + "test_children_are_grouped_under_their_supervisor"
GARBLED = SUPERVISED + "test_garbled_registry_entries_break_no_reader"
SUPERVISED_CHILD = SUPERVISED + "test_sched_worker_reads_its_supervisor_from_the_environment"
SUPERVISOR_PAGE = ("tests/e2e/test_console_pages.py::"
                   "test_the_workers_page_groups_the_children_under_their_supervisor")
CLEANER = "tests/node/test_queue_cleaner.py"
IDLE_LANES = (f"{CLEANER}::"
              "test_idle_lanes_that_hold_nothing_leave_the_index_and_status[single]")
IDLE_LEASE = (f"{CLEANER}::"
              "test_the_reclaimer_finds_an_expired_lease_in_a_lane_that_went_idle[single]")
REINDEXED = (f"{CLEANER}::"
             "test_an_entry_written_after_its_lane_left_the_index_indexes_it_again[single-")
READ_COVERS = ("tests/history/test_snapshotter.py::"
               "test_an_event_right_after_a_read_brings_the_slots_new_state[sqlite-single]")
# The fault test of the same rule caught this one only when nothing else named the job
# after its promotion; the snapshotter test makes that so every time.
ACTIVE_READ = ("tests/history/test_snapshotter.py::"
               "test_an_overlap_skip_jobs_active_run_reaches_the_store[sqlite-single]")
RETRY_POLICY = ("tests/worker/test_retry_policy.py::"
                "test_each_retry_waits_what_the_policy_says_capped_and_jittered")
SUBMIT_CHECKS = ("tests/sdk/test_hostile_input.py::"
                 "test_submit_lua_refuses_a_bad_job_anywhere_in_a_batch_and_writes_nothing")
START_STOPPED = ("tests/faults/test_supervisor.py::"
                 "test_sigterm_during_the_start_of_many_children_stops_it_and_leaves_none")
KEEPS_DYING = ("tests/faults/test_supervisor.py::"
               "test_a_child_that_keeps_dying_after_it_is_up_backs_off_then_stops_the_supervisor")
SIZES = "tests/worker/test_supervisor_parts.py::"
POOL = "tests/worker/test_process_pool.py::"
POOL_TIMEOUT = POOL + "test_a_cpu_bound_handler_past_its_timeout_is_killed_and_the_pool_goes_on"
SUPERVISED = ("tests/faults/test_supervisor.py::"
              "test_sigkilled_children_are_restarted_and_lose_nothing")
SUBMIT_COUNTS = ("tests/sdk/test_hostile_input.py::"
                 "test_submit_lua_refuses_counts_that_do_not_match_the_items")
OUTBOX = "tests/outbox/test_transactional_submit.py::"
OUTBOX_WAITS = OUTBOX + "test_rows_wait_while_redis_is_unreachable"
OUTBOX_RESEND = OUTBOX + "test_a_resend_after_redis_acknowledged_writes_nothing_twice"
OUTBOX_FAULTS = "tests/faults/test_outbox.py::"
OUTBOX_POISON = OUTBOX + "test_a_row_that_is_not_a_job_is_kept_aside_whatever_fails_and_the_rest_go"
OUTBOX_POISON_FAULT = (OUTBOX_FAULTS + "test_poison_rows_are_kept_aside_and_the_relay_process_"
                       "runs_every_good_job_once")
OUTBOX_OTHER_NS = (OUTBOX + "test_an_outbox_serves_one_namespace_and_a_relay_of_another_refuses_"
                   "to_start")
DEDUPE = "tests/sdk/test_dedupe_windows.py::"
TAKE = "tests/lua/test_take.py::"
DEBOUNCED = DEDUPE + "test_a_debounce_moves_the_pending_run_and_takes_the_latest_payload[single]"
DEBOUNCED_RUN = (DEDUPE + "test_fifty_debounced_submits_run_once_with_the_last_payload_and_a_"
                 "window_outlives_retention[single]")
WINDOW_ENDS = (DEDUPE + "test_whatever_became_of_the_job_the_window_holds_then_a_new_job_gets_"
               "through[single]")
WINDOW_MOVED_ENDS = (DEDUPE + "test_a_window_a_debounce_moved_ends_and_then_a_new_job_gets_"
                     "through_and_runs[single-debounce]",
                     DEDUPE + "test_a_window_a_debounce_moved_ends_and_then_a_new_job_gets_"
                     "through_and_runs[single-dedupe_ttl-and-debounce]")
RETRY_NOT_MOVED = DEDUPE + "test_a_debounce_never_moves_a_retry_waiting_for_its_backoff[single]"
WEIGHT_LIMIT = TAKE + "test_the_per_key_limit_holds_at_every_weight"
NOT_EXTENDED = DEDUPE + "test_a_repeat_never_extends_a_window[single-window]"
WINDOW_REPEAT = (DEDUPE + "test_a_repeat_within_the_window_returns_the_first_id_and_writes_"
                 "nothing[single]")
BAD_WINDOW = DEDUPE + "test_bad_window_options_are_refused_with_one_line[single]"
HEAD_OF_LINE = TAKE + "test_a_key_at_its_limit_holds_up_only_itself"
TENANTS = "tests/sdk/test_concurrency_keys.py::"
KEY_STATUS = "tests/observe/test_key_status.py::"
OUTBOX_WINDOW = (OUTBOX + "test_the_outbox_refuses_a_dedupe_window_and_a_debounce_in_one_line")
PROGRESS_FENCE = ("tests/lua/test_heartbeat_progress.py::"
                  "test_a_stale_attempts_progress_is_not_written")
PROGRESS_SHOWN = ("tests/e2e/test_progress.py::"
                  "test_each_step_of_a_long_run_shows_in_the_sdk_and_the_console_within_a_"
                  "heartbeat")

MALFORMED = "tests/sdk/test_malformed_numbers.py::"
WHOLE_TEXT = MALFORMED + "test_the_scripts_store_whole_numbers_past_1e14"
WHOLE_TEXT_1E17 = MALFORMED + "test_the_scripts_store_whole_numbers_past_1e17"
UNREADABLE_SLOT = MALFORMED + "test_a_malformed_number_marks_the_slot_and_fails_no_read"
BOUNDS_CLI = "tests/cli/test_bounds_cli.py::"
KEYED_CARRY = "tests/lua/test_take.py::"

@dataclass(frozen=True)
class Mutant:
    name: str
    why: str  # the bug it plants, and what must notice it
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    fast: bool = False


MUTANTS = [
    Mutant("progress-without-the-fence", "heartbeat.lua writes a run's progress under a stale "
           "token too: an attempt that lost its slot overwrites the progress of the one "
           "that holds it", "scheduler/scripts/lua/heartbeat.lua",
           "  else\n    reply[#reply + 1] = R.STALE",
           "  else\n    local at = reports[i + 1]\n    if at then redis.call('HSET', slot_key, "
           "'progress', ARGV[at + 2]) end\n    reply[#reply + 1] = R.STALE",
           (PROGRESS_FENCE,), fast=True),
    Mutant("progress-never-sent", "the heartbeat leaves out the runs' progress reports: "
           "ctx.progress reaches neither the SDK nor the console",
           "scheduler/worker/heartbeat.py",
           "[(i, *report) for i, report, _ in reports.get(s, ())]", "[]",
           (PROGRESS_SHOWN,)),
    Mutant("slot-page-not-live", "a running slot's page never refreshes its fields: its "
           "progress stays as it was when the page was opened",
           "scheduler/web/pages.py",
           '"live": f"/slots/{slot_id}" if s.status is SlotStatus.RUNNING else None,',
           '"live": None,', (PROGRESS_SHOWN,)),
    Mutant("reclaim-ends-lost", "an expired at-least-once lease ends `lost` instead of "
           "re-running (terminal rule)",
           "scheduler/scripts/lua/_lib.lua", "  elseif job[1] == 'at_most_once' then",
           "  elseif true then", (SIGKILL,), fast=True),
    Mutant("supervisor-not-in-heartbeat", "a supervised child's heartbeat leaves out its "
           "supervisor: `sched workers` and the console list it as a worker on its own",
           "scheduler/worker/worker.py",
           "            self.heartbeat.info.update(supervisor.registry_fields())",
           "            pass", (GROUPED,), fast=True),
    Mutant("supervisor-restarts-lowest", "a supervisor's restarts are its children's lowest "
           "count (the oldest child's), not the highest",
           "scheduler/observe/records.py", "restarts=max(w.restarts or 0 for w in children)",
           "restarts=min(w.restarts or 0 for w in children)", (GROUPED,)),
    Mutant("supervisor-env-ignored", "`sched worker` does not read SCHED_SUPERVISOR: a "
           "supervisor's children are not grouped under it",
           "scheduler/cli/run.py", "    ref = os.environ.get(SUPERVISOR_ENV)\n",
           "    ref = None\n", (SUPERVISED_CHILD,)),
    Mutant("table-prints-escapes", "`sched workers` (every CLI table) prints the text of "
           "registry entries as written: a terminal escape in a worker id reaches the terminal",
           "scheduler/cli/inspect.py",
           "    rows = [printable(r) if isinstance(r, str) else [printable(str(c)) for c in r]\n",
           "    rows = [r if isinstance(r, str) else [str(c) for c in r]\n",
           ("tests/cli/test_supervised_workers.py::"
            "test_terminal_escapes_in_registry_entries_do_not_reach_the_terminal",), fast=True),
    Mutant("jobs-show-prints-escapes", "`sched jobs show` prints a job's fields as read: a "
           "terminal escape in a dedupe key or delete reason written past the SDK reaches the "
           "terminal", "scheduler/cli/inspect.py", "{printable(value)}", "{value}",
           (HOSTILE_CLI + "test_sched_jobs_show_prints_no_control_character_it_read",),
           fast=True),
    Mutant("reason-unchecked", "a cancel reason is not checked: a terminal escape or 5 MB of "
           "text is stored on every slot it ends", "scheduler/sdk/jobs.py",
           "    check_reason(reason)\n", "",
           (HOSTILE_SDK + "test_dedupe_keys_and_reasons_refuse_control_characters",
            HOSTILE_SDK + "test_a_reason_is_bounded"), fast=True),
    Mutant("delete-reason-unchecked", "a delete reason is not checked: a terminal escape or "
           "any length of text is stored on the job", "scheduler/sdk/schedules.py",
           "    check_reason(reason)\n", "",
           (HOSTILE_SDK + "test_dedupe_keys_and_reasons_refuse_control_characters",
            HOSTILE_SDK + "test_a_reason_is_bounded"), fast=True),
    Mutant("status-prints-escapes", "`sched status` prints shard owners as read: a terminal "
           "escape in a shard's lease reaches the terminal", "scheduler/cli/observe.py",
           '    click.echo(printable(f"shard owners: {s.shards_owned}/{s.shards}"\n'
           '                         + (f" ({\', \'.join(owners)[:100]})" if owners else "")))',
           '    click.echo(f"shard owners: {s.shards_owned}/{s.shards}"\n'
           '               + (f" ({\', \'.join(owners)[:100]})" if owners else ""))',
           (HOSTILE_CLI + "test_sched_status_prints_no_control_character_it_read",), fast=True),
    Mutant("dedupe-key-control-characters", "a dedupe key may hold control characters: "
           "`sched jobs show` and the console print it as given",
           "scheduler/core/models.py", "    if control := control_character(key):\n",
           "    if False:\n",
           (HOSTILE_SDK + "test_dedupe_keys_and_reasons_refuse_control_characters",), fast=True),
    Mutant("unknown-task-metrics-per-name", "a worker keeps run metrics per unknown task "
           "name: each distinct name Redis hands it costs memory for good",
           "scheduler/worker/claims.py", "        m = self.run_metrics.get((queue, label))\n"
           "        if m is None:\n"
           "            m = self.run_metrics[(queue, label)]",
           "        m = self.run_metrics.get((queue, task))\n"
           "        if m is None:\n"
           "            m = self.run_metrics[(queue, task)]",
           (UNKNOWN_NAMES,), fast=True),
    Mutant("unknown-task-cached-by-lane", "a worker caches each unknown task name's metrics by "
           "lane: each distinct name Redis hands it costs memory for good",
           "scheduler/worker/claims.py", "        if known:\n            self._by_lane",
           "        if True:\n            self._by_lane", (UNKNOWN_NAMES,), fast=True),
    Mutant("web-start-line-shows-the-token", "`sched web`'s start line prints the console's "
           "token as given: anyone who reads the log can sign in",
           "scheduler/cli/web.py", 'f"token {MASK}" if token else "no token"',
           'f"token {token}" if token else "no token"',
           ("tests/cli/test_serving.py::"
            "test_sched_web_logs_where_it_serves_once_bound_and_that_it_stopped",), fast=True),
    Mutant("supervisor-heading-unescaped", "the console's supervisor heading (anyone's text, "
           "from the worker registry) goes into the page unescaped",
           "scheduler/web/templates/lists.html", "{{ row.heading }}", "{{ row.heading|safe }}",
           (SUPERVISOR_PAGE,)),
    Mutant("registry-entry-trusted", "a worker registry entry's lease is read as written: "
           "one entry whose lease is not a number breaks `sched workers` and the console's "
           "Workers page (a 500)",
           "scheduler/observe/status.py", '    lease_ms = _int(f.get("lease_ms"), 30_000)',
           '    lease_ms = int(f.get("lease_ms", 30_000))', (GARBLED, SUPERVISOR_PAGE)),
    Mutant("once-always-false", "ctx.once() never lets the effect happen (exactly-once rule)",
           "scheduler/worker/execution.py",
           "        return code is Code.OK or (code is Code.REPEAT and retried)",
           "        return False", (CHAOS,)),
    Mutant("complete-unfenced", "complete.lua commits whatever token the worker presents "
           "(commit rule: a success committed by a worker without the lease)",
           "scheduler/scripts/lua/complete.lua",
           "  if not st or (st[1] == 'running' and st[2] == token) then",
           "  if not st or st[1] == 'running' then", (LATE,), fast=True),
    Mutant("complete-trusts-its-acks", "complete.lua commits a lane's slots unread even when "
           "one of their entries was acked already (a reclaimed slot's late commit lands: "
           "commit rule)",
           "scheduler/scripts/lua/complete.lua", "  fenced[lane_name] = acked == #ids",
           "  fenced[lane_name] = true", (FENCE, LATE), fast=True),
    Mutant("reclaim-disabled", "the reclaimer does nothing (settling times out)",
           "scheduler/node/reclaimer.py",
           '        """One pass over every shard; returns what it did."""',
           '        """One pass over every shard; returns what it did."""\n'
           '        return dict.fromkeys(self.totals, 0)', (SIGKILL,)),
    Mutant("materializer-skips-a-second", "cron occurrences at seconds ending in 3 or 8 get "
           "no slot, the watermark moves past them (cron rule)",
           "scheduler/node/materializer.py", "        else:\n            fires.append(t)",
           "        elif (t // 1000) % 5 != 3:\n            fires.append(t)", (MANY,)),
    Mutant("promoter-drops-one-in-a-thousand", "promote removes from `due` without "
           "dispatching one slot in a thousand (orphan rule, or settling times out)",
           "scheduler/scripts/lua/promote.lua", "  if st[1] == 'scheduled' then",
           "  if st[1] == 'scheduled' and string.sub(slot_id, -3) ~= '007' then", (MANY,)),
    # From the first round trip: the one healthy worker of its test may make only two (a
    # whole wave of completions in each), and a mutant dropping the third survived in CI.
    Mutant("committer-drops-a-batch", "every tenth batch of outcomes, from the first, is "
           "forgotten, whether its own round trip or a claim's carries it (lost rule: leases "
           "expire on healthy workers)",
           "scheduler/worker/committer.py",
           "        batch, self.pending = self.pending, {k: defaultdict(list) for k in KINDS}",
           "        batch, self.pending = self.pending, {k: defaultdict(list) for k in KINDS}\n"
           "        self.dropped += 1\n"
           "        if self.dropped % 10 == 1:\n"
           "            return {k: defaultdict(list) for k in KINDS}", (SIGKILL,), fast=True),
    Mutant("sweeper-disabled", "the sweeper never walks (orphans stay stranded)",
           "scheduler/node/sweeper.py", "        if not self.active:\n            return False",
           "        if True:\n            return False", (ORPHANS,)),
    Mutant("watchdog-disabled", "a worker cut off from Redis runs on past its leases "
           "(a slot runs on two workers at once)",
           "scheduler/worker/heartbeat.py", "        limit = self.clock.monotonic() + self.margin_s",
           "        limit = -1.0", (STALL,)),
    Mutant("claim-forgets-entries", "a failed claim drops its entries (they wait a lease)",
           "scheduler/worker/claims.py",
           "            reader.give_back(take)\n"
           "            reader.must_recover = reader.must_recover or prefetch\n",
           "", (CLAIM,)),
    Mutant("error-text-unsanitized", "a handler's error text goes to Redis as it is (the "
           "poison outcome is dropped: lost rule)",
           "scheduler/worker/execution.py",
           '    return line.encode("utf-8", "backslashreplace").decode("utf-8")',
           "    return line", (POISON,)),
    Mutant("oom-kills-loops", "every background loop (a worker's claim loops, its committer, "
           "a node's loops) dies of any error but a connection error (process rule)",
           "scheduler/redis/service.py",
           "            except Exception as exc:\n"
           "                self.errors.error(exc, self.error_context())",
           "            except (redis.exceptions.ConnectionError, "
           "redis.exceptions.TimeoutError) as exc:\n"
           "                self.errors.error(exc, self.error_context())", (OOM,)),
    Mutant("no-overdue-promotion", "only a shard's owner promotes (cron lag while nodes die)",
           "scheduler/node/promoter.py",
           "        if self.others and time.monotonic() >= self._overdue_at:",
           "        if False:", (NODES,)),
    Mutant("sweep-skips-queued", "sweep.lua's fast path reads only a live slot's fields and "
           "forgets `queued` (queued orphans stay stranded)",
           "scheduler/scripts/lua/sweep.lua",
           "local LIVE = {scheduled = true, queued = true, running = true}",
           "local LIVE = {scheduled = true, running = true}", (ORPHANS,)),
    Mutant("committer-loses-unbuildable-batch", "an outcome whose call cannot be built takes "
           "its whole batch down with it (the committer's own test)",
           "scheduler/worker/committer.py",
           "                    except Exception:\n"
           "                        self.alone += [(kind, shard, item) for item in part]",
           "                    except Exception:\n                        raise",
           ("tests/worker/test_committer.py::test_a_poison_outcome_is_dropped_alone",)),
    Mutant("sentinel-pins-first-primary", "a sentinel URL is resolved once, at start: after a "
           "failover every process keeps talking to the dead primary (settling times out)",
           "scheduler/redis/clients.py",
           "    client = manager.master_for(s.service, db=s.db, username=s.username, "
           "password=s.password,\n",
           "    host, port = redis.sentinel.Sentinel(list(s.sentinels)).discover_master("
           "s.service)\n    return (redis.asyncio.Redis if asyncio else redis.Redis)(host=host, "
           "port=port, db=s.db, retry=retry, **_options(timeout_s))\n    "
           "client = manager.master_for(s.service, db=s.db, username=s.username, "
           "password=s.password,\n",
           (SENTINEL,)),
    Mutant("replicated-without-confirmation", "durability=\"replicated\" returns as if the "
           "replicas confirmed, whatever WAIT said (the SDK's durability test)",
           "scheduler/redis/transport.py",
           "        replicas = got if isinstance(got, int) else 0  # the wait failed: none known",
           "        replicas = 99",
           ("tests/sdk/test_connection_ha.py::test_replicated_without_replicas_says_what_was_written",),
           fast=True),
    Mutant("cluster-ask-is-an-answer", "on a cluster an ASK reply (the shard's slot is "
           "migrating) is taken as the call's answer instead of waiting for the slot to move: "
           "a submit to a migrating shard fails", "scheduler/redis/cluster.py",
           "ELSEWHERE = (redis.exceptions.MovedError, redis.exceptions.AskError,",
           "ELSEWHERE = (redis.exceptions.MovedError,", (MIGRATING,)),
    Mutant("cluster-reads-one-shard", "on a cluster the worker keeps a read in flight for "
           "its first shard only: the other shards' jobs are never run (settling times out)",
           "scheduler/worker/reader.py",
           "        for shard, tail in self._shard_tail.items():\n            if shard not in",
           "        for shard, tail in list(self._shard_tail.items())[:1]:\n            if "
           "shard not in", (CLUSTER,)),
    Mutant("heartbeat-renews-the-default-lane", "the heartbeat renews a running slot's "
           "pending entry in the queue's plain stream, not its priority's lane: a live run of "
           "priority 1 looks idle to the reclaimer", "scheduler/scripts/lua/heartbeat.lua",
           "prefix .. 'q:' .. lane(st[4], st[6])", "prefix .. 'q:' .. st[4]",
           (f"{PRIORITIES}::test_a_long_run_in_a_priority_lane_keeps_its_lease",)),
    Mutant("backlog-worst-first", "the backlog hands out the worst priority waiting first",
           "scheduler/worker/backlog.py", "                pick = waiting[0]",
           "                pick = waiting[-1]",
           (f"{PRIORITIES}::test_better_priorities_start_first",)),
    Mutant("backlog-no-turns", "the 10th start always goes to the best of the worse "
           "priorities: 5 starves behind 3 (starvation rule)", "scheduler/worker/backlog.py",
           "                pick = next((i for i in worse if i > self._turn), worse[0])",
           "                pick = worse[0]", (f"{PRIORITIES}::test_the_backlog_rule",)),
    Mutant("acquire-grants-two-over", "acquire.lua grants two permits over the concurrency "
           "limit", "scheduler/scripts/lua/acquire.lua",
           "  grant = math.min(grant, concurrency - redis.call('ZCARD', permits))",
           "  grant = math.min(grant, concurrency + 2 - redis.call('ZCARD', permits))",
           (f"{LIMITS}::test_a_concurrency_limit_holds_across_workers",)),
    Mutant("permits-never-given-back", "a limited run's permit is not given back when it "
           "ends: the queue stalls until the permits expire", "scheduler/worker/limiter.py",
           "            if run.permit[1]:\n                run.on_end = self.on_end",
           "            if False:\n                run.on_end = self.on_end",
           (f"{LIMITS}::test_a_concurrency_limit_holds_across_workers",)),
    Mutant("rate-bucket-two-seconds", "the rate's bucket holds two seconds' worth: a burst "
           "breaks the rate over 10 s", "scheduler/scripts/lua/_bucket.lua",
           "  local cap = math.max(1, rate / 10)", "  local cap = math.max(1, rate * 2)",
           (f"{LIMITS}::test_a_rate_limit_holds_over_ten_seconds",)),
    Mutant("limiter-sleeps-out-the-rate", "a limited claim loop sleeps until the rate's next "
           "token, however far: at one an hour a cleared limit, and the entries it holds, "
           "wait an hour", "scheduler/worker/limiter.py",
           "min([*waits, REFRESH_S, due_back])", "min(waits)", (HELD_BACK,)),
    Mutant("rate-floor-unchecked", "a rate of 1e-300 a second is taken: a token a lifetime "
           "away", "scheduler/core/limits.py", "not MIN_RATE <= rate <= MAX_RATE",
           "not 0 < rate <= MAX_RATE",
           (f"{LIMITS}::test_the_sdk_refuses_bad_limits",
            f"{LIMITS}::test_the_cli_refuses_bad_limits"), fast=True),
    Mutant("slow-bucket-expires-in-a-minute", "a rate's bucket expires a minute idle, "
           "whatever the rate: one an hour restarts full and becomes one a minute",
           "scheduler/scripts/lua/_bucket.lua",
           "math.max(60000, math.ceil(cap * 1000 / rate))", "60000",
           (f"{LIMITS}::test_a_slow_rates_bucket_lives_until_it_is_full_again",), fast=True),
    Mutant("limiter-holds-entries", "entries a limited worker read without a permit stay in "
           "its hands for a minute, not HOLD_S: no other worker can start them",
           "scheduler/worker/limiter.py", "mono - self._waiting_since >= HOLD_S):",
           "mono - self._waiting_since >= 60 * HOLD_S):", (HELD_BACK,)),
    Mutant("limits-not-read-when-refused", "a worker whose claim is refused for a new "
           "queue-wide limit reads the limits only at its next refresh: meanwhile it hands "
           "the queue's entries back and reads them again, in a loop",
           "scheduler/worker/limiter.py", "        claims.on_limited = self.refresh",
           "        claims.on_limited = None",
           (f"{AT_ONCE}test_a_queue_wide_limit_holds_from_the_first_claim_after_the_call"
            "[single-client]",)),
    Mutant("cleared-limit-waits-for-the-main-read", "a worker that reads a cleared limit "
           "stops reading the queue in its limited loop at once: a job submitted then waits "
           "for the main loop's read sent before, without the queue, to end",
           "scheduler/worker/limiter.py",
           "self.leaving[q] = now + self.claims.block_ms / 1000", "self.leaving[q] = now",
           (f"{LIMITS}::test_a_cleared_limit_starts_the_next_job_at_once",)),
    Mutant("kept-connections-stay-on-the-old-primary", "a round trip on a connection "
           "transport.py keeps goes to the primary it connected to, though the sentinels "
           "named another: a worker renews its leases on an old primary that still answers",
           "scheduler/redis/transport.py",
           "    if address is not None and conn.is_connected and (conn.host, conn.port) != "
           "tuple(address):", "    if False:", (SENTINEL_SLOW,)),
    Mutant("sentinels-not-asked-again", "a process learns of a new primary only when a "
           "connection connects: its open connections stay on an old primary that still "
           "answers", "scheduler/redis/primary.py",
           "        address = await pool.get_master_address()",
           "        address = await pool.sentinel_manager.discover_master(pool.service_name)",
           (SENTINEL_SLOW,)),
    Mutant("permits-never-expire", "acquire.lua never drops expired permits: a crashed "
           "worker's permits hold the queue at its limit for good",
           "scheduler/scripts/lua/acquire.lua",
           "  redis.call('ZREMRANGEBYSCORE', permits, '-inf', now)\n", "",
           (f"{LIMITS}::test_acquire_grants_up_to_the_limit_and_takes_back",), fast=True),
    Mutant("permits-never-renewed", "the permits of runs in flight are not renewed: a run "
           "longer than the lease loses its permit and another starts beside it",
           "scheduler/worker/limiter.py",
           "pipe.zadd(self.keys.permits(q), dict.fromkeys(members, expires), xx=True)",
           "pipe.exists(self.keys.permits(q))",
           (f"{LIMITS}::test_a_run_longer_than_the_lease_keeps_its_permit",)),
    Mutant("repeat-claim-past-its-lease", "claim.lua grants a worker's claim sent again "
           "after that claim's lease ran out: a run its watchdog gave up, maybe after "
           "ctx.once, starts a second time under the same attempt", "scheduler/scripts/lua/claim.lua",
           "  return held[1] == worker and (tonumber(held[2]) or 0) >= now",
           "  return held[1] == worker",
           ("tests/lua/test_transitions.py::test_a_claim_sent_again_after_its_lease_ran_out_"
            "is_not_granted",), fast=True),
    Mutant("carried-at-most-once-not-acked", "claim.lua takes a carried at_most_once entry "
           "for an at_least_once one: its entry stays pending, so a crash after the claim "
           "runs it again", "scheduler/scripts/lua/claim.lua",
           "    if (k and k == CARRIED_AT_MOST_ONCE) or (not k and job[4] == 'at_most_once') then",
           "    if not k and job[4] == 'at_most_once' then",
           ("tests/lua/test_carried.py::test_a_carried_at_most_once_claim_acks_its_entry",),
           fast=True),
    Mutant("carried-keyed-by-entry-id", "the worker keeps carried job fields by stream entry "
           "id, which repeats across shards' streams: a run gets another job's payload",
           "scheduler/worker/reader.py",
           "                        carried[slot] = (fields[3], fields[5], fields[7], fields[9])",
           "                        carried[msg_id.decode()] = (fields[3], fields[5], fields[7],"
           " fields[9])",
           ("tests/lua/test_carried.py::test_the_reader_keeps_what_entries_carry_and_reads_f_at_"
            "the_end", "tests/worker/test_worker.py")),
    Mutant("claim-starts-early-slots", "claim.lua drops its not-before guard: an entry "
           "handed back without its time (a stopping worker's requeue) starts before its "
           "fire time", "scheduler/scripts/lua/claim.lua",
           "if st[1] == 'queued' and st[2] == msg and st[4] and tonumber(st[4]) > now then",
           "if st[1] == 'queued' and st[2] == msg and false then",
           (f"{EARLY}::test_held_entries_handed_back_by_a_stopping_worker_still_wait_for_their_time",
            f"{AHEAD}::test_a_slot_due_within_the_horizon_is_dispatched_early_and_not_claimed_"
            "before_its_time"), fast=True),
    Mutant("early-reply-dropped", "the worker drops an entry claim.lua answered EARLY for, "
           "instead of holding it: the slot waits in its pending list for the reclaimer",
           "scheduler/worker/claims.py",
           "                    source.hold((shard, lane, msg, slot_id), grant)\n",
           "                    pass\n",
           (f"{EARLY}::test_held_entries_handed_back_by_a_stopping_worker_still_wait_for_their_time",)),
    Mutant("skip-overlap-promoted-early", "an overlap=\"skip\" occurrence is dispatched early, "
           "so its overlap check sees the job as it was up to the horizon before its time",
           "scheduler/scripts/lua/promote.lua",
           "  if early and st[1] == 'scheduled' and (st[3] == 'skip' or st[3] == 'debounce' or st[6]) then",
           "  if false then",
           (f"{AHEAD}::test_an_overlap_skip_occurrence_waits_in_due_for_its_time",)),
    Mutant("claim-takes-every-free-slot", "a claim takes every free run slot, not a "
           "pipeline's share: at the default concurrency one pipeline holds them all and the "
           "other idles", "scheduler/worker/slots.py",
           "        return max(1, min(batch, -(-self.concurrency // pipelines)))",
           "        return max(1, min(batch, self.concurrency))",
           ("tests/worker/test_claim_share.py",)),
    Mutant("hash-read-slots-as-jobs", "the snapshotter's raw read asks for each slot's hash "
           "under the job key: history gets job hashes for slots (or nothing)",
           "scheduler/history/reads.py",
           "_bulk(slot_key + s) for s in r.slots", "_bulk(job_key + s) for s in r.slots",
           ("tests/history/test_hash_read.py",), fast=True),
    Mutant("reheld-slot-dropped", "a held-back slot's early promotion drops it from the held "
           "set instead of renewing its hold: never claimed, it never reaches history",
           "scheduler/history/intake.py",
           "                        deferred[slot] = (shard, deadline)\n                        self.reheld += 1",
           "                        self.reheld += 1",
           ("tests/history/test_snapshotter.py::"
            "test_a_held_back_slot_promoted_early_and_never_claimed_is_written_at_its_deadline",),
           fast=True),
    Mutant("flying-outcomes-forgotten", "the outcomes of the committer's round trip in flight "
           "are not this worker's (slots()): a recovery read meanwhile takes their entries back",
           "scheduler/worker/committer.py",
           "        batches = [self.pending, *self.flying]\n", "        batches = [self.pending]\n",
           ("tests/worker/test_committer.py::test_outcomes_in_flight_are_still_this_workers",
            "tests/worker/test_committer.py::"
            "test_outcomes_that_ride_a_claim_are_committed_or_kept"),
           fast=True),
    Mutant("boarded-outcomes-dropped", "the outcomes that rode a claim's round trip are "
           "forgotten when it fails: their slots wait out their leases and run again",
           "scheduler/worker/committer.py",
           "            if isinstance(results, BaseException):\n"
           "                results = [results] * len(boarding.built)\n",
           "            if isinstance(results, BaseException):\n"
           "                return\n",
           ("tests/worker/test_committer.py::"
            "test_outcomes_that_ride_a_claim_are_committed_or_kept",),
           fast=True),
    Mutant("dead-slot-unlogged", "a slot dead-lettered by a worker's commit logs no line of "
           "its own: behind the traceback's rate limit, most dead slots go unseen in the log",
           "scheduler/worker/committer.py", "                self._dead(answers, items)\n",
           "                pass\n",
           ("tests/redis/test_service_logs.py::"
            "test_every_attempt_that_ends_a_slot_dead_logs_one_line_naming_it",), fast=True),
    Mutant("attempts-view-twice", "the attempts view shows a single attempt twice when an "
           "older version left a row for it: the slot's state does not hide the stale row",
           "scheduler/history/sql/postgres/0002_attempt_log.sql",
           "WHERE NOT EXISTS (SELECT 1 FROM slots s", "WHERE 1 = 1 OR NOT EXISTS (SELECT 1 FROM slots s",
           ("tests/history/test_store.py::test_the_attempts_view_has_a_row_per_attempt_however_it_is_stored",),
           fast=True),
    Mutant("running-never-announced", "no heartbeat tells history that a run outlived its "
           "first interval (the claim writes no event: a long run stays `queued` in history)",
           "scheduler/worker/heartbeat.py",
           "items.append((run.slot_id, run.token, not run.announced))",
           "items.append((run.slot_id, run.token, False))", (ANNOUNCED,),
           fast=True),
    Mutant("submitted-record-without-its-job", "a cron job's `submitted` record is taken for a "
           "slot id (it has none: the snapshotter never hears of the job)",
           "scheduler/scripts/lua/submit.lua", "    if not slot_id or fire < now then",
           "    if not slot_id and false then", (SUBMITTED,), fast=True),
    Mutant("succeeded-records-one-attempt-for-all", "a `succeeded` entry names its slots alone "
           "with the first slot's attempt even when the batch holds several attempt numbers",
           "scheduler/scripts/lua/complete.lua",
           "    if tokens[i] ~= attempt then attempt = nil; break end",
           "    if false then attempt = nil; break end", (COMPACT,), fast=True),
    Mutant("materializer-keeps-its-definition", "a refused plan does not drop the job's kept "
           "definition: a running node never takes a named schedule's new cadence",
           "scheduler/node/materializer.py", "                self._jobs.pop((prefix, job_id), None)\n",
           "", (KEPT_DEFINITION + "[single]",), fast=True),
    Mutant("materialize-ignores-the-version", "materialize.lua creates occurrences planned from "
           "a definition since replaced (a node's kept one: the old cadence runs on)",
           "scheduler/scripts/lua/materialize.lua",
           "if (job[5] or '') ~= digest then return {R.MOVED, 0} end",
           "", (KEPT_DEFINITION + "[single]",), fast=True),
    Mutant("redefine-leaves-dispatched-ahead", "redefine.lua removes only `scheduled` "
           "occurrences: those dispatched ahead of their time run the old definition",
           "scheduler/scripts/lua/redefine.lua",
           "  elseif st[1] == 'queued' and (tonumber(st[2]) or 0) > now then",
           "  elseif false then", (WITHDRAWN + "[single]",), fast=True),
    Mutant("materialize-leaves-withdrawn-slots", "materialize.lua never takes over the slot "
           "id of an occurrence a redefinition withdrew: a time both cadences share never "
           "runs again", "scheduler/scripts/lua/materialize.lua",
           "  if st[2] and st[1] == 'cancelled' then", "  if false then",
           (WITHDRAWN + "[single]",), fast=True),
    Mutant("reader-keeps-older-carried-fields", "an entry carrying nothing is claimed with "
           "the job fields an older entry of its slot carried (a slot made again by a "
           "redefinition runs the old definition)",
           "scheduler/worker/reader.py", "                    elif slot in carried:",
           "                    elif False:", (CARRIED_OVER,), fast=True),
    Mutant("next-leaves-the-console", "`next=//evil.example` is taken for a path of the "
           "console (the redirect after sign-in and after each action goes to another site)",
           "scheduler/web/guard.py", 'or target.startswith("//")', "or False",
           (DOORS + "test_next_after_sign_in_is_a_path_of_the_console",), fast=True),
    Mutant("any-host-without-token", "a console without a token answers to any Host name "
           "(a DNS-rebinding page reads payloads and triggers runs)",
           "scheduler/web/middleware.py", "if self.loopback_only and not guard.host_allowed(",
           "if False and not guard.host_allowed(",
           (DOORS + "test_without_a_token_only_loopback_names_are_served",), fast=True),
    Mutant("csrf-double-submit", "the CSRF field is checked against the session cookie alone, "
           "not the console's HMAC of it (a planted cookie pair passes)",
           "scheduler/web/guard.py", "hmac.compare_digest(_bytes(self.csrf(session)), _bytes(sent))",
           "hmac.compare_digest(_bytes(session), _bytes(sent))",
           (DOORS + "test_a_planted_cookie_pair_does_not_pass",), fast=True),
    Mutant("post-without-origin", "a POST with neither Origin nor Referer counts as the "
           "console's own", "scheduler/web/guard.py",
           'source = headers.get("origin") or headers.get("referer")',
           'source = headers.get("origin") or headers.get("referer") or "//" + headers["host"]',
           (DOORS + "test_a_post_from_another_site_is_refused",), fast=True),
    Mutant("sign-ins-unlimited", "failed sign-ins are never limited",
           "scheduler/web/ratelimit.py", "if times is None or len(times) < self.limit:",
           "if True:", (DOORS + "test_failed_sign_ins_are_limited_per_address",), fast=True),
    Mutant("sign-in-compared-as-text", "the sign-in form's token is compared as text (a "
           "non-ASCII one is a 500)", "scheduler/web/guard.py",
           "hmac.compare_digest(self.token, _bytes(given))",
           "hmac.compare_digest(self.token.decode(), given)",
           (DOORS + "test_odd_tokens_and_fields_are_refused_never_an_error",), fast=True),
    Mutant("sign-in-cookie-forever", "the sign-in cookie has no Max-Age (it lasts as long as "
           "the browser keeps it)", "scheduler/web/guard.py",
           "max_age=int(self.session_s), ", "",
           (DOORS + "test_the_sign_in_cookie_and_sign_out",), fast=True),
    Mutant("short-token-public", "a console serves every interface with a token of any "
           "length (one character, guessed at once)", "scheduler/web/guard.py",
           "    if len(token.strip()) < MIN_TOKEN_CHARS:", "    if False:",
           (LIMITS_PAGE + "test_a_public_console_refuses_a_weak_token_in_one_line",), fast=True),
    Mutant("placeholder-token-public", "a console serves every interface with `change-me`, "
           "the token of the examples", "scheduler/web/guard.py",
           '        return "a placeholder from an example"', "        pass",
           (LIMITS_PAGE + "test_a_public_console_refuses_a_weak_token_in_one_line",),
           fast=True),
    Mutant("metrics-on-every-interface", "a service's --metrics-port listens on every "
           "interface unless told otherwise", "scheduler/cli/run.py",
           'METRICS_HOST = "127.0.0.1"', 'METRICS_HOST = "0.0.0.0"',
           (METRICS_ENDPOINTS + "test_every_command_that_opens_a_metrics_port_takes_a_host_"
            "loopback_by_default", METRICS_ENDPOINTS + "test_each_service_serves_metrics_on_"
            "loopback_unless_told[scheduler]"), fast=True),
    Mutant("every-queue-exported", "the exporter names every queue (5,000 queues: 25,000 "
           "series a scrape)", "scheduler/observe/metrics.py",
           "        if len(queues) <= self.top_queues:", "        if True:",
           (METRICS_ENDPOINTS + "test_the_exporter_exports_the_busiest_queues_and_sums_the_"
            "rest",), fast=True),
    Mutant("key-names-exported", "the exporter names the busiest concurrency keys (tenants' "
           "names, e-mail addresses) whatever --key-labels says", "scheduler/observe/metrics.py",
           '            if self.key_labels == "off":\n                continue\n', "",
           (METRICS_ENDPOINTS + "test_the_exporter_exports_the_busiest_queues_and_sums_the_"
            "rest",), fast=True),
    Mutant("password-cut-at-a-space", "a URL's user information ends at white space: "
           "redis://:pa ss@h shows `ss` (dev's banner, URL errors, the History page)",
           "scheduler/core/masking.py", r'r"(?P<userinfo>\S*|[^\s/@]*:[^\n/]*)@"',
           r'r"(?P<userinfo>\S*)@"', ("tests/sdk/test_masking.py",), fast=True),
    Mutant("any-body-read", "a POST's body is read whatever its Content-Type and "
           "Content-Length (an unauthenticated multipart sign-in is spooled whole before the "
           "token is compared)", "scheduler/web/middleware.py",
           "            return form_refusal(headers)", "            return None",
           (LIMITS_PAGE + "test_a_body_that_is_not_a_small_form_is_refused_before_it_is_read",),
           fast=True),
    Mutant("chunked-body-read-whole", "a chunked form (no Content-Length) is read to its end, "
           "however long", "scheduler/web/app.py", "            if len(body) > FORM_BYTES:",
           "            if False:",
           (LIMITS_PAGE + "test_a_chunked_form_is_read_to_the_limit_and_no_further",),
           fast=True),
    Mutant("done-text-from-the-link", "a page shows the `done` text of its link (anyone's "
           "sentence under the console's address)", "scheduler/web/app.py",
           '"done": results.message(request.query_params)',
           '"done": request.query_params.get("done")',
           (LIMITS_PAGE + "test_a_link_puts_no_sentence_of_its_own_on_any_page",), fast=True),
    Mutant("slot-fire-unbounded", "a slot id's fire time may have any number of digits (int() "
           "refuses past 4300: /slots/a:<5000 digits> is a 500)", "scheduler/core/keys.py",
           " or len(fire) > MAX_FIRE_DIGITS", "",
           (LIMITS_PAGE + "test_no_route_answers_500_to_hostile_values",), fast=True),
    # The lane index (queue_cleaner.py): a lane that holds anything must stay indexed, or the
    # reclaimer never finds its expired leases and status never shows its depth.
    Mutant("cleaner-drops-a-running-lane", "clean_lanes.lua ignores pending entries: a lane "
           "whose only entry is a run in flight leaves the index, and when that run's worker "
           "dies the reclaimer never finds its expired lease",
           "scheduler/scripts/lua/clean_lanes.lua", "      if f['pending'] > 0 then return true end",
           "      if false then return true end", (IDLE_LEASE, IDLE_LANES), fast=True),
    Mutant("cleaner-drops-undelivered-entries", "clean_lanes.lua sees only pending entries: a "
           "lane whose entries wait for a worker leaves the index (and status)",
           "scheduler/scripts/lua/clean_lanes.lua",
           "      return #redis.call('XRANGE', stream, '(' .. f['last-delivered-id'], '+', "
           "'COUNT', 1) > 0", "      return false", (IDLE_LANES,), fast=True),
    Mutant("cleaner-drops-unread-lanes", "clean_lanes.lua takes a lane no worker ever read "
           "(no consumer group) for empty", "scheduler/scripts/lua/clean_lanes.lua",
           "  return redis.call('XLEN', stream) > 0", "  return false", (IDLE_LANES,),
           fast=True),
    Mutant("submit-loses-the-re-add", "submit.lua no longer names its lane in the index: a "
           "queue the cleaner dropped stays out of status and the reclaimer's walk when jobs "
           "come back to it", "scheduler/scripts/lua/submit.lua",
           "        index_lane(prefix, lane_name, now_s)\n", "",
           (f"{REINDEXED}submit]",), fast=True),
    Mutant("promote-loses-the-re-add", "promote.lua dispatches into a lane without naming it "
           "in the index (a delayed job's queue, dropped while it waited)",
           "scheduler/scripts/lua/promote.lua", "          index_lane(prefix, lane_name, now)\n", "",
           (f"{REINDEXED}promote]",), fast=True),
    Mutant("dispatch-loses-the-re-add", "_lib.lua's dispatch (replay, reclaim, requeue, sweep, "
           "restore, trigger) writes an entry without naming its lane in the index",
           "scheduler/scripts/lua/_lib.lua",
           "  index_lane(prefix, lane_name, now)\n  local msg = redis.call('XADD'",
           "  local msg = redis.call('XADD'", (f"{REINDEXED}replay]",), fast=True),
    Mutant("history-skips-slot-ends", "the snapshotter takes a hash read to cover its slot's "
           "events of the next second too: a slot promoted and finished within a second of "
           "its read keeps its earlier state in history (`queued` while Redis says "
           "`succeeded`: history rule)", "scheduler/history/intake.py",
           "if seen.get(slot, -1) >= version:",
           "if seen.get(slot, -1) + 1_000_000_000 >= version:", (READ_COVERS,), fast=True),
    Mutant("active-run-not-copied", "promote.lua's record of an overlap=\"skip\" slot no "
           "longer names its job: the job's `active` run never reaches history (`sched "
           "recover` would start the next occurrence beside the restored one: history rule)",
           "scheduler/scripts/lua/promote.lua",
           "activated[#activated + 1] = {slot = slot_id, job = st[5]}",
           "activated[#activated + 1] = {slot = slot_id}", (ACTIVE_READ,), fast=True),
    Mutant("cancel-acks-the-plain-stream", "cancel.lua acks a queued slot's entry id in its "
           "queue's plain stream, not its priority's lane: another slot's entry of the same "
           "id, read and not yet claimed, is acked (the sweeper then takes it for an orphan)",
           "scheduler/scripts/lua/cancel.lua",
           "    if st[1] == 'queued' then ack(prefix, lane(st[3], st[5]), st[2]) end",
           "    if st[1] == 'queued' then ack(prefix, st[3], st[2]) end",
           (f"{PRIORITIES}::test_cancelling_a_queued_slot_acks_its_own_lanes_entry_only"
            "[single-cancel]", LANE_ACK), fast=True),
    Mutant("takeover-a-page-per-claim", "a snapshotter takes over a dead one's pending events "
           "one page (its adaptive read count, often 1) per shard per claim_idle_s / 2: "
           "history stays minutes behind after a crash", "scheduler/history/snapshotter.py",
           "                self.caught_up = False\n                self._claim_more = True\n",
           "                pass\n",
           ("tests/history/test_snapshotter.py::test_a_dead_snapshotters_pending_events_are_"
            "taken_over_in_a_few_claims[sqlite-single]",), fast=True),
    Mutant("retry-cap-forgotten", "fail.lua forgets the policy's max_s: base * 2^(n-1) "
           "uncapped (RetryPolicy(base_s=1, max_s=300, max_attempts=20) would wait six days "
           "before its last attempt)", "scheduler/scripts/lua/fail.lua",
           "retry_ms = math.min(cap, base * 2 ^ (failures - 1)) * (1 - jitter * u)",
           "retry_ms = base * 2 ^ (failures - 1) * (1 - jitter * u)", (RETRY_POLICY,),
           fast=True),
    Mutant("retry-jitter-lengthens", "fail.lua's jitter lengthens the delay (1 + jitter*u): "
           "past the cap, out of the policy's bounds", "scheduler/scripts/lua/fail.lua",
           "retry_ms = math.min(cap, base * 2 ^ (failures - 1)) * (1 - jitter * u)",
           "retry_ms = math.min(cap, base * 2 ^ (failures - 1)) * (1 + jitter * u)",
           (RETRY_POLICY,), fast=True),
    Mutant("retry-exponent-off-by-one", "fail.lua doubles once too often: the first retry "
           "waits 2 * base_s", "scheduler/scripts/lua/fail.lua",
           "retry_ms = math.min(cap, base * 2 ^ (failures - 1)) * (1 - jitter * u)",
           "retry_ms = math.min(cap, base * 2 ^ failures) * (1 - jitter * u)",
           (RETRY_POLICY,), fast=True),
    Mutant("submit-payload-unchecked", "submit.lua takes a payload that is not a string: the "
           "batch's jobs before it are written, then HSET fails (a call half written)",
           "scheduler/scripts/lua/submit.lua",
           "      if type(value) ~= 'string' then return invalid(i, job_id, 'the payload is not "
           "a string') end",
           "      if false then return invalid(i, job_id, 'the payload is not a string') end",
           (SUBMIT_CHECKS,), fast=True),
    Mutant("submit-any-field", "submit.lua writes a job-hash field the contract does not have "
           "(`status`, a made-up name) as a string",
           "scheduler/scripts/lua/submit.lua", "      local kind = field_types[name]\n",
           "      local kind = field_types[name] or 's'\n", (SUBMIT_CHECKS,), fast=True),
    Mutant("submit-fire-unchecked", "submit.lua takes any fire_ms a number parses from (1e300, "
           "nan, inf, 0x10, 007)",
           "scheduler/scripts/lua/submit.lua",
           "    if type(fire) ~= 'string' or not string.find(fire, '^[1-9]%d*$') and fire ~= '0'",
           "    if type(fire) ~= 'string' or not tonumber(fire)", (SUBMIT_CHECKS,), fast=True),
    Mutant("submit-counts-unchecked", "submit.lua ignores items past its n jobs and their field "
           "counts (a call of two jobs that says one writes the first)",
           "scheduler/scripts/lua/submit.lua", "if items[b + 1] ~= nil then", "if false then",
           (SUBMIT_COUNTS,), fast=True),
    Mutant("supervisor-forgets-the-dead", "`sched worker --processes N` never starts again a "
           "child that died: the supervisor runs on with fewer workers",
           "scheduler/worker/supervisor.py", "        self.due[child.index] = now + delay\n",
           "        pass\n", (SUPERVISED,)),
    Mutant("supervisor-kills-on-stop", "SIGTERM to `sched worker --processes N` kills its "
           "children instead of letting them drain: their runs wait out their leases",
           "scheduler/worker/supervisor.py", "            _signal(c, signal.SIGTERM)\n",
           "            _signal(c, signal.SIGKILL)\n", (SUPERVISED,)),
    Mutant("supervisor-start-ignores-stop", "SIGTERM during the start of the children does "
           "not stop the start: `--processes` many are forked first, then stopped",
           "scheduler/worker/supervisor.py",
           "                if self.stopping:  # SIGTERM during the start: start no more\n",
           "                if False:\n", (START_STOPPED,)),
    Mutant("supervisor-restarts-at-once", "a child that died after it was up is started again "
           "at once, each time: no backoff while it dies again and again",
           "scheduler/worker/supervisor.py",
           "        delay = min(BACKOFF_FIRST_S * 2 ** (tries - 1), BACKOFF_MAX_S)\n",
           "        delay = 0.0\n", (KEEPS_DYING,)),
    Mutant("supervisor-no-crash-window", "a child that dies every few seconds after it is up "
           "is restarted for ever: the supervisor looks healthy and serves nothing",
           "scheduler/worker/supervisor.py", "        if len(deaths) >= CRASH_LOOP:\n",
           "        if False:\n", (KEEPS_DYING,)),
    Mutant("processes-unbounded", "`--processes` takes any count (99999999999999999999999 "
           "forks until the kernel kills the supervisor)", "scheduler/worker/supervisor.py",
           "not 1 <= processes <= MAX_PROCESSES", "not 1 <= processes",
           (SIZES + "test_the_config_structs_refuse_sizes_past_their_maximum",), fast=True),
    Mutant("process-pool-unbounded", "WorkerConfig takes any process-pool size",
           "scheduler/core/bounds.py", '"process_pool": (1, MAX_PROCESS_POOL)',
           '"process_pool": (1, 10**30)',
           (SIZES + "test_the_config_structs_refuse_sizes_past_their_maximum",), fast=True),
    Mutant("supervisor-keeps-sigusr1", "SIGUSR1 to `sched worker --processes N` reaches no "
           "child: nothing logs where its tasks wait", "scheduler/worker/supervisor.py",
           "                _signal(c, signal.SIGUSR1)\n", "                pass\n",
           ("tests/faults/test_supervisor.py::test_sigusr1_reaches_every_child",)),
    Mutant("supervisor-waits-on-stuck-children", "a child that ignores SIGTERM is killed a "
           "minute after the grace, not STOP_MARGIN_S: the supervisor's stop hangs on it",
           "scheduler/worker/supervisor.py",
           "deadline = time.monotonic() + self.grace_s + STOP_MARGIN_S",
           "deadline = time.monotonic() + self.grace_s + 60 * STOP_MARGIN_S",
           ("tests/faults/test_supervisor.py::"
            "test_a_child_that_ignores_sigterm_is_killed_after_the_grace_and_margin",)),
    Mutant("merged-metrics-forget-the-dead", "the supervisor's /metrics drops a dead child's "
           "counts: its sums go down, which Prometheus reads as a counter reset",
           "scheduler/observe/children.py",
           "                self.gone[key] = self.gone.get(key, 0.0) + value\n",
           "                pass\n",
           ("tests/worker/test_supervisor_parts.py::"
            "test_counters_and_histograms_are_summed_and_gauges_kept_per_child",)),
    Mutant("supervisor-loops-on-crashes", "a child that cannot start is started again "
           "forever: the supervisor never stops with its error",
           "scheduler/worker/supervisor.py", "        if streak >= CRASH_LOOP:\n",
           "        if False:\n",
           ("tests/e2e/test_processes.py::"
            "test_a_child_that_cannot_start_stops_the_supervisor_with_one_error",)),
    Mutant("unplannable-job-stops-the-pass", "a cron job whose definition does not parse "
           "raises out of the materializer's pass: every other cron job's occurrences stop",
           "scheduler/node/materializer.py", "    except (SchedulerError, ValueError) as exc:",
           "    except ZeroDivisionError as exc:",
           ("tests/node/test_materializer.py::test_a_job_whose_definition_does_not_parse_"
            "stops_no_other[single-cron-not a cron]",), fast=True),
    Mutant("outbox-deletes-before-redis-acks", "the relay commits the DELETE of its rows "
           "before Redis acknowledged their jobs: a Redis failure then loses them (accepted rule)",
           "scheduler/outbox/relay.py",
           "                good, bad = self._send(rows) if rows else (0, [])\n",
           "                conn.commit()\n"
           "                good, bad = self._send(rows) if rows else (0, [])\n",
           (OUTBOX_WAITS, OUTBOX_FAULTS + "test_rows_wait_while_redis_is_stopped_then_all_run"),
           fast=True),
    Mutant("outbox-fresh-ids-on-resend", "the relay lets submit_many draw fresh job ids: a batch "
           "sent again after a failure makes every job twice, under ids no submit returned",
           "scheduler/outbox/relay.py", "        ids = [row[1] for row in kept]\n",
           "        ids = None  # type: ignore[assignment]\n",
           (OUTBOX_RESEND, OUTBOX_FAULTS
            + "test_relays_sigkilled_every_second_lose_and_duplicate_nothing"), fast=True),
    Mutant("outbox-row-error-narrowed", "the relay refuses a row only for a ValidationError: "
           "a row nested past the decoder (RecursionError) raises out of the pass, rolls back "
           "its batch, and stops the relay on the same rows for good",
           "scheduler/outbox/relay.py",
           "            except Exception as exc:  # noqa: BLE001 - whatever a row holds, it is "
           "the row's\n", "            except ValidationError as exc:\n",
           (OUTBOX_POISON,), fast=True),
    Mutant("outbox-relay-stuck-on-a-row", "the relay refuses a row only for a ValidationError: "
           "one poison row among the good ones fails every pass of `sched outbox relay` and "
           "holds its whole batch back (after every restart too)",
           "scheduler/outbox/relay.py",
           "            except Exception as exc:  # noqa: BLE001 - whatever a row holds, it is "
           "the row's\n", "            except ValidationError as exc:\n",
           (OUTBOX_POISON_FAULT,)),
    Mutant("outbox-reason-keeps-control-characters", "a refused row's reason is stored as "
           "the error said it: a NUL quoted from the row fails the INSERT into outbox_rejected, "
           "and with it every pass over the batch", "scheduler/outbox/relay.py",
           '    text = _CONTROL.sub(lambda m: f"\\\\x{ord(m.group()):02x}", " ".join(text.split()))\n',
           '    text = " ".join(text.split())\n', (OUTBOX_POISON,), fast=True),
    Mutant("outbox-serves-any-namespace", "a relay takes an outbox another namespace's relay "
           "serves: two apps (staging and production) sharing a schema swap jobs silently",
           "scheduler/outbox/relay.py", "        if serves != namespace:\n",
           "        if False:\n", (OUTBOX_OTHER_NS,), fast=True),
    Mutant("outbox-takes-other-namespaces-rows", "a relay submits a row written for another "
           "namespace into its own", "scheduler/outbox/relay.py",
           "            if row[4] is not None and row[4] != namespace:\n",
           "            if False:\n",
           (OUTBOX + "test_rows_are_written_for_a_namespace_and_a_relay_takes_only_its_own",),
           fast=True),
    Mutant("cron-runs-past-the-calendar", "a cron series is iterated past year 9999: a start "
           "that leaves no fire is an OverflowError traceback, next_fires and the job page fail",
           "scheduler/core/cron.py", "        except _CALENDAR_ENDS:\n            return  # the "
           "next local time, or its instant, is past year 9999\n",
           "        except ZeroDivisionError:\n            return\n",
           ("tests/sdk/test_calendar_end.py",), fast=True),
    Mutant("outbox-no-notify", "the outbox's trigger sends no NOTIFY: relays see a commit "
           "only at their next poll", "scheduler/outbox/sql/postgres/0001_outbox.sql",
           "    PERFORM pg_notify(TG_TABLE_SCHEMA || '.outbox', '');", "    NULL;",
           (OUTBOX + "test_a_commit_wakes_the_relay_long_before_its_poll",)),
    Mutant("pool-stop-spares-the-child", "a process-pool run stopped for its timeout (or a "
           "cancel, a lost lease, shutdown) leaves its child running: the CPU goes on being "
           "spent and the child never serves again",
           "scheduler/worker/pool.py",
           "                if child.current is item:\n"
           "                    self._retire(child)  # it runs this one: SIGKILL\n",
           "                if child.current is item:\n                    pass\n",
           (POOL_TIMEOUT,)),
    Mutant("pool-child-not-replaced", "a process-pool child killed or retired is not replaced: "
           "the pool shrinks until no run of a process task can start",
           "scheduler/worker/pool.py", "        if self.closed:\n            return\n",
           "        if True:\n            return\n",
           (POOL_TIMEOUT, POOL + "test_a_child_is_replaced_after_max_tasks_per_child_runs")),
    Mutant("pool-waited-run-has-no-timer", "a process-pool run that waited for a child arms "
           "no timeout timer once one takes it (the wait's placeholder holds its slot): it "
           "runs past its timeout to the end, holding the child",
           "scheduler/worker/pool.py",
           "        if run.timeout_ms:\n            run.timer = asyncio.get_running_",
           "        if run.timeout_ms and run.timer is None:\n            run.timer = "
           "asyncio.get_running_",
           (POOL + "test_a_run_that_waited_for_the_child_is_still_killed_at_its_timeout",)),
    Mutant("pool-dead-child-not-retired", "a process-pool child that died under a handler has "
           "its pipe closed but is not retired: no child replaces it, and a pool of one serves "
           "no process task again, the runs waiting for a child with their lease kept alive",
           "scheduler/worker/pool.py",
           "            ended = _ended(child.proc)\n        finally:\n"
           "            self._retire(child)\n",
           "            ended = _ended(child.proc)\n        finally:\n            pass\n",
           (POOL + "test_a_pool_of_one_replaces_its_dead_child",)),
    Mutant("pool-timeout-counts-from-the-claim", "a process-pool run that waits for a child "
           "has its timeout armed at its claim: it times out waiting, without ever running "
           "(the timeout counts from when a child takes the run)", "scheduler/worker/pool.py",
           "        run.timer = loop.call_later(0, _nothing)\n        run.timer.cancel()\n", "",
           (POOL + "test_a_run_that_waited_for_the_child_is_still_killed_at_its_timeout",)),
    Mutant("pool-max-tasks-ignored", "--max-tasks-per-child is ignored: a leaky library's "
           "child is never replaced", "scheduler/worker/pool.py",
           "        if self.max_tasks_per_child and child.runs >= self.max_tasks_per_child:",
           "        if False:",
           (POOL + "test_a_child_is_replaced_after_max_tasks_per_child_runs",)),
    Mutant("pool-child-logs-dropped", "ctx.logger's lines in a process-pool child reach "
           "neither the worker's log nor the attempt's run log", "scheduler/worker/pool.py",
           "current.run.ctx.logger.log(message.level, message.text)", "pass",
           (POOL + "test_a_handler_in_a_child_gets_its_context_logs_once_and_returns",)),
    Mutant("pool-close-spares-the-children", "the pool's close at the worker's exit leaves "
           "its children running: a busy one outlives its worker",
           "scheduler/worker/pool.py",
           "        for proc in list(self.procs):\n            with contextlib.suppress("
           "ProcessLookupError):\n                proc.send_signal(signal.SIGKILL)\n"
           "        for proc in list(self.procs):\n            proc.wait()\n",
           "        pass\n",
           (POOL + "test_a_run_still_going_after_the_grace_period_is_released_and_its_child_"
            "killed",)),
    Mutant("pool-share-of-cores-ignored", "under --processes N each child's process pool "
           "takes every core, not its share: N times more pool children than cores",
           "scheduler/cli/run.py", "env[PROCESS_POOL_ENV] = str(max(1, cores() // processes))",
           "env[PROCESS_POOL_ENV] = str(cores())",
           ("tests/e2e/test_processes.py::"
            "test_each_child_gets_its_share_of_the_cores_for_its_process_pool",)),
    Mutant("pool-accepts-an-async-def", "pool=\"process\" takes an async def, which would "
           "hold a child while it waits (refused at registration)",
           "scheduler/worker/registry.py",
           "    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):",
           "    if False:",
           (POOL + "test_an_async_def_or_a_handler_a_child_cannot_import_is_refused_at_"
            "registration",), fast=True),
    Mutant("pool-start-ignores-stop", "a SIGTERM while the process pool's children import "
           "a slow module waits until they are all ready (up to START_S) before the worker "
           "stops", "scheduler/worker/pool.py",
           "stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None",
           "stopped = None",
           (POOL + "test_sigterm_while_the_pool_starts_stops_the_worker_and_its_children",)),
    Mutant("pool-retry-is-a-failure", "Retry raised in a process-pool child fails the attempt "
           "as an error instead of steering the slot (after, reason)",
           "scheduler/worker/pool.py", '    if failed.kind == "retry":',
           '    if failed.kind == "never":',
           (POOL + "test_retry_after_in_a_child_sets_when_the_next_attempt_runs",)),
    Mutant("pool-started-for-any-app", "the process pool starts for an app without a "
           "pool=\"process\" task: children for nothing", "scheduler/worker/worker.py",
           "        if self.pool is not None or not self.registry.has_process_tasks():",
           "        if self.pool is not None:",
           (POOL + "test_a_registry_without_process_tasks_starts_no_pool",), fast=True),
    Mutant("pool-child-outlives-its-worker", "a process-pool child does not die with its worker "
           "(no PR_SET_PDEATHSIG): a SIGKILLed worker leaves its busy children spinning",
           "scheduler/worker/child.py", "        libc.prctl(1, signal.SIGKILL, 0, 0, 0)",
           "        pass", (POOL + "test_the_children_die_with_their_worker_even_sigkilled_mid_run",)),
    Mutant("pool-once-ignores-a-lost-lease", "ctx.once in a process-pool child is told yes "
           "after its slot was reclaimed (the effect happens twice: exactly-once rule)",
           "scheduler/worker/pool.py", "            return OnceReply(stale=True, error=str(exc))",
           "            return OnceReply(ok=True)",
           (POOL + "test_ctx_once_in_a_child_raises_lease_lost_once_the_slot_was_reclaimed",)),
    Mutant("debounce-keeps-first-payload", "a debounced repeat moves the pending run but "
           "keeps the first submit's payload (the run must have the latest)",
           "scheduler/scripts/lua/submit.lua",
           "    redis.call('HSET', job_key, 'payload', items[at + 1])",
           "    local _ = items[at + 1]", (DEBOUNCED,), fast=True),
    Mutant("dedupe-window-never-ends", "a dedupe window's record is written without its "
           "expiry: the key holds forever, as a plain dedupe key would",
           "scheduler/scripts/lua/submit.lua",
           "      redis.call('SET', prefix .. 'dedupe:' .. window[1], job_id, 'PX',\n"
           "        math.max(window[2], fire - now, 1))",
           "      redis.call('SET', prefix .. 'dedupe:' .. window[1], job_id)",
           (WINDOW_ENDS,), fast=True),
    Mutant("debounced-slot-dispatched-early", "a debounced slot is taken early by promote: "
           "repeats after that stop moving it, and a second job starts",
           "scheduler/scripts/lua/promote.lua", "or st[3] == 'debounce' or st[6])",
           "or st[6])", (DEBOUNCED_RUN,)),
    Mutant("key-permit-never-given-back", "a keyed run's end (success, fail, release, "
           "reclaim) does not give its key's permit back: the key stalls at its limit for good",
           "scheduler/scripts/lua/_lib.lua",
           "    redis.call('ZREM', queue_running(prefix, s.queue), run_member(s.key, slot_id, attempt))\n"
           "    redis.call('ZREM', older_running(prefix, s.queue, s.key), slot_id, older_member(slot_id, attempt))\n",
           "", (TAKE + "test_every_end_of_an_attempt_gives_the_permit_back",
                TAKE + "test_the_per_key_limit_holds_and_passes_over_a_full_key"), fast=True),
    Mutant("key-turn-skipped", "the keys of a round go back to the ring's tail in reverse "
           "order: the key that just had its turn comes round again first, and others wait",
           "scheduler/scripts/lua/take.lua",
           "      back[#back + 1] = key", "      table.insert(back, 1, key)", (TAKE + "test_keys_take_turns_whatever_order_their_slots_came_in",
                           TAKE + "test_a_weight_is_turns_per_round"), fast=True),
    Mutant("take-not-asked-again", "a worker whose take's reply was lost does not ask for "
           "its grants again: they wait out their lease and count a failed attempt",
           "scheduler/worker/keyed.py",
           "(s, q) in self._again, q in permits or not w.wide_limits,",
           "False, q in permits or not w.wide_limits,",
           ("tests/worker/test_keyed_claims.py",), fast=True),
    Mutant("key-limit-ignored", "take.lua grants past the per-key limit",
           "scheduler/scripts/lua/take.lua", "      room = math.min(room, per_key - held)",
           "      room = room", (TAKE + "test_the_per_key_limit_holds_and_passes_over_a_full_key",),
           fast=True),
    Mutant("retry-time-as-float-text", "fail.lua stores a retry's time as Lua prints a "
           "number: from 1e17 ms on it is \"1e+17\" text, which no reader takes",
           "scheduler/scripts/lua/fail.lua",
           "local at = string.format('%d', now + math.floor(retry_ms))",
           "local at = now + math.floor(retry_ms)", (WHOLE_TEXT_1E17,), fast=True),
    Mutant("lease-as-float-text", "heartbeat.lua stores the renewed lease as Lua prints a "
           "number (exponent text from 1e17 ms on)", "scheduler/scripts/lua/heartbeat.lua",
           "local lease_until = string.format('%d', now + tonumber(ARGV[2]))",
           "local lease_until = now + tonumber(ARGV[2])", (WHOLE_TEXT_1E17,), fast=True),
    Mutant("attempt-times-as-float-text", "an archived attempt's times are written as cjson "
           "prints a number (exponent text from 1e14 ms on): the attempt reads as unreadable",
           "scheduler/scripts/lua/_lib.lua",
           "'\":' .. string.format('%d', t[2])", "'\":' .. t[2]", (WHOLE_TEXT,), fast=True),
    Mutant("reader-takes-any-number", "slot_from_hash reads a number with int(): one slot "
           "holding \"1e+17\" fails every listing, page and read that meets it",
           "scheduler/core/models.py", "        number = whole_number(value)\n",
           "        number = int(value)\n", (UNREADABLE_SLOT,), fast=True),
    Mutant("reader-takes-any-time", "a time past the year 9999 reads as it is: every page "
           "that shows it as a date fails", "scheduler/core/models.py",
           "if number is None or (name.endswith((\"_ms\", \"_until\")) and not 0 <= number <= "
           "LATEST_MS):", "if number is None:", (UNREADABLE_SLOT,), fast=True),
    Mutant("snapshot-row-intolerant", "the snapshotter's row takes a slot's numbers with "
           "int(): one malformed slot fails every batch, and nothing more is copied",
           "scheduler/history/store/rows.py",
           "    number = whole_number(value) if value else None\n",
           "    number = int(value) if value else None\n",
           (MALFORMED + "test_the_snapshotter_copies_a_slot_with_a_malformed_number",),
           fast=True),
    Mutant("retry-after-not-cut", "a handler's Retry(after=1e15) goes to fail.lua as it is: "
           "the retry lands past every date a reader can show",
           "scheduler/core/models.py", "return int(min(after, MAX_SECONDS) * 1000), after > "
           "MAX_SECONDS", "return int(after * 1000), after > MAX_SECONDS",
           (MALFORMED + "test_a_retry_after_past_a_year_waits_a_year",), fast=True),
    Mutant("worker-config-unbounded", "WorkerConfig checks no maximum: lease_s=1e20 starts "
           "a worker whose every heartbeat fails", "scheduler/worker/config.py",
           "        check_bounds(self, WORKER_BOUNDS)\n", "",
           (BOUNDS_CLI + "test_every_config_refuses_a_number_past_its_range",), fast=True),
    Mutant("lease-option-unbounded", "`sched worker --lease` takes any finite number again",
           "scheduler/cli/options.py", "    return Finite(min=lo, max=hi)",
           "    return Finite(min=lo)",
           (BOUNDS_CLI + "test_every_number_option_has_a_range_and_refuses_past_it",),
           fast=True),
    Mutant("debounce-stretches-to-an-epoch", "a debounced repeat stretches the window's "
           "record by the moved run's fire time (an epoch in ms) instead of by the debounce: the "
           "key holds for decades and every later submit returns the old job",
           "scheduler/scripts/lua/submit.lua", "    redis.call('PEXPIRE', record, window[3])",
           "    redis.call('PEXPIRE', record, fire)", WINDOW_MOVED_ENDS, fast=True),
    Mutant("debounce-moves-a-retry", "a debounced repeat moves a failed attempt's retry (the "
           "slot is `scheduled` again) and swaps its payload: only a run never started moves",
           "scheduler/scripts/lua/submit.lua",
           "  if st[1] ~= 'scheduled' or st[2] and st[2] ~= '0' then return held end",
           "  if st[1] ~= 'scheduled' then return held end", (RETRY_NOT_MOVED,), fast=True),
    Mutant("weighted-key-past-its-limit", "take.lua checks what a key already holds, not what "
           "its turn would add: a key of weight 5 under a per-key limit of 2 starts 5 at once",
           "scheduler/scripts/lua/take.lua", "    if held + room > per_key then",
           "    if held >= per_key then", (WEIGHT_LIMIT,), fast=True),
    Mutant("window-repeat-writes-a-job", "submit.lua does not read a window's record: a "
           "repeat within dedupe_ttl makes a second job", "scheduler/scripts/lua/submit.lua",
           "  local held = redis.call('GET', record)", "  local held = false",
           (WINDOW_REPEAT,), fast=True),
    Mutant("repeat-extends-the-window", "a repeat within a dedupe_ttl window starts its "
           "time again: a key submitted often enough never lets a new job through",
           "scheduler/scripts/lua/submit.lua",
           "  if not held or window[3] == 0 then return held end",
           "  if held then redis.call('PEXPIRE', record, window[2]) end\n"
           "  if not held or window[3] == 0 then return held end", (NOT_EXTENDED,), fast=True),
    Mutant("debounce-keeps-the-time", "a debounced repeat swaps the payload but leaves the run "
           "in `due` at its first time: it is not moved", "scheduler/scripts/lua/submit.lua",
           "  redis.call('ZADD', prefix .. 'due', 'XX', fire, slot_id)", "  local _ = fire",
           (DEBOUNCED,), fast=True),
    Mutant("debounce-keeps-a-payload-for-none", "a debounced repeat without a payload keeps "
           "the previous one (the run must have the latest: none)",
           "scheduler/scripts/lua/submit.lua", "    redis.call('HDEL', job_key, 'payload')",
           "    local _ = job_key", (DEBOUNCED,), fast=True),
    Mutant("debounce-moves-a-dispatched-run", "a debounced repeat swaps the payload of a run "
           "already dispatched (queued): a repeat after the fire time must write nothing",
           "scheduler/scripts/lua/submit.lua",
           "  if st[1] ~= 'scheduled' or st[2] and st[2] ~= '0' then return held end",
           "  if st[1] == 'running' or st[2] and st[2] ~= '0' then return held end",
           (DEBOUNCED,), fast=True),
    Mutant("debounce-takes-a-delay", "the SDK takes debounce with delay, at or cron (the "
           "debounce then silently overrides the schedule)", "scheduler/sdk/batching.py",
           "        if schedule is not IMMEDIATE:\n            raise ValidationError(\"debounce\"",
           "        if False:\n            raise ValidationError(\"debounce\"", (BAD_WINDOW,),
           fast=True),
    Mutant("full-key-blocks-the-ring", "take.lua stops at the first key that can start "
           "nothing: a key at its limit holds up every key behind it in the ring",
           "scheduler/scripts/lua/take.lua",
           "  if started > 0 then idle = 0 else idle = idle + 1 end",
           "  if started == 0 then break end", (HEAD_OF_LINE,), fast=True),
    Mutant("key-rate-ignored", "take.lua takes tokens from a key's bucket but starts its whole "
           "room anyway: per_key_rate limits nothing", "scheduler/scripts/lua/take.lua",
           "    room = got\n", "    room = math.max(got, room)\n",
           (TAKE + "test_a_per_key_rate_holds_each_key_to_its_own_bucket",), fast=True),
    Mutant("key-priority-ignored", "a key's queue orders its slots by arrival alone: a key's "
           "priority 1 job waits behind its priority 5 ones", "scheduler/scripts/lua/_lib.lua",
           "(tonumber(priority) or DEFAULT.priority) * 1e13", "DEFAULT.priority * 1e13",
           (TAKE + "test_priorities_order_within_a_key",), fast=True),
    Mutant("key-weight-ignored", "take.lua gives every key one start a turn, whatever its "
           "weight", "scheduler/scripts/lua/take.lua",
           "      share * (weighted and tonumber(redis.call('HGET', weights, key)) or 1))",
           "      share * 1)",
           (TAKE + "test_a_weight_is_turns_per_round",), fast=True),
    Mutant("dedupe-not-scoped-by-tenant", "a dedupe key with a concurrency key is named by the "
           "dedupe key alone: two tenants of one home shard share one job",
           "scheduler/sdk/batching.py",
           'stem=dedupe_job_id(f"{concurrency_key} {dedupe_key}"))',
           "stem=dedupe_job_id(dedupe_key))",
           (TENANTS + "test_a_dedupe_key_is_scoped_by_its_concurrency_key",), fast=True),
    Mutant("keyed-jobs-outside-their-home", "keyed job ids are all placed in shard 0, not in "
           "their key's home shard: a key's runs and its count are on different shards",
           "scheduler/core/jobspec.py", "                     key_shard(concurrency_key, "
           "shards), shards)", "                     0, shards)",
           (TENANTS + "test_the_job_hash_holds_the_key_and_the_job_lives_in_its_home_shard",),
           fast=True),
    Mutant("concurrency-key-any-text", "a concurrency key of any characters is taken (spaces, "
           "braces, control characters reach key names and terminals)",
           "scheduler/core/keys.py", r'_CONCURRENCY_KEY = re.compile(r"[A-Za-z0-9_.@+=/:\-]{1,128}")',
           r'_CONCURRENCY_KEY = re.compile(r"(?s:.){1,128}")',
           (TENANTS + "test_a_bad_key_is_refused_in_one_line_and_nothing_is_written",),
           fast=True),
    Mutant("debounced-key-outlives-its-run", "a debounced job's record is set to last a "
           "debounce past its run's fire time: a submit after the run started returns the old "
           "job instead of making a new one", "scheduler/scripts/lua/submit.lua",
           "        math.max(window[2], fire - now, 1))",
           "        math.max(window[2], fire - now + window[3], 1))",
           (WINDOW_MOVED_ENDS[0],), fast=True),
    Mutant("window-seconds-unbounded", "dedupe_ttl and debounce take any positive seconds: "
           "less than a ms, or past a year", "scheduler/core/models.py",
           "not 0.001 <= float(seconds) <= MAX_SECONDS", "not 0 < float(seconds)",
           (BAD_WINDOW,), fast=True),
    Mutant("window-id-given", "submit_many(ids=...) takes an id for a windowed job: a repeat "
           "within the window then writes a second job under the given id",
           "scheduler/sdk/batching.py",
           "        if type(job[0]) is WindowId:\n            raise ValidationError(\"ids\"",
           "        if False:\n            raise ValidationError(\"ids\"", (BAD_WINDOW,),
           fast=True),
    Mutant("outbox-takes-a-window", "outbox.submit takes dedupe_ttl and debounce: the row is "
           "written and its job refused only later, by the relay",
           "scheduler/outbox/writer.py",
           "        if spec.dedupe_ttl is not None or spec.debounce is not None:",
           "        if False:", (OUTBOX_WINDOW,), fast=True),
    Mutant("key-weight-unbounded", "set_key_weight takes any weight from 1 up: one key's turn "
           "can hold a shard's take for as long as it likes", "scheduler/sdk/queues.py",
           "not 1 <= weight <= MAX_KEY_WEIGHT", "not 1 <= weight",
           (TENANTS + "test_key_weights_are_set_read_and_reset_in_the_home_shard",), fast=True),
    Mutant("given-id-outside-home", "submit_many(ids=...) takes a keyed job's id outside its "
           "key's home shard: the key's runs are then counted on two shards",
           "scheduler/sdk/batching.py",
           "            if shard_of(given, shards) != shard_of(job[0], shards):",
           "            if False:", (TENANTS + "test_given_ids_are_taken_only_in_the_home_shard",),
           fast=True),
    Mutant("schedule-key-changes-quietly", "declaring a named schedule with another key (or "
           "none) while its series lives makes a second series instead of being refused",
           "scheduler/sdk/schedules.py",
           "    yield from _same_key(core, name, job_id, spec.concurrency_key)",
           "    yield from ()",
           (TENANTS + "test_a_named_schedule_keeps_the_key_it_was_declared_with",), fast=True),
    Mutant("key-tokens-for-slots-it-lacks", "a key's turn takes its whole room's worth of "
           "tokens however few slots it has: its next slots wait for tokens it never used",
           "scheduler/scripts/lua/take.lua", "      math.min(room, redis.call('ZCARD', kq)))",
           "      room)", (TAKE + "test_a_key_s_turn_takes_tokens_only_for_the_slots_it_has",),
           fast=True),
    Mutant("key-rate-bucket-two-seconds", "the rate's bucket (shared with the queue's rate) "
           "holds two seconds' worth: a key idle for a while starts a burst",
           "scheduler/scripts/lua/_bucket.lua",
           "  local cap = math.max(1, rate / 10)", "  local cap = math.max(1, rate * 2)",
           (TAKE + "test_a_per_key_rate_holds_each_key_to_its_own_bucket",), fast=True),
    Mutant("depth-leaves-out-keyed-slots", "a queue's depth counts its streams only: keyed "
           "slots waiting for their turn vanish from status, `sched queues` and the gauge",
           "scheduler/observe/status.py", "        q.depth += k.waiting", "        q.depth += 0",
           (KEY_STATUS + "test_a_queues_depth_counts_its_keys_queued_slots[single]",),
           fast=True),
    Mutant("busiest-keys-least-first", "queue_keys names the least busy keys first (and keeps "
           "those for its top)", "scheduler/observe/keyed.py",
           "key=lambda k: (-(k.waiting + k.running), k.key))[:top]",
           "key=lambda k: ((k.waiting + k.running), k.key))[:top]",
           (KEY_STATUS + "test_the_busiest_keys_come_first_up_to_top[single]",), fast=True),
    Mutant("exporter-names-every-key", "the exporter and status name a queue's keys by the "
           "thousand: 100,000 tenants become as many series", "scheduler/observe/keyed.py",
           "TOP_KEYS = 10 ", "TOP_KEYS = 1000 ",
           (KEY_STATUS + "test_the_exporter_names_the_busiest_keys_only[single]",), fast=True),
    Mutant("window-end-shown-at-the-start", "get_job's dedupe_until_ms (shown by `sched jobs "
           "show` and the console) is the window's start, not its end",
           "scheduler/core/models.py",
           "return self.created_ms + round(self.dedupe_ttl_s * 1000) if self.dedupe_ttl_s",
           "return self.created_ms if self.dedupe_ttl_s", (WINDOW_REPEAT,), fast=True),
    Mutant("debounce-not-shown", "`sched jobs show` and the console's job page leave out a "
           "job's debounce", "scheduler/core/models.py",
           "        if self.debounce_s:\n            lines.append((\"debounce\"",
           "        if False:\n            lines.append((\"debounce\"",
           (DEDUPE + "test_sched_submit_takes_the_window_and_jobs_show_shows_it[single]",
            DEDUPE + "test_the_consoles_job_page_shows_the_key_its_window_and_the_debounce"
            "[single]"), fast=True),
    Mutant("per-key-limit-not-read-by-take", "take.lua does not read the per-key limit "
           "set_queue_limit wrote into its shard: one key's runs are not limited",
           "scheduler/scripts/lua/take.lua", "local per_key = tonumber(limit[1]) or -1",
           "local per_key = -1",
           (f"{IN_SCRIPTS}test_a_take_reads_the_per_key_limit_and_refuses_without_permits",
            f"{AT_ONCE}test_a_per_key_limit_holds_from_the_first_claim_after_the_call"
            "[single-client]"), fast=True),
    Mutant("window-id-outside-its-shard", "a window's job id is placed in shard 0, not in its "
           "key's: the record and its job are written to two shards (two slots on a Cluster)",
           "scheduler/core/jobspec.py",
           'placed_id(f"{base}.{job_ids.next(start_ms)}", shard_of(base, shards), shards)',
           'placed_id(f"{base}.{job_ids.next(start_ms)}", 0, shards)',
           (DEDUPE + "test_a_windowed_id_lands_in_its_keys_shard",), fast=True),
    Mutant("plain-dedupe-id-changed", "a plain dedupe_key's job id is no longer the key's id "
           "alone: jobs submitted before the change are not found by a repeat",
           "scheduler/sdk/batching.py", "        return dedupe_job_id(dedupe_key)",
           '        return dedupe_job_id(dedupe_key) + ".0"',
           (DEDUPE + "test_a_dedupe_key_without_a_window_keeps_its_old_behaviour[single]",),
           fast=True),
    Mutant("expirer-removes-unfinished-work", "expire.lua removes a slot of its `finished` "
           "set without re-checking it is still terminal: a replayed dead letter, queued "
           "again, leaves Redis", "scheduler/scripts/lua/expire.lua",
           "  if not terminal[st[1]] then\n    if not from_list then",
           "  if not st[1] then\n    if not from_list then",
           (EXPIRER + "test_a_slot_that_ran_again_is_never_removed",), fast=True),
    Mutant("expirer-ignores-retain-max", "expire.lua bounds finished work by age alone: at a "
           "high rate Redis keeps retention_s of jobs whatever their count",
           "scheduler/scripts/lua/expire.lua",
           "local excess = redis.call('LLEN', done_key) + redis.call('ZCARD', finished_key) - "
           "retain_max",
           "local excess = 0",
           (EXPIRER + "test_the_count_bound_comes_first_when_it_is_reached",), fast=True),
    Mutant("expirer-ahead-of-history", "expire.lua removes finished slots the history store "
           "has not committed yet: a namespace that keeps history loses them for good",
           "scheduler/scripts/lua/expire.lua",
           "  elseif history and not redis.call('ZSCORE', retain, slot_id) then",
           "  elseif false then",
           (EXPIRER + "test_with_history_only_what_the_store_has_leaves",), fast=True),
    Mutant("expirer-dead-letters-ahead-of-history", "expire.lua removes dead letters past "
           "their bound before the history group read their death",
           "scheduler/scripts/lua/expire.lua",
           "if history then dead_cutoff = math.min(dead_cutoff, (floor_ms or 0) - 1000) end",
           "", (EXPIRER + "test_with_history_only_what_the_store_has_leaves",), fast=True),
    Mutant("finished-not-indexed", "a successful run's slot is not indexed as finished: "
           "without a snapshotter, Redis keeps it for good",
           "scheduler/scripts/lua/complete.lua",
           "  redis.call('RPUSH', prefix .. 'done', unpack(ended))\n", "",
           (EXPIRER + "test_finished_work_leaves_after_its_retention_and_nothing_else_does",),
           fast=True),
    Mutant("expirer-reads-settings-once", "the node's expirer keeps the settings it read first:"
           " a change needs a restart of every node", "scheduler/node/expirer.py",
           "        self.settings = settings = namespace.parse_retention("
           "(await transport.send(pipe))[0])",
           "        if not hasattr(self, 'first'):\n"
           "            self.first = namespace.parse_retention((await transport.send(pipe))[0])\n"
           "        self.settings = settings = self.first",
           (EXPIRER + "test_a_changed_setting_reaches_a_running_node",)),
    Mutant("sweeper-leaves-finished-unindexed", "the sweeper passes over a finished slot "
           "missing from the `finished` index: it stays in Redis for good",
           "scheduler/scripts/lua/sweep.lua",
           "then index_finished(prefix, slot_id, at) end", "then end",
           (EXPIRER + "test_the_sweeper_indexes_a_finished_slot_the_index_lacks",), fast=True),
    Mutant("result-by-job-id-skips-history", "result(job_id) of a job retention removed "
           "from Redis does not look in the history store: 'not found' although history has it",
           "scheduler/sdk/results.py", "        if len(rows) != 1:\n            raise\n",
           "        if True:\n            raise\n",
           ("tests/sdk/test_results.py::test_a_result_outlives_its_job_in_the_history_store",),
           fast=True),
    Mutant("job-removed-under-a-live-run", "retention removes a one-off job's hash with its "
           "own slot while a triggered run of it is still queued",
           "scheduler/scripts/lua/_lib.lua", "      or redis.call('EXISTS', runs) == 1 then",
           "      or false then",
           (EXPIRER + "test_a_one_off_job_stays_while_a_triggered_run_of_it_does",), fast=True),
    Mutant("expirer-skips-the-done-list", "expire.lua walks the `finished` set alone: "
           "successes, indexed in the `done` list, stay in Redis for good",
           "scheduler/scripts/lua/expire.lua",
           "local list_head = redis.call('LRANGE', done_key, 0, limit - 1)",
           "local list_head = {}",
           (EXPIRER + "test_finished_work_leaves_after_its_retention_and_nothing_else_does",),
           fast=True),
    Mutant("expirer-drops-held-successes", "a success held for the history store leaves the "
           "`done` list and no index takes it: once the store has it, it stays in Redis",
           "scheduler/scripts/lua/expire.lua",
           "    if from_list then redis.call('ZADD', finished_key, at, slot_id) end\n", "",
           (EXPIRER + "test_with_history_only_what_the_store_has_leaves",), fast=True),
    Mutant("expirer-oldest-index-first", "expire.lua drains the `done` list before looking at "
           "the `finished` set: under the count bound a newer success leaves before an older "
           "cancelled or dead slot",
           "scheduler/scripts/lua/expire.lua",
           "(s_at == nil or l_at <= s_at)", "true",
           (EXPIRER + "test_the_count_bound_comes_first_when_it_is_reached",), fast=True),
    Mutant("reference-drops-driven-docstrings", "the docs' griffe extension finds each SDK "
           "method's operation but does not copy its docstring: submit, result and the rest "
           "vanish from the built API reference", "scripts/griffe_drives.py",
           "            obj.docstring = griffe.Docstring(op.docstring.value",
           "            _ = griffe.Docstring(op.docstring.value",
           ("tests/docs/test_api_reference.py::"
            "test_every_public_method_has_its_docstring_on_the_site",), fast=True),
    Mutant("retry-reads-as-failure", "an attempt whose handler raised Retry is recorded "
           "`failed`: sched runs, the console and the failure rates count an asked-for retry "
           "as an error", "scheduler/worker/execution.py",
           "self.end(run, Outcome.RETRIED, clean(exc.reason)",
           "self.end(run, Outcome.FAILED, clean(exc.reason)",
           ("tests/sdk/test_run_logs.py::"
            "test_sched_runs_shows_each_attempt_under_its_slot_within_100_columns",),
           fast=True),
    Mutant("testing-mode-skips-keyed-queues", "the testing mode opens a new queue's streams "
           "but not its keys' turns: a keyed job outside `default` never runs under "
           "TestScheduler", "scheduler/testing/harness.py",
           "            self.worker.config = self.worker.claims.config = config\n", "",
           ("tests/sdk/test_testing_mode.py::"
            "test_keyed_jobs_of_any_queue_run_in_their_keys_turns",), fast=True),
    Mutant("typed-payload-not-validated-at-submit", "a submit through a task handle writes a "
           "payload that does not fit the handler's type: found only when the run fails",
           "scheduler/worker/handles.py",
           "        if self.payload_type is None:\n            return payload\n",
           "        if True:\n            return payload\n",
           ("tests/sdk/test_task_handles.py::"
            "test_a_typed_payload_that_does_not_fit_is_refused_naming_the_field",), fast=True),
    Mutant("catalog-defaults-not-applied", "a submit by name ignores the task's defaults in "
           "the catalog: a job meant for the mail workers waits in `default`",
           "scheduler/sdk/batching.py",
           "    defaults = core.catalog.get(spec.task) if type(spec.task) is str else BUILT_IN",
           "    defaults = None if type(spec.task) is str else BUILT_IN",
           ("tests/sdk/test_task_catalog.py::"
            "test_a_submit_by_name_takes_the_catalogs_defaults_and_its_own_options_win",),
           fast=True),
    Mutant("undeclared-schedule-kept", "a start of an app leaves the schedules it declared "
           "before and no longer declares: a schedule dropped from the code fires on",
           "scheduler/sdk/declared.py",
           "            if marker.app == app and name not in keep}",
           "            if False}",
           ("tests/sdk/test_declared_schedules.py::"
            "test_each_start_creates_updates_and_removes_by_name",
            "tests/e2e/test_declared_deploy.py::"
            "test_a_declared_schedule_fires_and_is_deleted_once_the_code_drops_it"),
           fast=True),
    Mutant("read-ahead-whole-batch", "a worker reads a whole batch whatever its free run "
           "slots: a burst lands in the first worker (or child) to read, the others idle",
           "scheduler/worker/claims.py",
           "            target = max(0, min(self.config.batch, free + ahead))",
           "            target = self.config.batch",
           ("tests/worker/test_read_ahead.py::test_a_burst_is_shared_by_the_workers_waiting_"
            "for_it",), fast=True),
    Mutant("pool-fed-by-run-slots", "a worker whose tasks all run in its process pool "
           "claims up to its run slots: runs wait for its busy children while other workers "
           "idle", "scheduler/worker/claims.py",
           "                free = min(free, pool.startable() - taking)", "                pass",
           ("tests/worker/test_read_ahead.py::test_a_worker_whose_tasks_run_in_its_process_"
            "pool_claims_what_its_children_can_start",), fast=True),
    Mutant("claim-ignores-queue-wide-limit", "claim.lua claims an entry of a queue with a "
           "queue-wide limit without a permit: a worker that has not read the limit yet runs "
           "the queue past it", "scheduler/scripts/lua/claim.lua",
           "if ARGV[8] ~= '1' and redis.call('EXISTS', limited_set) == 1 then limited = {} end",
           "if false then limited = {} end",
           (f"{IN_SCRIPTS}test_a_claim_without_permits_is_refused_while_its_queue_has_a_"
            "queue_wide_limit",
            f"{AT_ONCE}test_a_queue_wide_limit_holds_from_the_first_claim_after_the_call"
            "[single-client]"), fast=True),
    Mutant("take-ignores-queue-wide-limit", "take.lua takes keyed slots of a queue with a "
           "queue-wide limit without permits", "scheduler/scripts/lua/take.lua",
           "if not permitted and redis.call('SISMEMBER', prefix .. 'limited', queue) == 1 then",
           "if false then",
           (f"{IN_SCRIPTS}test_a_take_reads_the_per_key_limit_and_refuses_without_permits",),
           fast=True),
    Mutant("acquire-ignores-stored-limit", "acquire.lua grants permits without reading the "
           "queue's limit: a queue-wide concurrency limit holds nothing",
           "scheduler/scripts/lua/acquire.lua",
           "local concurrency = tonumber(limit[1]) or -1", "local concurrency = -1",
           (f"{IN_SCRIPTS}test_acquire_reads_the_limit_at_each_call",), fast=True),
    Mutant("limit-written-to-one-shard", "set_queue_limit writes the per-shard copies into "
           "shard 0 only: the scripts of every other shard claim past the limit",
           "scheduler/core/limits.py", "    for shard in range(shards):",
           "    for shard in range(min(shards, 1)):",
           (f"{IN_SCRIPTS}test_a_limit_is_written_where_every_script_reads_it",), fast=True),
    Mutant("refused-entries-kept", "a worker whose claim is refused for a queue-wide limit "
           "keeps the entries in its hands instead of handing them back: no one starts them",
           "scheduler/worker/claims.py",
           "            await self._refused(source, refused, now)", "            pass",
           (f"{AT_ONCE}test_a_queue_wide_limit_holds_from_the_first_claim_after_the_call"
            "[single-client]",)),
    Mutant("old-limits-not-copied", "a worker does not write the scripts' copies of limits "
           "an older version set (the limits hash alone): after an upgrade those queues run "
           "unlimited", "scheduler/worker/limiter.py",
           "        await self.copy_missing(limits.parse(raw))", "        pass",
           (f"{IN_SCRIPTS}test_a_worker_writes_the_copies_of_limits_set_before_the_scripts_"
            "read_them",), fast=True),
    Mutant("strict-tasks-not-refused", "with the namespace's strict_tasks on, a submit of a "
           "task no worker registered goes through: a typo'd task name waits for ever",
           "scheduler/sdk/catalog.py", "    if unknown and core.strict_tasks:",
           "    if unknown and False:",
           ("tests/sdk/test_unknown_tasks.py::"
            "test_strict_tasks_refuses_an_unknown_task_and_writes_nothing",), fast=True),
    Mutant("unknown-task-warned-every-submit", "a client warns about an unknown task at "
           "every submit of it, not once per name: a loop of submits floods the logs",
           "scheduler/sdk/catalog.py", "        if name not in core.warned:",
           "        if True:",
           ("tests/sdk/test_unknown_tasks.py::"
            "test_an_unknown_task_warns_once_per_name_per_client_naming_the_closest_known_"
            "first",), fast=True),
    Mutant("unknown-task-judged-on-a-stale-catalog", "a client warns about (or refuses) a task "
           "from its copy of the catalog without reading it again: a task whose worker started "
           "since is called unknown, and its job misses the task's defaults",
           "scheduler/sdk/catalog.py", "    core.take_catalog(raw, strict)\n",
           "    pass\n",
           ("tests/sdk/test_unknown_tasks.py::"
            "test_a_task_registered_after_the_clients_last_read_is_known_at_once",), fast=True),
    Mutant("task-handle-checked", "a TaskHandle's submit is checked against the catalog: with "
           "strict_tasks on, code that submits through its own task is refused before that "
           "task's workers start", "scheduler/worker/handles.py",
           "        client._core.vouched.add(self.name)  # the name comes from code: no catalog "
           "check\n        return client.submit(",
           "        return client.submit(",
           ("tests/sdk/test_unknown_tasks.py::test_a_task_handles_submit_is_not_checked",),
           fast=True),
    Mutant("dead-workers-serve-tasks", "the catalog lists a worker whose heartbeat aged out "
           "(killed without leaving) as serving its tasks",
           "scheduler/sdk/catalog.py",
           "        if seen_ms is None or _text(state) == \"waiting\" or not is_alive(",
           "        if seen_ms is None or _text(state) == \"waiting\" or 0 and is_alive(",
           ("tests/sdk/test_task_catalog.py::"
            "test_a_worker_heartbeat_that_aged_out_serves_nothing",), fast=True),
    Mutant("workers-serving-not-listed", "the heartbeat does not say which tasks a worker "
           "serves: the catalog lists no worker for any task",
           "scheduler/worker/worker.py",
           "        self.heartbeat.info[\"tasks\"] = catalog.served(registry)\n",
           "        pass\n",
           ("tests/sdk/test_task_catalog.py::"
            "test_the_catalog_lists_the_live_workers_serving_each_task_and_its_rates",),
           fast=True),
    Mutant("catchup-drop-not-listed", "materialize.lua counts the occurrences the catch-up "
           "policy dropped but lists none in the fire ledger: `fires` cannot say which fire "
           "times were dropped, nor why", "scheduler/scripts/lua/materialize.lua",
           "  note_fires(prefix, job_id, {unpack(ARGV, 10 + n, 9 + n + k)}, 'catchup')\n", "",
           ("tests/lua/test_fire_ledger_scripts.py::test_catchup_drops_are_listed_one_by_one",),
           fast=True),
    Mutant("overlap-skip-not-in-the-ledger", "promote.lua ends an overlap=\"skip\" occurrence "
           "`skipped` without its ledger entry: once the skipped slot leaves Redis, nothing "
           "says which run it yielded to", "scheduler/scripts/lua/promote.lua",
           "        note_fires(prefix, st[5], {slot_id}, 'overlap', active)\n", "",
           ("tests/lua/test_fire_ledger_scripts.py::test_an_overlap_skip_names_the_run_it_yielded_to",),
           fast=True),
    Mutant("redefined-not-in-the-ledger", "redefine.lua withdraws the old cadence's "
           "occurrences without ledger entries: a new definition that takes a slot id over "
           "erases why the old one did not run", "scheduler/scripts/lua/redefine.lua",
           "note_fires(prefix, job_id, gone, 'redefined')\n", "",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_a_redefinition_and_a_delete_record_what_they_withdrew",),
           fast=True),
    Mutant("fire-ledger-unbounded", "the fire ledger is never trimmed: a schedule that skips "
           "or is dropped forever grows its key without bound", "scheduler/scripts/lua/_lib.lua",
           "  if extra > 0 then redis.call('ZREMRANGEBYRANK', key, 0, extra - 1) end",
           "  if false then redis.call('ZREMRANGEBYRANK', key, 0, extra - 1) end",
           ("tests/lua/test_fire_ledger_scripts.py::test_the_ledger_keeps_its_newest_entries",),
           fast=True),
    Mutant("no-worker-not-told", "an occurrence waiting past its objective on a queue no live "
           "worker reads reads `behind`, as if workers were merely slow",
           "scheduler/sdk/fires.py",
           "    return {s.slot_id: (Reason.NO_WORKER if s.queue not in served",
           "    return {s.slot_id: (Reason.BEHIND if s.queue not in served",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_a_redefinition_and_a_delete_record_what_they_withdrew",), fast=True),
    Mutant("on-time-share-counts-overlap", "the on-time share counts overlap skips as misses: "
           "a schedule whose skips are its policy reads as behind its objective",
           "scheduler/core/ledger.py", "    counted = due - overlap\n", "    counted = due\n",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_the_summary_counts_from_the_occurrences_themselves",), fast=True),
    Mutant("unmade-occurrences-not-listed", "a redefinition while no node ran drops the old "
           "definition's occurrences no node made without a word: the timeline skips them",
           "scheduler/scripts/lua/redefine.lua",
           "note_fires(prefix, job_id, unmade_fires(prefix, job_id, {unpack(ARGV, 8, 7 + k)}), "
           "'redefined')\n", "",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_occurrences_no_node_made_are_listed_by_a_redefinition_or_a_delete",),
           fast=True),
    Mutant("objective-not-stored", "a schedule's on_time_within is not stored: "
           "every schedule is judged against the default 2 s, a nightly job's minute of "
           "start-up reads as late", "scheduler/core/timing.py",
           '    fields = {} if on_time_within is None else {"on_time_ms": _on_time_ms(on_time_within)}',
           '    fields = {} if True else {"on_time_ms": _on_time_ms(on_time_within)}',
           ("tests/sdk/test_declared_schedules.py::test_a_declared_objective_reaches_the_job",),
           fast=True),
    Mutant("not-run-uncounted", "the occurrences that will not run are listed but not "
           "counted: sched_occurrences_not_run stays 0 and its alert never fires",
           "scheduler/scripts/lua/_lib.lua",
           "  redis.call('HINCRBY', prefix .. 'stats', 'not_run:' .. reason, added)", "",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_the_exporter_counts_occurrences_not_run_by_reason",), fast=True),
    Mutant("timeline-oldest-first", "the console's job page lists a recurring job's "
           "occurrences oldest first: the one a user came to see is at the bottom",
           "scheduler/web/pages.py", "            for f in reversed(page.fires)]",
           "            for f in page.fires]",
           ("tests/e2e/test_console_pages.py::"
            "test_a_cron_jobs_page_says_whether_each_occurrence_fired",)),
    Mutant("app-import-error-as-traceback", "an app whose own code fails as it is imported (a "
           "misspelt handle) ends `sched worker --app` in a traceback instead of one line "
           "naming the file, the line and the name", "scheduler/cli/run.py",
           "    except Exception as exc:\n        # The app's own code failed",
           "    except ArithmeticError as exc:\n        # The app's own code failed",
           ("tests/e2e/test_newcomer.py::test_a_misspelt_handle_in_the_app_stops_its_services_"
            "at_their_start",), fast=True),
    Mutant("typed-payload-field-unnamed", "a typed payload that does not fit is refused "
           "without naming the field: the newcomer cannot tell what to mend",
           "scheduler/worker/handles.py",
           "        field = \"payload\" + path + (f\".{missing['name']}\" if missing else \"\")",
           "        field = \"payload\"",
           ("tests/e2e/test_newcomer.py::test_a_typed_payload_that_does_not_fit_is_refused_"
            "naming_the_field",), fast=True),
    Mutant("node-skips-declared-schedules", "`sched scheduler --app` starts without applying "
           "the app's declarations: a schedule dropped from the code fires on after the "
           "restart", "scheduler/cli/run.py",
           "    if app_spec is not None:\n        apply_declared(",
           "    if False:\n        apply_declared(",
           ("tests/e2e/test_newcomer.py::test_removing_the_declared_schedule_and_restarting_"
            "the_node_deletes_it",), fast=True),
    Mutant("docs-block-sees-earlier-blocks", "a docs code block runs after the page's earlier "
           "blocks, in their names: a block that fails when a reader copies it alone passes",
           "tests/docs/test_code_blocks.py",
           "                str(b.line), _python(b.code, ns)]",
           "                str(b.line), _python(\"\".join(p.code for p in python[:python.index(b) "
           "+ 1]), ns)]",
           ("tests/docs/test_code_blocks.py::test_a_block_sees_the_pages_setup_and_no_other_"
            "blocks_names",), fast=True),
    Mutant("cli-needs-psycopg", "the `sched` command imports psycopg at its start: without "
           "the postgres extra no command runs, a worker's included",
           "scheduler/cli/main.py",
           "import msgspec\n\nimport scheduler.cli.dev as dev_cmds",
           "import msgspec\nimport psycopg  # noqa: F401\n\nimport scheduler.cli.dev as dev_cmds",
           ("tests/test_dependencies.py::test_without_psycopg_the_cli_runs_what_needs_no_"
            "postgres",), fast=True),
    Mutant("postgres-store-import-unguarded", "history on Postgres without psycopg ends in a "
           "ModuleNotFoundError traceback instead of one line saying what to install",
           "scheduler/history/store/postgres.py",
           "except ImportError:  # the `postgres` extra",
           "except ArithmeticError:  # the `postgres` extra",
           ("tests/test_dependencies.py::test_without_psycopg_the_cli_says_in_one_line_what_to_"
            "install",), fast=True),
    Mutant("testing-mode-rate-never-due", "the testing mode's clock jumps over the moments a "
           "rate's next token comes: jobs a rate held back stay queued however far it moves",
           "scheduler/testing/harness.py",
           "        times += [] if held is None else [held]\n", "",
           ("tests/sdk/test_queue_limits.py::test_the_testing_mode_holds_a_rate_in_fake_time",),
           fast=True),
    Mutant("keyed-no-wake", "a key entering a ring wakes no worker: an idle worker starts "
           "a free key's job only at its next poll", "scheduler/scripts/lua/_lib.lua",
           "    redis.call('XADD', prefix .. 'kwake:' .. queue, 'MAXLEN', '1', '*', 'k', key)\n",
           "",
           ("tests/worker/test_keyed_claims.py::"
            "test_a_free_keys_job_starts_at_once_on_an_idle_worker",)),
    Mutant("keyed-turn-of-one", "a key's turn takes one slot (its weight) whatever the call's "
           "n and the ring's length: a short ring costs a ring move and a pop per slot",
           "scheduler/scripts/lua/take.lua",
           "local share = math.max(1, math.floor(n / math.max(length, 1)))",
           "local share = 1",
           ("tests/lua/test_take.py::test_a_turn_is_the_key_s_even_share_of_the_call",),
           fast=True),
    Mutant("keyed-spread-forgets-held-runs", "a take counts only what it starts toward the "
           "spread, not the runs of the key the worker holds: a worker takes its share again "
           "each time", "scheduler/scripts/lua/take.lua",
           "  for i = 1, #flat, 2 do spent[flat[i]] = tonumber(flat[i + 1]) end\n", "",
           ("tests/lua/test_take.py::test_a_call_starts_no_more_of_one_key_than_its_spread",),
           fast=True),
    Mutant("keyed-no-spread", "a worker asks for no spread: a busy key's permits stay with "
           "the worker that asked first, which takes each back as its runs end",
           "scheduler/worker/keyed.py",
           "workers = live if live > 1 else None", "workers = None",
           ("tests/e2e/test_tenants.py::"
            "test_a_busy_key_spreads_over_the_workers_up_to_its_limit",)),
    Mutant("keyed-leases-not-written", "take.lua's batched ZADD of the leases is lost: a "
           "keyed run whose worker dies is never reclaimed",
           "scheduler/scripts/lua/take.lua",
           "  redis.call('ZADD', leases, unpack(leased, i, math.min(i + 999, #leased)))",
           "  local _ = leased",
           ("tests/lua/test_take.py::test_every_end_of_an_attempt_gives_the_permit_back",),
           fast=True),
    Mutant("keyed-complete-keeps-permits", "complete.lua's batched give-back of the leases "
           "and the keys' permits is lost: a key at its limit never starts again",
           "scheduler/scripts/lua/complete.lua", "end_leases(prefix, ends)\n", "",
           ("tests/lua/test_take.py::test_the_per_key_limit_holds_and_passes_over_a_full_key",),
           fast=True),
    Mutant("catchup-not-in-history", "materialize.lua lists catch-up drops in Redis but "
           "sends no `not_run` event: once the ledger key is trimmed or lost, the history "
           "store cannot say why those occurrences did not run",
           "scheduler/scripts/lua/materialize.lua",
           "  emit(prefix, maxlen, now, 'not_run',\n", "  emit(prefix, maxlen, now, 'none',\n",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_the_history_store_keeps_the_ledger_and_fires_reads_it_back",), fast=True),
    Mutant("not-run-events-not-copied", "the snapshotter acks `not_run` events without "
           "copying their entries: the store's fire_entries stays empty",
           "scheduler/history/intake.py",
           "                if kind == NOT_RUN and isinstance(job, str):",
           "                if False:",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_the_history_store_keeps_the_ledger_and_fires_reads_it_back",), fast=True),
    Mutant("fires-ignores-history", "`fires` reads Redis alone: occurrences whose records "
           "left Redis read `unrecorded` (or vanish) though the history store holds them",
           "scheduler/sdk/fires.py",
           "    if not (oldest is None or lo < oldest or missing):",
           "    if True:",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_the_history_store_keeps_the_ledger_and_fires_reads_it_back",), fast=True),
    Mutant("retry-reads-running", "an occurrence whose attempt failed and waits a minute for "
           "its retry reads `running`: nothing is running, and the failure is hidden",
           "scheduler/core/ledger.py",
           "        return replace(base, state=FireState.RETRYING, start_lag_ms=lag)",
           "        return replace(base, state=FireState.RUNNING, start_lag_ms=lag)",
           ("tests/e2e/test_fire_ledger.py::test_a_run_waiting_to_retry_reads_retrying",)),
    Mutant("summary-of-one-page", "`fires` summarizes only the page it returns: a week's "
           "explain reads as on time from its first thousand occurrences",
           "scheduler/sdk/fires.py", "    if start == lo and more is None:", "    if True:",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_the_summary_covers_the_whole_window_not_the_page",), fast=True),
    Mutant("timeline-marks-mute", "the console's timeline marks say nothing on hover: a "
           "user sees a red mark and not why", "scheduler/web/pages.py",
           '    return {"kind": kind, "title": title,', '    return {"kind": kind, "title": "",',
           ("tests/e2e/test_console_pages.py::"
            "test_a_cron_jobs_page_says_whether_each_occurrence_fired",)),
    Mutant("redefined-not-in-history", "redefine.lua sends the occurrences it withdrew "
           "without those no node made: once Redis forgets them, the history store cannot "
           "say why the old cadence stopped", "scheduler/scripts/lua/redefine.lua",
           "not_run_records(job_id, 'redefined', gone, unmade)",
           "not_run_records(job_id, 'redefined', gone)",
           ("tests/lua/test_fire_ledger_scripts.py::"
            "test_the_history_store_keeps_the_ledger_and_fires_reads_it_back",), fast=True),
    Mutant("fire-entries-kept-forever", "history retention leaves the fire ledger's entries: "
           "the store grows past history_days", "scheduler/history/store/postgres.py",
           '            cur.execute(Q["drop_fires_before"], {"cutoff_ms": cutoff_ms})', "",
           ("tests/history/test_store.py::"
            "test_fire_ledger_entries_are_upserted_read_by_range_and_kept_history_days",),
           fast=True),
    Mutant("retry-without-backoff", "fail.lua retries at once, whatever the policy's backoff "
           "(`sched verify`'s retry rule)", "scheduler/scripts/lua/fail.lua",
           "retry_ms = math.min(cap, base * 2 ^ (failures - 1)) * (1 - jitter * u)",
           "retry_ms = 0",
           ("tests/cli/test_verify.py::test_verify_passes_on_a_healthy_stack_and_leaves_no_key",)),
    Mutant("canary-not-served", "a Registry serves no canary unless asked: `sched verify` "
           "must say no worker serves it (exit 2), not blame the scheduler node",
           "scheduler/worker/registry.py", "        self.canary = canary\n",
           "        self.canary = False\n",
           ("tests/cli/test_verify.py::test_verify_cannot_run_without_a_worker_or_a_node_and_"
            "says_so_in_seconds[worker only]",)),
    Mutant("forget-leaves-slots", "forget.lua removes a job but not its slots: a verify run "
           "leaves a slot hash per canary behind", "scheduler/scripts/lua/forget.lua",
           "      keys = keys + redis.call('DEL', prefix .. 'slot:' .. slot_id)\n", "",
           ("tests/cli/test_verify.py::test_verify_passes_on_a_healthy_stack_and_leaves_no_key",)),
    Mutant("pool-queued-run-not-dropped", "a process-pool run stopped (cancel, timeout, lost "
           "lease) while it waits in its child behind the run going there is not taken back: "
           "the child begins it anyway",
           "scheduler/worker/pool.py",
           "                    child.send(Drop(item.seq))  # not begun: it never will",
           "                    pass  # not begun: it never will",
           (POOL + "test_a_run_stopped_while_queued_behind_a_busy_child_never_begins",)),
    Mutant("pool-children-in-the-workers-session", "the process pool's children share the "
           "worker's session, so Linux's autogroup scheduling gives the worker and all its "
           "children one share of the CPU between them on a busy machine",
           "scheduler/worker/pool.py", "                            start_new_session=True,\n",
           "", (POOL + "test_a_run_stopped_while_queued_behind_a_busy_child_never_begins",)),
    Mutant("behind-never-listed", "the objective watch takes an occurrence waiting past its "
           "objective for one on time: a schedule no worker reads is never named",
           "scheduler/node/objectives.py",
           "            if now_ms - slot.fire_ms > on_time_ms:\n                return True",
           "            if now_ms - slot.fire_ms > on_time_ms:\n                return False",
           ("tests/node/test_objectives.py::test_a_schedule_waiting_past_its_objective_is_"
            "listed_and_leaves_when_deleted",), fast=True),
    Mutant("behind-never-leaves", "a schedule that started on time again stays listed behind "
           "its objective", "scheduler/node/objectives.py",
           "        met = [j for j, v in verdicts.items() if v is False]",
           "        met: list[str] = []",
           ("tests/e2e/test_behind_objective.py::test_status_names_a_schedule_nobody_reads_"
            "until_it_catches_up",)),
    Mutant("behind-deleted-kept", "a deleted schedule stays listed behind its objective "
           "forever", "scheduler/node/objectives.py", "if score is None]",
           "if score is None and not listed]",
           ("tests/node/test_objectives.py::test_a_schedule_waiting_past_its_objective_is_"
            "listed_and_leaves_when_deleted",), fast=True),
    Mutant("behind-since-reset", "each pass moves when a schedule fell behind to now: its "
           "age says nothing", "scheduler/node/objectives.py",
           "pipe.zadd(behind, {j: now for j in late}, nx=True)",
           "pipe.zadd(behind, {j: now for j in late})",
           ("tests/node/test_objectives.py::test_a_schedule_waiting_past_its_objective_is_"
            "listed_and_leaves_when_deleted",), fast=True),
    Mutant("behind-healthy", "`sched status` stays healthy while a schedule is behind its "
           "objective", "scheduler/observe/records.py",
           "        if self.schedules_behind:\n            found.append(self.behind_line())\n",
           "", ("tests/node/test_objectives.py::test_a_schedule_waiting_past_its_objective_is_"
                "listed_and_leaves_when_deleted",), fast=True),
    Mutant("behind-not-on-overview", "the console's overview leaves out the schedules behind "
           "their objective", "scheduler/web/templates/health.html",
           "{% if status.schedules_behind %}", "{% if false %}",
           ("tests/e2e/test_behind_objective.py::test_status_names_a_schedule_nobody_reads_"
            "until_it_catches_up",)),
    Mutant("behind-not-exported", "the exporter leaves sched_schedules_behind_objective at 0",
           "scheduler/observe/metrics.py",
           'g["sched_schedules_behind_objective"].add_metric([], status.schedules_behind)',
           'g["sched_schedules_behind_objective"].add_metric([], 0)',
           ("tests/node/test_objectives.py::test_a_schedule_waiting_past_its_objective_is_"
            "listed_and_leaves_when_deleted",), fast=True),
    Mutant("pool-no-run-moves-to-a-free-child", "a process-pool run queued in a child behind "
           "a long run stays there while another child is free: a short job starts when the "
           "long one ends", "scheduler/worker/pool.py",
           "        for busy in self.children:\n            if busy is free or busy.current",
           "        for busy in ():\n            if busy is free or busy.current",
           (POOL + "test_a_run_queued_behind_a_long_one_moves_to_a_child_that_becomes_free",)),
    Mutant("pool-child-drops-but-keeps-the-run", "a process-pool child says Dropped for a run "
           "it keeps: the run moved to a free child also begins in the busy one (twice)",
           "scheduler/worker/child.py", "                    self.jobs = kept\n", "",
           (POOL + "test_a_run_queued_behind_a_long_one_moves_to_a_child_that_becomes_free",)),
    Mutant("chaos-forgets-its-kills", "`sched verify --chaos` does not tell the checker which "
           "workers it killed: their lost attempts fail the lost rule on a healthy deployment",
           "scheduler/testing/chaos.py", "        self.truth.faulted_pids.add(proc.pid)\n", "",
           ("tests/cli/test_verify.py::test_verify_chaos_kills_and_restarts_its_children_and_"
            "every_invariant_holds",)),
    Mutant("canary-refused-as-unknown", "the unknown-task check judges the scheduler's own "
           "canary: every verify run warns, and a strict namespace refuses its canaries",
           "scheduler/sdk/catalog.py", "names = {n for n in names if not is_reserved(n)}",
           "names = set(names)",
           ("tests/sdk/test_unknown_tasks.py::"
            "test_strict_tasks_refuses_an_unknown_task_and_writes_nothing",), fast=True),
    Mutant("keyed-starts-a-key-s-whole-share-first", "a take's grants start in take.lua's "
           "order, a key's whole share before the next key's: a tenant with few jobs waits "
           "for the start of a flood's share", "scheduler/worker/keyed.py",
           "if len(set(keys)) > 1:", "if False:",
           ("tests/e2e/test_bench_smoke.py::test_fairness_smoke",)),
    Mutant("history-read-of-jobs-reads-all", "the history store's read of given jobs reads "
           "the whole namespace: `sched verify` judges every slot a deployment ever kept",
           "scheduler/history/sql/sqlite/queries.sql",
           "WHERE namespace = :namespace AND job_id IN (SELECT value FROM json_each(:jobs))\n"
           "ORDER BY job_id, fire_ms;", "WHERE namespace = :namespace\nORDER BY job_id, fire_ms;",
           ("tests/history/test_store.py::test_slot_states_and_job_definitions_of_given_jobs_"
            "alone",), fast=True),
    Mutant("relay-unknown-task-warns", "the outbox relay's unknown task is a Python warning "
           "again: a service's warnings reach no one, the operator never reads the typo",
           "scheduler/outbox/relay.py",
           '        client._core.on_unknown_task = lambda text: log.warning("outbox: %s", text)\n',
           "",
           ("tests/outbox/test_transactional_submit.py::test_a_row_naming_an_unknown_task_goes_"
            "on_and_the_relay_logs_it_once",), fast=True),
    Mutant("at-most-once-failure-retried", "fail.lua retries a failed at_most_once attempt "
           "by its policy: a handler that had its effect and then raised starts again",
           "scheduler/scripts/lua/fail.lua", "if job[5] ~= 'at_most_once' and failures <",
           "if failures <",
           ("tests/lua/test_transitions.py::test_an_at_most_once_failure_is_final_whatever_"
            "attempts_are_left",), fast=True),
    Mutant("heartbeat-renews-nothing", "heartbeat.lua answers OK but renews no lease (neither "
           "the slot's lease_until nor its pending entry, nor an at-most-once slot's `leases` "
           "score): a run longer than its lease is reclaimed under its worker",
           "scheduler/scripts/lua/heartbeat.lua",
           "    redis.call('HSET', slot_key, 'lease_until', lease_until)\n"
           "    if st[3] and st[3] ~= '' then\n"
           "      redis.call('XCLAIM', prefix .. 'q:' .. lane(st[4], st[6]), 'workers', worker, "
           "0, st[3], 'JUSTID')\n"
           "    else  -- at_most_once: no pending entry; its lease lives in the `leases` zset\n"
           "      redis.call('ZADD', prefix .. 'leases', 'XX', lease_until, slot_id)\n"
           "    end\n",
           "",
           (f"{PRIORITIES}::test_a_long_run_in_a_priority_lane_keeps_its_lease",)),
    Mutant("materializer-doubles-a-second", "cron occurrences at seconds ending in 3 or 8 are "
           "written twice (a second slot a millisecond later): one fire time, two runs",
           "scheduler/node/materializer.py", "        else:\n            fires.append(t)",
           "        else:\n            fires.append(t)\n            if (t // 1000) % 5 == 3:\n"
           "                fires.append(t + 1)",
           ("tests/node/test_materializer.py::"
            "test_two_materializers_at_once_create_each_slot_once",), fast=True),
    Mutant("verify-runs-uncapped", "a verify run's summary is pushed onto the namespace's list "
           "of runs, never trimmed: the one key a run leaves grows with every run",
           "scheduler/testing/verify.py",
           "        transport.call_sync(client.redis, \"ltrim\", key, 0, canary.RUNS_KEPT - 1)\n",
           "", ("tests/e2e/test_console_verify.py::"
                "test_the_verify_page_lists_the_last_runs_and_answers_hostile_entries",),
           fast=True),
    Mutant("verify-page-hides-the-failed-invariants", "the console's Verify page says a run "
           "FAILED without naming the invariants that did not hold",
           "scheduler/web/pages.py", "        word += \": \" + \", \".join(c.name for c in run.checks "
           "if not c.holds)", "        pass",
           ("tests/e2e/test_console_verify.py::"
            "test_the_verify_page_lists_the_last_runs_and_answers_hostile_entries",),
           fast=True),
    Mutant("claims-before-commits", "a worker's round trip sends its claims ahead of the "
           "outcomes it carries: a claim of an ended run's own entry is granted again, and "
           "the handler runs a second time",
           "scheduler/worker/exchange.py", 'ORDER = ("commits", "claims")',
           'ORDER = ("claims", "commits")',
           ("tests/worker/test_exchange.py::"
            "test_commits_go_ahead_of_the_claims_of_their_round_trip",), fast=True),
    Mutant("boarded-replies-unlanded", "the replies to the outcomes a claim's round trip "
           "carried never reach the committer: they stay in flight for ever, never counted",
           "scheduler/worker/exchange.py", '        committer.land(boarding, got["commits"])\n',
           "",
           ("tests/worker/test_exchange.py::"
            "test_commits_go_ahead_of_the_claims_of_their_round_trip",), fast=True),
    Mutant("sentinel-pool-fails-past-its-size", "a Sentinel URL's clients fail a call past "
           "the pool's 100 connections at once instead of waiting for a free one: a worker's "
           "handlers fail during a failover", "scheduler/redis/clients.py",
           "max_connections=MAX_CONNECTIONS, timeout=timeout_s,\n                                **_options",
           "max_connections=MAX_CONNECTIONS, timeout=0.001,\n                                **_options",
           ("tests/redis/test_sentinel_pool.py::"
            "test_more_calls_than_connections_wait_on_a_sentinel_url",)),
    Mutant("redis-away-excuses-expired-leases", "an attempt lost before Redis went away is "
           "blamed on the restart: `sched verify --redis-restart` excuses a lease that ran out "
           "before the outage (a worker that stopped renewing for a reason of its own)",
           "scheduler/testing/truth.py",
           "            and lease_until_ms >= o.start_ms for o in", "            for o in",
           ("tests/faults/test_invariants.py::"
            "test_redis_away_excuses_only_the_attempts_in_flight_across_it",), fast=True),
    Mutant("verify-gives-up-on-the-first-refused-submit", "`sched verify --redis-restart` "
           "does not send a batch again while Redis is away: a failover mid-run ends the run "
           "(exit 2) instead of being judged across", "scheduler/testing/verify.py",
           "                if time.monotonic() > deadline:\n                    raise",
           "                if True:\n                    raise",
           ("tests/e2e/test_verify_failover.py::test_verify_passes_across_a_sentinel_failover",)),
    Mutant("verify-holds-only-streams-that-exist", "`sched verify` holds no events on a shard "
           "whose stream does not exist yet: a snapshotter starting with the run (`sched dev` "
           "just started) trims the canaries' success events and the commit rule fails",
           "scheduler/testing/verify.py",
           "self.group, id=\"$\",\n                                    mkstream=True)",
           "self.group, id=\"$\",\n                                    mkstream=False)",
           ("tests/e2e/test_verify_failover.py::"
            "test_verify_passes_against_sched_dev_and_judges_its_history",)),
    Mutant("objective-late-counted-on-time", "the objective watch counts an occurrence that "
           "started past its on_time_within as on time: a schedule that starts late is never "
           "behind", "scheduler/node/objectives.py",
           "        return objective.LATE if missed else objective.ON_TIME",
           "        return objective.ON_TIME",
           ("tests/node/test_objectives.py::test_behind_is_a_share_below_the_target_and_each_"
            "occurrence_counts_once",), fast=True),
    Mutant("objective-recounts-each-look", "the objective watch forgets how far it counted: "
           "each look counts a job's whole window again", "scheduler/node/objectives.py",
           "            pipe.hset(key, objective.THROUGH, through)\n", "",
           ("tests/node/test_objectives.py::test_behind_is_a_share_below_the_target_and_each_"
            "occurrence_counts_once",), fast=True),
    Mutant("objective-window-never-moves", "the on-time share is taken over every occurrence "
           "counted, not the window's: a schedule that fell behind once stays behind",
           "scheduler/core/objective.py", "and int(start) > now_ms - window_ms:",
           "and int(start) > 0:",
           ("tests/node/test_objectives.py::test_a_schedule_leaves_once_its_window_is_on_time_"
            "again",), fast=True),
    Mutant("objective-reads-a-job-too-late", "the objective watch reads a job again only "
           "after its next occurrence's objective plus a minute: a schedule no worker reads "
           "is named a minute late", "scheduler/node/objectives.py",
           "[watermark]) + on_time_ms + 1", "[watermark]) + on_time_ms + 60_000",
           ("tests/node/test_objectives.py::test_a_job_is_read_again_only_once_its_next_"
            "occurrence_is_decided",), fast=True),
    Mutant("explain-objective-counts-past-the-window", "`explain`'s objective line counts "
           "occurrences older than the node's window", "scheduler/core/objective.py",
           "    counts = totals(raw, now_ms, int(window_ms))",
           "    counts = totals(raw, now_ms, now_ms)",
           ("tests/cli/test_schedules_cli.py::test_explain_prints_the_schedule_against_its_"
            "objective",), fast=True),
    Mutant("forget-keeps-the-objective-counts", "`forget` (and so `sched verify`) leaves a "
           "schedule's objective counts in Redis", "scheduler/scripts/lua/forget.lua",
           "      prefix .. 'fires:' .. job_id, prefix .. 'ontime:' .. job_id)",
           "      prefix .. 'fires:' .. job_id)",
           ("tests/sdk/test_forget.py::test_forget_removes_a_schedules_fire_ledger_and_"
            "objective_counts",), fast=True),
    Mutant("keyed-take-in-flight-answers-a-re-ask", "a take sent before another's reply "
           "was lost clears the re-ask when its own reply lands: the lost take's grants wait "
           "out their lease and count a failed attempt", "scheduler/worker/keyed.py",
           "        self._again -= asking\n",
           "        self._again -= {(s, q) for s, q, _ in asks}\n",
           ("tests/worker/test_keyed_claims.py::test_a_take_in_flight_when_another_s_reply_"
            "is_lost_does_not_answer_the_re_ask",), fast=True),
    Mutant("keyed-two-takes-of-a-queue-past-the-spread", "with several live workers a "
           "worker's two take loops take one queue at once: each counts the runs it holds "
           "without the other's grants, and the worker runs a key past its share of the "
           "per-key limit", "scheduler/worker/keyed.py",
           "        if workers and flying & set(queues):", "        if False:",
           ("tests/worker/test_keyed_claims.py::test_with_several_workers_a_queue_has_one_"
            "take_in_flight",), fast=True),
    Mutant("keyed-re-ask-beside-a-take-in-flight", "a worker re-asks for a lost take's "
           "grants while another take of the queue is in flight: it grants that take's slots "
           "again, and a run that ended already starts a second time",
           "scheduler/worker/keyed.py",
           "        return (shard, queue) not in self._asking and not (",
           "        return True or (shard, queue) not in self._asking and not (",
           ("tests/worker/test_keyed_claims.py::test_a_re_ask_waits_for_the_take_in_flight",),
           fast=True),
    Mutant("limit-held-reads-behind", "an occurrence its queue's rate or concurrency limit "
           "holds back reads `behind` (the workers are slow), not `paused_by_limit`",
           "scheduler/sdk/fires.py",
           "else Reason.PAUSED_BY_LIMIT if s.queue in limited else Reason.BEHIND)",
           "else Reason.BEHIND)",
           ("tests/e2e/test_fire_ledger.py::"
            "test_queues_held_by_their_rate_or_concurrency_limit",)),
    Mutant("fires-walk-the-whole-past", "a page of a recurring job's timeline enumerates "
           "its fire times from the schedule's first occurrence, not the page's start: the "
           "page is right, but one at the end of a long past costs the whole past",
           "scheduler/sdk/fires.py",
           "    for t in CronSpec(job.cron, job.tz or \"UTC\").after(max(lo, job.fire_ms) - 1):\n",
           "    for t in CronSpec(job.cron, job.tz or \"UTC\").after(job.fire_ms - 1):\n"
           "        if t < lo:\n            continue\n",
           ("tests/sdk/test_fires_paging.py::test_a_page_of_a_long_past_costs_the_same",),
           fast=True),
    Mutant("chaos-kills-found-nothing-in-flight", "`sched verify --chaos` reports no worker "
           "kill that found a canary in flight: a run whose kills hit idle workers and one "
           "whose kills lost attempts read the same", "scheduler/testing/chaos.py",
           "        self.in_flight += held\n", "        self.in_flight += 0\n",
           ("tests/cli/test_verify.py::test_verify_chaos_kills_and_restarts_its_children_and_"
            "every_invariant_holds",)),
    Mutant("sentinel-clients-left-open", "closing a Sentinel URL's asyncio client leaves the "
           "sentinels' own connections open: each is reclaimed after the event loop with a "
           "ResourceWarning", "scheduler/redis/clients.py",
           "            await sentinel.connection_pool.disconnect()\n", "            pass\n",
           ("tests/redis/test_sentinel_pool.py::test_more_calls_than_connections_wait_on_a_"
            "sentinel_url",)),
    Mutant("cluster-reads-wait-for-a-gap-in-held-entries", "on a cluster a worker holding "
           "entries due within the next 100 ms starts no shard read: while delayed jobs keep "
           "falling due, jobs due now wait unread for seconds (sched verify's start lag on a "
           "Cluster)", "scheduler/worker/reader.py",
           "                    return await self._read_shards(self._count(free), block_ms, "
           "pause)\n",
           "                    return await asyncio.sleep(pause)\n",
           (f"{EARLY}::test_jobs_due_now_start_on_time_while_held_entries_keep_falling_due"
            "[cluster]",)),
    Mutant("restart-command-outlives-the-run", "a `--redis-restart` command still running "
           "when the run ends (Ctrl-C, SIGTERM, a failure) is left to run on, with whatever it "
           "started", "scheduler/testing/restart.py",
           "        if proc is not None and proc.poll() is None:\n            self._kill()\n",
           "        if proc is not None and proc.poll() is None:\n            pass\n",
           ("tests/e2e/test_verify_failover.py::test_a_run_that_ends_stops_its_restart_"
            "command_and_what_it_started",),
           fast=True),
    Mutant("keyed-take-keeps-its-copy", "a take leaves a keyed slot's copy of its job's "
           "fields (_lib.lua's grant_copy) marked: the slot queued again after its run (a release, a "
           "reclaim) is granted the job as it was at its first queueing, not as it is",
           "scheduler/scripts/lua/take.lua",
           "'lease_until', lease_s, 'grant', '')", "'lease_until', lease_s)",
           (f"{KEYED_CARRY}test_a_keyed_grant_is_its_job_as_queued_and_a_slot_queued_again_"
            "reads_the_job",), fast=True),
    Mutant("keyed-take-grants-an-emptied-copy", "a take reads a keyed slot's emptied copy "
           "of its job's fields (a take started it before, and a release queued it again) "
           "as a copy, not falling back to the job hash", "scheduler/scripts/lua/take.lua",
           "local copy = st[6] and st[6] ~= '' and st[6]", "local copy = st[6] and st[6]",
           (f"{KEYED_CARRY}test_a_keyed_grant_is_its_job_as_queued_and_a_slot_queued_again_"
            "reads_the_job",), fast=True),
    Mutant("keyed-take-trusts-a-missing-copy", "a take grants a slot queued without a copy "
           "of its job's fields (before slots carried one) from the copy it has not",
           "scheduler/scripts/lua/take.lua", "          if copy and not trace then",
           "          if not trace then",
           (f"{KEYED_CARRY}test_a_slot_queued_without_the_copy_reads_its_job",), fast=True),
    Mutant("keyed-slot-copies-past-64-bytes", "a keyed slot carries a copy of its job's "
           "fields longer than 64 bytes: its hash turns from a listpack into a hash table for "
           "good, three times a finished slot's memory", "scheduler/scripts/lua/_lib.lua",
           "  if #copy > 64 then return nil end", "  if #copy > 4096 then return nil end",
           (f"{KEYED_CARRY}test_a_copy_past_64_bytes_is_not_made",),
           fast=True),
    Mutant("keyed-promote-carries-nothing", "promote.lua queues a keyed slot without the "
           "copy of its job's fields: its take reads the job hash",
           "scheduler/scripts/lua/promote.lua",
           "          if copy then\n            redis.call('HSET', slot_key, 'status', 'queued', 'msg', '', 'grant', copy)",
           "          if false then\n            redis.call('HSET', slot_key, 'status', 'queued', 'msg', '', 'grant', copy)",
           (f"{KEYED_CARRY}test_a_promoted_keyed_slot_carries_its_job_s_fields",), fast=True),
    Mutant("keyed-ring-drops-keys-holding-slots", "when a round's one EXISTS finds a key "
           "emptied, take.lua drops every key of the round that took its whole room from the "
           "ring, those still holding slots too: they are never taken again",
           "scheduler/scripts/lua/take.lua",
           "    if not check[i] or redis.call('EXISTS', check[i]) == 1 then",
           "    if not check[i] then",
           (f"{KEYED_CARRY}test_keys_that_took_their_whole_room_stay_in_the_ring_while_they_"
            "hold_slots",), fast=True),
    Mutant("keyed-ring-keeps-an-empty-key", "take.lua keeps a key whose turn emptied its "
           "queue in the ring: a slot queued for it later puts it in a second time, and the "
           "key takes two turns a round", "scheduler/scripts/lua/take.lua",
           "  if present == #queues then return back, length end",
           "  if true then return back, length end",
           (f"{KEYED_CARRY}test_keys_that_took_their_whole_room_stay_in_the_ring_while_they_"
            "hold_slots",), fast=True),
    Mutant("history-keeps-the-grant-copy", "the history store keeps a keyed slot's copy of "
           "its job's fields: `sched recover` restores the slot with a copy that may be older "
           "than its job, and its take grants that", "scheduler/history/store/rows.py",
           '    if "grant" in h:\n', '    if False:\n',
           ("tests/history/test_store.py::test_a_keyed_slot_s_copy_of_its_grant_is_not_kept",),
           fast=True),
    Mutant("unkeyed-take-no-turn", "the plain claims of a queue whose keys wait take every "
           "free slot they find, not their turn: a flood of unkeyed jobs starts nearly all "
           "the runs while the keys wait", "scheduler/worker/claims.py",
           "        if not turns.waiting:\n", "        if True:\n",
           (TURN + "test_unkeyed_jobs_take_a_turn_like_a_key",)),
    Mutant("keyed-takes-leave-no-turn", "the keyed takes of a queue leave no slot for its "
           "unkeyed entries' share: a flood of the keys' jobs starts ahead of them",
           "scheduler/worker/turns.py",
           "        if queue not in self.waiting or not self.plain_waits(queue):\n"
           "            return free\n",
           "        if True:\n            return free\n",
           ("tests/worker/test_turns.py::test_the_unkeyed_jobs_share_is_one_keys",), fast=True),
    Mutant("blocked-keys-keep-their-turn", "keys that can start nothing more (at their "
           "per-key limit) keep their turn: the slots kept for them sit idle while unkeyed "
           "jobs wait", "scheduler/worker/turns.py",
           "        if self.waiting.pop(queue, None) is not None:\n",
           "        if self.waiting.get(queue, None) is None:\n",
           (TURN + "test_keys_at_their_limit_leave_their_turn_to_the_unkeyed",)),
    Mutant("woken-take-probes-first", "a take woken by a key entering a cold queue's ring "
           "probes the rings first: a free key's job starts a round trip later than an "
           "unkeyed one", "scheduler/worker/keyed.py",
           "            self._found[q] = mono\n            self._rings.pop(q, None)\n",
           "            self._rings.pop(q, None)\n",
           (TURN + "test_a_woken_take_sends_no_probe_first",)),
    Mutant("free-key-waits-for-a-poll", "the keyed loop with nothing to take sleeps out its "
           "poll instead of waiting on the wake streams: a free key's job starts up to a poll "
           "later than an unkeyed one", "scheduler/worker/keyed.py",
           "        if self._wake_ok:\n", "        if False:\n",
           (TURN + "test_a_free_keys_job_starts_as_fast_as_an_unkeyed_one",)),
    Mutant("cli-start-loads-the-harness", "every `sched` start loads the testing mode's "
           "harness and fakeredis with the testing package, for `sched verify`'s bounds",
           "scheduler/testing/__init__.py",
           "if TYPE_CHECKING:\n    from scheduler.testing.harness import",
           "if True:\n    from scheduler.testing.harness import",
           ("tests/cli/test_cli_start.py::test_the_cli_loads_neither_the_testing_harness_nor_"
            "the_console_until_asked",)),
    Mutant("lua-includes-drop-what-their-functions-call", "a script keeps the include's "
           "functions it calls and drops those they call in turn: a nil function in Lua",
           "scheduler/scripts/source.py",
           "            wanted |= _called(_code(m.group(0)))\n", "            pass\n",
           ("tests/lua/test_transitions.py",)),
    Mutant("keyed-commit-unfenced", "complete.lua trusts a keyed run's commit whether its "
           "member of its key's running set was there or not: a commit of an attempt that "
           "lost its slot (reclaimed and taken again) or of a slot already committed passes",
           "scheduler/scripts/lua/complete.lua",
           "  fenced_run[running] = removed == #members\n", "  fenced_run[running] = true\n",
           (TAKE + "test_a_stale_keyed_commit_is_refused_and_leaves_the_new_attempt_s_permit",
            TAKE + "test_a_keyed_commit_sent_again_is_a_repeat"), fast=True),
    Mutant("key-member-without-attempt", "a keyed run's member of its key's running set is "
           "the slot id alone: the late commit of an attempt whose slot was taken again "
           "removes the new attempt's member and commits without a read",
           "scheduler/scripts/lua/_lib.lua",
           "  return key .. ' ' .. slot_id .. '#' .. attempt\n", "  return key .. ' ' .. slot_id\n",
           (TAKE + "test_a_stale_keyed_commit_is_refused_and_leaves_the_new_attempt_s_permit",),
           fast=True),
    Mutant("key-permit-old-form-kept", "the end of a keyed attempt removes only its member "
           "of the attempt's form: a member written before (the slot id alone) stays, and "
           "its key's permit is leaked", "scheduler/scripts/lua/_lib.lua",
           "    redis.call('ZREM', older_running(prefix, s.queue, s.key), slot_id, older_member(slot_id, attempt))\n",
           "    redis.call('ZREM', older_running(prefix, s.queue, s.key), older_member(slot_id, attempt))\n",
           (TAKE + "test_a_member_of_the_older_form_leaves_with_its_run",), fast=True),
    Mutant("key-permit-old-form-kept-by-commit", "a commit read off the fence removes only "
           "the run's member of the attempt's form: one written before (the slot id alone) "
           "stays, and its key's permit is leaked", "scheduler/scripts/lua/_lib.lua",
           "    members[#members + 1], members[#members + 2] = slot_id, older_member(slot_id, attempt)\n",
           "    members[#members + 1] = older_member(slot_id, attempt)\n",
           (TAKE + "test_a_member_of_the_older_form_leaves_with_its_run",), fast=True),
    Mutant("key-recount-ignores-attempt", "the recount of a key at its limit keeps a member "
           "whose slot runs under another attempt: a lost give-back holds a permit while "
           "the slot runs again", "scheduler/scripts/lua/take.lua",
           "    if st[1] == 'running' and (not attempt or st[2] == attempt) then\n",
           "    if st[1] == 'running' then\n",
           (TAKE + "test_the_recount_drops_a_member_of_another_attempt",), fast=True),
    Mutant("key-sweep-doubles-old-member", "the sweep adds a live keyed run's member beside "
           "one of the older form: the run holds two of its key's permits",
           "scheduler/scripts/lua/sweep.lua",
           "      if not older[1] and not older[2] then\n",
           "      if true then\n",
           (TAKE + "test_a_member_of_the_older_form_leaves_with_its_run",), fast=True),
    Mutant("key-member-kept-by-restore", "a running keyed slot restored from history keeps "
           "its lost attempt's member of its key's running set: that attempt's late commit "
           "passes the fence and commits a slot queued again", "scheduler/scripts/lua/restore.lua",
           "      if st[12] then  -- the attempt ends here", "      if false then  --", (
               TAKE + "test_a_restored_running_slot_leaves_no_member_of_its_lost_attempt",),
           fast=True),
    Mutant("keyed-commit-sent-unmarked",
           "a take's entries carry no key: every keyed commit reads its slot (the fence by "
           "the key's running set is never used)", "scheduler/scripts/replies.py",
           'entries = [(lane, b"~" + key, slot_id.decode())',
           'entries = [(lane, b"", slot_id.decode())',
           (TAKE + "test_a_take_s_entries_carry_what_fences_their_commit",), fast=True),
    Mutant("keyed-take-keeps-the-last-attempt-s-member", "a take of a keyed slot's next "
           "attempt leaves the last attempt's member that an older version's reclaim left in "
           "the key's running set: that attempt's late commit passes the fence beside the new "
           "one's (two successes of one slot while versions are mixed)",
           "scheduler/scripts/lua/take.lua",
           "  redis.call('ZREM', running, unpack(stale, i, math.min(i + 999, #stale)))\n", "",
           ("tests/lua/test_take.py::test_a_take_of_a_later_attempt_drops_the_member_an_older_"
            "reclaim_left",), fast=True),
    Mutant("keyed-take-keeps-the-last-attempt-s-older-permit", "a take of a keyed slot's next "
           "attempt leaves the last attempt's permit of the older form (a key's own set) that "
           "a still older reclaim left: an older worker's late commit of that attempt passes "
           "its fence beside the new one's", "scheduler/scripts/lua/take.lua",
           "            redis.call('ZREM', older_running(prefix, queue, key), older_member(slot_id, st[3]))\n",
           "", ("tests/lua/test_take.py::test_a_take_of_a_later_attempt_drops_the_member_an_older_"
                "reclaim_left",), fast=True),
    Mutant("keyed-take-forgets-the-call-s-runs", "a key's later turn in the same take does not "
           "count the runs its earlier turns started (their permits are written at the call's "
           "end): a key with a short ring passes its per-key limit",
           "scheduler/scripts/lua/take.lua",
           "      local held = key_held(prefix, queue, key) + (added[key] or 0)\n",
           "      local held = key_held(prefix, queue, key)\n",
           (TAKE + "test_a_call_s_runs_count_against_their_key_s_later_turns",), fast=True),
    Mutant("key-held-ignores-the-older-form", "a key's permits of the older form (runs an older "
           "version's take started) are not counted: the key runs past its limit while they "
           "last", "scheduler/scripts/lua/_lib.lua",
           "    + redis.call('ZCARD', older_running(prefix, queue, key))\n", "\n",
           (TAKE + "test_a_permit_of_the_older_form_counts_against_the_limit",), fast=True),
    Mutant("key-range-takes-in-longer-keys", "a key's range of the queue's running set ends "
           "past the keys it is the start of: key \"a\" counts the runs of \"ab\" as its own "
           "and stalls under another tenant's load", "scheduler/scripts/lua/_lib.lua",
           "'(' .. key .. '!')\n", "'(' .. key .. '~')\n",
           (TAKE + "test_a_key_s_runs_are_its_own_whatever_keys_it_prefixes",), fast=True),
]
