# nbgrader course configuration for rocmlab (read by `rocmlab build` and `rocmlab grade`).
# The course folder, the gradebook URL and the assignment are set by rocmlab at run time.
c = get_config()  # noqa: F821  (injected by traitlets)

# What a learner sees in place of a solution body.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.ClearSolutions.enforce_metadata = True

# Lab notebooks carry their own outputs policy: students get clean notebooks.
c.ClearOutput.enabled = True
c.ClearHiddenTests.enforce_metadata = True

# Grading runs notebooks under rocmlab's own limits (lab.toml timeouts), not nbgrader's 30 s.
c.Execute.timeout = 600
c.Execute.interrupt_on_timeout = True
