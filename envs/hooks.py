"""What an environment gives the rest of ragym besides the env itself: its hooks, registered by its package.

Training and evaluation need a few env-specific pieces: a scripted expert (the toy warm start, ``ragym rollout``),
toy rows (``--toy``), the paper's longest episode (``ragym budget``), the paper recipe its preps feed, and its own
evaluation summary. Each env package declares them in one ``EnvHooks`` (in its ``hooks.py``) and names that
object when it registers (``register_env(..., hooks="pkg.hooks:HOOKS")``); ``rl/`` asks ``env_hooks(env_id)``
and keeps no per-env list or branch.

``hooks.py`` is the one module of an env package that may import a layer above ``envs``, ``data_prep`` (its toy rows
are verl rows): nothing imports it by name in code, the registry loads it when a hook is first asked for
(``tests/test_package_graph.py`` checks both).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class MissingHook(LookupError):
    """An env has no hook of the kind a command needs; the message names the env, the hook and where it goes."""


@dataclass(frozen=True)
class SearchProbe:
    """How to watch an env search: ``tests/envs/test_env_retrievers.py`` passes ``source()`` in, wrapped in a spy,
    plays ``turns`` and checks that every search went through it and that the episode is the in-process one."""

    source: Callable[[], Any]
    """-> a ``RetrieverSource`` of the same retrievers the env builds in process when given none."""
    turns: tuple[str, ...]
    """Turns after ``reset(seed=0)`` that make the env search (none when its reset searches)."""
    name: str
    """The one retriever name the env asks the source for."""


@dataclass(frozen=True)
class ServedFolder:
    """A folder ``ragym serve`` takes for an env (``--FLAG DIR``) and the retrievers it serves from it."""

    flag: str
    """The flag without its dashes (``kb-dir``); one env's only: two envs naming the same flag is an error."""
    help: str
    """The flag's help line."""
    load: Callable[[Path, Any], dict[str, Any]]
    """``load(folder, spec)`` -> retriever name -> ``Served`` (``ragym.envs.retrieval.service.app``); ``spec``
    is the service's ``CatalogSpec`` (``ragym.envs.serving.catalog``: the faiss index kind, the GPU)."""


@dataclass(frozen=True)
class EvalTables:
    """A paper's tables of an env's rows in ``ragym eval`` (KB-VQA: MMAgent-R²'s Tables 2-4), per data source."""

    title: str
    """The heading above the tables in ``metrics.md``."""
    sources: tuple[str, ...]
    """The data sources the tables report; another source's summary has none (``paper`` is None)."""
    groups: Callable[[dict[str, Any]], tuple[str | None, str | None]]
    """``groups(row)`` -> (the table column the row belongs to, its question type), recorded with each of the
    env's episodes (``EpisodeRecord.subset``, ``question_type``)."""
    columns: Callable[[str, Sequence[Any], dict[str, Any]], dict[str, Any] | None]
    """``columns(source, records, summary)`` -> ``metrics.json``'s ``paper`` for one source's episode records
    (``summary``: the source's own figures, the official accuracy among them)."""
    markdown: Callable[[str, dict[str, Any]], str]
    """``markdown(source, paper)`` -> the source's table in ``metrics.md``."""
    notes: Callable[[str, dict[str, Any]], list[str]]
    """``notes(source, paper)`` -> one line per reason a cell is n/a (``ragym eval`` prints them)."""


