# GENERATED FILE, do not edit. Written by scripts/gen-python-contract.mjs from package.json
# ("version") and schemas/errors.ts, schemas/retry-policy.ts, schemas/frames.ts,
# schemas/encoded-chunk.ts, schemas/integrity.ts, schemas/chain.ts, schemas/descriptor.ts,
# schemas/descriptor-schema.ts, schemas/layouts.ts, schemas/kv-tokens.ts, as built into
# dist/schemas/. After changing any of them, run from the repository root:
#   npm run -s build && node scripts/gen-python-contract.mjs
# `node scripts/gen-python-contract.mjs --check` prints the drift and exits 1;
# test/python-contract.test.ts fails on it.
"""The wire contract the Python client shares with the gateway, and the project's version."""

from typing import Final, FrozenSet, List, Literal, Mapping, Tuple, TypedDict

#: The version of the project (package.json), the Python package's too.
VERSION: Final[str] = "0.3.0"
__version__: Final[str] = VERSION


# --- errors (schemas/errors.ts) --------------------------------------------------------------------

#: Every code of the registry (ERRORS).
KNOWN_CODES: Final[FrozenSet[str]] = frozenset(
    {
        "OC_ERR_ACCESS_DENIED",
        "OC_ERR_ACCESS_RESERVED",
        "OC_ERR_ACCESS_TENANT",
        "OC_ERR_ADMISSION_LIMIT",
        "OC_ERR_AUTH_ALGORITHM",
        "OC_ERR_AUTH_CLOCK_SKEW",
        "OC_ERR_AUTH_EXPIRED",
        "OC_ERR_AUTH_EXPIRES_RANGE",
        "OC_ERR_AUTH_FORBIDDEN_HEADER",
        "OC_ERR_AUTH_HEADERS_NOT_SIGNED",
        "OC_ERR_AUTH_MALFORMED",
        "OC_ERR_AUTH_MISSING",
        "OC_ERR_AUTH_MULTIPLE",
        "OC_ERR_AUTH_NOT_YET_VALID",
        "OC_ERR_AUTH_SCOPE",
        "OC_ERR_AUTH_SIGNATURE",
        "OC_ERR_AUTH_SIGV2_DISABLED",
        "OC_ERR_AUTH_UNKNOWN_KEY",
        "OC_ERR_BACKEND_PROTOCOL",
        "OC_ERR_BACKEND_RANGE",
        "OC_ERR_BACKEND_TIMEOUT",
        "OC_ERR_BACKEND_UNAVAILABLE",
        "OC_ERR_CANCELLED",
        "OC_ERR_CAPACITY_FULL",
        "OC_ERR_CAPACITY_TOO_LARGE",
        "OC_ERR_CAPACITY_UNMANAGED",
        "OC_ERR_CHUNK_CHANGED",
        "OC_ERR_CHUNK_CORRUPT",
        "OC_ERR_CHUNK_INDEX",
        "OC_ERR_CHUNK_MISSING",
        "OC_ERR_CHUNK_SIZE",
        "OC_ERR_CLIENT_CRC",
        "OC_ERR_CLIENT_INCOMPLETE",
        "OC_ERR_CLIENT_PROTOCOL",
        "OC_ERR_CLIENT_STALLED",
        "OC_ERR_CLIENT_TARGET",
        "OC_ERR_CLIENT_TIMEOUT",
        "OC_ERR_CLIENT_USAGE",
        "OC_ERR_CODEC_MIXED",
        "OC_ERR_CODEC_UNACCEPTED",
        "OC_ERR_CONFIG_INVALID",
        "OC_ERR_DESCRIPTOR_ENCODING",
        "OC_ERR_DESCRIPTOR_INVALID",
        "OC_ERR_DESCRIPTOR_KEY_MISMATCH",
        "OC_ERR_DESCRIPTOR_LIMIT",
        "OC_ERR_DESCRIPTOR_UNSIGNED",
        "OC_ERR_INTERNAL",
        "OC_ERR_KEY_CONCURRENCY",
        "OC_ERR_KV_TOKENS",
        "OC_ERR_PIN_INVALID",
        "OC_ERR_POOL_BUSY",
        "OC_ERR_POOL_WORKER",
        "OC_ERR_POST_FORM",
        "OC_ERR_POST_POLICY",
        "OC_ERR_POST_TOO_SMALL",
        "OC_ERR_QUOTA_EXCEEDED",
        "OC_ERR_REQUEST_BAD_DIGEST",
        "OC_ERR_REQUEST_CHUNKED_ENCODING",
        "OC_ERR_REQUEST_CHUNK_SIGNATURE",
        "OC_ERR_REQUEST_CONTENT_SHA256",
        "OC_ERR_REQUEST_COPY_TO_ITSELF",
        "OC_ERR_REQUEST_HEADER_TOO_LARGE",
        "OC_ERR_REQUEST_INCOMPLETE_BODY",
        "OC_ERR_REQUEST_INVALID_ARGUMENT",
        "OC_ERR_REQUEST_INVALID_BUCKET_NAME",
        "OC_ERR_REQUEST_INVALID_DIGEST",
        "OC_ERR_REQUEST_INVALID_KEY",
        "OC_ERR_REQUEST_MALFORMED_XML",
        "OC_ERR_REQUEST_METADATA_TOO_LARGE",
        "OC_ERR_REQUEST_METHOD_NOT_ALLOWED",
        "OC_ERR_REQUEST_MISSING_CONTENT_SHA256",
        "OC_ERR_REQUEST_MISSING_LENGTH",
        "OC_ERR_REQUEST_NOT_IMPLEMENTED",
        "OC_ERR_REQUEST_TIMEOUT",
        "OC_ERR_REQUEST_TOO_LARGE",
        "OC_ERR_REQUEST_UNSUPPORTED_CHECKSUM",
        "OC_ERR_SCHEDULER_CLOSED",
        "OC_ERR_STORE_BUCKET_EXISTS",
        "OC_ERR_STORE_BUCKET_NOT_EMPTY",
        "OC_ERR_STORE_ENTITY_TOO_SMALL",
        "OC_ERR_STORE_INVALID_PART",
        "OC_ERR_STORE_INVALID_PART_NUMBER",
        "OC_ERR_STORE_INVALID_PART_ORDER",
        "OC_ERR_STORE_INVALID_RANGE",
        "OC_ERR_STORE_IO",
        "OC_ERR_STORE_NO_SUCH_BUCKET",
        "OC_ERR_STORE_NO_SUCH_BUCKET_POLICY",
        "OC_ERR_STORE_NO_SUCH_CORS",
        "OC_ERR_STORE_NO_SUCH_KEY",
        "OC_ERR_STORE_NO_SUCH_UPLOAD",
        "OC_ERR_STORE_PRECONDITION_FAILED",
    }
)
#: The codes for which sending the same request again may succeed (ErrorSpec.retryable).
RETRYABLE_CODES: Final[FrozenSet[str]] = frozenset(
    {
        "OC_ERR_ADMISSION_LIMIT",
        "OC_ERR_BACKEND_TIMEOUT",
        "OC_ERR_BACKEND_UNAVAILABLE",
        "OC_ERR_CAPACITY_FULL",
        "OC_ERR_CHUNK_CHANGED",
        "OC_ERR_CLIENT_INCOMPLETE",
        "OC_ERR_KEY_CONCURRENCY",
        "OC_ERR_POOL_BUSY",
        "OC_ERR_SCHEDULER_CLOSED",
    }
)
#: The code an answer without ours (the store's own, relayed) stands for, by HTTP status and S3 code, where one does.
CODES_BY_ANSWER: Final[Mapping[Tuple[int, str], str]] = {
    (400, "MalformedPOSTRequest"): "OC_ERR_POST_FORM",
    (400, "EntityTooSmall"): "OC_ERR_STORE_ENTITY_TOO_SMALL",
    (403, "InvalidAccessKeyId"): "OC_ERR_AUTH_UNKNOWN_KEY",
    (403, "RequestTimeTooSkewed"): "OC_ERR_AUTH_CLOCK_SKEW",
    (400, "AuthorizationQueryParametersError"): "OC_ERR_AUTH_EXPIRES_RANGE",
    (404, "NoSuchBucketPolicy"): "OC_ERR_STORE_NO_SUCH_BUCKET_POLICY",
    (404, "NoSuchCORSConfiguration"): "OC_ERR_STORE_NO_SUCH_CORS",
    (403, "QuotaExceeded"): "OC_ERR_QUOTA_EXCEEDED",
    (400, "XAmzContentSHA256Mismatch"): "OC_ERR_REQUEST_CONTENT_SHA256",
    (400, "BadDigest"): "OC_ERR_REQUEST_BAD_DIGEST",
    (400, "InvalidDigest"): "OC_ERR_REQUEST_INVALID_DIGEST",
    (411, "MissingContentLength"): "OC_ERR_REQUEST_MISSING_LENGTH",
    (400, "InvalidBucketName"): "OC_ERR_REQUEST_INVALID_BUCKET_NAME",
    (400, "MalformedXML"): "OC_ERR_REQUEST_MALFORMED_XML",
    (501, "NotImplemented"): "OC_ERR_REQUEST_NOT_IMPLEMENTED",
    (405, "MethodNotAllowed"): "OC_ERR_REQUEST_METHOD_NOT_ALLOWED",
    (400, "RequestHeaderSectionTooLarge"): "OC_ERR_REQUEST_HEADER_TOO_LARGE",
    (400, "RequestTimeout"): "OC_ERR_REQUEST_TIMEOUT",
    (400, "MetadataTooLarge"): "OC_ERR_REQUEST_METADATA_TOO_LARGE",
    (404, "NoSuchBucket"): "OC_ERR_STORE_NO_SUCH_BUCKET",
    (404, "NoSuchKey"): "OC_ERR_STORE_NO_SUCH_KEY",
    (404, "NoSuchUpload"): "OC_ERR_STORE_NO_SUCH_UPLOAD",
    (409, "BucketAlreadyOwnedByYou"): "OC_ERR_STORE_BUCKET_EXISTS",
    (409, "BucketNotEmpty"): "OC_ERR_STORE_BUCKET_NOT_EMPTY",
    (416, "InvalidRange"): "OC_ERR_STORE_INVALID_RANGE",
    (412, "PreconditionFailed"): "OC_ERR_STORE_PRECONDITION_FAILED",
    (400, "InvalidPart"): "OC_ERR_STORE_INVALID_PART",
    (416, "InvalidPartNumber"): "OC_ERR_STORE_INVALID_PART_NUMBER",
    (400, "InvalidPartOrder"): "OC_ERR_STORE_INVALID_PART_ORDER",
    (500, "InternalError"): "OC_ERR_STORE_IO",
    (409, "OperationAborted"): "OC_ERR_CHUNK_CHANGED",
    (406, "InvalidRequest"): "OC_ERR_CODEC_UNACCEPTED",
    (409, "InvalidRequest"): "OC_ERR_CODEC_MIXED",
    (408, "RequestTimeout"): "OC_ERR_CLIENT_STALLED",
    (499, "RequestCancelled"): "OC_ERR_CANCELLED",
}


