"""docker-compose.yml, the Prometheus config, the alert rules and the Grafana dashboard parse;
every command in compose is a real `sched` command with real options; every metric the
queries use is one scheduler/observe/metrics.py declares; the stack has no default secret
(it refuses to start without its three, as compose interpolates them), publishes every port
on loopback only, and each service's URL carries the Redis password. (No Docker engine or
`docker compose` here: this is what can be checked without one, compose's interpolation rules
included.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli.main import cli
from scheduler.observe.metrics import declared_names

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\bsched_[a-z_]+\b")


SECRETS = {"SCHED_WEB_TOKEN": "kX9v2Qm7Lr4Tz8WbYc1Nd6Pf", "SCHED_REDIS_PASSWORD": "r3dis-Pw_x",
           "SCHED_POSTGRES_PASSWORD": "pg-Pw_y7"}


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


class Unset(Exception):
    """A required variable (`${VAR:?message}`) is unset or empty: compose refuses to start."""


def interpolate(text: str, env: dict[str, str]) -> str:
    """A value as `docker compose` makes it from `env`: `$$` is `$`; `$VAR`, `${VAR}`,
    `${VAR:-default}` / `${VAR-default}` (unset or empty / unset), `${VAR:?message}` /
    `${VAR?message}` (raises Unset), `${VAR:+other}` / `${VAR+other}`; a default may hold
    another ${...}."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                if j == len(text):
                    raise ValueError(f"unclosed ${{ in {text!r}")
                depth += {"{": 1, "}": -1}.get(text[j], 0) if text[j - 1] == "$" or \
                    text[j] == "}" else 0
                j += 1
            body = text[i + 2:j - 1]
            m = re.fullmatch(r"(\w+)(?:(:?)([-?+])(.*))?", body, re.S)
            assert m, f"not a compose variable: ${{{body}}}"
            name, colon, op, arg = m.groups()
            value = env.get(name)
            missing = value is None or (colon == ":" and value == "")
            if op is None:
                out.append(value or "")
            elif op == "-":
                out.append(interpolate(arg, env) if missing else value or "")
            elif op == "?":
                if missing:
                    raise Unset(f"{name}: {arg}")
                out.append(value or "")
            else:
                out.append("" if missing else interpolate(arg, env))
            i = j
        elif m := re.match(r"\$(\w+)", text[i:]):
            out.append(env.get(m.group(1), ""))
            i += m.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def rendered(env: dict[str, str]) -> dict[str, Any]:
    """The compose file with every string interpolated from `env`, as compose runs it."""
    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return interpolate(node, env)
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node
    return walk(compose())  # type: ignore[no-any-return]


def test_interpolation_follows_composes_rules() -> None:
    env = {"A": "a", "E": ""}
    for text, want in [("$$A", "$A"), ("${A}", "a"), ("$A/x", "a/x"), ("${B:-d}", "d"),
                       ("${E:-d}", "d"), ("${E-d}", ""), ("${B:-x${A}y}", "xay"),
                       ("${A:+set}", "set"), ("${B:+set}", ""), ("${A:?no}", "a")]:
        assert interpolate(text, env) == want, text
    for text in ("${B:?say}", "${E:?say}", "${B?say}", "${B:-${E:?say}}"):
        with pytest.raises(Unset):
            interpolate(text, env)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_compose_refuses_to_start_without_each_secret(name: str) -> None:
    """SCHED_WEB_TOKEN defaulted to `change-me`, Redis and Postgres had none or `sched`."""
    for value in (None, ""):
        env = {k: v for k, v in SECRETS.items() if k != name}
        if value is not None:
            env[name] = value
        with pytest.raises(Unset, match=name):
            rendered(env)
    text = (ROOT / "docker-compose.yml").read_text()
    assert re.findall(rf"\${{{name}:-", text) == [], f"{name} has a default"


def test_every_port_is_published_on_loopback_only() -> None:
    services = rendered(SECRETS)["services"]
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert {"redis", "postgres", "web", "exporter", "prometheus", "grafana",
            "redisinsight"} <= set(published)
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:") and str(port).count(":") == 2, \
                (name, port)


