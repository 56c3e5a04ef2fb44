"""How the tests run the project's spark-submit commands: the venv's launcher, from the clean
environment of a user's shell (no PYSPARK_* of the test run)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
SPARK_SUBMIT = BIN / "spark-submit"

# Every spark-submit of the tests decides a few lines and exits within a minute: the JVM's
# optimising compiler (C2) only costs it CPU, compiling Spark's code for a run too short to gain
# from it (a 3-line batch: 41 s of CPU with it, 26 s without, 2.6 s less wall time alone and much
# more on a busy machine). Stopping at C1 changes no result. The tests' own long-lived session
# (conftest.py) and every user's application keep the JVM's default, which long runs need.
SHORT_RUN_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def user_env(*drop: str, **extra: str) -> dict[str, str]:
    """The environment a user's spark-submit runs in: this one without PYSPARK_* and ``drop``,
    plus ``extra``; short-run JVM options added to any SPARK_SUBMIT_OPTS already there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK") and k not in drop}
    env["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, (env.get("SPARK_SUBMIT_OPTS"), SHORT_RUN_JVM_OPTIONS)))
    env.update(extra)
    return env
