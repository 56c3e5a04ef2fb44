"""The Great Expectations quality gate of a committed batch (see ``gate.run_gate``)."""

from msgdedup.quality.gate import GateInputError, GateResult, GateSettings, run_gate

__all__ = ["GateInputError", "GateResult", "GateSettings", "run_gate"]