def test_every_service_reaches_redis_and_postgres_with_their_passwords() -> None:
    from scheduler.history.store.interface import is_postgres
    from scheduler.redis.urls import parse_sentinel
    from scheduler.web.guard import check_bind

    services = rendered(SECRETS)["services"]
    redis_pw, pg_pw = SECRETS["SCHED_REDIS_PASSWORD"], SECRETS["SCHED_POSTGRES_PASSWORD"]
    assert services["redis"]["command"][-2:] == ["--requirepass", redis_pw]
    replica = services["redis-replica"]["command"]
    assert replica[replica.index("--masterauth") + 1] == redis_pw
    assert replica[replica.index("--requirepass") + 1] == redis_pw
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == pg_pw
    sched = {n: s for n, s in services.items() if (s.get("command") or [""])[0] == "sched"}
    assert set(sched) >= {"scheduler", "worker", "exporter", "web", "db-upgrade", "snapshotter"}
    for name, service in sched.items():
        env = service["environment"]
        assert env["SCHED_REDIS_URL"] == f"redis://:{redis_pw}@redis:6379/0", name
        if "SCHED_POSTGRES_DSN" in env:
            dsn = env["SCHED_POSTGRES_DSN"]
            assert is_postgres(dsn) and f"sched:{pg_pw}@postgres:5432" in dsn, name
    web = services["web"]
    assert web["environment"]["SCHED_WEB_TOKEN"] == SECRETS["SCHED_WEB_TOKEN"]
    host = web["command"][web["command"].index("--host") + 1]
    check_bind(host, web["environment"]["SCHED_WEB_TOKEN"])
    # The header's sentinel URL, as a shell expands it, names the service and both passwords.
    header = (ROOT / "docker-compose.yml").read_text()
    found = re.search(r'SCHED_REDIS_URL="(redis\+sentinel://[^"]+)"', header)
    assert found is not None
    parsed = parse_sentinel(found.group(1).replace("$SCHED_REDIS_PASSWORD", redis_pw))
    assert parsed is not None and parsed.service == "sched"
    assert parsed.password == redis_pw and parsed.sentinel_password == redis_pw


@pytest.mark.parametrize("token", ["change-me", "changeme", "short-token"])
def test_the_console_service_refuses_a_weak_token(token: str) -> None:
    from scheduler.core.errors import ConfigError
    from scheduler.web.guard import check_bind

    web = rendered({**SECRETS, "SCHED_WEB_TOKEN": token})["services"]["web"]
    with pytest.raises(ConfigError, match="weak token"):
        check_bind(web["command"][web["command"].index("--host") + 1],
                   web["environment"]["SCHED_WEB_TOKEN"])


def test_compose_services_run_real_cli_commands() -> None:
    services = rendered(SECRETS)["services"]
    assert {"redis", "postgres", "scheduler", "worker", "exporter", "snapshotter", "prometheus", "grafana",
            "redisinsight"} <= set(services)
    assert "--appendonly" in services["redis"]["command"]
    for name, service in services.items():
        command = service.get("command")
        if not command or command[0] != "sched":
            continue
        sub = cli.get_command(None, command[1])  # type: ignore[arg-type]
        assert sub is not None, f"service {name}: unknown command {command}"
        sub.make_context(sub.name, list(command[2:]))  # raises on an unknown option


def test_compose_mounts_exist_and_prometheus_scrapes_the_ports_compose_serves() -> None:
    services = rendered(SECRETS)["services"]
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repo"
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    ports = {}
    for job in config["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            for host in sd["names"]:
                ports[host] = str(sd["port"])
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.split(":")
                ports[host] = port
    assert set(ports) == {"exporter", "worker", "scheduler", "snapshotter"}
    for host, port in ports.items():
        command = services[host]["command"]
        flag = "--port" if host == "exporter" else "--metrics-port"
        assert command[command.index(flag) + 1] == port, host
        # Prometheus is another container: the endpoint listens on the container's network
        # (metrics default to loopback), which publishes none of these ports.
        listen = "--host" if host == "exporter" else "--metrics-host"
        assert command[command.index(listen) + 1] == "0.0.0.0", host
        assert "ports" not in services[host] or host == "exporter", host
    mounted = {v.split(":")[1] for v in services["prometheus"]["volumes"]}
    assert set(config["rule_files"]) <= mounted


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "sched.json").read_text())
    assert dash["panels"] and dash["uid"]
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def test_alert_rules_cover_lag_backlog_and_dead_letters() -> None:
    rules = alert_rules()
    for rule in rules:
        assert {"alert", "expr", "labels", "annotations"} <= set(rule), rule
        assert rule["annotations"]["summary"]
    used = " ".join(r["expr"] for r in rules)
    for needed in ("sched_queue_oldest_ready_age_seconds", "sched_due_backlog",
                   "sched_dead_letter_size", "sched_workers_alive"):
        assert needed in used


