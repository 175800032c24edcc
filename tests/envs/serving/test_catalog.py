"""``ragym serve``'s folders are the envs' own (``EnvHooks.services``): a new env's hooks add a flag and its
retrievers with no edit to the service."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.envs import hooks
from ragym.envs.hooks import EnvHooks, ServedFolder
from ragym.envs.retrieval.service.app import Served
from ragym.envs.serving.catalog import CatalogSpec, load_catalog, served_folders
from ragym.envs.serving.cli import parse_args


def _words(folder: Path, spec: CatalogSpec) -> dict[str, Served]:
    """One text retriever per file of ``folder`` (the name is all these tests read)."""
    return {f"words/{p.stem}": Served(object(), "text") for p in sorted(folder.glob("*.txt"))}


WORDS = EnvHooks(name="words", services=(ServedFolder("words-dir", "a folder of word lists", _words),))
CLASHING = EnvHooks(name="clash", services=(ServedFolder("kb-dir", "another env's KB flag", _words),))


@pytest.fixture
def with_hooks(monkeypatch: pytest.MonkeyPatch):
    """Registers hooks of a test env (restored after the test)."""
    monkeypatch.setattr(hooks, "_HOOKS", dict(hooks._HOOKS))
    monkeypatch.setattr(hooks, "_LOADED", dict(hooks._LOADED))

    def register(env_id: str, attribute: str) -> None:
        hooks.register_hooks(env_id, f"{__name__}:{attribute}")

    return register


def test_the_shipped_envs_serve_their_folders() -> None:
    assert set(served_folders()) == {"kb-dir", "doc-store-root"}
    args = parse_args(["--kb-dir", "kb", "--doc-store-root", "docs"])
    assert sorted(args.folders) == [("doc-store-root", "docs"), ("kb-dir", "kb")]
    assert parse_args(["--shards", "v=m.json"]).folders == ()


def test_nothing_to_serve_is_a_usage_error_naming_the_folder_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bare ``ragym serve`` is argparse's one line and exit status 2, not the catalog's traceback."""
    with pytest.raises(SystemExit) as stop:
        parse_args([])
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        last
        == "ragym serve: error: nothing to serve: give a folder an env serves (--doc-store-root, --kb-dir) or --shards"
    )


def test_a_new_env_s_hooks_add_a_flag_and_its_retrievers(with_hooks, tmp_path: Path) -> None:
    with_hooks("Words-v0", "WORDS")
    (tmp_path / "birds.txt").write_text("wren\n")
    (tmp_path / "trees.txt").write_text("oak\n")
    args = parse_args(["--words-dir", str(tmp_path)])
    assert args.folders == (("words-dir", str(tmp_path)),)
    assert set(load_catalog(CatalogSpec(args.folders))) == {"words/birds", "words/trees"}


def test_two_envs_naming_one_flag_and_an_unknown_folder_kind_are_refused(with_hooks, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no env serves a --words-dir folder"):
        load_catalog(CatalogSpec((("words-dir", str(tmp_path)),)))
    with_hooks("Clash-v0", "CLASHING")
    with pytest.raises(ValueError, match="--kb-dir is served by both Clash-v0 and KBVQA-v0"):
        served_folders()


def test_a_retriever_name_served_twice_is_refused(with_hooks, tmp_path: Path) -> None:
    with_hooks("Words-v0", "WORDS")
    (tmp_path / "birds.txt").write_text("wren\n")
    twice = (("words-dir", str(tmp_path)), ("words-dir", str(tmp_path)))
    with pytest.raises(ValueError, match=r"serves \['words/birds'\], already served"):
        load_catalog(CatalogSpec(twice))
