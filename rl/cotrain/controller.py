"""Retriever co-training inside a GRPO run: harvest each step, train rounds off the step path, guard, swap.

One ``CoTraining`` per trainer process, called once a step where the engine has its scored training episodes
(the local engine's ``train_step``, ragym's verl trainer's step hook), so both engines harvest through the same
function (``ragym.envs.kbvqa.harvest.harvest_episode``) into the same buffer. Every ``every_n_steps`` steps a round
(``ragym.rl.cotrain.round``) starts in its own process (a Ray task when Ray is up) and the step goes on; a later
step that finds it finished compares its held-out recall with the serving version's (the forgetting guard) and
either swaps it into the KB's query-encoder slot (every env of the process searches with it from the next search
on; a retrieval service named by the recipe is told through ``POST /encoder``, and a swap that some of a Ray Serve
deployment's replicas did not take is warned and counted) or skips it, logged either way.
``<output_dir>/cotrain/serving.json`` records each swap by step, so a resumed run serves what its checkpoint did:
a version is whole (its query map, and with ``update_documents`` every document row its chain changed, relative to
the KB), so the last version swapped by that step is all a resumed run installs.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
from dataclasses import asdict
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import numpy as np

from ragym.envs.files import atomic_write
from ragym.envs.kbvqa.harvest import Harvest, harvest_episode
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.registry import synthetic_data
from ragym.envs.retrieval.retrievers import IndexSpec
from ragym.envs.retrieval.versions import (
    QueryEncoder,
    identity_encoder,
    load_query_encoder,
    save_query_encoder,
)
from ragym.rl.cotrain.buffer import HarvestBuffer, HeldOut
from ragym.rl.cotrain.config import SECTION, CotrainConfig
from ragym.rl.cotrain.round import RoundSpec, recall, run_round
from ragym.rl.errors import UsageError

logger = logging.getLogger(__name__)

RECALL_KS = (1, 3)
"""Retriever recall reported per step (``retriever/recall@k``): top-1, and the demo's pool (K=1 x (Rej_max + 1))."""


