"""The GPU install resolves to verl's tested versions, without a GPU or the network.

``launch/install_gpu.sh`` installs ``launch/gpu-requirements.lock`` (setup.py's gpu extra as uv resolved it for
Linux x86-64 / Python 3.11), then the flash-attn of ``launch/gpu-flash-attn.txt``. These tests read the lock
against setup.py and against verl's own metadata (the installed verl, the release setup.py pins), so a setup.py
edit without ``make gpu-lock``, or a verl upgrade without one, fails here and not on a cluster.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path, PurePosixPath
from unittest import mock
from urllib.parse import unquote, urlparse

import packaging
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "launch" / "gpu-requirements.lock"
FLASH_ATTN = REPO / "launch" / "gpu-flash-attn.txt"
VLLM_EXTRA = "vllm"
"""verl's extra that pins the versions its vLLM rollout was tested with."""


def locked() -> dict[str, Version]:
    """The lock's pins, by canonical name (each line ``name==version``, comments after ``#``)."""
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        spec = line.split("#")[0].strip()
        if not spec:
            continue
        name, _, pinned = spec.partition("==")
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name) and pinned, f"not a name==version pin: {line!r}"
        assert canonicalize_name(name) not in pins, f"{name} pinned twice"
        pins[canonicalize_name(name)] = Version(pinned)
    return pins


def setup_arguments() -> dict:
    """The keyword arguments setup.py passes to ``setuptools.setup`` (nothing is built)."""
    captured: dict = {}
    with mock.patch("setuptools.setup", lambda **kwargs: captured.update(kwargs)):
        runpy.run_path(str(REPO / "setup.py"))
    return captured


def extra_requirements(dist: str, extra: str) -> list[Requirement]:
    """What ``dist[extra]`` requires, from the installed metadata, with ``dist``'s own extras it names expanded."""
    found = []
    for line in requires(dist) or []:
        req = Requirement(line)
        if req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        if canonicalize_name(req.name) == canonicalize_name(dist):
            found += [r for inner in sorted(req.extras) for r in extra_requirements(dist, inner)]
        else:
            req.marker = None
            found.append(req)
    return found


SETUP = setup_arguments()
GPU_SET = [Requirement(r) for r in [*SETUP["install_requires"], *SETUP["extras_require"]["gpu"]]]
VERL_VLLM = extra_requirements("verl", VLLM_EXTRA)


def test_the_installed_verl_is_the_release_setup_py_pins() -> None:
    """verl's pins below come from the installed verl; it must be the release setup.py and the lock name."""
    (verl,) = [r for r in GPU_SET if r.name == "verl" and not r.extras]
    assert verl.specifier.contains(version("verl"))
    assert locked()["verl"] == Version(version("verl"))


@pytest.mark.parametrize("req", GPU_SET, ids=str)
def test_the_lock_satisfies_setup_py(req: Requirement) -> None:
    """Every base and gpu-extra requirement of setup.py is in the lock at a version it allows."""
    pins = locked()
    assert canonicalize_name(req.name) in pins, f"{req.name} is not in the lock: make gpu-lock"
    assert req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True)


def test_verls_vllm_extra_pins_the_stack() -> None:
    """Guard on the metadata itself: verl's extra pins the four versions the GPU path depends on."""
    pinned = {canonicalize_name(r.name) for r in VERL_VLLM if str(r.specifier).startswith("==")}
    assert {"vllm", "torch", "torchvision", "transformers"} <= pinned


@pytest.mark.parametrize("req", VERL_VLLM, ids=str)
def test_the_lock_holds_verls_vllm_extra(req: Requirement) -> None:
    """verl's tested versions, exactly: every requirement of verl[vllm] is in the lock and satisfied."""
    pins = locked()
    assert canonicalize_name(req.name) in pins, f"verl[{VLLM_EXTRA}] needs {req}; the lock lacks it"
    assert req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True)


def faiss_of(reqs: list[str]) -> set[str]:
    """The faiss distributions among ``reqs``."""
    return {name for name in (Requirement(r).name for r in reqs) if name.startswith("faiss")}


def test_one_faiss_per_install() -> None:
    """Every faiss distribution writes the package faiss: each install names one, faiss-cpu (PyPI's faiss GPU
    wheels are CUDA 12 builds or want a newer CUDA 13 runtime than torch pins; tests/launch/test_cuda_majors.py)."""
    assert faiss_of(SETUP["install_requires"]) == set()
    assert faiss_of(SETUP["extras_require"]["cpu"]) == {"faiss-cpu"}
    assert faiss_of(SETUP["extras_require"]["gpu"]) == {"faiss-cpu"}
    assert faiss_of(list(locked())) == {"faiss-cpu"}


