"""ragym's verl plugin without a trainer: what it registers, and that each piece does its one job."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import torch
from verl.plugin.platform.platform_manager import PlatformRegistry
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.workers.config.rollout import RolloutConfig
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutReplicaRegistry

from ragym.rl.verl_plugin import plugin
from ragym.rl.verl_plugin.import_hooks import when_imported
from ragym.rl.verl_plugin.platform import PlatformCPU
from ragym.rl.verl_plugin.rollout import HFGenerationServer, HFRolloutReplica, HFServerAdapter, turn_seed
from ragym.rl.verl_plugin.trainer import RagymTrainer


def test_verl_loads_the_plugin_and_finds_every_registration() -> None:
    assert plugin._installed
    names = PlatformRegistry.registered_names()
    # After verl's own: auto-detection tries those first, so a GPU node never lands on the CPU platform.
    assert names[-1] == "cpu" and names.index("nvidia") < names.index("cpu")
    assert RolloutReplicaRegistry.get("hf") is HFRolloutReplica
    assert get_rollout_class("hf", "async") is HFServerAdapter
    assert get_trainer_cls("ragym") is RagymTrainer


HEAVY = ("vllm", "verl.workers.rollout", "verl.checkpoint_engine", "ragym.rl.verl_plugin.trainer")
"""What the plugin once imported at ``import verl`` in every process: vLLM came in through verl's checkpoint engines."""


