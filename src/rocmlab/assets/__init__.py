"""Offline course assets: the Chinese QC data sets and the tiny-qwen-zh model.

The shipped data lives in ``data/`` as JSONL (made once by ``generate_data.py``) and is read by
``loaders.py`` (re-exported by ``rocmlab.lab`` for the notebooks). The model is built on first
use by ``tiny_model.py`` (its tokenizer in ``tiny_tokenizer.py``); ``resolve.py`` finds real models; ``commands.py`` is ``rocmlab assets``.
"""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