def test_every_metric_in_dashboards_and_alerts_is_declared() -> None:
    declared = declared_names()
    exprs = dashboard_exprs() + [r["expr"] for r in alert_rules()]
    used = {name for e in exprs for name in METRIC.findall(e)}
    assert used and used <= declared, sorted(used - declared)
    for topic in ("sched_queue_depth", "sched_runs_total", "sched_start_lag_seconds_bucket",
                  "sched_due_backlog", "sched_dead_letter_size", "sched_workers_alive"):
        assert any(topic in e for e in dashboard_exprs()), topic


@pytest.mark.slow  # real processes: a redis-server and a sentinel, seconds until it signs in
def test_the_ha_profile_runs_two_replicas_and_three_sentinels_that_work(tmp_path: Path) -> None:
    """The sentinel config compose writes (its own shell line, run here as compose runs it)
    is run against a real primary that requires the password (hostnames swapped for loopback
    ports): it signs in to the primary, requires the password itself, and finds the primary
    under the service name the docs' sentinel URL uses (docs/operating/sentinel.md)."""
    import contextlib
    import os
    import subprocess

    import redis
    from faults.harness import RedisServer, free_port, wait_for

    services = rendered(SECRETS)["services"]
    replica, sentinel = services["redis-replica"], services["sentinel"]
    assert replica["profiles"] == sentinel["profiles"] == ["ha"]
    assert replica["deploy"]["replicas"] == 2 and sentinel["deploy"]["replicas"] == 3
    assert replica["command"][-3:] == ["--replicaof", "redis", "6379"]
    password = SECRETS["SCHED_REDIS_PASSWORD"]
    assert sentinel["environment"]["REDIS_PASSWORD"] == password
    shell, flag, script = sentinel["command"]
    assert (shell, flag) == ("sh", "-c")
    write, _, start = script.partition(" && ")
    assert write.endswith(" > /tmp/sentinel.conf") and start.startswith("exec redis-server")
    path = tmp_path / "sentinel.conf"
    subprocess.run([shell, flag, write.replace("/tmp/sentinel.conf", str(path))], check=True,
                   env={**os.environ, **sentinel["environment"]}, timeout=30)
    conf = path.read_text()
    assert f"sentinel auth-pass sched {password}\n" in conf and f"requirepass {password}\n" in conf
    primary = RedisServer().start()
    with contextlib.closing(primary.client()) as c:
        c.config_set("requirepass", password)
    port = free_port()
    path.write_text(conf.replace("port 26379", f"port {port}\nbind 127.0.0.1")
                    .replace("sched redis 6379 2", f"sched 127.0.0.1 {primary.port} 1"))
    proc = subprocess.Popen(["redis-server", str(path), "--sentinel"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def sees() -> bool:
            with contextlib.closing(redis.Redis(port=port, password=password,
                                                socket_timeout=1)) as s:
                try:
                    master = s.sentinel_master("sched", return_responses=True)
                except redis.exceptions.RedisError:
                    return False
                # A run id is learnt from the primary's INFO: the sentinel signed in to it.
                return int(master["port"]) == primary.port and bool(master.get("runid"))
        wait_for(sees, 15, "the compose sentinel config to sign in to the primary")
        with contextlib.closing(redis.Redis(port=port, socket_timeout=1)) as anonymous:
            with pytest.raises(redis.exceptions.AuthenticationError):
                anonymous.sentinel_master("sched")
    finally:
        proc.kill()
        proc.wait()
        primary.stop()
