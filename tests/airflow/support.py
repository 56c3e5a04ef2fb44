"""Stand-ins shared by the Airflow unit tests (the e2e tests run the real scheduler)."""

from __future__ import annotations


class ResolvedTaskInstance:
    """Airflow's task instance as a downstream task sees it: XCom hands it the partition sensor's
    run spec, and nothing else."""

    def __init__(self, spec, first_reschedule_date=None):
        self.spec = spec
        self.first_reschedule_date = first_reschedule_date

    def xcom_pull(self, task_ids):
        from msgdedup.orchestration.partitions import SPEC_TASK_ID

        assert task_ids == SPEC_TASK_ID
        return self.spec.to_dict()

    def get_first_reschedule_date(self, context):
        """When the task was first rescheduled in this try (None: it has not been yet)."""
        return self.first_reschedule_date