def test_import_verl_leaves_the_registries_to_the_processes_that_use_them() -> None:
    """A Ray worker that only imports ``verl`` (the data plane's, the reward loop's) pays for none of the registries;
    importing one registers ragym's entry there and then."""
    probe = (
        "import sys, verl\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
        "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "print(RolloutReplicaRegistry.get('hf').__name__, get_trainer_cls('ragym').__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.splitlines() == ["[]", "HFRolloutReplica RagymTrainer"], (
        done.stdout + done.stderr[-2000:]
    )


def test_a_hook_runs_after_its_modules_import_or_at_once_if_already_imported(tmp_path, monkeypatch) -> None:
    (tmp_path / "ragym_hook_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    when_imported("ragym_hook_probe", lambda module: seen.append(module.VALUE))
    assert seen == []
    import ragym_hook_probe  # noqa: F401  (the import under test)

    assert seen == [1]
    when_imported("ragym_hook_probe", lambda module: seen.append(module.VALUE + 1))
    assert seen == [1, 2]
    sys.modules.pop("ragym_hook_probe")


def test_cpu_platform_answers_what_verl_asks_of_a_device() -> None:
    platform = PlatformCPU()
    assert (platform.device_name, platform.communication_backend_name()) == ("cpu", "gloo")
    # verl passes current_device() to device= arguments: an int would mean an accelerator index.
    assert torch.zeros(2).to(platform.current_device()).device.type == "cpu"
    module = platform.device_module
    module.empty_cache()
    module.manual_seed(3)
    assert module.memory_allocated() == 0 and module.is_available()
    free, total = module.mem_get_info()
    assert 0 < free <= total
    state = module.get_rng_state()
    first = torch.rand(1)
    module.set_rng_state(state)
    assert torch.equal(first, torch.rand(1))
    with pytest.raises(AttributeError, match="no 'nonsense'"):
        module.nonsense  # noqa: B018


def test_the_process_group_gets_plain_gloo_on_cpu(monkeypatch) -> None:
    seen = []
    wrapped = plugin._plain_gloo(lambda timeout_second=None, backend=None: seen.append(backend))
    monkeypatch.setattr(plugin, "on_cpu", lambda: True)
    wrapped(backend=None)
    wrapped(backend="cpu:gloo,cpu:gloo")
    wrapped(backend="cpu:gloo")  # an explicit, valid choice (verl's checkpoint engine) is kept
    monkeypatch.setattr(plugin, "on_cpu", lambda: False)
    wrapped(backend=None)
    assert seen == ["gloo", "gloo", "cpu:gloo", None]


def test_the_processor_falls_back_to_ragyms_for_a_qwen_vl_policy(tiny_policy_dir) -> None:
    fallback = plugin._with_ragym_processor(lambda path, **kwargs: None)
    processor = fallback(str(tiny_policy_dir("qwen2_5_vl")))
    assert processor is not None and hasattr(processor, "get_rope_index")
    # A folder that is no Qwen-VL model keeps verl's answer (text-only: None).
    assert plugin._with_ragym_processor(lambda path, **kwargs: None)("/nonexistent") is None


def test_text_only_forward_fix_gives_the_vision_output_a_mean() -> None:
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    hidden = torch.arange(6.0).view(2, 3)
    assert BaseModelOutputWithPooling(last_hidden_state=hidden).mean() == hidden.mean()


OFFLOAD_PROBE = """
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
import verl.workers.engine.fsdp.transformer_impl as engine

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
for name, policy in (("ragym", engine.CPUOffloadPolicy), ("torch", CPUOffloadPolicy)):
    layer = torch.nn.Linear(4, 2)
    try:
        fully_shard(layer, mesh=mesh, offload_policy=policy(pin_memory=True))  # verl's call for a reference policy
        print(name, tuple(layer(torch.ones(1, 4)).shape))
    except RuntimeError as error:
        print(name, "accelerator" in str(error))
dist.destroy_process_group()
"""


def test_a_reference_policys_offload_loads_on_cpu() -> None:
    """verl's FSDP2 engine offloads a forward-only model (the KL reference) with pinned memory, which torch cannot
    pin without an accelerator: every CPU run with ``use_kl_loss`` failed at the reference's load. Through the
    plugin the same call shards and runs; torch's own policy still fails here (the fault the plugin mends)."""
    done = subprocess.run(
        [sys.executable, "-c", OFFLOAD_PROBE], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.stdout.splitlines() == ["ragym (1, 2)", "torch True"], done.stdout + done.stderr[-3000:]


def rollout_config(seed: int | None) -> RolloutConfig:
    """verl's rollout section as the replica gets it (``actor_rollout_ref.rollout``)."""
    return RolloutConfig(name="hf", response_length=8, seed=seed)


@pytest.fixture(scope="module")
def server(tiny_policy_dir) -> HFGenerationServer:
    return HFGenerationServer(str(tiny_policy_dir("qwen2_5_vl")), rollout_config(seed=0))


def test_server_tags_outputs_with_the_weights_step(server) -> None:
    params = {"temperature": 0.0, "max_tokens": 4}
    output = asyncio.run(server.generate("r", prompt_ids=[1, 2, 3], sampling_params=params))
    assert output.extra_fields["global_steps"] is None and 1 <= len(output.token_ids) <= 4
    server.set_global_steps(7)
    output = asyncio.run(server.generate("r", prompt_ids=[1, 2, 3], sampling_params=params))
    assert output.extra_fields["global_steps"] == 7


def test_server_loads_the_trainers_weights_and_refuses_partial_ones(server) -> None:
    state = {name: torch.full_like(t, 0.01) for name, t in server.model.state_dict().items()}
    assert server.update_weights(state, global_steps=3) == len(state)
    assert server.global_steps == 3 and server.num_weight_updates == 1
    assert all(torch.all(p == 0.01) for p in server.model.parameters())
    name = next(iter(state))
    with pytest.raises(KeyError, match="missing from the update"):
        server.update_weights({k: v for k, v in state.items() if k != name}, global_steps=4)
    with pytest.raises(KeyError, match="does not have"):
        server.update_weights({**state, "lm_head.nonsense": torch.zeros(1)}, global_steps=4)
    assert server.global_steps == 3  # a refused update changes nothing


GROUP = [f"det-0-{sample}" for sample in range(4)]
"""A row's four samples, named as the agent loop names them under ``rollout.full_determinism``."""


def sample_group(
    server: HFGenerationServer, request_ids: list[str], *, together: bool
) -> dict[str, list[int]]:
    """Each request's sampled tokens for one prompt: all requests in one batch, or one batch each."""
    params = {"temperature": 1.0, "max_tokens": 6}

    async def one(request_id: str) -> tuple[str, list[int]]:
        output = await server.generate(request_id, prompt_ids=[5, 6, 7, 8], sampling_params=params)
        return request_id, list(output.token_ids)

    async def run() -> list[tuple[str, list[int]]]:
        if together:
            return await asyncio.gather(*map(one, request_ids))
        return [await one(request_id) for request_id in request_ids]

    return dict(asyncio.run(run()))


def test_a_seeded_rollout_repeats_however_its_requests_are_batched(tiny_policy_dir) -> None:
    path = str(tiny_policy_dir("qwen2_5_vl"))
    first, second = HFGenerationServer(path, rollout_config(5)), HFGenerationServer(path, rollout_config(5))
    together = sample_group(first, GROUP, together=True)
    one_by_one = sample_group(second, GROUP[::-1], together=False)
    assert (first.stats()["num_batches"], second.stats()["num_batches"]) == (1, 4)
    assert one_by_one == together
    assert len({tuple(tokens) for tokens in together.values()}) == len(GROUP)  # each sample has its own draws


def test_the_rollout_seed_comes_from_the_config_and_each_step_draws_afresh(tiny_policy_dir) -> None:
    path = str(tiny_policy_dir("qwen2_5_vl"))
    five = sample_group(HFGenerationServer(path, rollout_config(5)), GROUP, together=True)
    six = HFGenerationServer(path, rollout_config(6))
    at_step_none = sample_group(six, GROUP, together=True)
    assert all(at_step_none[request_id] != five[request_id] for request_id in GROUP)
    six.set_global_steps(2)  # the same request ids at the next step (verl numbers samples per row)
    at_step_two = sample_group(six, GROUP, together=True)
    assert all(at_step_two[request_id] != at_step_none[request_id] for request_id in GROUP)


def test_a_null_rollout_seed_draws_as_seed_zero(tiny_policy_dir) -> None:
    path = str(tiny_policy_dir("qwen2_5_vl"))
    unseeded = sample_group(HFGenerationServer(path, rollout_config(None)), GROUP, together=True)
    assert unseeded == sample_group(HFGenerationServer(path, rollout_config(0)), GROUP, together=True)


def test_the_turns_of_one_episode_draw_their_own_seeds(server, monkeypatch) -> None:
    """An episode's turns share the request id, the weights' step and the rollout seed; only the prompt, which grows
    by the turn and its observation, tells them apart. Seeded alike, every turn would replay the first turn's
    random draws."""
    assert turn_seed(5, 2, "det-0-0", 240) != turn_seed(5, 2, "det-0-0", 241)
    seeds = []
    inner = server.server.generate

    async def recording(request_id, **kwargs):
        seeds.append(kwargs["sampling_params"]["seed"])
        return await inner(request_id, **kwargs)

    monkeypatch.setattr(server.server, "generate", recording)
    params = {"temperature": 1.0, "max_tokens": 4}
    for prompt in ([5, 6, 7, 8], [5, 6, 7, 8, 9, 10, 11]):  # a turn, then the next: the same request id
        asyncio.run(server.generate("det-0-0", prompt_ids=prompt, sampling_params=params))
    assert seeds == [turn_seed(server.seed, server.global_steps, "det-0-0", n) for n in (4, 7)]
    assert seeds[0] != seeds[1]
