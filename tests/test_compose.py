"""docker-compose.yml parses and every command in it is a real `sched` command."""

from __future__ import annotations

from pathlib import Path

import yaml

from cli.main import cli

ROOT = Path(__file__).parent.parent


def test_compose_services_run_real_cli_commands() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert {"redis", "scheduler", "worker"} <= set(compose["services"])
    assert "--appendonly" in compose["services"]["redis"]["command"]
    for name, service in compose["services"].items():
        command = service.get("command")
        if not command or command[0] != "sched":
            continue
        sub = cli.get_command(None, command[1])  # type: ignore[arg-type]
        assert sub is not None, f"service {name}: unknown command {command}"
        sub.make_context(sub.name, list(command[2:]))  # raises on an unknown option
