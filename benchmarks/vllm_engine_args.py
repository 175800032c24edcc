"""The engine arguments a vLLM release takes, read from its wheel's source without installing or importing it: the
fields of ``EngineArgs`` and ``AsyncEngineArgs`` (``vllm/engine/arg_utils.py``), name -> annotation, written as
the JSON fixture ``tests/recipes/fixtures/vllm_<version>_engine_args.json`` that ``tests/recipes/test_vllm_args.py``
checks every recipe's ``engine_kwargs.vllm`` against (no network at test time).

Usage: ``pip download vllm==0.24.0 --no-deps -d /tmp/vllm024`` then
``python benchmarks/vllm_engine_args.py /tmp/vllm024/vllm-0.24.0-*.whl``.
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLASSES = ("EngineArgs", "AsyncEngineArgs")


def engine_fields(source: str) -> dict[str, str]:
    """name -> annotation of every annotated field of the ``CLASSES`` in ``arg_utils.py``'s source."""
    fields: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in CLASSES:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    fields[item.target.id] = ast.unparse(item.annotation)
    return dict(sorted(fields.items()))


def main(wheel: str) -> None:
    """Write the fixture of ``wheel`` (a vllm-VERSION-*.whl)."""
    version = Path(wheel).name.split("-")[1]
    with zipfile.ZipFile(wheel) as archive:
        fields = engine_fields(archive.read("vllm/engine/arg_utils.py").decode())
    out = REPO / "tests" / "recipes" / "fixtures" / f"vllm_{version.replace('.', '_')}_engine_args.json"
    out.write_text(
        json.dumps({"vllm": version, "source": "vllm/engine/arg_utils.py", "fields": fields}, indent=1) + "\n"
    )
    print(f"{len(fields)} engine arguments of vLLM {version} -> {out.relative_to(REPO)}")


if __name__ == "__main__":
    main(sys.argv[1])
