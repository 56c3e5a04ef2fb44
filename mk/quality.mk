# Quality gate: regenerate the committed GX project (expectations/) from
# src/msgdedup/quality/checks.py after changing the checks (tests/quality/test_project.py
# fails while the two differ).
.PHONY: gx-project
gx-project: setup
	$(VENV)/bin/python -m msgdedup.quality.project expectations
