"""docker-compose.yml is a valid deployment, and its secrets come only from .env.

No Docker engine runs here, so the file is validated by a real Compose implementation
(Debian's docker-compose, installed by `make compose-cli`): `docker-compose config` parses it
against the Compose schema and interpolates it, which is what `up` does first.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
SECRETS = (
    "POSTGRES_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_ADMIN_PASSWORD", "SPARK_AUTH_SECRET",
)
AIRFLOW_SERVICES = {"airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
SENSITIVE_NAME = re.compile(r"(PASSWORD|SECRET|FERNET|TOKEN|_KEY$|CREDENTIAL)", re.IGNORECASE)
URL_PASSWORD = re.compile(r"://[^/:@\s]+:(?P<password>\$\{[^}]*\}|[^@\s]+)@")
# A path to a secret (e.g. a passwords file) is not itself a secret.
NOT_A_SECRET = re.compile(r"_(FILE|PATH|DIR)$")
INTERPOLATION = re.compile(r"^\$\{[A-Z0-9_]+:\?[^}]+\}$")


def compose_cli() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        pytest.fail("docker-compose is not installed: run `make compose-cli` (part of `make test`)")
    return found


def generated_env() -> dict[str, str]:
    from cryptography.fernet import Fernet

    values = {name: secrets.token_hex(16) for name in SECRETS}
    values["AIRFLOW_FERNET_KEY"] = Fernet.generate_key().decode()
    return values


def compose_config(env_file: Path) -> subprocess.CompletedProcess:
    """`docker-compose config` with only the given .env (no secret leaks in from this shell)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(env_file.parent)}
    return subprocess.run(
        [compose_cli(), "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE),
         "--env-file", str(env_file), "config"],
        env=env, capture_output=True, text=True, timeout=120,
    )


