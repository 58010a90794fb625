"""Launch links: the nbgitpuller URL of a lab on the workshop hub, from ``env/site.toml`` (one place).

nbgitpuller (https://nbgitpuller.readthedocs.io/en/latest/link.html) serves ``/git-pull`` on the
learner's server: ``repo``, ``branch``, ``targetpath`` and ``urlpath`` say what to clone or update
into which folder of the home, and which page to open afterwards. ``/hub/user-redirect/`` sends a
logged-in learner (after the login page, a new one) to their own server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from ..schemas import read_toml, validate

CONFIG = Path("env") / "site.toml"


@dataclass(frozen=True)
class LaunchConfig:
    hub_url: str
    labs_repo: str
    labs_branch: str
    target_dir: str

    def notebook_path(self, lang: str, lab_id: str) -> str:
        """Where nbgitpuller puts a lab's notebook, relative to the learner's home."""
        return f"{self.target_dir}/{lang}/{lab_id}/{lab_id}.ipynb"

    def url(self, lang: str, lab_id: str) -> str:
        query = urlencode(
            {
                "repo": self.labs_repo,
                "branch": self.labs_branch,
                "targetpath": self.target_dir,
                "urlpath": f"lab/tree/{self.notebook_path(lang, lab_id)}",
            },
            quote_via=quote,
        )
        return f"{self.hub_url}/hub/user-redirect/git-pull?{query}"


def read_config(root: Path, **overrides: str | None) -> LaunchConfig:
    """``env/site.toml`` with any non-empty ``overrides`` (hub_url=..., labs_repo=...) applied, validated."""
    path = root / CONFIG
    data = read_toml(path, missing="the hub URL of the launch links")
    data.update({key: value for key, value in overrides.items() if value})
    if isinstance(data.get("hub_url"), str):
        data["hub_url"] = data["hub_url"].rstrip("/")
    validate(data, "site", path)
    return LaunchConfig(**data)
