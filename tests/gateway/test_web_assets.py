"""The web pages' vendored libraries (gateway/static/vendor): every file is
the one scripts/vendor-web.sh copied from npm (SHA256SUMS), each library
ships its license, and the README's table names each one."""

from __future__ import annotations

import hashlib
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[2] / "gateway" / "static" / "vendor"


def test_vendored_files_match_their_checksums_and_carry_licenses():
    listed = {}
    for line in (VENDOR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name] = digest
    on_disk = {
        str(p.relative_to(VENDOR))
        for p in VENDOR.rglob("*")
        if p.is_file() and p.name not in ("SHA256SUMS", "README.md")
    }
    assert set(listed) == on_disk
    for name, digest in listed.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, (
            f"{name} differs from what npm shipped"
        )
    libraries = {Path(name).parts[0] for name in listed}
    assert libraries == {"marked", "dompurify", "highlight", "uplot"}
    readme = (VENDOR / "README.md").read_text()
    for library in libraries:
        assert (VENDOR / library / "LICENSE").is_file(), library
        assert f"`{library}/" in readme, library