def write_env(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def environment_items(service: dict) -> list[tuple[str, str]]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return [tuple(item.split("=", 1)) if "=" in item else (item, "") for item in env]
    return [(k, "" if v is None else str(v)) for k, v in env.items()]


def test_compose_file_is_valid_and_interpolates_every_secret_from_env(tmp_path):
    values = generated_env()
    done = compose_config(write_env(tmp_path / ".env", values))
    assert done.returncode == 0, done.stderr

    config = yaml.safe_load(done.stdout)
    services = config["services"]
    assert set(services) == AIRFLOW_SERVICES | {"postgres", "airflow-init", "spark-master", "spark-worker",
                                                "batch-service"}

    # One project image for Airflow and Spark, built from the Dockerfile.
    for name in AIRFLOW_SERVICES | {"airflow-init", "spark-master", "spark-worker", "batch-service"}:
        assert services[name]["build"]["dockerfile"] == "Dockerfile", name
        assert services[name]["image"] == services["spark-master"]["image"], name
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["spark-master"]["command"][:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert services["spark-worker"]["command"][:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert services["spark-worker"]["command"][-1] == "spark://spark-master:7077"
    commands = {name: services[name]["command"] for name in AIRFLOW_SERVICES}
    assert commands["airflow-api-server"][:2] == ["airflow", "api-server"]
    assert commands["airflow-scheduler"] == ["airflow", "scheduler"]
    assert commands["airflow-dag-processor"] == ["airflow", "dag-processor"]
    assert commands["airflow-triggerer"] == ["airflow", "triggerer"]

    # The generated secrets reach the services that need them (interpolation from .env works).
    scheduler = dict(environment_items(services["airflow-scheduler"]))
    assert scheduler["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        f"postgresql+psycopg2://airflow:{values['POSTGRES_PASSWORD']}@postgres:5432/airflow")
    assert scheduler["AIRFLOW__CORE__FERNET_KEY"] == values["AIRFLOW_FERNET_KEY"]
    assert scheduler["AIRFLOW__API_AUTH__JWT_SECRET"] == values["AIRFLOW_JWT_SECRET"]
    assert dict(environment_items(services["postgres"]))["POSTGRES_PASSWORD"] == values["POSTGRES_PASSWORD"]
    init_environment = dict(environment_items(services["airflow-init"]))
    assert init_environment["AIRFLOW_ADMIN_PASSWORD"] == values["AIRFLOW_ADMIN_PASSWORD"]
    for name in ("spark-master", "spark-worker", "airflow-scheduler", "batch-service"):
        assert dict(environment_items(services[name]))["SPARK_AUTH_SECRET"] == values["SPARK_AUTH_SECRET"], name
    # The batch service: a driver on the cluster, its socket shared with the scheduler (where the
    # tasks run) and named to the DAG by the Variable; nobody else mounts it, nothing publishes it.
    service = services["batch-service"]
    assert service["command"][:3] == ["spark-submit", "--master", "spark://spark-master:7077"]
    socket_path = service["command"][service["command"].index("--socket") + 1]
    assert scheduler["AIRFLOW_VAR_MSGDEDUP_BATCH_SERVICE"] == socket_path
    mount = f"batch-service:{Path(socket_path).parent}"
    mounting = {name for name, svc in services.items()
                if any(str(v).startswith(mount) for v in svc.get("volumes") or [])}
    assert {"batch-service", "airflow-scheduler"} <= mounting
    assert "ports" not in service
    # Every Airflow component shares the same secrets (JWTs signed by one are checked by another).
    for name in AIRFLOW_SERVICES:
        env = dict(environment_items(services[name]))
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == values["AIRFLOW_JWT_SECRET"], name


@pytest.mark.parametrize("missing", SECRETS)
def test_a_missing_secret_stops_compose_with_its_name(tmp_path, missing):
    values = generated_env()
    values[missing] = ""  # an empty value counts as missing (`:?`)
    done = compose_config(write_env(tmp_path / ".env", values))
    assert done.returncode != 0
    assert "set it in .env" in done.stderr and missing in done.stderr, done.stderr


def test_no_service_carries_a_literal_secret():
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    offenders = []
    for name, service in raw["services"].items():
        for key, value in environment_items(service):
            if SENSITIVE_NAME.search(key) and not NOT_A_SECRET.search(key) and not INTERPOLATION.match(value):
                offenders.append(f"{name}: {key}={value!r} (must be ${{VAR:?set it in .env}})")
            for match in URL_PASSWORD.finditer(value):
                if not INTERPOLATION.match(match.group("password")):
                    offenders.append(f"{name}: {key} has a literal password in a URL")
        command = service.get("command")
        text = command if isinstance(command, str) else " ".join(command or [])
        if re.search(r"(password|secret)\s*[=:]\s*['\"]?\w", text, re.IGNORECASE):
            offenders.append(f"{name}: command sets a secret literally")
    assert offenders == []


def test_secrets_file_is_git_ignored_and_documented():
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT)
    assert ignored.returncode == 0, ".env must be git-ignored"
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", ".env"], cwd=ROOT, capture_output=True)
    assert tracked.returncode != 0, ".env must never be committed"
    example = (ROOT / ".env.example").read_text()
    for name in SECRETS:
        assert re.search(rf"^{name}=$", example, re.MULTILINE), f"{name} must be listed, empty, in .env.example"
    assert ".env" in (ROOT / ".dockerignore").read_text().split()


def test_dockerfile_builds_the_project_from_the_lock():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", dockerfile, re.MULTILINE)
    assert "default-jdk-headless" in dockerfile  # Java 17 on Debian bookworm, with javac
    assert "uv sync --frozen" in dockerfile
    assert "scripts/build_jvm.sh" in dockerfile  # the project's jar, built in the image
    uv_version = re.search(r"^UV_VERSION := (\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    assert f"ARG UV_VERSION={uv_version}" in dockerfile
    for copied in re.findall(r"^COPY (?:--\S+ )*(\S+) ", dockerfile, re.MULTILINE):
        assert (ROOT / copied).exists(), f"Dockerfile copies {copied}, which does not exist"
