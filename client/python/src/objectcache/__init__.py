"""ObjectCache: fetch LLM prefix KV caches from object storage layer by layer."""
from .client import FetchResult, ObjectCacheClient
from .errors import ObjectCacheError
from .keys import chunk_hashes, chunk_keys, layout_fingerprint

__all__ = ["FetchResult", "ObjectCacheClient", "ObjectCacheError", "chunk_hashes", "chunk_keys", "layout_fingerprint"]
__version__ = "0.3.0"
