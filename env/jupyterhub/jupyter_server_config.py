# The single-user servers' config, for both roles (found through JUPYTER_CONFIG_PATH, set by
# rocmlab.hub.spawner). A terminal's login shell resets PATH: rocmlab.hub.terminal puts the
# course's tools (rocmlab submit, nbgrader) back in front of it.
from pathlib import Path

from rocmlab.hub.terminal import shell_command

c = get_config()  # noqa: F821  (injected by traitlets)
c.ServerApp.terminado_settings = {"shell_command": shell_command()}
# JupyterLab's update check, on each load, shows the learner's newest hint from the instructor as a
# notification instead (rocmlab.live.notify); no request leaves the server for PyPI. JupyterLab
# runs that check only once news were answered (fetchNews "none" asks first): the course's setting
# defaults (lab-settings/overrides.json) answer "false", no news, and a learner may still change it.
c.LabApp.check_for_updates_class = "rocmlab.live.notify.HintNotice"
c.LabApp.app_settings_dir = str(Path(__file__).resolve().parent / "jupyter" / "lab-settings")
