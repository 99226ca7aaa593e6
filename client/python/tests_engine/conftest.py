"""Fixtures of the engine tests: the real model (loaded once), and one gateway per backend (the
embedded store, and MinIO), each with ``--domain oc.test`` so LMCache's own S3 connector, which
sends virtual-hosted-style requests only, can reach it."""
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import harness  # noqa: E402
from stack import Stack, start_stack  # noqa: E402

DOMAIN = "oc.test"
_stacks: Dict[str, Stack] = {}


@pytest.fixture(scope="session")
def model() -> Any:
    import torch

    torch.set_num_threads(2)
    return harness.load_model()


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return harness.load_tokenizer()


@pytest.fixture(scope="session", params=["local", "s3"])
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    running = start_stack(["--domain", DOMAIN], backend=request.param)
    yield running
    running.stop()
