#!/usr/bin/env python3
"""Re-download and re-checksum the Data Docs assets pinned in
``src/msgdedup/quality/data_docs_assets/manifest.json`` (``make data-docs-assets``).

The only step that needs the network, and only when the pins change (e.g. a GX upgrade whose
templates reference other versions): the normal build, the tests and the gate read the files
committed in git. The manifest is the input: its ``packages`` (npm name, version) and ``files``
(path ``<name>-<version>/<path inside the npm package>``). For each package this script

1. asks the npm registry for the version's tarball and its ``dist.integrity`` (SHA-512),
   refusing a tarball whose integrity differs from the one already pinned in the manifest;
2. checks the downloaded tarball against that integrity and extracts the listed files only;
3. records each file's SHA-256 and the package's tarball URL and integrity in the manifest.

Files in the assets directory that the manifest no longer lists are deleted. To change a pin,
edit the version, paths and ``cdn_urls`` in the manifest, remove the package's ``integrity``
and run this script. Standard library only, so it runs with any Python 3.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "src" / "msgdedup" / "quality" / "data_docs_assets"
MANIFEST = "manifest.json"
REGISTRY = "https://registry.npmjs.org"


def package_dir(package: str, version: str) -> str:
    """``@scope/name`` 6.6.0 -> ``name-6.6.0``: the directory of the package's files."""
    return f"{package.rsplit('/', 1)[-1]}-{version}"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310 - https registry URLs only
        return response.read()


def _check_integrity(data: bytes, integrity: str, what: str) -> None:
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise SystemExit(f"{what}: {algorithm} {actual} does not match the pinned integrity {expected}")


def fetch_package(entry: dict) -> tarfile.TarFile:
    name, version = entry["package"], entry["version"]
    meta = json.loads(_get(f"{REGISTRY}/{urllib.parse.quote(name, safe='@')}/{version}"))
    dist = meta["dist"]
    pinned = entry.get("integrity")
    if pinned and pinned != dist["integrity"]:
        raise SystemExit(f"{name}@{version}: the registry now says {dist['integrity']}, the manifest pins {pinned}")
    if not dist["tarball"].startswith(REGISTRY + "/"):
        raise SystemExit(f"{name}@{version}: tarball outside the npm registry: {dist['tarball']}")
    data = _get(dist["tarball"])
    _check_integrity(data, dist["integrity"], f"{name}@{version}")
    entry["tarball"], entry["integrity"] = dist["tarball"], dist["integrity"]
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")


def update(assets: Path) -> list[str]:
    manifest = json.loads((assets / MANIFEST).read_text())
    by_package: dict[tuple[str, str], list[dict]] = {}
    for item in manifest["files"]:
        by_package.setdefault((item["package"], item["version"]), []).append(item)
    lines = []
    for entry in manifest["packages"]:
        key = (entry["package"], entry["version"])
        prefix = package_dir(*key) + "/"
        with fetch_package(entry) as tarball:
            for item in by_package.pop(key, []):
                if not item["path"].startswith(prefix):
                    raise SystemExit(f"{item['path']}: files of {key[0]}@{key[1]} live under {prefix}")
                member = tarball.extractfile("package/" + item["path"][len(prefix):])
                if member is None:
                    raise SystemExit(f"{item['path']}: not a regular file in the npm package")
                content = member.read()
                target = assets / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                item["sha256"] = hashlib.sha256(content).hexdigest()
                lines.append(f"{item['sha256']}  {item['path']} ({len(content)} bytes)")
        if entry["license_file"] not in {i["path"] for i in manifest["files"]}:
            raise SystemExit(f"{key[0]}@{key[1]}: license_file {entry['license_file']} is not in files")
    if by_package:
        raise SystemExit(f"files of packages the manifest does not list: {sorted(by_package)}")
    listed = {item["path"] for item in manifest["files"]} | {MANIFEST}
    for path in sorted(assets.rglob("*"), reverse=True):
        relative = path.relative_to(assets).as_posix()
        if path.is_file() and relative not in listed:
            path.unlink()
            lines.append(f"deleted {relative}")
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    (assets / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assets", type=Path, default=ASSETS, help="the assets directory (default: %(default)s)")
    args = parser.parse_args(argv)
    for line in update(args.assets):
        print(line)
    print(f"updated {args.assets / MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