# --- the retry policy (schemas/retry-policy.ts) ----------------------------------------------------

#: How often a retryable refusal is tried again unless the client is told otherwise.
DEFAULT_RETRIES: Final[int] = 3
#: The wait before the first retry of an answer without Retry-After, in seconds; doubled at each next one.
FIRST_BACKOFF_S: Final[float] = 0.2
#: The longest Retry-After honoured, in seconds (a longer one is waited for this long).
MAX_RETRY_AFTER_S: Final[float] = 30.0
#: A Retry-After the clients honour (re.fullmatch): delay-seconds; anything else is ignored and the backoff applies.
RETRY_AFTER_PATTERN: Final[str] = "^[0-9]{1,9}(\\.[0-9]{1,9})?$"


# --- the response stream (schemas/frames.ts) -------------------------------------------------------

STREAM_MAGIC: Final[bytes] = b"OCKV"
#: Raw slices.
STREAM_VERSION: Final[int] = 1
#: A descriptor naming codecs: a segment table, then the slices as stored.
STREAM_VERSION_SEGMENTED: Final[int] = 2
STREAM_CONTENT_TYPE: Final[str] = "application/vnd.objectcache.stream.v1"
SEGMENTED_STREAM_CONTENT_TYPE: Final[str] = "application/vnd.objectcache.stream.v2"
PREAMBLE_BYTES: Final[int] = 8
#: struct format of the preamble: magic, version, reserved.
PREAMBLE_FORMAT: Final[str] = "<4sHH"
FRAME_HEADER_BYTES: Final[int] = 24
#: The most a reader takes of an ERROR or END frame's JSON.
MAX_JSON_FRAME_BYTES: Final[int] = 1048576
#: struct format of a frame header: type, flags, reserved, index, length, crc32c, reserved.
FRAME_HEADER_FORMAT: Final[str] = "<BBHIQII"
FRAME_LAYER: Final[int] = 1
FRAME_CHUNK: Final[int] = 2
FRAME_ERROR: Final[int] = 3
FRAME_END: Final[int] = 4


