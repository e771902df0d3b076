"""One import name: stallscope installs ``stallscope`` and nothing else, so a user's own ``analyzer``,
``collector`` or ``dashboard`` package is never shadowed, neither in a profiled program nor when the
command line runs from the user's folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "worked_example_serial.pt.trace.json.gz"
COMPONENTS = ("analyzer", "collector", "dashboard")

USER_PROGRAM = """\
import analyzer, collector, dashboard
import torch

print("USER", analyzer.mine(), collector.mine(), dashboard.mine())
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
for _ in range(6):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def _pyproject() -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and newer
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture
def users_folder(tmp_path: Path) -> Path:
    """A user's project with packages of the names stallscope's root folders have, each with its own
    ``mine()`` that stallscope's packages do not have."""
    for name in COMPONENTS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"def mine():\n    return 'users-{name}'\n")
    (tmp_path / "train.py").write_text(USER_PROGRAM)
    return tmp_path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def test_every_folder_is_installed_under_stallscope() -> None:
    # GIVEN the packages pyproject.toml installs and where package-dir takes each from
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    listed = set(tool["setuptools"]["packages"])
    mapping = tool["setuptools"]["package-dir"]
    # WHEN every folder of the source (packages and the dashboard's data folders) is named as it is imported
    found = set()
    for name, folder in mapping.items():
        for path in [ROOT / folder, *(p for p in (ROOT / folder).rglob("*") if p.is_dir())]:
            inner = path.relative_to(ROOT / folder).parts
            if "__pycache__" in inner or (name == "stallscope" and inner and inner[0] in COMPONENTS):
                continue  # a component is never nested in the checkout; it has its own mapping
            found.add(".".join([name, *inner]))
    # THEN the list is exactly the folders, and every name is under stallscope
    assert found == listed
    assert all(n == "stallscope" or n.startswith("stallscope.") for n in listed)


@pytest.mark.slow
def test_a_profiled_program_imports_its_own_packages_of_our_folder_names(users_folder: Path) -> None:
    pytest.importorskip("torch")
    # GIVEN a program that imports its own analyzer, collector and dashboard
    # WHEN stallscope profiles it from its folder
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "stallscope",
            "profile",
            "-o",
            "out",
            "--skip",
            "0",
            "--steps",
            "2",
            "train.py",
        ],
        cwd=users_folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # THEN the program ran with its own modules, and the trace was recorded and analysed
    assert proc.returncode == 0, proc.stderr
    assert "USER users-analyzer users-collector users-dashboard" in proc.stdout
    assert "verdict" in proc.stdout
    assert any((users_folder / "out").glob("*.pt.trace.json*"))


def test_the_command_line_works_from_a_folder_with_packages_of_our_folder_names(users_folder: Path) -> None:
    # GIVEN the user's folder, whose analyzer would come first on sys.path
    # WHEN `python -m stallscope analyze` runs there
    proc = subprocess.run(
        [sys.executable, "-m", "stallscope", "analyze", "--no-cache", str(SAMPLE)],
        cwd=users_folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    # THEN stallscope's own analyzer answered
    assert proc.returncode == 0, proc.stderr
    assert "verdict   device-bound" in proc.stdout


@pytest.mark.slow
def test_pip_install_adds_only_stallscope(tmp_path: Path) -> None:
    # GIVEN a fresh, empty environment
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    before = set(os.listdir(site))
    # WHEN stallscope is installed into it (its dependencies are this environment's)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    # THEN it added exactly one import name and its dist-info
    added = set(os.listdir(site)) - before
    assert {a for a in added if not a.endswith(".dist-info")} == {"stallscope"}
    assert [a for a in added if a.endswith(".dist-info")] == [a for a in added if a.startswith("stallscope-")]
    installed = site / "stallscope"
    assert (installed / "py.typed").is_file()
    assert sorted(p.name for p in installed.iterdir() if p.is_dir() and p.name in COMPONENTS) == list(
        COMPONENTS
    )
    assert (installed / "dashboard" / "templates" / "report.html.j2").is_file()
    # AND that tree analyses and renders a report, read from the install, not from this checkout
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        from stallscope.commands import main
        import stallscope.analyzer, stallscope.dashboard.report
        assert stallscope.analyzer.__file__.startswith({str(site)!r}), stallscope.analyzer.__file__
        assert stallscope.dashboard.report.__file__.startswith({str(site)!r})
        sys.exit(main(["report", {str(SAMPLE)!r}, "-o", {str(tmp_path / "r.html")!r}, "--no-cache"]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "worked_example_serial" in (tmp_path / "r.html").read_text()
