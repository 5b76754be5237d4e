"""Session fixtures for the augment tests (reusable by the stage's tests):

* ``tiny_lm_dir``: a 2-layer GPT-2 trained for a few steps on the demo corpus, saved as a
  Hugging Face model directory (``tests/augment/tinylm.py``);
* ``served_lm``: that model behind a real ``transformers serve`` on 127.0.0.1 (its
  OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``), yielding
  ``ServedModel(base_url, model_name, model_dir)``; ``lm_server`` is the handle itself
  (``requests_received()``);
* ``scripted_server``: an aiohttp server whose answers each test scripts (``reset``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.augment.servers import LMServer, ScriptedServer, ServedModel
from tests.augment.tinylm import train_tiny_lm


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny_lm(tmp_path_factory.mktemp("tinylm") / "model")


@pytest.fixture(scope="session")
def lm_server(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LMServer]:
    server = LMServer(tiny_lm_dir, tmp_path_factory.mktemp("serve") / "serve.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def served_lm(lm_server: LMServer) -> ServedModel:
    return lm_server.served


@pytest.fixture(scope="session")
def _scripted_session() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def scripted_server(_scripted_session: ScriptedServer) -> ScriptedServer:
    _scripted_session.reset()
    return _scripted_session
