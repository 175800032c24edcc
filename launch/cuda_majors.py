"""The CUDA majors among an environment's packages: a GPU process should load one CUDA stack, not two.

torch, vLLM and flash-attn in the GPU install are CUDA 13.0 builds and load the CUDA 13 libraries of the
``nvidia-*`` wheels; a package built for CUDA 12 (``faiss-gpu-cu12``) brings ``nvidia-cublas-cu12`` and
``nvidia-cuda-runtime-cu12``, and one process then loads both majors' runtimes and cuBLAS. Each package's major
is read by a rule for its name: torch's own ``torch.version.cuda`` (its ``torch/version.py``, read without importing
torch) or a local version label (``+cu130``); a name suffix (``-cu12``, ``-cu13``, ``cupy-cuda12x``); for CUDA
13's unsuffixed ``nvidia-*`` wheels, whose versions are their libraries' own (cuFFT 12.0 ships with CUDA 13.0,
cuFFT 11.x with CUDA 12), the explicit tables below. Compiled packages that name no CUDA (vllm, flashinfer)
are not read: they load the libraries these packages provide.

Usage: python launch/cuda_majors.py [SITE_DIR ...]   distributions installed there (default: this interpreter's)
       python launch/cuda_majors.py --lock FILE      the name==version pins of a requirements lock
       add --list to print every CUDA package's major and the rule that gave it.
Exit 0 with one summary line where every CUDA package has one major; 1 with a line per package of another
major (torch's, else the most common one, is the reference) and per package no rule reads.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path

SAME_MAJOR = frozenset(
    {
        "cuda-bindings",
        "cuda-python",
        "cuda-toolkit",
        "nvidia-cublas",
        "nvidia-cuda-cccl",
        "nvidia-cuda-crt",
        "nvidia-cuda-cuobjdump",
        "nvidia-cuda-cupti",
        "nvidia-cuda-nvcc",
        "nvidia-cuda-nvdisasm",
        "nvidia-cuda-nvrtc",
        "nvidia-cuda-opencl",
        "nvidia-cuda-profiler-api",
        "nvidia-cuda-runtime",
        "nvidia-cuda-sanitizer-api",
        "nvidia-cuda-tileiras",
        "nvidia-npp",
        "nvidia-nvfatbin",
        "nvidia-nvjitlink",
        "nvidia-nvjpeg",
        "nvidia-nvml-dev",
        "nvidia-nvtx",
        "nvidia-nvvm",
    }
)
"""Packages whose version's major is the CUDA major they ship with (nvidia-cublas 13.1.0.3: CUDA 13)."""

BY_VERSION: dict[str, tuple[tuple[tuple[int, ...], int], ...]] = {
    "nvidia-cufft": (((11, 0), 12), ((12, 0), 13)),
    "nvidia-curand": (((10, 3, 1), 12), ((10, 4), 13)),
    "nvidia-cusolver": (((11, 4, 2), 12), ((12, 0), 13)),
    "nvidia-cusparse": (((12, 0), 12), ((12, 6), 13)),
    "nvidia-cufile": (((1, 5), 12), ((1, 15), 13)),
    # PyPI's faiss GPU wheels by their Requires-Dist: faiss-gpu 1.14.3-1.15.1 want nvidia-*-cu12; faiss-gpu-cuvs
    # 1.14.1.post1 wants nvidia-*-cu12, 1.15.0 and 1.15.1 want nvidia-cuda-runtime>=13.2.
    "faiss-gpu": (((1, 14, 3), 12),),
    "faiss-gpu-cuvs": (((1, 14, 1), 12), ((1, 15), 13)),
}
"""Per package, (lowest version, CUDA major) ascending: the first release of each major's library (cuFFT 11.0.0
came with CUDA 12.0, 12.0.0 with CUDA 13.0); a version below the first bound is not read."""

NO_CUDA = frozenset(
    {
        "cuda-core",
        "cuda-pathfinder",
        "cuda-tile",
        "faiss-cpu",
        "nvidia-cudnn-frontend",
        "nvidia-cutlass",
        "nvidia-cutlass-dsl",
        "nvidia-cutlass-dsl-libs-base",
        "nvidia-ml-py",
    }
)
"""CUDA-related packages tied to no major: pure Python over whatever CUDA is loaded, or the driver's NVML."""

SUFFIX = re.compile(r"-cu(?:da)?(\d{2})x?(?=-|$)")
"""A major in the name: nvidia-cublas-cu12, faiss-gpu-cu12-cuvs, libcuvs-cu13, cupy-cuda12x."""

LOCAL = re.compile(r"^cu(\d+)(\d)(?![0-9])")
"""A CUDA build's local version label, major and minor digits: +cu130 (13.0), +cu128, +cu130torch2.11."""

IN_SCOPE = re.compile(r"^(?:nvidia-|cuda-|faiss|cupy)")


@dataclass(frozen=True)
class Package:
    """One distribution as the check reads it."""

    name: str
    """Canonical name (lower case, runs of ``-_.`` as one ``-``)."""
    version: str
    """Its version string, local label included."""
    torch_cuda: str | None = None
    """torch only: ``torch.version.cuda`` as its installed ``torch/version.py`` says ("" for None, a CPU build;
    "not found" without the file); None where nothing was read (a lock)."""


def canonical(name: str) -> str:
    """A distribution name as packaging canonicalises it.

    >>> canonical("Nvidia_Cublas.cu12")
    'nvidia-cublas-cu12'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version, without pre/post/dev parts or a local label.

    >>> release("1.14.1.post1+cu12")
    (1, 14, 1)
    """
    return tuple(int(n) for n in re.findall(r"\d+", re.split(r"[^\d.]", version, maxsplit=1)[0]))


