"""ObjectCache: fetch LLM prefix KV caches from object storage layer by layer."""

from ._contract import VERSION as __version__
from .client import FetchResult, ObjectCacheClient
from .config import Config
from .errors import ObjectCacheError
from .keys import chunk_hashes, chunk_keys, layout_fingerprint
from .types import Descriptor

__all__ = ["Config", "Descriptor", "FetchResult", "ObjectCacheClient", "ObjectCacheError", "__version__", "chunk_hashes", "chunk_keys", "layout_fingerprint"]