def _spec(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(env kwargs, env options) of a verl row."""
    from ragym.rl.agent_loop.observations import EpisodeSpec

    spec = EpisodeSpec.from_extra_info(dict(row["extra_info"]))
    return dict(spec.env_kwargs), dict(spec.env_options or {})


def _kb_of(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """(KB folder, index kind) the rows search live; one KB and live search, else a one-line error."""
    found = set()
    for row in rows:
        kwargs, _ = _spec(row)
        if kwargs.get("candidate_source", "precomputed") != "live":
            raise UsageError(
                f"{SECTION}: co-training trains the live image search; row {row['extra_info'].get('index')} "
                "reads stored candidate lists (set env_kwargs candidate_source: live)"
            )
        kb = kwargs.get("kb_dir") or synthetic_data("kbvqa", kwargs.get("preset", "tiny"))
        found.add((str(Path(kb).resolve()), kwargs.get("index_kind", "auto")))
    if len(found) != 1:
        raise UsageError(f"{SECTION}: the training rows search {len(found)} KBs; co-training serves one")
    return found.pop()


def held_out(rows: list[dict[str, Any]]) -> tuple[HeldOut, tuple[tuple[str, str], ...]]:
    """The rows' query images (never harvested) and their (query image, gold) pairs (the guard's)."""
    queries, pairs = set(), []
    for row in rows:
        _, options = _spec(row)
        images = [str(q) for q in options.get("query_images") or []]
        queries.update(images)
        golds = options.get("gold_entities") or [None] * len(images)
        pairs.extend((q, g) for q, g in zip(images, golds, strict=True) if g is not None)
    return HeldOut(frozenset(queries)), tuple(pairs)


class CoTraining:
    """The co-training loop of one trainer process."""

    def __init__(
        self,
        cfg: CotrainConfig,
        output_dir: str | Path,
        train_rows: list[dict[str, Any]],
        guard_rows: list[dict[str, Any]],
        resume_step: int | None,
        service_url: str | None = None,
        report_rows: list[dict[str, Any]] | None = None,
    ) -> None:
        self.cfg, self.root = cfg, Path(output_dir) / "cotrain"
        self.kb_dir, index_kind = _kb_of(train_rows)
        self.kb = load_kb(self.kb_dir)
        self.retriever = self.kb.versioned_image(IndexSpec(kind=index_kind))
        guard_out, self.guard_pairs = held_out(guard_rows)
        # retriever/recall@k is reported on the held-out rows (data.val_files), which the guard need not read:
        # a guard that selected versions on them would report its own selection
        report_out, self.report_pairs = (
            held_out(report_rows) if report_rows is not None else (guard_out, self.guard_pairs)
        )
        self.held_out = HeldOut(guard_out.queries | report_out.queries)
        self.buffer = HarvestBuffer(self.root / "buffer", self.held_out)
        self.buffer.drop_after(resume_step if resume_step is not None else -1)
        self.service_url = service_url
        if cfg.update_documents:
            self._refuse_fixed_rows(index_kind)
        self.swaps = [s for s in self._read_swaps() if resume_step is not None and s["step"] <= resume_step]
        self._write_swaps()
        self.counts = {"cotrain/swaps": 0.0, "cotrain/swaps_skipped": 0.0, "cotrain/rounds": 0.0}
        self.pending: tuple[RoundSpec, Any] | None = None
        self.initial = cfg.initial_encoder or self._noisy_initial()
        self._install(self.swaps[-1]["path"] if self.swaps else self.initial)

    # ----- per step -------------------------------------------------------------------------------
    def on_step(
        self, step: int, episodes: list[tuple[list[dict[str, Any]], dict[str, Any]]]
    ) -> dict[str, float]:
        """Harvest step ``step``'s training episodes ((events, its row's ``extra_info``) each), finish or start a
        round; returns the step's ``cotrain/`` and ``retriever/`` metrics."""
        metrics: dict[str, float] = {}
        if self.cfg.enable:
            harvest = Harvest()
            for events, extra_info in episodes:
                harvest.add(harvest_episode(events, _spec({"extra_info": extra_info})[1]))
            metrics.update(self.buffer.add(step, harvest))
            metrics.update(self._finish_round(step))
            if step % self.cfg.every_n_steps == 0 and self.pending is None:
                self._start_round(step)
        if step == 1 or step % self.cfg.every_n_steps == 0:
            metrics.update(self.serving_recall())
        encoder = self.retriever.slot.current
        metrics["cotrain/serving_step"] = float((encoder.meta.get("step", 0) if encoder else 0) or 0)
        return {**metrics, **self.counts}

    def serving_recall(self) -> dict[str, float]:
        """``retriever/recall@k`` of the serving version on the held-out rows (the report's set)."""
        encoder = self.retriever.slot.current or identity_encoder(self.kb.entity_embeddings.shape[1])
        found = recall(self.kb, encoder, self.report_pairs, RECALL_KS)
        return {f"retriever/{k}": v for k, v in found.items()}

    # ----- rounds ---------------------------------------------------------------------------------
    def _start_round(self, step: int) -> None:
        version = f"cotrain-s{step:06d}"
        current = self.swaps[-1]["path"] if self.swaps else self.initial
        spec = RoundSpec(
            self.kb_dir,
            str(self.buffer.folder),
            step,
            current,
            str(self.root / "versions" / version),
            version,
            self.guard_pairs,
            tuple(sorted({*RECALL_KS, self.cfg.guard_k})),
            asdict(self.cfg),
        )
        self.counts["cotrain/rounds"] += 1
        if not self.cfg.background:
            self.pending = (spec, run_round(spec))
            return
        if _ray_up():
            import ray

            self.pending = (spec, ray.remote(num_cpus=1)(run_round).remote(spec))
            return
        process = multiprocessing.get_context("spawn").Process(target=run_round, args=(spec,), daemon=True)
        process.start()
        self.pending = (spec, process)

    def _finish_round(self, step: int) -> dict[str, float]:
        """Guard and swap a round that has finished (a failed one is logged and dropped)."""
        if self.pending is None:
            return {}
        spec, handle = self.pending
        if isinstance(handle, BaseProcess):
            if handle.is_alive():
                return {"cotrain/round_running": 1.0}
            failed = handle.exitcode != 0
        elif not isinstance(handle, dict):  # a Ray object ref
            import ray

            if not ray.wait([handle], timeout=0)[0]:
                return {"cotrain/round_running": 1.0}
            failed = False
        else:
            failed = False
        self.pending = None
        if failed or not (Path(spec.out) / "encoder.json").is_file():
            logger.warning("co-training round %s failed; the serving version stays", spec.version)
            return {"cotrain/round_failed": 1.0}
        return self.guard_and_swap(step, spec.out)

    def guard_and_swap(self, step: int, folder: str) -> dict[str, float]:
        """Swap the version at ``folder`` in unless its held-out recall fell more than the margin; the metrics."""
        encoder = load_query_encoder(folder)
        k = self.cfg.guard_k
        new, old = encoder.meta.get(f"new_recall@{k}"), encoder.meta.get(f"serving_recall@{k}")
        metrics = {
            f"cotrain/new_recall@{k}": float(new or 0.0),
            f"cotrain/serving_recall@{k}": float(old or 0.0),
        }
        if encoder.meta.get("num_harvested_pairs") == 0 and not encoder.meta.get("num_documents_moved"):
            # A round without harvested pairs trains nothing: its version is the serving one under a new name, and
            # swapping it in would count a swap and flush the service's per-version cache for no change.
            self.counts["cotrain/swaps_skipped"] += 1
            logger.info(
                "co-training: %s not swapped in at step %d: its round had no harvested pairs",
                encoder.version,
                step,
            )
            self._log_decision(step, encoder.version, folder, "nothing_trained", new, old)
            return metrics
        if new is not None and old is not None and new < old - self.cfg.max_recall_drop:
            self.counts["cotrain/swaps_skipped"] += 1
            logger.warning(
                "co-training: %s skipped at step %d: held-out recall@%d %.3f < serving %.3f - %.3f",
                encoder.version,
                step,
                k,
                new,
                old,
                self.cfg.max_recall_drop,
            )
            self._log_decision(step, encoder.version, folder, "skipped", new, old)
            return metrics
        self._install(folder)
        self.swaps.append({"step": step, "path": folder, "version": encoder.version})
        self._write_swaps()
        self.counts["cotrain/swaps"] += 1
        self._log_decision(step, encoder.version, folder, "swapped", new, old)
        logger.info(
            "co-training: serving %s from step %d (held-out recall@%d %s -> %s)",
            encoder.version,
            step,
            k,
            old,
            new,
        )
        return metrics

    def close(self) -> None:
        """Stop a round still running (its version is never swapped in)."""
        if self.pending is not None and isinstance(self.pending[1], BaseProcess):
            self.pending[1].terminate()
            self.pending[1].join(timeout=10)
        self.pending = None

    # ----- serving state --------------------------------------------------------------------------
    def _install(self, folder: str | None) -> None:
        """Serve the version at ``folder`` (None: the KB's own query side) here and at the recipe's service."""
        encoder = load_query_encoder(folder) if folder else None
        self.retriever.swap(encoder)
        if self.service_url and folder:
            from ragym.envs.retrieval.service.client import EncoderSwapIncomplete, ServiceRetriever

            missing = 0
            try:
                ServiceRetriever(self.service_url, "image").swap_encoder(str(Path(folder).resolve()))
            except EncoderSwapIncomplete as error:
                # The replicas that hold it serve it; the others keep the previous version until they apply it
                # (ragym.envs.serving.encoder_sync). Each search records its version, so the run goes on, warned.
                logger.warning("co-training: the retrieval service did not swap every replica: %s", error)
                missing = error.live - error.holding
            self.counts["cotrain/service_replicas_missing"] = float(missing)

    def _refuse_fixed_rows(self, index_kind: str) -> None:
        """``update_documents``: refuse now, in one line, an index that cannot replace rows (here, or the
        service's), which would otherwise fail the first swap of a version carrying document rows mid-run."""
        found = []
        if (here := self.retriever.row_refusal) is not None:
            found.append(f"the rows' index_kind {index_kind}: {here}")
        if self.service_url:
            from ragym.envs.retrieval.service.client import ServiceRetriever

            status = ServiceRetriever(self.service_url, "image").call("GET", "/ready", None)
            if (there := status["retrievers"]["image"].get("document_rows_refused")) is not None:
                found.append(f"the retrieval service {self.service_url}: {there}")
        if found:
            raise UsageError(f"{SECTION}.update_documents: " + "; ".join(found))

    def _noisy_initial(self) -> str | None:
        """The miniature's weak initial version (``initial_noise_rank``), written under ``cotrain/versions``."""
        rank = self.cfg.initial_noise_rank
        if not rank:
            return None
        dim = int(self.kb.entity_embeddings.shape[1])
        rng = np.random.default_rng(self.cfg.initial_noise_seed)
        u, v = (rng.standard_normal((dim, rank)).astype(np.float32) / dim**0.5 for _ in range(2))
        matrix = np.eye(dim, dtype=np.float32) + self.cfg.initial_noise_strength * dim**0.5 * (u @ v.T)
        meta = {
            "made_by": "initial_noise",
            "rank": rank,
            "strength": self.cfg.initial_noise_strength,
            "step": 0,
        }
        folder = self.root / "versions" / "initial-noise"
        return str(save_query_encoder(QueryEncoder("initial-noise", matrix, meta), folder))

    def _read_swaps(self) -> list[dict[str, Any]]:
        path = self.root / "serving.json"
        return json.loads(path.read_text(encoding="utf-8"))["swaps"] if path.is_file() else []

    def _write_swaps(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.root / "serving.json", json.dumps({"swaps": self.swaps}, indent=2) + "\n")

    def _log_decision(self, step: int, version: str, folder: str, decision: str, new: Any, old: Any) -> None:
        record = {
            "step": step,
            "version": version,
            "path": folder,
            "decision": decision,
            "new_recall": new,
            "serving_recall": old,
            "guard_k": self.cfg.guard_k,
            "margin": self.cfg.max_recall_drop,
        }
        with (self.root / "swaps.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _ray_up() -> bool:
    """Whether this process is a Ray driver or worker (rounds then run as Ray tasks)."""
    try:
        import ray
    except ImportError:
        return False
    return ray.is_initialized()


def from_recipe(
    config: Any,
    train_rows: list[dict[str, Any]],
    val_rows: list[dict[str, Any]],
    resume_step: int | None,
    engine: str,
) -> CoTraining | None:
    """The recipe's co-training (``ragym.cotrain``) for a trainer, or None when it neither trains nor serves an
    initial encoder. ``engine`` ``verl``: the envs run in other processes, so the swap goes through the recipe's
    retrieval service, which must be named."""
    from omegaconf import OmegaConf

    from ragym.rl.cotrain.config import read_cotrain
    from ragym.rl.data.rows import load_rows
    from ragym.rl.recipe.retrieval import URL_KEY, recipe_retrieval_url

    section = OmegaConf.select(config, SECTION, default=None)
    cfg = read_cotrain(OmegaConf.to_container(section, resolve=True) if section is not None else None)  # pyright: ignore[reportArgumentType]
    if cfg is None or not (cfg.enable or cfg.initial_encoder or cfg.initial_noise_rank):
        return None
    url = recipe_retrieval_url(config)
    if engine == "verl" and url is None:
        raise UsageError(
            f"{SECTION} under verl: the agent-loop workers search in their own processes, so the "
            f"encoder is swapped at the retrieval service: set {URL_KEY} (ragym serve --kb-dir KB)"
        )
    guard = load_rows(cfg.guard_rows).rows if cfg.guard_rows else val_rows
    if cfg.enable and not guard:
        raise UsageError(
            f"{SECTION}.enable needs held-out rows for the forgetting guard: data.val_files or "
            f"{SECTION}.guard_rows"
        )
    output_dir = OmegaConf.select(config, "trainer.default_local_dir")
    return CoTraining(cfg, output_dir, train_rows, guard, resume_step, url, val_rows or None)
