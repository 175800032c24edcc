"""``ragym serve``: the retrieval service for one machine (uvicorn, 127.0.0.1 unless told otherwise).

    ragym serve --kb-dir DIR [--doc-store-root DIR] [--shards NAME=shards.json] [--port 8765]
                [--max-batch-size 64] [--max-wait-ms 2] [--cache-size 100000] [--gpu 0]
                [--search-workers 4] [--search-threads 0] [--batch-splits 1] [--cpu-cores 0] [--omp-wait-policy passive]

The folder flags (``--kb-dir``: KB-VQA, ``--doc-store-root``: DocMemo) are the envs' own (``EnvHooks.services``,
``ragym.envs.serving.catalog.served_folders``): an env adds its folder kind in its package. The bearer token, when wanted, comes from ``$RAGYM_RETRIEVAL_TOKEN`` (never a command-line argument, which
other users can read in the process list). The OpenMP wait policy is set before faiss loads (OpenMP reads it
once), so this module imports the service, and with it faiss, only in ``main``, after the policy is set; the
envs' hooks that name the folder flags may load faiss too, so ``main`` reads the policy before asking them.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from pathlib import Path

from ragym.envs.retrieval.search_settings import WAIT_POLICIES, request_wait_policy
from ragym.envs.retrieval.service.client import TOKEN_ENV
from ragym.envs.retrieval.service.config import DEFAULT_HOST, ServiceConfig

log = logging.getLogger(__name__)


def _shard_set(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--shards expects NAME=MANIFEST, got {text!r}")
    return name, path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line of ``ragym serve``; ``folders`` holds the (flag, folder) pairs of the envs' folder flags."""
    from ragym.envs.serving.catalog import served_folders

    parser = _parser(add_help=True)
    kinds = served_folders()
    group = parser.add_argument_group("folders the envs serve (their hooks' services)")
    for flag, kind in kinds.items():
        group.add_argument(f"--{flag}", dest=_dest(flag), metavar="DIR", help=kind.help)
    args = parser.parse_args(argv)
    given = vars(args)
    args.folders = tuple((flag, given.pop(_dest(flag))) for flag in kinds if given[_dest(flag)] is not None)
    if not args.folders and not args.shards:
        flags = ", ".join(f"--{flag}" for flag in kinds)
        parser.error(f"nothing to serve: give a folder an env serves ({flags}) or --shards")
    try:  # a setting the service refuses (--max-batch-size 0) is a usage error, not a traceback
        service_config(args)
    except ValueError as error:
        parser.error(str(error))
    return args


def _dest(flag: str) -> str:
    return "folder:" + flag


def _parser(add_help: bool) -> argparse.ArgumentParser:
    """Every flag but the envs' folders."""
    defaults = ServiceConfig()
    parser = argparse.ArgumentParser(
        prog="ragym serve", description=(__doc__ or "").partition("\n")[0], add_help=add_help
    )
    parser.add_argument(
        "--shards",
        type=_shard_set,
        action="append",
        default=[],
        metavar="NAME=MANIFEST",
        help="serve a sharded index (ragym.envs.retrieval.service.shards manifest) as retriever NAME",
    )
    parser.add_argument(
        "--index-kind",
        default="auto",
        choices=("auto", "built", "flat", "hnsw", "ivf"),
        help="auto: the KB's built index (index/entities/index.json) when recorded, else flat",
    )
    parser.add_argument("--gpu", type=int, help="GPU device for flat indexes (exact search on torch)")
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="bind address (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--max-batch-size", type=int, default=defaults.max_batch_size)
    parser.add_argument("--max-wait-ms", type=float, default=defaults.max_wait_ms)
    parser.add_argument("--cache-size", type=int, default=defaults.cache_size)
    parser.add_argument(
        "--search-workers",
        type=int,
        default=defaults.search_workers,
        help="index calls that may run at once (one per retriever at a time)",
    )
    parser.add_argument(
        "--search-threads",
        type=int,
        default=defaults.search_threads,
        help="OpenMP threads per index call; 0: one, or with the passive wait policy the "
        "cores shared out among the search workers",
    )
    parser.add_argument(
        "--batch-splits",
        type=int,
        default=defaults.batch_splits,
        help="chunks a full batch is searched in at once (1: one index call; a core each suits "
        "a node the service has to itself)",
    )
    parser.add_argument(
        "--cpu-cores",
        type=int,
        default=defaults.cpu_cores,
        help="cores the service may use; 0: its CPU affinity / cgroup quota",
    )
    parser.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="keep the loaded indexes' objects in the garbage collector's full passes",
    )
    parser.add_argument(
        "--omp-wait-policy",
        choices=WAIT_POLICIES,
        default=defaults.omp_wait_policy,
        help="passive: idle OpenMP threads sleep (a busy node cannot stall them); "
        "$OMP_WAIT_POLICY wins when set",
    )
    return parser


def service_config(args: argparse.Namespace) -> ServiceConfig:
    """The ``ServiceConfig`` the flags describe (the token from ``$RAGYM_RETRIEVAL_TOKEN``)."""
    return ServiceConfig(
        max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms,
        cache_size=args.cache_size,
        token=os.environ.get(TOKEN_ENV) or None,
        host=args.host,
        port=args.port,
        search_workers=args.search_workers,
        search_threads=args.search_threads,
        cpu_cores=args.cpu_cores,
        batch_splits=args.batch_splits,
        omp_wait_policy=args.omp_wait_policy,
        gc_freeze=args.gc_freeze,
    )


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    policy = request_wait_policy(_parser(add_help=False).parse_known_args(argv)[0].omp_wait_policy)
    args = parse_args(argv)
    config = service_config(args)
    if policy != config.omp_wait_policy and config.omp_wait_policy != "default":
        log.warning(
            "OpenMP wait policy is %s, not %s ($OMP_WAIT_POLICY, or faiss was loaded before)",
            policy,
            config.omp_wait_policy,
        )
    from ragym.envs.retrieval.service.app import RetrievalApp
    from ragym.envs.retrieval.service.shards import read_manifest
    from ragym.envs.serving.catalog import CatalogSpec, load_catalog

    # a missing folder or index file stops here, not as a load error after the server is up
    for flag, folder in args.folders:
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"--{flag} {folder}: no such folder")
    for _, manifest in args.shards:
        try:
            read_manifest(manifest)
        except ValueError as error:  # a manifest of another shape: one line, not a traceback
            raise SystemExit(f"ragym serve: {error}") from None
    _check_address(config.host, config.port)
    catalog = CatalogSpec(args.folders, tuple(args.shards), args.index_kind, args.gpu)
    app = RetrievalApp(lambda: load_catalog(catalog), config)
    # no proxy-headers middleware: the service never reads the client address, and it wraps every request
    uvicorn.run(
        app, host=config.host, port=config.port, log_level="info", access_log=False, proxy_headers=False
    )
    return 0


def _check_address(host: str, port: int) -> None:
    """Stop, in one line, when ``host:port`` cannot be listened on (a port in use): uvicorn finds out only after
    the indexes started loading, and the process then waits for that load to end before it exits."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as error:
            raise SystemExit(
                f"ragym serve: cannot listen on {host}:{port}: {error.strerror or error}"
            ) from None


if __name__ == "__main__":
    raise SystemExit(main())
