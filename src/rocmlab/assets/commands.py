"""`rocmlab assets build-model | fetch | info`: the offline model and data from the command line."""

from __future__ import annotations

import json

from ..errors import ExitCode, InputError


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="assets_command", metavar="{build-model,fetch,info}")
    sub.required = True
    build = sub.add_parser("build-model", help="build tiny-qwen-zh into the cache (no network)")
    build.add_argument(
        "--steps", type=int, default=None, metavar="N", help="pre-training steps (default: the recipe's)"
    )
    build.add_argument("--seed", type=int, default=None, metavar="N", help="random seed (default: the recipe's)")
    build.add_argument(
        "--cache-dir", default=None, metavar="DIR", help="cache root (default: $ROCMLAB_CACHE or the user cache dir)"
    )
    build.add_argument("--force", action="store_true", help="delete a cached build first")
    fetch = sub.add_parser("fetch", help="pre-fetch a model for offline use (tiny-qwen-zh or a hub id)")
    fetch.add_argument("name", metavar="MODEL", help='"tiny-qwen-zh" or a hub id such as Qwen/Qwen2.5-0.5B-Instruct')
    fetch.add_argument(
        "--mirror", default=None, metavar="URL", help="hub endpoint, e.g. https://hf-mirror.com (default: HF_ENDPOINT)"
    )
    info = sub.add_parser("info", help="show the data sets and the cached model")
    info.add_argument("--cache-dir", default=None, metavar="DIR")
    info.add_argument("--json", dest="as_json", action="store_true", help="print JSON")


def needs_course(options: dict) -> bool:
    """Never: assets live in the user cache, not in the course."""
    return False


def main(*, assets_command: str, course=None, **options) -> int:
    """``options`` are those of the sub-command (``course`` is not used: assets live in the user cache)."""
    handlers = {"build-model": build_model, "fetch": fetch, "info": info}
    return handlers[assets_command](**options)


def build_model(*, steps: int | None = None, seed: int | None = None, cache_dir=None, force: bool = False) -> int:
    import os
    import shutil

    # Before torch loads its OpenMP runtime: idle threads sleep instead of spinning, so a build
    # that shares its cores with running labs does not lose them to busy-waiting.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    from . import tiny_model

    steps = steps if steps is not None else tiny_model.DEFAULT_STEPS
    seed = seed if seed is not None else tiny_model.DEFAULT_SEED
    if steps < 1:
        raise InputError(f"--steps: expected a positive number, got {steps}")
    target = tiny_model.model_dir(cache_dir, steps=steps, seed=seed)
    if force and target.exists():
        shutil.rmtree(target)
    path = tiny_model.ensure_tiny_model(cache_dir, steps=steps, seed=seed)
    manifest = tiny_model.read_valid_manifest(path)
    print(f"{tiny_model.MODEL_NAME}: {path}")
    print(f"  weights sha256 {manifest['weights_sha256']}")
    print(f"  eval perplexity on qc_reports: {manifest['eval_perplexity_qc_reports']}")
    return ExitCode.OK


def fetch(*, name: str, mirror: str | None = None) -> int:
    from .resolve import fetch_model

    path = fetch_model(name, mirror=mirror)
    print(f"{name}: ready at {path}")
    return ExitCode.OK


def info(*, cache_dir=None, as_json: bool = False) -> int:
    from . import loaders, tiny_model
    from .cache import cache_root

    target = tiny_model.model_dir(cache_dir)
    manifest = tiny_model.read_valid_manifest(target)
    summary = {
        "data": {
            "qc_reports_train": len(loaders.load_qc_reports("train")),
            "qc_reports_eval": len(loaders.load_qc_reports("eval")),
            "qc_kb": len(loaders.load_qc_kb()),
            "taxonomy": {key: len(values) for key, values in loaders.qc_taxonomy().items()},
        },
        "cache_root": str(cache_root(cache_dir)),
        "tiny_model": {
            "path": str(target),
            "status": "built" if manifest else ("corrupt or partial" if target.exists() else "not built"),
            **(
                {
                    key: manifest[key]
                    for key in (
                        "parameters",
                        "steps",
                        "seed",
                        "weights_sha256",
                        "eval_perplexity_qc_reports",
                        "versions",
                    )
                }
                if manifest
                else {}
            ),
        },
    }
    if as_json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
        return ExitCode.OK
    d, m = summary["data"], summary["tiny_model"]
    print(
        f"data: {d['qc_reports_train']} train / {d['qc_reports_eval']} eval qc_reports, {d['qc_kb']} KB documents, "
        f"{d['taxonomy']['defect_types']} defect types, {d['taxonomy']['product_lines']} product lines"
    )
    print(f"cache: {summary['cache_root']}")
    print(f"{tiny_model.MODEL_NAME}: {m['status']} at {m['path']}")
    if manifest:
        print(
            f"  {m['parameters'] / 1e6:.2f} M parameters, {m['steps']} steps, seed {m['seed']}, "
            f"eval perplexity {m['eval_perplexity_qc_reports']}, sha256 {m['weights_sha256'][:16]}"
        )
    return ExitCode.OK
