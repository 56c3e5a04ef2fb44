"""StepTimer: the ``timings`` records of manifests and gate results."""

from msgdedup.timing import StepTimer


def test_steps_and_laps_are_named_and_add_up():
    timer = StepTimer()
    timer.lap("plan")
    with timer.step("read"):
        pass
    with timer.step("read"):
        pass
    timer.lap("write")
    record = timer.as_dict()
    assert list(record) == ["plan_s", "read_s", "write_s", "total_s"]
    assert all(isinstance(v, float) and v >= 0 for v in record.values())
    assert record["total_s"] >= max(record["plan_s"], record["read_s"], record["write_s"])
