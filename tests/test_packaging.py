"""The wheel and sdist build and the installed wheel runs, as the Dockerfile's build stage does.

Mirrors the Dockerfile: ``python -m build``, then the wheel installed into a virtualenv created
without pip (``pip --python``), then the ``ome-scheduler`` console script run from it. The
wheel's long description is README.md, as markdown (its links are ``tests/test_docs.py``'s).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_wheel_and_sdist_build_install_and_run(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "ome_scheduler", src / "ome_scheduler", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(src)],
        check=True,
        capture_output=True,
    )
    wheels = list(dist.glob("ome_scheduler-*-py3-none-any.whl"))
    sdists = list(dist.glob("ome_scheduler-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())

    # pyproject's readme = "README.md": the METADATA body is README.md itself, typed markdown.
    with zipfile.ZipFile(wheels[0]) as whl:
        (name,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        meta = Parser().parsestr(whl.read(name).decode("utf-8"))
    assert meta["Description-Content-Type"] == "text/markdown"
    description = meta.get_payload()
    assert isinstance(description, str)
    assert description.strip() == (REPO / "README.md").read_text(encoding="utf-8").strip()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q", str(wheels[0])],
        check=True,
        capture_output=True,
    )
    exe = venv / "bin/ome-scheduler"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True)
    assert "--leader-elect" in r.stdout and "--secure-port" in r.stdout
    # The installed package validates the chart's configuration, then stops at the credentials.
    r = subprocess.run(
        [str(exe), f"--config={REPO / 'examples/demo/config.yaml'}", "--kubeconfig=/nonexistent", "--secure-port=0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 1 and "cannot read kubeconfig /nonexistent (--kubeconfig): no such file" in r.stderr, (
        r.stderr
    )
