"""The ``ragym`` command line: a thin dispatcher to one module per subcommand."""

from __future__ import annotations

import importlib
import logging
import sys
import warnings
from collections.abc import Callable

# name -> ("module" or "module:function", one-line help); the function (default ``main``) takes the argv
# after the command name and returns the exit status. Modules import lazily so ``ragym --help`` stays fast
# and one broken optional dependency cannot break every command.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "ragym.rl.demo.run",
        "CPU demo: synthetic KB + tiny policy, warm start, GRPO, before/after evaluation",
    ),
    "rollout": (
        "ragym.rl.eval.scripted",
        "scripted-policy rollouts on an environment, printing episode metrics",
    ),
    "tiny-policy": ("ragym.rl.tiny.policy", "build a tiny Qwen2.5-VL / Qwen3-VL policy from config"),
    "train": ("ragym.rl.train", "run the local GRPO engine on a recipe"),
    "score": ("ragym.rewards.cli", "score saved episodes with a reward recipe and print the breakdown"),
    "submit": (
        "ragym.rl.cluster.submit:submit_main",
        "submit a GRPO job to a Ray cluster with `ray job submit`",
    ),
    "jobs": ("ragym.rl.cluster.submit:jobs_main", "list, tail or stop Ray jobs"),
    "export": (
        "ragym.rl.export",
        "export a verl FSDP or local-engine checkpoint to a Hugging Face model directory",
    ),
    "eval": (
        "ragym.rl.eval.evaluate",
        "evaluate a policy with the agent loop and report the paper's metrics",
    ),
    "prep": (
        "ragym.rl.prep",
        "prepare a dataset into verl rows (and its KB, corpus or stores): `ragym prep --list` names them",
    ),
    "r3g-demo": (
        "ragym.rl.demo.r3g",
        "CPU demo: GRPO on the synthetic R3G task vs the paper's no-module ablation (evidence Recall@1)",
    ),
    "r3g-baselines": (
        "ragym.rl.eval.r3g_baselines",
        "MRAG, the paper's ablations and the fixed R3G pipeline on R3G-v0 rows (scripted or chat judge)",
    ),
    "retriever-demo": (
        "ragym.rl.retriever.demo",
        "CPU demo: fine-tune MEMORA-R on Skeptics pairs, before/after nDCG@10",
    ),
    "train-retriever": ("ragym.rl.retriever.cli", "train the MEMORA-R dense retriever from a recipe"),
    "memora-baseline": (
        "ragym.rl.eval.memora_baseline",
        "MEMORA's fixed pipeline (scripted or OpenAI-compatible LLM) on MEMORA-v0 rows: nDCG@10 vs first stage",
    ),
    "view": (
        "ragym.rl.view.cli",
        "browse episodes turn by turn (images, events, rewards, tokens) on 127.0.0.1",
    ),
    "serve": (
        "ragym.envs.serving.cli",
        "serve a KB's retrievers over HTTP (batched, cached; 127.0.0.1 by default)",
    ),
    "ablate": (
        "ragym.rl.ablate.cli",
        "the papers' ablation tables in miniature: a grid of demo variants x seeds",
    ),
    "budget": (
        "ragym.rl.budget.cli",
        "tokens per episode (text, visual) of rows' longest episodes at a recipe's settings, and the truncated share; "
        "`budget memory`: GPU memory per GPU, full fine-tuning vs LoRA; `budget gpu-check`: the update measured on one GPU",
    ),
}


ARGUMENTS: dict[str, str] = {
    "demo": "ragym.rl.demo.args:parse_demo_args",
    "r3g-demo": "ragym.rl.demo.args:parse_r3g_demo_args",
    "tiny-policy": "ragym.rl.tiny.args:parse_tiny_policy_args",
    "export": "ragym.rl.export_args:parse_export_args",
    "eval": "ragym.rl.eval.args:parse_eval_args",
    "train-retriever": "ragym.rl.retriever.args:parse_train_retriever_args",
    "retriever-demo": "ragym.rl.retriever.args:parse_retriever_demo_args",
}
"""Commands whose module imports torch, transformers or verl at its top (5-10 s): name -> the "module:function"
that parses their arguments without those imports, as their ``main`` does. The dispatcher parses first, so
``--help`` and a usage error take a moment; the other commands' modules are light enough to parse themselves."""


