"""A new file in a log dir takes the bits of its siblings of the same kind (storage.ownership),
read from a bounded number of them: a root holding thousands of partitions' state files is not
read whole for every new one."""

from __future__ import annotations

import os

from kcompact.storage import ownership


def test_a_new_file_takes_its_kinds_bits_among_thousands(tmp_path, monkeypatch):
    for n in range(3 * ownership.SIBLINGS_OF_A_KIND):
        (tmp_path / f"kcompact-state.orders-{n}.json").write_text("{}")
        os.chmod(tmp_path / f"kcompact-state.orders-{n}.json", 0o640)
    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n0\n")
    os.chmod(tmp_path / "cleaner-offset-checkpoint", 0o600)
    read = []
    real = ownership._narrowest
    monkeypatch.setattr(ownership, "_narrowest", lambda modes: read.append(len(modes)) or real(modes))
    owner = ownership.for_file(str(tmp_path / "kcompact-state.orders-999.json"))
    assert owner.mode == 0o640 and read == [ownership.SIBLINGS_OF_A_KIND]
