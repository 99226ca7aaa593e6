"""The Python client names chunks exactly as the TypeScript client does (shared vectors)."""

import json
from pathlib import Path

import pytest

from objectcache import chunk_keys, layout_fingerprint
from objectcache.keys import encode_tokens

VECTORS = json.loads((Path(__file__).resolve().parents[3] / "schemas" / "test-vectors" / "chunk-keys.json").read_text())["vectors"]
TOKEN_VECTORS = json.loads((Path(__file__).resolve().parents[3] / "schemas" / "test-vectors" / "kv-tokens.json").read_text())["vectors"]


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: f"{v['layout']}-G{v['chunkTokens']}-{len(v['tokens'])}t")
def test_keys_match_the_shared_vectors(v: dict) -> None:
    assert layout_fingerprint(v["modelId"], v["dtype"], v["chunkTokens"], v["layers"], v["layerBytes"], v["layout"]) == v["fingerprint"]
    assert chunk_keys(v["tokens"], v["modelId"], v["dtype"], v["chunkTokens"], v["layers"], v["layerBytes"], v["layout"]) == v["keys"]


def test_longer_prompts_extend_the_keys_and_partial_chunks_are_not_keyed() -> None:
    args = ("m", "bfloat16", 4, 2, 8, "KV_L2TD")
    short = chunk_keys(list(range(9)), *args)
    long = chunk_keys(list(range(13)), *args)
    assert len(short) == 2 and long[:2] == short and len(long) == 3
    assert chunk_keys([0, 1, 2, 4, 4, 5, 6, 7], *args)[0] != short[0]


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError):
        layout_fingerprint("m", "bfloat16", 4, 2, 8, "KV_XYZ")


@pytest.mark.parametrize("v", TOKEN_VECTORS, ids=lambda v: f"{len(v['tokens'])}t")
def test_tokens_are_recorded_as_the_shared_vectors_say(v: dict) -> None:
    assert encode_tokens(v["tokens"]) == v["value"]


def test_a_token_list_too_long_for_the_metadata_is_not_recorded() -> None:
    assert encode_tokens([150_000] * 1000) is None
