"""Quality-gate tests use the suite's one local SparkSession (tests/conftest.py: ``spark``)."""

import os

# GX must not try to reach its analytics service from a test (the network is closed anyway).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
