"""A recipe's vLLM server arguments, parsed by vLLM's own ``vllm serve`` parser, as verl's rollout server does.

verl's ``vLLMHttpServer`` turns ``actor_rollout_ref.rollout`` into ``vllm serve`` command-line arguments (its
named settings, then every ``engine_kwargs.vllm`` entry) and parses them with vLLM's parser when the server
starts on the cluster: an argument vLLM no longer takes (``disable_mm_preprocessor_cache``, replaced by
``mm_processor_cache_gb``) ends the job there. ``vllm_engine_args`` runs the same parse on any machine with
vLLM installed, so the next renamed flag fails a test, not a cluster job.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

ROLLOUT = "actor_rollout_ref.rollout"
"""The recipe section verl's vLLM server reads."""


def server_settings(config: DictConfig) -> dict[str, Any]:
    """The settings verl 0.9.1's ``vLLMHttpServer.launch_server`` passes to ``vllm serve`` for this recipe
    (``verl/workers/rollout/vllm_rollout/vllm_async_server.py``), without the per-replica ones (seed offset,
    data-parallel addresses)."""
    # The rollout section is a DictConfig, whose container is a dict (to_container's type also covers lists).
    rollout = cast(dict[str, Any], OmegaConf.to_container(OmegaConf.select(config, ROLLOUT), resolve=True))
    vllm_kwargs = (rollout.get("engine_kwargs") or {}).get("vllm") or {}
    engine_kwargs = {key: value for key, value in vllm_kwargs.items() if value is not None}
    if rollout.get("limit_images"):
        engine_kwargs["limit_mm_per_prompt"] = {"image": rollout["limit_images"]}
    compilation = engine_kwargs.pop("compilation_config", None) or {}
    if isinstance(compilation, str):
        compilation = json.loads(compilation)
    compilation.setdefault("cudagraph_mode", "FULL_AND_PIECEWISE")
    if rollout.get("cudagraph_capture_sizes"):
        compilation["cudagraph_capture_sizes"] = rollout["cudagraph_capture_sizes"]
    return {
        "dtype": rollout["dtype"],
        "load_format": rollout["load_format"],
        "skip_tokenizer_init": False,
        "distributed_executor_backend": "mp",
        "worker_extension_cls": "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension",
        "max_model_len": rollout["max_model_len"],
        "max_num_seqs": rollout["max_num_seqs"],
        "enable_chunked_prefill": rollout["enable_chunked_prefill"],
        "max_num_batched_tokens": rollout["max_num_batched_tokens"],
        "enable_prefix_caching": rollout["enable_prefix_caching"],
        "enable_sleep_mode": rollout.get("enable_sleep_mode", True),
        "logprobs_mode": rollout["logprobs_mode"],
        "enforce_eager": rollout["enforce_eager"],
        "gpu_memory_utilization": rollout["gpu_memory_utilization"],
        "disable_log_stats": rollout["disable_log_stats"],
        "tensor_parallel_size": rollout["tensor_model_parallel_size"],
        "seed": rollout["seed"] or 0,
        "scheduling_policy": rollout["scheduling_policy"],
        "compilation_config": json.dumps(compilation),
        **engine_kwargs,
    }


def vllm_engine_args(config: DictConfig, model_path: str) -> Any:
    """vLLM's ``AsyncEngineArgs`` for the recipe's rollout server, through ``vllm serve``'s own parser and
    validation; raises ``ValueError`` with vLLM's message for an argument vLLM does not take."""
    import vllm.entrypoints.cli.serve as serve
    from verl.workers.rollout.vllm_rollout.utils import build_cli_args_from_config
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["serve", model_path, *build_cli_args_from_config(server_settings(config))]
    parser = FlexibleArgumentParser(description="ragym: a recipe's vLLM server arguments")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    commands = {}
    for command in serve.cmd_init():
        command.subparser_init(subparsers).set_defaults(dispatch_function=command.cmd)
        commands[command.name] = command
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(argv)
    except SystemExit:  # argparse's way to refuse; its message went to stderr
        message = errors.getvalue().strip().splitlines()
        raise ValueError(
            f"vllm serve refuses the recipe's arguments: {message[-1] if message else argv}"
        ) from None
    assert args is not None  # argparse returns the namespace it fills (vLLM's override has no return type)
    args.model = args.model_tag
    commands[args.subparser].validate(args)
    return AsyncEngineArgs.from_cli_args(args)