@dataclass(frozen=True)
class EnvHooks:
    """One env's hooks. Every field is optional: a command that needs a missing one says which and stops."""

    name: str
    """Short name: shipped recipes for the env are named ``{name}_*.yaml`` (``kbvqa_qwen2_5_vl_7b``), which is
    how ``--toy`` finds a recipe's env."""
    format_action: Callable[..., str] | None = None
    """The inverse of ``parse_action``: an action object (and the reason, where the grammar has one) -> the turn
    text. Scripted policies write their turns with it."""
    parse_action: Callable[[str], Any] | None = None
    """The env's parser at its default settings: turn text -> action object (or its parse error). The generic
    ``format`` reward judges a turn the env never saw (cut by the length budget) with it."""
    example_actions: tuple[Any, ...] = ()
    """At least one action of every kind the grammar has: ``format_action`` and ``parse_action`` must take each
    round trip (``tests/envs/test_action_formats.py``); a turn that parses to none of their types is malformed."""
    expert: Callable[[Any, int], Any] | None = None
    """``expert(env, seed)`` -> a scripted policy (``reset(obs)``, ``act(obs_text) -> turn``) that plays the env's
    protocol well: the toy warm start imitates it, ``ragym rollout --policy expert`` plays it."""
    policies: Mapping[str, Callable[[Any, int], Any]] | None = None
    """Other scripted policies by name: ``ragym rollout --policy NAME`` plays ``policies[NAME](env, seed)``
    (KB-VQA's ``signature``, ``oracle``, ``random``)."""
    warm_schedule: tuple[int, int] = (8, 16)
    """(rows, passes) of the toy warm start (``ragym.rl.tiny.warm``): long episodes need more."""
    tokenizer_corpus: Callable[[], Iterator[str]] | None = None
    """``tokenizer_corpus()`` -> text of the env (its system prompt, observations of a few seeded episodes) that the
    tiny policies' tokenizer is trained on (``ragym.rl.tiny.corpus``)."""
    toy_rows: Callable[[Path], None] | None = None
    """``toy_rows(out)`` writes ``out/data/{train,test}.parquet`` (verl rows of the env's synthetic data)."""
    toy_prompt_length: int | None = None
    """``data.max_prompt_length`` of the env's toy runs where its toy rows' prompts (in the tiny policy's tokens) are
    longer than ``recipes/platforms/toy.yaml``'s; ``max_model_len`` grows with it. None: the platform's."""
    longest_episode: Callable[[Any, dict[str, Any] | None, int], None] | None = None
    """``longest_episode(env, options, seed)`` plays the paper's longest episode on ``env`` (a logging wrapper:
    reset it with ``seed`` and ``options``, then step until done); ``ragym budget`` counts what it logged."""
    paper_recipe: str | None = None
    """The shipped recipe that trains the env at the paper's settings: the budget report of a prep that writes
    the env's rows uses it."""
    gold_ranks: Callable[[dict[str, Any]], tuple[list[int | None], int | None]] | None = None
    """``gold_ranks(row)`` -> (the gold's rank per query image in what the env serves, the pool size): the
    retriever's ceiling in ``ragym eval`` (KB-VQA's R@1 and R@pool), independent of the policy."""
    eval_summary: Callable[[list[tuple[list[dict[str, Any]], float]]], dict[str, Any] | None] | None = None
    """``eval_summary([(events, correct), ...])`` of the env's episodes (those of an env id registered with these
    hooks, an episode whose env could not start included) -> the env's own figures in ``ragym eval``'s summary,
    under ``name`` (None without episodes)."""
    eval_markdown: Callable[[dict[str, dict[str, Any]]], str] | None = None
    """``ragym eval``'s report.md section of the env's figures: data source -> what ``eval_summary`` returned."""
    eval_tables: EvalTables | None = None
    """A paper's tables of the env's rows in ``ragym eval`` (``EvalTables``; KB-VQA's Tables 2-4)."""
    env_for_kwargs: Callable[[dict[str, Any]], str | None] | None = None
    """``env_for_kwargs(kwargs)`` -> the registered env id that env kwargs need instead of a row's own, or None:
    ``ragym rollout`` applies its command line's settings to each row, and some only a variant of the env takes
    (KB-VQA's demo aids: ``KBVQA-Demo-v0``)."""
    services: tuple[ServedFolder, ...] | None = None
    """The folders ``ragym serve`` takes for the env, each with the retrievers it serves from it (KB-VQA's
    knowledge base, DocMemo's document stores): the env's retrievers, searched through the service."""
    search_probe: SearchProbe | None = None
    """How the env searches the retriever passed in (``SearchProbe``): the test that every env searches only
    through it needs one per env."""


def load_object(target: str) -> Any:
    """The object ``module:attribute`` names (an env class, an ``EnvHooks``), its module imported."""
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)


_HOOKS: dict[str, str] = {}
_LOADED: dict[str, EnvHooks] = {}


def register_hooks(env_id: str, target: str) -> None:
    """Name ``env_id``'s hooks: ``module:attribute`` of an ``EnvHooks`` (loaded when first asked for)."""
    if ":" not in target:
        raise ValueError(f"{env_id}: hooks must be 'module:attribute', got {target!r}")
    _HOOKS[env_id] = target
    _LOADED.pop(env_id, None)


def hooked_envs() -> list[str]:
    """Every env id with hooks, sorted."""
    return sorted(_HOOKS)


def env_hooks(env_id: str) -> EnvHooks:
    """``env_id``'s hooks; an env registered without them is an error that says where they go."""
    if env_id not in _LOADED:
        if env_id not in _HOOKS:
            raise MissingHook(
                f"{env_id} registers no hooks: give its register_env(...) hooks='PACKAGE.hooks:HOOKS' "
                "(docs/environments.md)"
            )
        hooks = load_object(_HOOKS[env_id])
        if not isinstance(hooks, EnvHooks):
            raise TypeError(f"{env_id}: {_HOOKS[env_id]} is a {type(hooks).__name__}, not an EnvHooks")
        _LOADED[env_id] = hooks
    return _LOADED[env_id]


def hook(env_id: str, name: str, purpose: str) -> Any:
    """``env_id``'s hook ``name``; a missing one is a ``MissingHook`` naming ``purpose`` (what needed it)."""
    found = getattr(env_hooks(env_id), name)
    if found is None:
        module = _HOOKS[env_id].split(":")[0]
        raise MissingHook(f"{purpose} needs {env_id}'s {name!r} hook; {module} does not define it")
    return found


def envs_with(name: str) -> list[str]:
    """The env ids whose hooks define ``name``, sorted."""
    return [env_id for env_id in hooked_envs() if getattr(env_hooks(env_id), name) is not None]


def one_env_per_hooks(hook_name: str | None = None) -> list[str]:
    """The first env id registered with each distinct hooks (KB-VQA's demo env shares KB-VQA's), in the order
    of the hooks' names; with ``hook_name``, only those whose hooks define it."""
    names = sorted({env_hooks(env_id).name for env_id in _HOOKS})
    found = [env_named(name) for name in names]
    return [
        e
        for e in found
        if e is not None and (hook_name is None or getattr(env_hooks(e), hook_name) is not None)
    ]


def env_named(name: str) -> str | None:
    """The first env id registered whose hooks have the short ``name`` (``kbvqa``: ``KBVQA-v0``, not the demo
    env registered after it with the same hooks), or None."""
    return next((env_id for env_id in _HOOKS if env_hooks(env_id).name == name), None)


def tables_for(source: str) -> EvalTables | None:
    """The env tables (``EnvHooks.eval_tables``) that report data source ``source``, or None."""
    found = (env_hooks(env_id).eval_tables for env_id in one_env_per_hooks("eval_tables"))
    return next((tables for tables in found if tables is not None and source in tables.sources), None)