def test_every_documented_install_names_one_faiss_extra() -> None:
    """The Makefile's CPU install and every `pip install ... .[extras]` in the docs pick cpu or gpu, not both."""
    files = [
        REPO / "Makefile",
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *(REPO / "launch").iterdir(),
    ]
    installs = [
        (path.name, extras)
        for path in files
        if path.is_file()
        for extras in re.findall(r"pip install [^\n`]*?-e '?\.\[([a-z,]+)\]", path.read_text())
    ]
    assert ("Makefile", "cpu,dev") in installs
    for where, extras in installs:
        assert len({"cpu", "gpu"} & set(extras.split(","))) == 1, f"{where}: .[{extras}]"


def flash_attn_wheel() -> tuple[str, Version, set[str]]:
    """launch/gpu-flash-attn.txt's wheel: (distribution name, version, tags as interpreter-abi-platform)."""
    (line,) = [line for line in FLASH_ATTN.read_text().splitlines() if line and not line.startswith("#")]
    req = Requirement(line)
    assert req.url, f"{FLASH_ATTN.name} should name a wheel by URL"
    name, wheel_version, _, tags = parse_wheel_filename(PurePosixPath(unquote(urlparse(req.url).path)).name)
    return name, wheel_version, {f"{t.interpreter}-{t.abi}-{t.platform}" for t in tags}


def verls_flash_attn_pin() -> tuple[Requirement, str]:
    """verl's flash-attn requirement and the extra that carries it (its name says the CUDA and torch it fits)."""
    (req,) = [Requirement(line) for line in requires("verl") or [] if Requirement(line).name == "flash-attn"]
    match = re.fullmatch(r'extra == "([^"]+)"', str(req.marker))
    assert match, f"unexpected marker on verl's {req}"
    return req, match.group(1)


def test_flash_attn_step_fits_the_locked_torch_and_verls_pin() -> None:
    """flash-attn (after the lock, no build isolation) is verl's pinned version built for the lock's CUDA and
    torch minor, for CPython 3.11 on Linux x86-64; its own requirements come from the lock."""
    pins = locked()
    name, wheel_version, tags = flash_attn_wheel()
    verl_pin, verl_extra = verls_flash_attn_pin()
    torch, cuda = pins["torch"], pins["nvidia-cuda-runtime"]

    assert name == "flash-attn" and "flash-attn" not in pins
    assert verl_pin.specifier.contains(wheel_version.public), (
        f"verl pins {verl_pin}, the wheel is {wheel_version}"
    )
    assert wheel_version.local == f"cu{cuda.major}{cuda.minor}torch{torch.major}.{torch.minor}"
    assert verl_extra == f"flash-attn-cu{cuda.major}{cuda.minor}torch{torch.major}{torch.minor}"
    assert tags == {"cp311-cp311-linux_x86_64"}
    assert {
        "torch",
        "einops",
    } <= pins.keys()  # flash-attn 2.8.3's own requirements (it is installed --no-deps)


def fake_install(venv: Path, dists: dict[str, str]) -> None:
    """A venv whose metadata lists ``dists`` (name -> version) and nothing else, and torch's version.py naming
    the lock's CUDA (as PyPI's torch 2.11.0 wheel does): all that --check reads."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    shutil.copytree(Path(packaging.__file__).parent, site / "packaging")
    for name, dist_version in dists.items():
        info = site / f"{name.replace('-', '_')}-{dist_version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {dist_version}\n")
    cuda = locked()["nvidia-cuda-runtime"]
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text(f"cuda: Optional[str] = '{cuda.major}.{cuda.minor}'\n")


def the_install() -> dict[str, str]:
    """What launch/install_gpu.sh installs: the lock's versions and the flash-attn wheel's."""
    _, flash_attn_version, _ = flash_attn_wheel()
    return {**{name: str(pin) for name, pin in locked().items()}, "flash-attn": str(flash_attn_version)}


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({}, None),
        ({"faiss-gpu-cu12": "1.14.1.post1"}, "faiss-gpu-cu12 1.14.1.post1 beside faiss-cpu"),
        (
            {"nvidia-cublas-cu12": "12.9.3.13"},
            "nvidia-cublas-cu12 12.9.3.13: CUDA 12 (name ends -cu12), not 13",
        ),
        ({"transformers": "5.10.4"}, "transformers: 5.10.4 installed, want ==5.9.0"),
        ({"flash-attn": "2.8.3"}, "flash-attn: 2.8.3 installed, want ==2.8.3+cu130torch2.11"),
        ({"vllm": None}, "vllm: missing"),
    ],
    ids=[
        "the install",
        "a second faiss",
        "a second CUDA",
        "another transformers",
        "another flash-attn build",
        "no vllm",
    ],
)
def test_the_check_gpu_smoke_runs_first(tmp_path: Path, change: dict, complaint: str | None) -> None:
    """`launch/install_gpu.sh --check` passes the exact install and names what differs from it."""
    dists = {name: v for name, v in {**the_install(), **change}.items() if v is not None}
    fake_install(tmp_path / "venv", dists)
    result = subprocess.run(
        ["bash", str(REPO / "launch" / "install_gpu.sh"), "--check"],
        env={**os.environ, "RAGYM_VENV": str(tmp_path / "venv")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode == 0) == (complaint is None), result.stderr
    assert complaint is None or complaint in result.stderr
