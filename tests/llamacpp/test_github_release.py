"""formats/github_release.py: a release file is trusted only with a sha256 digest, an http(s)
URL and a size."""

from __future__ import annotations

import pytest

from ojai_setup.formats.github_release import ReleaseFile, release_file

HEX = "ab" * 32
GOOD = {"digest": f"sha256:{HEX.upper()}", "browser_download_url": "https://example.org/f.deb",
        "size": 10}


class Refused(Exception):
    pass


def test_a_complete_asset_is_read() -> None:
    assert release_file(GOOD, "f.deb", "v1", kind="a package", error=Refused) == ReleaseFile(
        url="https://example.org/f.deb", size=10, sha256=HEX)


@pytest.mark.parametrize(("change", "message"), [
    ({"digest": None}, r"no sha256 digest for f.deb in release v1 \(digest: None\); refusing "
                       r"to install a package that cannot be verified"),
    ({"digest": "sha1:" + "ab" * 20}, "no sha256 digest"),
    ({"digest": "sha256:" + "ab" * 31}, "no sha256 digest"),
    ({"browser_download_url": "file:///etc/passwd"}, "no usable download URL: 'file:///etc/passwd'"),
    ({"browser_download_url": None}, "no usable download URL"),
    ({"size": 0}, "no usable size: 0"),
    ({"size": "10"}, "no usable size: '10'"),
])
def test_an_incomplete_asset_is_refused_with_the_callers_error(change, message) -> None:
    with pytest.raises(Refused, match=message):
        release_file({**GOOD, **change}, "f.deb", "v1", kind="a package", error=Refused)