# --- encoded chunks (schemas/encoded-chunk.ts) and stored metadata (integrity.ts, chain.ts, kv-tokens.ts) ---

#: The codec of a chunk stored raw.
RAW_CODEC: Final[str] = "none"
#: Codec names, as the gateway and the stored metadata take them.
CODEC_NAME_PATTERN: Final[str] = "^[a-z0-9][a-z0-9._-]{0,31}$"
#: User metadata naming an encoded chunk's codec (x-amz-meta-... on the wire).
CODEC_META: Final[str] = "oc-codec"
#: User metadata with the length of each encoded slice.
SLICE_BYTES_META: Final[str] = "oc-slice-bytes"
#: Most layers of an encoded chunk (its index must fit in S3's 2 KB of user metadata).
MAX_ENCODED_LAYERS: Final[int] = 160
#: An encoded slice is at most FACTOR x layerBytes + EXTRA bytes (maxEncodedSliceBytes).
MAX_ENCODED_SLICE_FACTOR: Final[int] = 2
MAX_ENCODED_SLICE_EXTRA_BYTES: Final[int] = 4096
#: User metadata with the CRC-32C of every layer's slice.
LAYER_CRC_META: Final[str] = "oc-layer-crc32c"
#: Most layers whose CRC-32Cs fit in S3's 2 KB of user metadata.
MAX_CHECKSUMMED_LAYERS: Final[int] = 256
#: User metadata naming the chunk before this one in its prefix.
AFTER_META: Final[str] = "objectcache-after"
#: Longer keys are not recorded: refused as an explicit after (OC_ERR_CLIENT_USAGE), no chain from them in a batch.
MAX_AFTER_KEY: Final[int] = 512
#: What a recorded key may hold (re.fullmatch); others are not recorded, as MAX_AFTER_KEY says.
AFTER_KEY_PATTERN: Final[str] = "^[\\x20-\\x7e]*$"
#: User metadata with the chunk's token ids (unsigned LEB128 varints, base64url), for the KV events.
TOKENS_META: Final[str] = "objectcache-tokens"
#: Longer token lists are not recorded.
MAX_TOKENS_META_CHARS: Final[int] = 1400
#: S3's limit on user metadata, counted with the x-amz-meta- prefix: tokens that would pass it are left out.
MAX_USER_METADATA_BYTES: Final[int] = 2048
#: User metadata naming the chunk's model (a KV events topic's {model}).
MODEL_META: Final[str] = "objectcache-model"
#: What a recorded model name may be (re.fullmatch).
MODEL_NAME_PATTERN: Final[str] = "^[\\x21-\\x3f\\x41-\\x7e]{1,256}$"


