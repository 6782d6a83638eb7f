"""What the tests share: where the `mdsd` command line is."""

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def mdsd_binary():
    """The `mdsd` binary the tests compare with: ``MDSD_BIN``, else ``mdsd``
    on PATH (``cargo install --locked --path mdsd``), else the checkout's
    ``target/release/mdsd``; a test without one skips, saying so."""
    candidates = [os.environ.get("MDSD_BIN"), shutil.which("mdsd"),
                  ROOT / "target" / "release" / "mdsd"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    pytest.skip("no mdsd binary: set MDSD_BIN, put mdsd on PATH, or cargo build --release")