def cuda_major(package: Package) -> tuple[int | None, str] | None:
    """(CUDA major or None for no CUDA, the rule that read it), or None where no rule reads the package.

    >>> cuda_major(Package("nvidia-cufft", "12.0.0.61"))
    (13, 'nvidia-cufft 12.0 and later ship with CUDA 13')
    >>> cuda_major(Package("nvidia-cublas-cu12", "12.9.3.13"))
    (12, 'name ends -cu12')
    """
    name, version = package.name, package.version
    local = version.partition("+")[2]
    if local and (match := LOCAL.match(local)):
        return int(match.group(1)), f"local version label +{local}"
    if name == "torch":
        if local == "cpu" or package.torch_cuda == "":
            return None, "a CPU build"
        if package.torch_cuda is None:
            return None, "a lock's pin names no build; its CUDA libraries are read as packages of their own"
        if match := re.match(r"(\d+)\.", package.torch_cuda):
            return int(match.group(1)), f"torch.version.cuda = {package.torch_cuda}"
        return None
    if match := SUFFIX.search(name):
        return int(match.group(1)), f"name ends -cu{match.group(1)}"
    if name in NO_CUDA:
        return None, "tied to no CUDA major"
    if name in SAME_MAJOR:
        return release(version)[0], "its version's major is the CUDA major"
    if name in BY_VERSION:
        found = [(low, major) for low, major in BY_VERSION[name] if release(version) >= low]
        if found:
            low, major = found[-1]
            return major, f"{name} {'.'.join(map(str, low))} and later ship with CUDA {major}"
    return None


def in_scope(package: Package) -> bool:
    """Whether the check reads this package: torch, nvidia-*, cuda-*, faiss*, cupy*, a -cuNN name or +cuNNN label."""
    return (
        package.name == "torch"
        or bool(IN_SCOPE.match(package.name) or SUFFIX.search(package.name))
        or bool(LOCAL.match(package.version.partition("+")[2]))
    )


def torch_version_cuda(version_py: object) -> str:
    """``torch.version.cuda`` as torch's ``version.py`` assigns it, without importing torch ("" for None).

    >>> import tempfile; path = Path(tempfile.mkdtemp()) / "version.py"
    >>> _ = path.write_text("cuda: Optional[str] = '13.0'\\n")
    >>> torch_version_cuda(path)
    '13.0'
    """
    path = Path(str(version_py))
    said = re.search(r"^cuda\b[^=\n]*=\s*(.+)$", path.read_text(), re.M) if path.is_file() else None
    return said.group(1).strip().strip("'\"").replace("None", "") if said else "not found"


def installed(paths: list[str] | None) -> list[Package]:
    """The distributions installed in ``paths`` (default: this interpreter's ``sys.path``)."""
    found: dict[str, Package] = {}
    for dist in distributions(path=paths) if paths else distributions():
        name = canonical(dist.metadata["Name"] or "")
        if not name or name in found:  # the first on the path is the one imported
            continue
        torch_cuda = torch_version_cuda(dist.locate_file("torch/version.py")) if name == "torch" else None
        found[name] = Package(name, dist.version, torch_cuda)
    return list(found.values())


def locked(path: str) -> list[Package]:
    """The ``name==version`` pins of a requirements lock (comments after ``#``)."""
    pins = [line.split("#")[0].strip() for line in Path(path).read_text().splitlines()]
    return [Package(canonical(name), version) for name, _, version in (p.partition("==") for p in pins if p)]


def report(packages: Iterable[Package]) -> tuple[list[str], list[str]]:
    """(summary and offender lines, every read package's line): offenders are packages of another major than
    torch's (else the most common) and packages in scope that no rule reads."""
    majors: dict[str, tuple[int, str]] = {}  # "name version" -> (major, rule)
    unread, listing, reference = [], [], None
    for package in sorted((p for p in packages if in_scope(p)), key=lambda p: p.name):
        key, found = f"{package.name} {package.version}", cuda_major(package)
        if found is None:
            unread.append(f"  {key}: no rule reads its CUDA major (add it to launch/cuda_majors.py)")
            continue
        major, why = found
        listing.append(f"  {key}: {'no CUDA major' if major is None else f'CUDA {major}'} ({why})")
        if major is not None:
            majors[key] = (major, why)
            reference = major if package.name == "torch" else reference
    counts = Counter(major for major, _ in majors.values())
    whose = "torch's" if reference is not None else "the most common"
    if reference is None and counts:
        reference = counts.most_common(1)[0][0]
    found = ", ".join(f"CUDA {m} ({n} package{'s' * (n != 1)})" for m, n in counts.most_common())
    if len(counts) > 1:
        summary = f"{len(counts)} CUDA majors: {found}; against CUDA {reference} ({whose}):"
    else:
        summary = f"one CUDA major: {found or 'none'}"
    if unread:
        summary += f"; {len(unread)} package(s) no rule reads"
    offenders = [
        f"  {key}: CUDA {major} ({why}), not {reference}"
        for key, (major, why) in majors.items()
        if major != reference
    ]
    return [summary, *offenders, *unread], listing


def main(argv: list[str] | None = None) -> int:
    """Print the CUDA majors of an environment or a lock; 1 where there is more than one or one is unread."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("paths", nargs="*", help="site-packages folders (default: this interpreter's)")
    parser.add_argument("--lock", help="read a requirements lock's pins instead")
    parser.add_argument("--list", action="store_true", help="print every CUDA package's major and rule")
    args = parser.parse_args(argv)
    packages = locked(args.lock) if args.lock else installed(args.paths)
    lines, listing = report(packages)
    if args.list:
        print("\n".join(listing))
    failed = len(lines) > 1
    print("\n".join(lines), file=sys.stderr if failed else sys.stdout)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
