# syntax=docker/dockerfile:1
# One image for every service of docker-compose.yml: the Airflow components, the Spark master and
# workers, and the project itself (Spark executors import msgdedup, so they need the same venv).
FROM python:3.11-slim-bookworm

# Java 17 for Spark (bookworm's default JDK: its javac builds the project's jar below), tini to
# reap Spark's and Airflow's child processes.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      default-jdk-headless procps tini \
 && rm -rf /var/lib/apt/lists/*

# uv is pinned like in the Makefile (UV_VERSION), so the image resolves nothing: uv.lock decides.
ARG UV_VERSION=0.13.8
RUN pip install --no-cache-dir "uv==${UV_VERSION}"

# The service user. The named volumes' mount points exist with its ownership, so Docker
# initialises new volumes writable by it.
ARG APP_UID=50000
RUN useradd --create-home --uid "${APP_UID}" --gid 0 msgdedup \
 && mkdir -p /opt/msgdedup /opt/airflow/auth /opt/airflow/logs /data /run/msgdedup \
 && chown -R msgdedup:0 /opt/msgdedup /opt/airflow /data /run/msgdedup \
 && chmod 0700 /run/msgdedup

WORKDIR /opt/msgdedup
USER msgdedup
ENV UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_COMPILE_BYTECODE=1

# Dependencies first (cached until uv.lock changes), then the project.
COPY --chown=msgdedup:0 pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --no-install-project
COPY --chown=msgdedup:0 src ./src
COPY --chown=msgdedup:0 spark_apps ./spark_apps
COPY --chown=msgdedup:0 dags ./dags
COPY --chown=msgdedup:0 plugins ./plugins
COPY --chown=msgdedup:0 expectations ./expectations
COPY --chown=msgdedup:0 conf ./conf
COPY --chown=msgdedup:0 scripts ./scripts
COPY --chown=msgdedup:0 docker/entrypoint.sh /opt/msgdedup/docker/entrypoint.sh
RUN uv sync --frozen --no-dev && scripts/bind_spark_to_venv.sh .venv && scripts/build_jvm.sh .venv

ENV PATH=/opt/msgdedup/.venv/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/default-java \
    PYSPARK_PYTHON=/opt/msgdedup/.venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/msgdedup/.venv/bin/python \
    SPARK_CONF_DIR=/opt/msgdedup/var/spark-conf \
    AIRFLOW_HOME=/opt/airflow \
    MSGDEDUP_GX_PROJECT=/opt/msgdedup/expectations \
    GX_ANALYTICS_ENABLED=false

ENTRYPOINT ["/usr/bin/tini", "--", "/opt/msgdedup/docker/entrypoint.sh"]
CMD ["bash"]
