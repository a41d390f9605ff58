"""scripts/services.sh's ensure_chromium, as scripts/test.sh runs it, on a PATH that holds a
stand-in apt-get (this machine's own must not install anything): it waits for apt's lock, and
when the install fails it shows apt's own error output, which says why."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import TESTS

SERVICES = TESTS.parent / "scripts" / "services.sh"
BASH = shutil.which("bash") or "/bin/bash"
LOCKED = ("E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 "
          "(unattended-upgr)")


def _apt_get(bin_dir: Path, calls: Path, install: str) -> None:
    """An apt-get that records its arguments; `install`: what its install does (`ok`
    succeeds, `locked` fails as apt does while its lock is held)."""
    script = bin_dir / "apt-get"
    script.write_text(f"""#!{BASH}
echo "$*" >>{calls}
case "$*" in
  *update*) exit 0 ;;
esac
if [ {install} = ok ]; then exit 0; fi
echo "{LOCKED}" >&2
exit 100
""")
    script.chmod(0o755)


def _ensure_chromium(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    # Only the stand-ins on the PATH: `command -v chromium` must not find this machine's.
    return subprocess.run([BASH, "-c", f". {SERVICES}; set -euo pipefail; ensure_chromium; "
                                       f"echo done"],
                          env={"PATH": str(bin_dir)}, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("install", ["ok", "locked"])
def test_ensure_chromium_waits_for_apts_lock_and_shows_why_it_failed(
        tmp_path: Path, install: str) -> None:
    """A held lock failed the install at once, and the message ("could not install chromium")
    hid apt's own output."""
    calls = tmp_path / "calls"
    _apt_get(tmp_path, calls, install)
    done = _ensure_chromium(tmp_path)
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr  # test.sh goes on
    made = calls.read_text().splitlines()
    assert made and all(c.startswith("-o DPkg::Lock::Timeout=300 ") for c in made), made
    if install == "ok":
        assert made == ["-o DPkg::Lock::Timeout=300 install -y -qq chromium"]
        assert done.stderr == ""
        return
    assert made == ["-o DPkg::Lock::Timeout=300 install -y -qq chromium",
                    "-o DPkg::Lock::Timeout=300 update -qq",
                    "-o DPkg::Lock::Timeout=300 install -y -qq chromium"]
    assert done.stderr.startswith("could not install chromium: "), done.stderr
    assert LOCKED in done.stderr


def test_ensure_chromium_does_nothing_when_chromium_is_there(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    _apt_get(tmp_path, calls, "ok")
    (tmp_path / "chromium").write_text(f"#!{BASH}\n")
    (tmp_path / "chromium").chmod(0o755)
    done = _ensure_chromium(tmp_path)
    assert done.returncode == 0 and done.stderr == "" and not calls.exists()
