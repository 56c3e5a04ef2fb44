# Quality gate: regenerate the committed GX project (expectations/) from
# src/msgdedup/quality/checks.py after changing the checks (tests/quality/test_project.py
# fails while the two differ).
.PHONY: gx-project
gx-project: setup
	$(VENV)/bin/python -m msgdedup.quality.project expectations

# Data Docs assets: re-download the pinned browser assets of the GX Data Docs from the npm
# registry and re-checksum them (src/msgdedup/quality/data_docs_assets/manifest.json). Only
# needed when the pins change (e.g. a GX upgrade); nothing else needs the network.
.PHONY: data-docs-assets
data-docs-assets:
	$(PYTHON) scripts/update_data_docs_assets.py
