"""The peers' own environments, under bench/.peers/ (git-ignored), never the project's.

Each Python peer has its own venv (bench/.peers/venv-<peer>, pip: celery's kombu wants
redis-py >= 6.1, taskiq-redis wants < 6); BullMQ is `npm install bullmq` in
bench/.peers/node. `setup()` is idempotent: it installs only what is missing, and a peer whose
install fails is returned with its reason so the others still run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
PEERS_DIR = HERE.parent / ".peers"
NODE_DIR = PEERS_DIR / "node"


def python(peer: str) -> Path:
    return PEERS_DIR / f"venv-{peer}" / "bin" / "python"

# peer -> the distributions it needs (the first one's version is reported)
PY_PACKAGES = {"arq": ["arq"], "celery": ["celery", "redis"], "dramatiq": ["dramatiq", "redis"],
               "rq": ["rq"], "saq": ["saq", "redis"], "taskiq": ["taskiq<0.13", "taskiq-redis"]}
# taskiq-redis (1.2.3) imports taskiq.compat.model_dump, gone in taskiq 0.13; kombu 5.7's redis
# transport imports `packaging` and saq 0.26 imports `typing_extensions` without requiring them;
# celery, dramatiq and saq leave redis-py to an extra (a fresh venv had none).
COMMON = ["hiredis", "uvloop", "packaging", "typing-extensions"]  # redis-py: whichever version the peer wants
NODE_PEERS = {"bullmq"}


def _tail(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip() and "WARNING: Location" not in x]
    return lines[-1][:200] if lines else "no output"


def _pip(peer: str, *packages: str) -> str | None:
    out = subprocess.run([str(python(peer)), "-m", "pip", "install", "--quiet",
                          "--disable-pip-version-check", *packages],
                         capture_output=True, text=True, timeout=600)
    return None if out.returncode == 0 else f"pip install {' '.join(packages)}: {_tail(out.stderr)}"


def py_version(peer: str, dist: str) -> str | None:
    if not python(peer).exists():
        return None
    out = subprocess.run([str(python(peer)), "-c", "import importlib.metadata as m, sys; "
                          "print(m.version(sys.argv[1]))", dist], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def node_version(package: str = "bullmq") -> str | None:
    pkg = NODE_DIR / "node_modules" / package / "package.json"
    return str(json.loads(pkg.read_text())["version"]) if pkg.exists() else None


def version(peer: str) -> str | None:
    return node_version() if peer in NODE_PEERS else py_version(peer, _dist(PY_PACKAGES[peer][0]))


def _dist(requirement: str) -> str:
    return re.split(r"[\[<>=]", requirement)[0]


def setup(peers: list[str]) -> dict[str, str]:
    """Install what `peers` need if missing; returns {peer: reason} for those unavailable."""
    unavailable: dict[str, str] = {}
    for peer in (p for p in peers if p in PY_PACKAGES):
        wanted = [*PY_PACKAGES[peer], *COMMON]
        if all(py_version(peer, _dist(d)) for d in wanted):
            continue
        if not python(peer).exists():
            out = subprocess.run([sys.executable, "-m", "venv", str(python(peer).parent.parent)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                unavailable[peer] = f"python -m venv: {_tail(out.stderr)}"
                continue
        if err := _pip(peer, *wanted):
            unavailable[peer] = err
    if "bullmq" in peers and not (node_version() and node_version("ioredis")):
        if not (shutil.which("node") and shutil.which("npm")):
            unavailable["bullmq"] = "node and npm are not on PATH"
        else:
            NODE_DIR.mkdir(parents=True, exist_ok=True)
            if not (NODE_DIR / "package.json").exists():
                (NODE_DIR / "package.json").write_text('{"name": "peers", "private": true}\n')
            # BullMQ 6 loads ioredis as an optional peer dependency: install both
            out = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund",
                                  "bullmq", "ioredis"], cwd=NODE_DIR, capture_output=True, text=True,
                                 timeout=600)
            if out.returncode != 0 or not node_version():
                unavailable["bullmq"] = f"npm install bullmq ioredis: {_tail(out.stderr)}"
    return unavailable
