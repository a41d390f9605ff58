"""docker-compose.yml, the Prometheus config, the alert rules and the Grafana dashboard parse;
every command in compose is a real `sched` command with real options; every metric the
queries use is one scheduler/observe/metrics.py declares. (No Docker engine here: this is what can be
checked without one.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from scheduler.cli.main import cli
from scheduler.observe.metrics import declared_names

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\bsched_[a-z_]+\b")


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_compose_services_run_real_cli_commands() -> None:
    services = compose()["services"]
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
    services = compose()["services"]
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


def test_the_ha_profile_runs_two_replicas_and_three_sentinels_that_work(tmp_path: Path) -> None:
    """The sentinel config compose writes is run here against a real primary (hostnames
    swapped for loopback ports): it finds the primary under the service name the docs'
    sentinel URL uses (docs/operating/sentinel.md)."""
    import contextlib
    import subprocess

    import redis
    from faults.harness import RedisServer, free_port, wait_for

    from scheduler.redis.urls import parse_sentinel

    services = compose()["services"]
    replica, sentinel = services["redis-replica"], services["sentinel"]
    assert replica["profiles"] == sentinel["profiles"] == ["ha"]
    assert replica["deploy"]["replicas"] == 2 and sentinel["deploy"]["replicas"] == 3
    assert replica["command"][-3:] == ["--replicaof", "redis", "6379"]
    header = (ROOT / "docker-compose.yml").read_text()
    url = re.search(r"SCHED_REDIS_URL=(redis\+sentinel://\S+)", header)
    assert url is not None
    parsed = parse_sentinel(url.group(1))
    assert parsed is not None and parsed.service == "sched"
    assert compose()["x-sched"]["environment"]["SCHED_REDIS_URL"].startswith(
        "${SCHED_REDIS_URL:-redis://redis:6379/0}")
    script = sentinel["command"][2]
    conf = script.split("printf '", 1)[1].split("' >", 1)[0].replace("\\n", "\n")
    primary = RedisServer().start()
    port = free_port()
    path = tmp_path / "sentinel.conf"
    path.write_text(conf.replace("port 26379", f"port {port}\nbind 127.0.0.1")
                    .replace("sched redis 6379 2", f"sched 127.0.0.1 {primary.port} 1"))
    proc = subprocess.Popen(["redis-server", str(path), "--sentinel"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def sees() -> bool:
            with contextlib.closing(redis.Redis(port=port, socket_timeout=1)) as s:
                try:
                    addr = s.sentinel_get_master_addr_by_name("sched")
                    return addr is not None and int(addr[1]) == primary.port
                except redis.exceptions.RedisError:
                    return False
        wait_for(sees, 15, "the compose sentinel config to find the primary")
    finally:
        proc.kill()
        proc.wait()
        primary.stop()
