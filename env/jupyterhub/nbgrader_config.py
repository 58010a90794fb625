# nbgrader config of every single-user server of the rocmlab hub (found through JUPYTER_CONFIG_PATH).
# The spawner (rocmlab.hub.spawner) sets the variables read here.
import os
from pathlib import Path

c = get_config()  # noqa: F821  (injected by traitlets)

# The course's own settings (solution stubs, hidden tests, execution limits) come first.
_course_config = Path(os.environ.get("ROCMLAB_ROOT", "")) / "autograder" / "nbgrader_config.py"
if os.environ.get("ROCMLAB_ROOT") and _course_config.is_file():
    load_subconfig(str(_course_config))  # noqa: F821

c.CourseDirectory.course_id = os.environ.get("ROCMLAB_COURSE_ID", "rocmlab")
# A learner's root is their own view of the exchange (inbound/ and feedback/ are their own folders,
# rocmlab.hub.exchange_layout); an instructor's is the exchange itself. Nothing in it is writable by
# every user, so nbgrader's steps are the ones that do not ask for (or make) a world-writable root.
c.Exchange.root = os.environ.get("ROCMLAB_EXCHANGE", "/srv/nbgrader/exchange")
for _step, _name in {
    "fetch_assignment": "CourseFetchAssignment",
    "submit": "CourseSubmit",
    "list": "CourseList",
    "fetch_feedback": "CourseFetchFeedback",
    "release_assignment": "CourseReleaseAssignment",
    "collect": "LearnerFolderCollect",  # the folder names the student; copied through descriptors
    "release_feedback": "LearnerFolderReleaseFeedback",
}.items():
    setattr(c.ExchangeFactory, _step, f"rocmlab.hub.exchange.{_name}")
# Workshop server: each learner's inbound folder must be owned by the account of that name.
c.LearnerFolderCollect.owner_is_account = os.environ.get("ROCMLAB_HUB_MODE") == "server"
# Fetched assignments go to ~/<course id>/<lab>/, beside the delivered ~/<lab>/ folders.
c.Exchange.path_includes_course = True

# nbgrader's autograde (the formgrader's button, `nbgrader autograde`) would run learners' code as the
# instructor, unsandboxed: refused, with how to grade instead (`rocmlab grade`; rocmlab.hub.formgrader).
c.Autograde.sanitize_preprocessors = ["rocmlab.hub.formgrader.RefuseAutograde"]
c.Autograde.autograde_preprocessors = ["rocmlab.hub.formgrader.RefuseAutograde"]

if os.environ.get("ROCMLAB_HUB_ROLE") == "instructor" and os.environ.get("ROCMLAB_COURSE_ROOT"):
    c.CourseDirectory.root = os.environ["ROCMLAB_COURSE_ROOT"]
    c.CourseDirectory.db_url = "sqlite:///" + os.path.join(os.environ["ROCMLAB_COURSE_ROOT"], "gradebook.db")

# Demo hub only: every server runs as the same Unix user, so nbgrader (which names the student
# after the process's Unix user) is told the hub user's name instead.
if os.environ.get("ROCMLAB_STUDENT_ID"):
    c.CourseDirectory.student_id = os.environ["ROCMLAB_STUDENT_ID"]
if os.environ.get("ROCMLAB_HUB_MODE") == "demo":
    c.ExchangeCollect.check_owner = False  # every submission is owned by the one Unix user
