"""Airflow 3 plugin: a "Data quality" entry in the UI's navigation for message_dedup batches.

Thin on purpose: the app (with its Airflow-login requirement) is
``msgdedup.orchestration.quality_view``; the reports are built by ``msgdedup.reports``.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from msgdedup.orchestration.quality_view import MOUNT_PATH, create_app


class DataQualityPlugin(AirflowPlugin):
    name = "msgdedup_data_quality"
    fastapi_apps = [{"app": create_app(), "url_prefix": MOUNT_PATH, "name": "Data quality"}]
    external_views = [
        {
            "name": "Data quality",
            "href": MOUNT_PATH.lstrip("/") + "/",
            "destination": "nav",
            "url_route": "data-quality",
            "icon": None,
        }
    ]