OWN_WAIT_POLICY = ("serve",)
"""Commands that choose the OpenMP wait policy themselves (``ragym serve --omp-wait-policy``)."""


def prepare_process(name: str) -> None:
    """Process-wide settings for ``ragym NAME``, made before its module imports torch or faiss: the passive
    OpenMP wait policy (idle threads sleep instead of spinning on cores other processes need; the processes it
    starts, Ray's workers included, inherit it), unless the command chooses one itself."""
    if name not in OWN_WAIT_POLICY:
        from ragym.envs.retrieval.search_settings import request_wait_policy

        request_wait_policy("passive")


def command_main(name: str) -> Callable[[list[str]], int]:
    """The function that runs ``ragym NAME`` (imports its module)."""
    module, _, function = COMMANDS[name][0].partition(":")
    return getattr(importlib.import_module(module), function or "main")


def check_arguments(name: str, argv: list[str]) -> None:
    """Parse ``ragym NAME``'s arguments by its light parser (``ARGUMENTS``) where it has one: ``--help`` prints and a
    usage error stops (``SystemExit``) before the command's module is imported."""
    if name in ARGUMENTS:
        module, _, function = ARGUMENTS[name].partition(":")
        getattr(importlib.import_module(module), function)(argv)


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: ragym [--debug] [--verbose] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def user_error(err: BaseException) -> str | None:
    """The message for a user error, one line per problem (ragym's ``UsageError`` or a library error that means one: a
    missing file, malformed YAML, a bad Hydra override, a model path that is neither a folder nor a hub id, an env
    setting its config refuses, a JSON-lines file with a line that is not JSON);
    None for anything else, which is a bug and keeps its traceback."""
    from ragym.rl.errors import UsageError

    if isinstance(err, UsageError):
        return str(err)
    kinds: list[type] = [FileNotFoundError, NotADirectoryError, IsADirectoryError]
    for module, name in _LIBRARY_ERRORS:
        found = getattr(sys.modules.get(module), name, None)
        kinds += [found] if found is not None else []
    if isinstance(err, tuple(kinds)):
        lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
        return " ".join(lines[:2]) or type(err).__name__
    return None


_LIBRARY_ERRORS = (
    ("yaml", "YAMLError"),
    ("hydra.errors", "HydraException"),
    ("omegaconf.errors", "OmegaConfBaseException"),
    ("huggingface_hub.errors", "HFValidationError"),
    ("ragym.envs.core", "UnknownSetting"),
    ("ragym.envs.core", "BadSetting"),
    ("ragym.envs.files", "JsonlError"),
)
"""(module, exception) pairs that mean the user's input is wrong; only checked when already imported."""


OWN_LOGGERS = ("ragym", "benchmarks", "__main__")
"""Top-level logger names of ragym's own code: their INFO lines are about the user's work."""


class _OwnOrWarning(logging.Filter):
    """Passes ragym's own records and every library's warnings and errors (libraries' INFO lines, such as the ten
    ``faiss.loader`` lines every command began with, stay out unless ``--verbose``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".", 1)[0] in OWN_LOGGERS


def configure_logging(verbose: bool) -> None:
    """INFO for ragym's loggers; libraries at WARNING (their import-time notices too) unless ``verbose``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbose:
        return
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _OwnOrWarning) for f in handler.filters):
            handler.addFilter(_OwnOrWarning())
    # verl lists the optional training engines it could not import (torchtitan, megatron, ...) on every import.
    warnings.filterwarnings("ignore", message=r".* engine is not available", category=UserWarning)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``ragym COMMAND ...`` to its module's ``main``; a user error is one line (``--debug``: raise);
    ``--verbose`` lets libraries' INFO lines through."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug, verbose = "--debug" in argv, "--verbose" in argv
    argv = [a for a in argv if a not in ("--debug", "--verbose")]
    configure_logging(verbose)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"ragym: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    prepare_process(name)
    check_arguments(name, rest)
    try:
        return int(command_main(name)(rest) or 0)
    except Exception as err:
        message = None if debug else user_error(err)
        if message is None:
            raise
        *problems, last = message.splitlines() or [message]
        for line in problems:  # several problems: one line each
            print(f"ragym {name}: {line}", file=sys.stderr)
        print(f"ragym {name}: {last} (--debug shows the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
