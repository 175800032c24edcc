"""launch/cuda_majors.py: one CUDA major per environment, read from package metadata without a GPU.

The versions below are NVIDIA's own: CUDA 13.0.2's components as cuda-toolkit 13.0.2 pins them (cuBLAS 13.1.0.3,
cuFFT 12.0.0.61, cuRAND 10.4.0.35, cuSOLVER 12.0.4.66, cuSPARSE 12.6.3.3, cuFile 1.15.1.6) and CUDA 12.9's
(cuFFT 11.4.1.4, cuRAND 10.3.10.19, cuSOLVER 11.7.5.82, cuSPARSE 12.5.10.65, cuFile 1.14.1.1).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "launch" / "cuda_majors.py"
LOCK = REPO / "launch" / "gpu-requirements.lock"
_spec = importlib.util.spec_from_file_location("cuda_majors", SCRIPT)
assert _spec and _spec.loader
cuda_majors = importlib.util.module_from_spec(_spec)
sys.modules["cuda_majors"] = cuda_majors  # dataclasses resolve their module by name
_spec.loader.exec_module(cuda_majors)

CUDA_13 = {
    "torch": "2.11.0",
    "cuda-toolkit": "13.0.2",
    "nvidia-cublas": "13.1.0.3",
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-cufft": "12.0.0.61",
    "nvidia-curand": "10.4.0.35",
    "nvidia-cusolver": "12.0.4.66",
    "nvidia-cusparse": "12.6.3.3",
    "nvidia-cufile": "1.15.1.6",
    "nvidia-cudnn-cu13": "9.19.0.56",
    "nvidia-nccl-cu13": "2.28.9",
    "nvidia-ml-py": "13.615.71",
    "faiss-cpu": "1.15.1",
    "numpy": "2.3.5",
}
"""A CUDA 13 install in small: torch (its version.py says 13.0) and 10 libraries of CUDA 13; nvidia-ml-py and
faiss-cpu name no CUDA, numpy is outside the check."""

FAISS_CU12 = {
    "faiss-gpu-cu12": "1.14.1.post1",
    "nvidia-cublas-cu12": "12.9.3.13",
    "nvidia-cuda-runtime-cu12": "12.9.79",
}
"""What faiss-gpu-cu12 brings: itself and CUDA 12's runtime and cuBLAS."""


def fake_site(site: Path, dists: dict[str, str], torch_cuda: str | None = "13.0") -> Path:
    """A site-packages folder holding ``dists`` (name -> version) as dist-info metadata, and torch's version.py."""
    site.mkdir(parents=True)
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if torch_cuda is not None:
        (site / "torch").mkdir()
        cuda = "None" if torch_cuda == "" else repr(torch_cuda)
        (site / "torch" / "version.py").write_text(f"__version__ = '2.11.0'\ncuda: Optional[str] = {cuda}\n")
    return site


