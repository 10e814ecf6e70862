"""Virtualenvs of OpenStack services the tests run next to Exosuit, apart from its own.

``openstack-cyborg`` and ``nova`` pin OpenStack libraries of their own, so each lives in
a virtualenv of its own in the repository (git-ignored), made once and reused:

* ``.venv-cyborg/``: openstack-cyborg (its ``cyborg-dbsync`` and object layer fill the
  database the import tests read);
* ``.venv-nova/``: nova (API, conductor, scheduler, compute on the fake driver).

``make test`` builds them first (``python -m tests.helpers.venvs``); a fixture that
finds one missing builds it. A marker file records what was installed: a venv whose
marker is missing or names other requirements is built again.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["VENVS", "Venv", "ensure"]

ROOT = Path(__file__).resolve().parents[2]


class Venv:
    def __init__(self, name: str, requirements: tuple[str, ...]) -> None:
        self.name = name
        self.requirements = requirements
        self.path = ROOT / f".venv-{name}"
        self.marker = self.path / ".installed"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def bin(self, script: str) -> Path:
        return self.path / "bin" / script

    def ready(self) -> bool:
        try:
            return self.marker.read_text().split() == list(self.requirements)
        except OSError:
            return False


VENVS = {
    "cyborg": Venv("cyborg", ("openstack-cyborg", "PyMySQL")),
    "nova": Venv("nova", ("nova", "PyMySQL")),
}


def ensure(name: str, timeout: float = 1200) -> Venv:
    """The venv, built first if needed (one builder at a time). Raises RuntimeError with
    pip's output when it cannot be built (no network, no such package)."""
    venv = VENVS[name]
    if venv.ready():
        return venv
    ROOT.joinpath(".venv-locks").mkdir(exist_ok=True)
    with open(ROOT / ".venv-locks" / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if venv.ready():
            return venv
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        steps = []
        if not venv.python.exists():
            steps.append([sys.executable, "-m", "venv", "--clear", str(venv.path)])
        steps.append([str(venv.python), "-m", "pip", "install", "--quiet", *venv.requirements])
        for step in steps:
            result = subprocess.run(
                step, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
            if result.returncode != 0:
                raise RuntimeError(
                    f"building {venv.path} failed ({' '.join(step[:4])} …): "
                    + (result.stderr or result.stdout)[-2000:]
                )
        venv.marker.write_text(" ".join(venv.requirements) + "\n")
    return venv


def main(argv: list[str]) -> int:
    for name in argv or list(VENVS):
        venv = ensure(name)
        print(f"{venv.path}: ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
