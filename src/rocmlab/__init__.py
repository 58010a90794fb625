"""rocmlab: versioned, autograded, CI-executed Jupyter labs for AMD GPUs."""

__version__ = "0.1.0"