def check(site: Path) -> subprocess.CompletedProcess[str]:
    """``python launch/cuda_majors.py SITE`` as install_gpu.sh --check runs it, on one folder."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(site)], capture_output=True, text=True, check=False
    )


def test_a_cuda_13_install_passes_with_one_line(tmp_path: Path) -> None:
    """Every CUDA package of the clean set reads as 13: exit 0 and one line counting them."""
    result = check(fake_site(tmp_path / "site", CUDA_13))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "one CUDA major: CUDA 13 (11 packages)"  # torch + 10 libraries


def test_faiss_gpu_cu12_beside_it_fails_one_line_per_offender(tmp_path: Path) -> None:
    """faiss-gpu-cu12 and its CUDA 12 libraries: exit 1, a summary, and exactly those three named as CUDA 12."""
    result = check(fake_site(tmp_path / "site", {**CUDA_13, **FAISS_CU12}))
    assert result.returncode == 1
    summary, *offenders = result.stderr.strip().splitlines()
    assert summary == "2 CUDA majors: CUDA 13 (11 packages), CUDA 12 (3 packages); against CUDA 13 (torch's):"
    assert sorted(line.split()[0] for line in offenders) == sorted(FAISS_CU12)
    assert all(": CUDA 12 (" in line and line.endswith("not 13") for line in offenders)


def test_torch_sets_the_reference_major(tmp_path: Path) -> None:
    """Under a CUDA 12.8 torch the CUDA 13 libraries are the offenders, though they are the majority."""
    result = check(fake_site(tmp_path / "site", CUDA_13, torch_cuda="12.8"))
    assert result.returncode == 1
    offenders = result.stderr.strip().splitlines()[1:]
    assert len(offenders) == 10 and not any(line.startswith("  torch ") for line in offenders)


def test_a_package_no_rule_reads_fails(tmp_path: Path) -> None:
    """An nvidia-* package the tables do not know is named, not passed over."""
    result = check(fake_site(tmp_path / "site", {**CUDA_13, "nvidia-newlib": "3.1.0"}))
    assert result.returncode == 1
    assert "  nvidia-newlib 3.1.0: no rule reads its CUDA major" in result.stderr


def test_torch_without_its_version_file_fails(tmp_path: Path) -> None:
    """An installed torch whose version.py is missing cannot be read: the check says so."""
    result = check(fake_site(tmp_path / "site", CUDA_13, torch_cuda=None))
    assert result.returncode == 1
    assert "  torch 2.11.0: no rule reads its CUDA major" in result.stderr


def test_a_cpu_torch_and_faiss_cpu_hold_no_cuda(tmp_path: Path) -> None:
    """The CPU install: torch's version.py says None, faiss-cpu names no CUDA; nothing to mix."""
    result = check(fake_site(tmp_path / "site", {"torch": "2.11.0", "faiss-cpu": "1.15.1"}, torch_cuda=""))
    assert (result.returncode, result.stdout.strip()) == (0, "one CUDA major: none")


@pytest.mark.parametrize(
    ("name", "version", "major"),
    [
        ("nvidia-cufft", "12.0.0.61", 13),
        ("nvidia-cufft", "11.4.1.4", 12),
        ("nvidia-curand", "10.4.0.35", 13),
        ("nvidia-curand", "10.3.10.19", 12),
        ("nvidia-cusolver", "12.0.4.66", 13),
        ("nvidia-cusolver", "11.7.5.82", 12),
        ("nvidia-cusparse", "12.6.3.3", 13),
        ("nvidia-cusparse", "12.5.10.65", 12),
        ("nvidia-cufile", "1.15.1.6", 13),
        ("nvidia-cufile", "1.14.1.1", 12),
        ("nvidia-cublas", "13.1.0.3", 13),
        ("nvidia-cufft-cu12", "11.4.1.4", 12),
        ("cupy-cuda12x", "13.6.0", 12),
        ("faiss-gpu-cu12-cuvs", "1.15.0", 12),
        ("faiss-gpu", "1.15.1", 12),
        ("faiss-gpu-cuvs", "1.15.1", 13),
        ("faiss-gpu-cuvs", "1.14.1.post1", 12),
        ("torch", "2.8.0+cu128", 12),
        ("flash-attn", "2.8.3+cu130torch2.11", 13),
        ("torch", "2.11.0+cpu", None),
        ("faiss-cpu", "1.15.1", None),
    ],
)
def test_each_rule_reads_the_major_nvidia_ships(name: str, version: str, major: int | None) -> None:
    """Each rule against a release's known CUDA major (the module docstring's versions)."""
    found = cuda_majors.cuda_major(cuda_majors.Package(name, version))
    assert found is not None and found[0] == major


def test_the_committed_lock_holds_one_cuda_major() -> None:
    """launch/gpu-requirements.lock, read by the same rules: CUDA 13 only, its CUDA libraries among them."""
    lines, listing = cuda_majors.report(cuda_majors.locked(str(LOCK)))
    assert lines == [lines[0]] and lines[0].startswith("one CUDA major: CUDA 13 ("), lines
    assert "  nvidia-cuda-runtime 13.0.96: CUDA 13 (its version's major is the CUDA major)" in listing


def test_the_lock_before_this_change_is_caught() -> None:
    """The lock with faiss-gpu-cu12 (its three CUDA 12 pins added back) fails, naming each."""
    pins = [cuda_majors.Package(n, v) for n, v in FAISS_CU12.items()]
    lines, _ = cuda_majors.report([*cuda_majors.locked(str(LOCK)), *pins])
    assert lines[0].startswith("2 CUDA majors:") and len(lines) == 1 + len(FAISS_CU12)
