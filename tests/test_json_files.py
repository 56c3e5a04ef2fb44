"""The warehouse's JSON documents on a local disk: read whole or refused, written atomically."""

import os
import stat

import pytest

from msgdedup import json_files


def test_read_refuses_missing_torn_and_non_object_documents(tmp_path):
    with pytest.raises(json_files.DocumentError, match="manifest .* does not exist"):
        json_files.read_object(tmp_path / "missing.json", "manifest")
    (tmp_path / "torn.json").write_text('{"batch_id": "B1", "ru')
    with pytest.raises(json_files.DocumentError, match="unreadable"):
        json_files.read_object(tmp_path / "torn.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(json_files.DocumentError, match="not a JSON object"):
        json_files.read_object(tmp_path / "list.json")
    assert json_files.read_object_or_none(tmp_path / "torn.json") is None


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "published" / "B1.json"
    json_files.write_atomic(target, {"run_id": "r1"})
    json_files.write_atomic(target, {"run_id": "r2"})
    assert json_files.read_object(target) == {"run_id": "r2"}
    assert os.listdir(target.parent) == ["B1.json"]
    assert not stat.S_IMODE(target.stat().st_mode) & stat.S_IWOTH
