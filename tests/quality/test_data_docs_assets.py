"""The pinned Data Docs assets (``src/msgdedup/quality/data_docs_assets``) are exactly the files
their manifest records, with their licenses, and cover every CDN reference of GX's templates."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import great_expectations
import pytest

from msgdedup.quality import data_docs_offline
from msgdedup.quality.data_docs_offline import (
    ASSETS_DIR, AssetIntegrityError, manifest, read_verified, rewrite_template,
)

GX_TEMPLATES = Path(great_expectations.__file__).parent / "render" / "view" / "templates"
REMOTE_TAG = re.compile(r'<(?:script|link)\b[^>]*?\b(?:src|href)="(https?://[^"]+)"[^>]*>')


def test_every_shipped_file_has_its_recorded_sha256():
    for entry in manifest()["files"]:
        content = (ASSETS_DIR / entry["path"]).read_bytes()
        assert hashlib.sha256(content).hexdigest() == entry["sha256"], entry["path"]


def test_nothing_unlisted_is_shipped():
    shipped = {p.relative_to(ASSETS_DIR).as_posix() for p in ASSETS_DIR.rglob("*") if p.is_file()}
    assert shipped == {entry["path"] for entry in manifest()["files"]} | {"manifest.json"}


def test_every_package_is_pinned_with_its_license_file():
    packages = {(p["package"], p["version"]): p for p in manifest()["packages"]}
    files = {entry["path"] for entry in manifest()["files"]}
    for (name, version), package in packages.items():
        assert package["tarball"].startswith("https://registry.npmjs.org/"), name
        assert package["integrity"].startswith("sha512-"), name
        assert package["license"], name
        assert package["license_file"] in files, f"{name}@{version}: license file not shipped"
    for entry in manifest()["files"]:
        assert (entry["package"], entry["version"]) in packages, entry["path"]


def test_files_are_the_ones_gx_pins_by_subresource_integrity():
    """GX's templates give an SRI hash for popper and Bootstrap's JS: ours must match it."""
    pinned = {}
    for template in GX_TEMPLATES.glob("*.j2"):
        for tag in re.findall(r"<script\b[^>]*>", template.read_text()):
            src, sri = re.search(r'src="([^"]+)"', tag), re.search(r'integrity="([^"]+)"', tag)
            if src and sri:
                pinned[src[1]] = sri[1]
    assert len(pinned) >= 2, pinned
    by_url = {url: entry["path"] for entry in manifest()["files"] for url in entry.get("cdn_urls", ())}
    for url, sri in pinned.items():
        algorithm, _, expected = sri.partition("-")
        content = read_verified(by_url[url])
        assert base64.b64encode(hashlib.new(algorithm, content).digest()).decode() == expected, url


def test_every_cdn_reference_of_gx_templates_is_shipped_or_deliberately_dropped():
    referenced = {url for t in GX_TEMPLATES.glob("*.j2") for url in REMOTE_TAG.findall(t.read_text())}
    shipped = {url for entry in manifest()["files"] for url in entry.get("cdn_urls", ())}
    dropped = {entry["cdn_url"] for entry in manifest()["not_shipped"]}
    assert referenced == shipped | dropped
    for template in GX_TEMPLATES.glob("*.j2"):
        rewritten = rewrite_template(template.read_text())
        assert not REMOTE_TAG.findall(rewritten), template.name
        assert "amazonaws.com" not in rewritten, template.name


def test_a_changed_file_is_refused(tmp_path, monkeypatch):
    path = "jquery-3.7.1/dist/jquery.min.js"
    copy = tmp_path / "assets"
    (copy / path).parent.mkdir(parents=True)
    (copy / path).write_bytes(read_verified(path) + b"\n/* appended */")
    monkeypatch.setattr(data_docs_offline, "ASSETS_DIR", copy)
    with pytest.raises(AssetIntegrityError, match="jquery.min.js: sha256"):
        read_verified(path)
