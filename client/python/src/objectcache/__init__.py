"""ObjectCache: fetch LLM prefix KV caches from object storage layer by layer."""
from ._contract import VERSION as __version__
from .client import FetchResult, ObjectCacheClient
from .errors import ObjectCacheError
from .keys import chunk_hashes, chunk_keys, layout_fingerprint
from .types import Descriptor

__all__ = ["Descriptor", "FetchResult", "ObjectCacheClient", "ObjectCacheError", "chunk_hashes", "chunk_keys", "layout_fingerprint"]
