"""Offline course assets: the Chinese QC data sets and the tiny-qwen-zh model.

The shipped data lives in ``data/`` as JSONL (made once by ``generate_data.py``);
``rocmlab.lab`` loads it. The model is built on first use by ``tiny_model.py``.
"""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