# --- the descriptor (schemas/descriptor-schema.ts, descriptor.ts, layouts.ts) ----------------------

#: The request header that carries a descriptor on GET.
DESCRIPTOR_HEADER: Final[str] = "x-objectcache-descriptor"
#: A descriptor whose header would be longer goes as a POST body (transport "auto").
MAX_HEADER_DESCRIPTOR_BYTES: Final[int] = 8192
DESCRIPTOR_VERSION: Final[Literal[1]] = 1
#: How the chunk objects are stored.
Layout = Literal["KV_L2TD", "KV_2LTD", "MLA"]
LAYOUTS: Final[Tuple[Layout, ...]] = ("KV_L2TD", "KV_2LTD", "MLA")
#: Order the client wants bytes in.
Delivery = Literal["layer-major", "chunk-major"]
DELIVERIES: Final[Tuple[Delivery, ...]] = ("layer-major", "chunk-major")
#: Delivery mode; auto applies the size threshold.
Mode = Literal["auto", "layerwise", "chunkwise"]
MODES: Final[Tuple[Mode, ...]] = ("auto", "layerwise", "chunkwise")


class DescriptorTarget(TypedDict):
    """Where the client places the bytes (where an RDMA transport would name the remote buffer)."""

    #: Bytes of the client buffer.
    length: int
    #: Distance between consecutive delivered layers in the buffer.
    layerStride: int


class _DescriptorRequired(TypedDict):
    #: Descriptor format version.
    version: Literal[1]
    #: Object keys of the matched chunks in prefix order (after keyPrefix).
    keys: List[str]
    #: L: layers in every chunk object.
    layers: int
    #: G: tokens per chunk.
    chunkTokens: int
    #: S: bytes of one layer of one chunk.
    layerBytes: int
    #: How the chunk objects are stored.
    layout: Layout
    #: Order the client wants bytes in.
    delivery: Delivery


class Descriptor(_DescriptorRequired, total=False):
    """Names the matched prefix chunks and the model layout of one layerwise GET. Field meanings: schemas/wire-format.md section 2."""

    #: Compact form: prepended to every entry of keys.
    keyPrefix: str
    #: [first, end) of the layers to deliver; all layers when absent.
    layerRange: List[int]
    #: Client compute window per layer, for the scheduler.
    computeMsPerLayer: float
    #: Tenant for bandwidth sharing and metrics.
    tenant: str
    #: Delivery mode; auto applies the size threshold.
    mode: Mode
    #: Encodings the client decodes ("none": raw). Present: the stream is version 2, each slice a segment in its stored encoding; absent: raw bytes only (version 1).
    codecs: List[str]
    #: Who checks each slice against its writer's recorded CRC-32C. client: the reader checks every frame's CRC-32C, so the gateway may send the recorded values as the slices' checksums without a pass over the bytes. gateway: the gateway checksums every slice it reads. Absent: the gateway checks, unless it runs with --slice-checks client; one run with --slice-checks gateway always checks.
    sliceChecks: Literal["gateway", "client"]
    #: Where the client places the bytes (where an RDMA transport would name the remote buffer).
    target: DescriptorTarget
