"""Recipe values that count something (GPUs, prompts, episodes, tokens, steps): each a whole number of at least 1.

The commands that plan or run a recipe read these with ``int(...)`` and divide by them; unchecked, a word was a
traceback, a zero a ``ZeroDivisionError``, and a negative or a fraction went through (``ragym submit`` printed the
job, the local engine started a run that trained on nothing). Each command checks the counts it reads here, where
the recipe loads, every problem one line naming the key. A group estimator's group (``rollout.n``) has at least two
episodes: with one, verl's GRPO took the raw reward as the advantage without a word. The yes/no switches both
engines read (``SWITCHES``) are true or false.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from omegaconf import DictConfig, OmegaConf

LOCAL_ENGINE_COUNTS = (
    "data.train_batch_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs",
    "actor_rollout_ref.rollout.prompt_length",
    "actor_rollout_ref.rollout.response_length",
    "trainer.total_epochs",
)
"""Keys the local engine (``ragym.rl.engine.config``) reads as counts; here, so that ``ragym submit`` checks a local
job's without importing the engine."""
LOCAL_ENGINE_OPTIONAL_COUNTS = (
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
)
"""The local engine's counts that may be null: the old-log-prob pass's micro-batch (then the update's) and the turn
limit (then the env's)."""
LOCAL_ENGINE_STEPS = {"trainer.total_training_steps": 0}
"""The local engine's steps, null (epochs x rows per epoch) or at least 0: 0 runs no GRPO step, only what comes before
the first (the warm start of ``ragym demo --steps 0``, the evaluation before training: a grid's 0-step baseline)."""


def count_problem(key: str, value: object, *, optional: bool = False, least: int = 1) -> str | None:
    """Why ``value`` cannot be the count at ``key`` (None: it can): a whole number of at least ``least`` (1), or null
    where ``optional`` (the key's default is null, meaning "not set").

    >>> count_problem("data.train_batch_size", 128), count_problem("trainer.total_training_steps", None, optional=True)
    (None, None)
    >>> count_problem("data.train_batch_size", -4)
    'data.train_batch_size -4 is not a whole number of at least 1; set data.train_batch_size=1 or more'
    """
    if value is None and optional:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return None
    shown = "null" if value is None else repr(value) if isinstance(value, str) else value
    either = ", or null" if optional else ""
    return f"{key} {shown} is not a whole number of at least {least}; set {key}={least} or more{either}"


def count_problems(
    config: DictConfig,
    keys: Iterable[str],
    optional: Iterable[str] = (),
    least: Mapping[str, int] | None = None,
) -> list[str]:
    """One line per key of ``keys`` (required) and ``optional`` (null allowed) in ``config`` whose value is not a
    count, and per key of ``least`` (null allowed) below its own minimum; a key the config does not have is left to
    its reader."""
    problems = []
    marker = object()
    checks = [*((k, False, 1) for k in keys), *((k, True, 1) for k in optional)]
    checks += [(k, True, minimum) for k, minimum in (least or {}).items()]
    for key, may_be_null, minimum in checks:
        value = OmegaConf.select(config, key, default=marker)
        if value is marker:
            continue
        problem = count_problem(key, value, optional=may_be_null, least=minimum)
        problems += [problem] if problem is not None else []
    return problems


GROUP_ESTIMATORS = (
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "gdpo",
    "gpg",
    "rloo",
    "rloo_vectorized",
    "opo",
    "reinforce_plus_plus_baseline",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "turn_credit",
)
"""``algorithm.adv_estimator`` values whose baseline is the other episodes of a row's group (verl 0.9.1's
``core_algos``; ragym's ``turn_credit`` adds GRPO's to its step term, whose partners are the group's other episodes).
With one episode per row verl's GRPO takes a group mean of 0 and a std of 1: the raw reward becomes the advantage,
REINFORCE without a baseline, and ``grpo/zero_adv_group_share`` (groups of two or more) shows 0.0."""
GROUP_SIZE_KEY = "actor_rollout_ref.rollout.n"


def group_size_problems(config: DictConfig) -> list[str]:
    """One line when the recipe's estimator compares episodes within a group and ``rollout.n`` gives one episode a
    group; a group size that is not a count is left to ``count_problems``.

    >>> group_size_problems(OmegaConf.create({"algorithm": {"adv_estimator": "grpo"},
    ...     "actor_rollout_ref": {"rollout": {"n": 1}}}))  # doctest: +ELLIPSIS
    ['actor_rollout_ref.rollout.n 1 is one episode per group, ...; set actor_rollout_ref.rollout.n=2 or more']
    """
    estimator = OmegaConf.select(config, "algorithm.adv_estimator", default=None)
    n = OmegaConf.select(config, GROUP_SIZE_KEY, default=None)
    if estimator not in GROUP_ESTIMATORS or type(n) is not int or n != 1:
        return []
    return [
        f"{GROUP_SIZE_KEY} 1 is one episode per group, but algorithm.adv_estimator={estimator} takes the "
        "baseline of each episode from the rest of its group: with none, the raw reward would be the advantage; set "
        f"{GROUP_SIZE_KEY}=2 or more"
    ]


SWITCHES = (
    "data.shuffle",
    "trainer.val_before_train",
    "algorithm.filter_groups.enable",
    "algorithm.norm_adv_by_std_in_grpo",
    "algorithm.use_kl_in_reward",
    "actor_rollout_ref.actor.shuffle",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.rollout.full_determinism",
    "actor_rollout_ref.rollout.val_kwargs.do_sample",
)
"""verl's yes/no switches the local engine reads, which verl's trainer reads too, as Python truth values. A word on
the command line stays a string (Hydra parses only true/false): ``algorithm.filter_groups.enable=no`` is "no", a true
value, though ``no`` in a YAML file is false."""


def switch_problem(key: str, value: object) -> str | None:
    """Why ``value`` cannot be the switch at ``key`` (None: it can): true or false, no word or number taken for one.

    >>> switch_problem("data.shuffle", False) is None, switch_problem("data.shuffle", "no")
    (True, "data.shuffle 'no' is not true or false; set data.shuffle=true or data.shuffle=false")
    """
    if isinstance(value, bool):
        return None
    shown = "null" if value is None else repr(value) if isinstance(value, str) else value
    return f"{key} {shown} is not true or false; set {key}=true or {key}=false"


def switch_problems(config: DictConfig, keys: Iterable[str] = SWITCHES) -> list[str]:
    """One line per key of ``keys`` in ``config`` that is not true or false; a key the config does not have is left
    to its reader."""
    marker = object()
    values = [(key, OmegaConf.select(config, key, default=marker)) for key in keys]
    return [
        p for key, value in values if value is not marker and (p := switch_problem(key, value)) is not None
    ]
