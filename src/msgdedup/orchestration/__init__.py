"""Airflow orchestration of the batch command: everything the ``message_dedup`` DAG runs.

The DAG file (``dags/message_dedup.py``) only declares structure; the logic lives here so it can
be imported and tested without a scheduler:

- :mod:`.settings`   Airflow Variables (paths) with their documented defaults, trigger-form params
- :mod:`.partitions` data interval / trigger form -> validated batch id and partition path
- :mod:`.sensors`    the "partition is complete" sensor (``_SUCCESS`` marker, reschedule mode)
- :mod:`.spark`      SparkSubmitOperator subclasses for the dedup and the GX gate apps
- :mod:`.publish`    write-audit-publish: the published marker and the Asset event
"""
