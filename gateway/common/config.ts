// Over 600 lines: the settings table (one entry per setting, docs/reference.md is generated from it) and its parser.
/**
 * Gateway configuration: one table of settings, read once at the edge (flags, then
 * `OBJECTCACHE_*` environment variables, then defaults), validated at start-up so a bad value
 * fails fast with a message that names the setting. Nothing below the CLI reads process.env.
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { availableParallelism, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { evaluate, iterator, parse as parseJson, type ObjectNode } from '@humanwhocodes/momoa';
import { ObjectCacheError } from '../../schemas/errors.js';
import { AccessPolicy, parseAccessPolicy, PolicyError } from './access-policy.js';
import type { DescriptorLimits } from '../../schemas/descriptor.js';
import { DESCRIPTOR_SCHEMA } from '../../schemas/descriptor-schema.js';
import { parseMargin, parseRate } from './rate.js';
import { assertBucketName } from './bucket-name.js';
import { MIN_STATE_KEY_CHARS } from './state-key.js';

export type SettingKind = 'string' | 'integer' | 'url' | 'path' | 'enum';

export interface SettingSpec {
  readonly flag: string;
  readonly env: string;
  readonly kind: SettingKind;
  /** Default as the user would type it; undefined means "unset". */
  readonly default: string | undefined;
  readonly description: string;
  readonly values?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  /** Secrets are never echoed in errors or logs. */
  readonly secret?: boolean;
  /** Settings only read from the environment (credentials), never from flags. */
  readonly envOnly?: boolean;
  /** The setting's former names, still read for one release (a warning at start-up names the new one). */
  readonly deprecated?: { readonly flag: string; readonly env: string };
}

/** Every `objectcache serve` setting. docs/reference.md's settings table is generated from this list. */
export const SERVE_SETTINGS = {
  host: { flag: 'host', env: 'OBJECTCACHE_HOST', kind: 'string', default: '127.0.0.1', description: 'Address the S3 endpoint listens on.' },
  port: { flag: 'port', env: 'OBJECTCACHE_PORT', kind: 'integer', default: '9080', min: 0, max: 65535, description: 'Port of the S3 endpoint (0 picks a free port).' },
  metricsHost: {
    flag: 'metrics-host',
    env: 'OBJECTCACHE_METRICS_HOST',
    kind: 'string',
    default: '127.0.0.1',
    description:
      "Address of the admin endpoint (/healthz, /readyz, /metrics, /capacity). /capacity lists every tenant's coldest keys: on an address other than loopback it is served only with OBJECTCACHE_ADMIN_TOKEN set.",
  },
  adminToken: {
    flag: 'admin-token',
    env: 'OBJECTCACHE_ADMIN_TOKEN',
    kind: 'string',
    default: undefined,
    envOnly: true,
    secret: true,
    description:
      "Bearer token the admin endpoint's /capacity asks for (Authorization: Bearer <token>; 16 or more characters). Unset: /capacity answers on a loopback admin address only (environment only).",
  },
  metricsPort: {
    flag: 'metrics-port',
    env: 'OBJECTCACHE_METRICS_PORT',
    kind: 'integer',
    default: '9081',
    min: 0,
    max: 65535,
    description: 'Port of the admin endpoint (0 picks a free port).',
  },
  dataDir: {
    flag: 'data-dir',
    env: 'OBJECTCACHE_DATA_DIR',
    kind: 'path',
    default: './data',
    description: 'Directory of the embedded store (used when no --s3-endpoint is given).',
  },
  s3Endpoint: {
    flag: 's3-endpoint',
    env: 'OBJECTCACHE_S3_ENDPOINT',
    kind: 'url',
    default: undefined,
    description: 'Base URL of the S3 backend (MinIO, Ceph RGW, S3). Unset: serve the embedded store.',
  },
  s3Region: { flag: 's3-region', env: 'OBJECTCACHE_S3_REGION', kind: 'string', default: 'us-east-1', description: 'Region the gateway signs backend requests for.' },
  domain: {
    flag: 'domain',
    env: 'OBJECTCACHE_DOMAIN',
    kind: 'string',
    default: undefined,
    description:
      "Domains for virtual-hosted-style requests, comma-separated (as MinIO's MINIO_DOMAIN): a Host of <bucket>.<domain> addresses that bucket. Path-style requests work either way.",
  },
  region: { flag: 'region', env: 'OBJECTCACHE_REGION', kind: 'string', default: 'us-east-1', description: 'Region clients must sign for (the SigV4 credential scope).' },
  sigV2: {
    flag: 'sigv2',
    env: 'OBJECTCACHE_SIGV2',
    kind: 'enum',
    default: 'on',
    values: ['on', 'off'],
    description: 'Accept AWS Signature Version 2 (Authorization: AWS key:signature, and presigned AWSAccessKeyId/Signature/Expires URLs) as MinIO does.',
  },
  credentials: {
    flag: 'credentials',
    env: 'OBJECTCACHE_CREDENTIALS',
    kind: 'path',
    default: undefined,
    description:
      'JSON file of extra client key pairs: [{"accessKeyId","secretAccessKey","tenant"?,"policy"?}]; a key may do only what its access policy allows (docs/access-control.md).',
  },
  accessPolicies: {
    flag: 'access-policies',
    env: 'OBJECTCACHE_ACCESS_POLICIES',
    kind: 'path',
    default: undefined,
    description:
      'JSON file of named access policies and the keys and tenants they are attached to: {"policies":{name:policy},"tenants":{tenant:[names]},"keys":{accessKeyId:[names]}}.',
  },
  insecureTrialCredentials: {
    flag: 'insecure-trial-credentials',
    env: 'OBJECTCACHE_INSECURE_TRIAL_CREDENTIALS',
    kind: 'enum',
    default: 'off',
    values: ['on', 'off'],
    description: 'on: serve with the published trial secret (objectcache-secret) on an address other than loopback. Off, the gateway refuses to start that way.',
  },
  accessKey: { flag: 'access-key', env: 'OBJECTCACHE_ACCESS_KEY', kind: 'string', default: 'objectcache', envOnly: true, description: 'Client access key id (environment only).' },
  secretKey: {
    flag: 'secret-key',
    env: 'OBJECTCACHE_SECRET_KEY',
    kind: 'string',
    default: 'objectcache-secret',
    envOnly: true,
    secret: true,
    description: 'Client secret key (environment only; the default is for local trials).',
  },
  backendAccessKey: {
    flag: 'backend-access-key',
    env: 'OBJECTCACHE_BACKEND_ACCESS_KEY',
    kind: 'string',
    default: undefined,
    envOnly: true,
    description: 'Access key the gateway uses at the S3 backend (environment only; required with --s3-endpoint).',
  },
  backendSecretKey: {
    flag: 'backend-secret-key',
    env: 'OBJECTCACHE_BACKEND_SECRET_KEY',
    kind: 'string',
    default: undefined,
    envOnly: true,
    secret: true,
    description: 'Secret key the gateway uses at the S3 backend (environment only; required with --s3-endpoint).',
  },
  stateKey: {
    flag: 'state-key',
    env: 'OBJECTCACHE_STATE_KEY',
    kind: 'string',
    default: undefined,
    envOnly: true,
    secret: true,
    description:
      "Secret (16 or more characters) the gateways in front of one store sign their own state with (capacity journals, snapshot and lease; packed segments' manifests); state not signed with it is never applied or served. The same on every gateway. Unset: derived from the S3 store's credentials, or kept in <data dir>/.state-key on the embedded store (environment only).",
  },
  backendConnections: {
    flag: 'backend-connections',
    env: 'OBJECTCACHE_BACKEND_CONNECTIONS',
    kind: 'integer',
    default: '64',
    min: 1,
    max: 4096,
    description: 'Keep-alive connections to the S3 backend.',
  },
  backendTimeoutMs: {
    flag: 'backend-timeout-ms',
    env: 'OBJECTCACHE_BACKEND_TIMEOUT_MS',
    kind: 'integer',
    default: '30000',
    min: 100,
    max: 3_600_000,
    description:
      'Time the backend may take to connect, to send headers, and between body bytes; also the longest a request waits for a free connection to it (then 503, OC_ERR_BACKEND_TIMEOUT).',
  },
  maxObjectBytes: {
    flag: 'max-object-bytes',
    env: 'OBJECTCACHE_MAX_OBJECT_BYTES',
    kind: 'integer',
    default: String(5 * 1024 ** 3),
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    description: 'Largest single PUT or part accepted (S3 allows 5 GiB).',
  },
  maxHeaderBytes: {
    flag: 'max-header-bytes',
    env: 'OBJECTCACHE_MAX_HEADER_BYTES',
    kind: 'integer',
    default: String(64 * 1024),
    min: 8 * 1024,
    max: 1024 * 1024,
    description: 'Largest request header section accepted.',
  },
  reservedBuckets: {
    flag: 'reserved-buckets',
    env: 'OBJECTCACHE_RESERVED_BUCKETS',
    kind: 'string',
    default: 'minio,admin,swift,auth',
    description:
      "Path prefixes (first path segment, comma-separated) that are the object store's own APIs, not buckets: refused for every key but the administrator, on every request shape, before the store is asked. minio: MinIO's admin, health, metrics, KMS and peer APIs (/minio/...); admin, swift, auth: Ceph RGW's admin API and Swift entry points. Empty: none.",
  },
  maxConnections: {
    flag: 'max-connections',
    env: 'OBJECTCACHE_MAX_CONNECTIONS',
    kind: 'integer',
    default: '4096',
    min: 1,
    max: 1_000_000,
    description:
      'Client connections held open at once; a connection beyond it is closed at once. Keep it below the open-file limit (ulimit -n), which every connection, backend connection and staged upload counts against.',
  },
  maxRequestsPerConnection: {
    flag: 'max-requests-per-connection',
    env: 'OBJECTCACHE_MAX_REQUESTS_PER_CONNECTION',
    kind: 'integer',
    default: 'auto',
    min: 0,
    max: 1_000_000,
    description:
      'Requests one keep-alive connection may carry; its last answer says Connection: close, and the client reconnects (the kernel and node:cluster spread connections, not requests, so this spreads a client with few connections across the serving processes). 0: no limit. auto: 100 with several --processes, else 0.',
  },
  maxRequestsPerKey: {
    flag: 'max-requests-per-key',
    env: 'OBJECTCACHE_MAX_REQUESTS_PER_KEY',
    kind: 'integer',
    default: '128',
    min: 1,
    max: 1_000_000,
    description:
      'Requests one access key may have in flight at once (from its signature being verified to its response ending); beyond it 503 SlowDown (OC_ERR_KEY_CONCURRENCY), so one key cannot hold every connection, slot or file of the gateway.',
  },
  maxDescriptorGetsPerKey: {
    flag: 'max-descriptor-gets-per-key',
    env: 'OBJECTCACHE_MAX_DESCRIPTOR_GETS_PER_KEY',
    deprecated: { flag: 'max-layerwise-per-key', env: 'OBJECTCACHE_MAX_LAYERWISE_PER_KEY' },
    kind: 'integer',
    default: 'auto',
    min: 1,
    max: 100_000,
    description:
      'Descriptor GETs (layerwise or chunkwise) one access key may have admitted at once (auto: three quarters of --max-descriptor-gets, at least 1); beyond it 503 SlowDown (OC_ERR_KEY_CONCURRENCY), so the rest of the slots stay free for other keys.',
  },
  headerTimeoutMs: {
    flag: 'header-timeout-ms',
    env: 'OBJECTCACHE_HEADER_TIMEOUT_MS',
    kind: 'integer',
    default: '20000',
    min: 100,
    max: 3_600_000,
    description:
      "Time a client has to send a request's headers once it opened the connection or sent its previous request, and a browser-form upload's fields before its file (both are unauthenticated); then 400 RequestTimeout (OC_ERR_REQUEST_TIMEOUT) and the connection is closed; a connection that sent nothing is closed. At most --request-timeout-ms.",
  },
  bodyIdleTimeoutMs: {
    flag: 'body-idle-timeout-ms',
    env: 'OBJECTCACHE_BODY_IDLE_TIMEOUT_MS',
    kind: 'integer',
    default: '20000',
    min: 100,
    max: 3_600_000,
    description:
      'Time a request body may pause between bytes (as S3 does after about 20 s); then 400 RequestTimeout (OC_ERR_REQUEST_TIMEOUT) and the connection is closed. A response the client stops reading is cut after --client-stall-timeout-ms.',
  },
  requestTimeoutMs: {
    flag: 'request-timeout-ms',
    env: 'OBJECTCACHE_REQUEST_TIMEOUT_MS',
    kind: 'integer',
    default: '3600000',
    min: 1000,
    max: 86_400_000,
    description:
      'Time a client has to send a whole request, headers and body (a 5 GiB upload needs at least 1.5 MB/s for the default hour); then 400 RequestTimeout (OC_ERR_REQUEST_TIMEOUT) and the connection is closed.',
  },
  maxFormFieldsBytes: {
    flag: 'max-form-fields-bytes',
    env: 'OBJECTCACHE_MAX_FORM_FIELDS_BYTES',
    kind: 'integer',
    default: String(64 * 1024),
    min: 4096,
    max: 16 * 1024 * 1024,
    description:
      "Bytes of all fields of a browser-form upload together, names and values, before its file: they are read before the form's signature can be checked (S3 allows a 20 KB policy and 2 KB of metadata).",
  },
  sigV2MaxExpiresSeconds: {
    flag: 'sigv2-max-expires-seconds',
    env: 'OBJECTCACHE_SIGV2_MAX_EXPIRES_SECONDS',
    kind: 'integer',
    default: '604800',
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    description:
      'Longest lifetime of a Signature Version 2 presigned URL (its Expires less the time of the request), 7 days as SigV4 allows; 0: no limit (a URL that lives for years cannot be taken back short of rotating the key).',
  },
  budget: {
    flag: 'budget',
    env: 'OBJECTCACHE_BUDGET',
    kind: 'string',
    default: undefined,
    description:
      'Byte budgets of buckets, comma-separated bucket=size (size in bytes or with KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. kvcache=500GiB. A budgeted bucket is trimmed by access-based, prefix-aware eviction once it passes --budget-high-percent, down to --budget-low-percent (docs/capacity.md). Unset: nothing is ever evicted.',
  },
  tenantQuota: {
    flag: 'tenant-quota',
    env: 'OBJECTCACHE_TENANT_QUOTA',
    kind: 'string',
    default: undefined,
    description:
      "Byte quotas of tenants over the budgeted buckets together, comma-separated tenant=size. A write that would take a tenant past its quota first evicts that tenant's own coldest chunks; when nothing of its own can go, it is refused (403 QuotaExceeded, OC_ERR_QUOTA_EXCEEDED). Needs --budget.",
  },
  budgetHighPercent: {
    flag: 'budget-high-percent',
    env: 'OBJECTCACHE_BUDGET_HIGH_PERCENT',
    kind: 'integer',
    default: '99',
    min: 1,
    max: 100,
    description: "Percentage of a bucket's budget at which trimming starts.",
  },
  budgetLowPercent: {
    flag: 'budget-low-percent',
    env: 'OBJECTCACHE_BUDGET_LOW_PERCENT',
    kind: 'integer',
    default: '97',
    min: 0,
    max: 99,
    description: "Percentage of a bucket's budget trimming stops at; below --budget-high-percent.",
  },
  multipartExpiry: {
    flag: 'multipart-expiry',
    env: 'OBJECTCACHE_MULTIPART_EXPIRY',
    kind: 'string',
    default: '24h',
    description:
      "Abort a multipart upload left unfinished this long after it began (e.g. 24h, 30m), and free its parts: the embedded store's own, and in front of a store those of budgeted buckets (by the lease holder; MinIO expires its own after 24 hours by default too). off: never.",
  },
  evictIdle: {
    flag: 'evict-idle',
    env: 'OBJECTCACHE_EVICT_IDLE',
    kind: 'string',
    default: 'off',
    description: 'Evict a chunk of a budgeted bucket not read or written for this long (e.g. 7d, 12h, 30m, 90s), budget or not, tail first; off: only the budget trims.',
  },
  evictRate: {
    flag: 'evict-rate',
    env: 'OBJECTCACHE_EVICT_RATE',
    kind: 'integer',
    default: '100',
    min: 1,
    max: 100_000,
    description:
      'Most chunks eviction deletes per second (one at a time), so trimming never crowds out reads at the store; while writes wait for room in a full bucket, it deletes as fast as the store answers (docs/capacity.md).',
  },
  capacityStateBucket: {
    flag: 'capacity-state-bucket',
    env: 'OBJECTCACHE_CAPACITY_STATE_BUCKET',
    kind: 'string',
    default: 'objectcache-capacity',
    description:
      "Bucket of capacity management's own state (access journals, snapshot, the eviction lease), shared by every gateway in front of the store; created when missing, and reserved like --reserved-buckets.",
  },
  capacitySyncMs: {
    flag: 'capacity-sync-ms',
    env: 'OBJECTCACHE_CAPACITY_SYNC_MS',
    kind: 'integer',
    default: '2000',
    min: 100,
    max: 600_000,
    description: "How often a gateway writes its access journal and reads the other gateways' (what it records in between is lost if it dies).",
  },
  capacityLeaseMs: {
    flag: 'capacity-lease-ms',
    env: 'OBJECTCACHE_CAPACITY_LEASE_MS',
    kind: 'integer',
    default: '15000',
    min: 1000,
    max: 3_600_000,
    description:
      'Lifetime of the eviction lease: one gateway at a time trims; another takes over this long after the holder stops renewing it (at least three --capacity-sync-ms).',
  },
  processes: {
    flag: 'processes',
    env: 'OBJECTCACHE_PROCESSES',
    kind: 'integer',
    default: 'auto',
    min: 1,
    max: 256,
    description:
      'Serving processes on the one S3 port (auto: one per three cores this process may use, at least one: each keeps its main thread and two read workers busy). They share one view of the admission slots, per-key limits, buffered-byte budget and bandwidth scheduler, held by the primary process; a process that dies is replaced (docs/architecture.md, section 1).',
  },
  workers: {
    flag: 'workers',
    env: 'OBJECTCACHE_WORKERS',
    kind: 'integer',
    default: 'auto',
    min: 1,
    max: 64,
    description: 'Read worker threads of each serving process (auto: its share of the cores less one for its main thread, 1 to 4).',
  },
  workerQueue: {
    flag: 'worker-queue',
    env: 'OBJECTCACHE_WORKER_QUEUE',
    kind: 'integer',
    default: '256',
    min: 1,
    max: 100_000,
    description: 'Read tasks that may wait for a worker; beyond it layerwise GETs get 503 SlowDown.',
  },
  readConcurrency: {
    flag: 'read-concurrency',
    env: 'OBJECTCACHE_READ_CONCURRENCY',
    kind: 'integer',
    default: '16',
    min: 1,
    max: 1024,
    description: 'Range reads one read task keeps in flight.',
  },
  readBytes: {
    flag: 'read-bytes',
    env: 'OBJECTCACHE_READ_BYTES',
    kind: 'integer',
    default: String(4 * 1024 * 1024),
    min: 4096,
    max: 1024 ** 3,
    description:
      'Target size of one range read: later layer groups grow until a read reaches it (the object store pays per request: 4 MiB reads cost MinIO half the CPU per GiB of 1 MiB reads).',
  },
  taskBytes: {
    flag: 'task-bytes',
    env: 'OBJECTCACHE_TASK_BYTES',
    kind: 'integer',
    default: String(8 * 1024 * 1024),
    min: 4096,
    max: 1024 ** 3,
    description: 'Target bytes of one worker task (a layer group of a run of chunks).',
  },
  readAheadBytes: {
    flag: 'read-ahead-bytes',
    env: 'OBJECTCACHE_READ_AHEAD_BYTES',
    kind: 'integer',
    default: String(512 * 1024 * 1024),
    min: 4096,
    max: Number.MAX_SAFE_INTEGER,
    description:
      'Bytes one layerwise GET may have read but not yet sent (a layer group is at most this, but at least one layer; the next group is read while the current one is sent, as far as this allows).',
  },
  maxBufferedBytes: {
    flag: 'max-buffered-bytes',
    env: 'OBJECTCACHE_MAX_BUFFERED_BYTES',
    kind: 'integer',
    default: 'auto',
    min: 4096,
    max: Number.MAX_SAFE_INTEGER,
    description:
      'Bytes all layerwise GETs together may have read but not yet sent, across every serving process (also the shared memory each process reserves for task buffers, used as needed). auto: 1 GiB per serving process, at most a quarter of the memory this process may use, at least 1 GiB.',
  },
  kvEvents: {
    flag: 'kv-events',
    env: 'OBJECTCACHE_KV_EVENTS',
    kind: 'string',
    default: 'off',
    description:
      "ZeroMQ endpoint the KV events of the budgeted buckets are published on (docs/kv-events.md), bound: e.g. tcp://127.0.0.1:5557, tcp://*:5557 (every interface), ipc:///run/oc-events; with connect: before it (connect:tcp://router:5557), connected to instead. A BlockStored for every chunk that comes, a BlockRemoved for every one that goes, in vLLM's KVEventBatch format, for KV-aware routers (llm-d, Dynamo). Needs --budget. off: none.",
  },
  kvEventsReplay: {
    flag: 'kv-events-replay',
    env: 'OBJECTCACHE_KV_EVENTS_REPLAY',
    kind: 'string',
    default: 'off',
    description: 'ZeroMQ ROUTER endpoint that replays held batches from a sequence number (vLLM\u2019s replay protocol), e.g. tcp://*:5558. off: no replay.',
  },
  kvEventsHistory: {
    flag: 'kv-events-history',
    env: 'OBJECTCACHE_KV_EVENTS_HISTORY',
    kind: 'integer',
    default: '10000',
    min: 1,
    max: 1_000_000,
    description: 'Batches held for replay (at most 64 MiB of them whatever this says).',
  },
  kvEventsTopic: {
    flag: 'kv-events-topic',
    env: 'OBJECTCACHE_KV_EVENTS_TOPIC',
    kind: 'string',
    default: '',
    description:
      "Topic of each batch, with {model} (the writer's x-amz-meta-objectcache-model), {tenant} and {bucket} replaced: vLLM's subscribers take the empty topic, Dynamo's docs use kv-events, llm-d subscribes to kv@ and the pool form kv@pool:<name>@{model}, which the preset llm-d names (kv@pool:objectcache@{model}). Empty by default.",
  },
  kvEventsEncoding: {
    flag: 'kv-events-encoding',
    env: 'OBJECTCACHE_KV_EVENTS_ENCODING',
    kind: 'enum',
    default: 'tagged',
    values: ['tagged', 'array'],
    description:
      'Event encoding. tagged: maps with a type field, vLLM 0.24 and later. array: positional arrays, tag first, what vLLM wrote before and consumers built for it read.',
  },
  kvEventsMedium: {
    flag: 'kv-events-medium',
    env: 'OBJECTCACHE_KV_EVENTS_MEDIUM',
    kind: 'string',
    default: 'SHARED',
    description: 'The medium every event names: SHARED is what Dynamo maps to its external tier; llm-d scores a medium it does not weigh as 1.0.',
  },
  kvEventsLocality: {
    flag: 'kv-events-locality',
    env: 'OBJECTCACHE_KV_EVENTS_LOCALITY',
    kind: 'string',
    default: 'REMOTE',
    description: 'The locality every tagged event names (LOCAL or REMOTE, relative to the engines); off: the field is left out.',
  },
  kvEventsSalt: {
    flag: 'kv-events-salt',
    env: 'OBJECTCACHE_KV_EVENTS_SALT',
    kind: 'enum',
    default: 'none',
    values: ['none', 'tenant'],
    description:
      "tenant: each stored block carries its tenant as its cache salt (vLLM's extra_keys), so a router that keys blocks by tokens and salt keeps tenants apart, and matches engines that send the tenant as vLLM's cache_salt. none: no salt.",
  },
  kvEventsTenants: {
    flag: 'kv-events-tenants',
    env: 'OBJECTCACHE_KV_EVENTS_TENANTS',
    kind: 'string',
    default: 'all',
    description: "Tenants whose chunks' events are published, comma-separated (token ids are prompt content: publish only what the subscribers may see). all: every tenant's.",
  },
  segments: {
    flag: 'segments',
    env: 'OBJECTCACHE_SEGMENTS',
    kind: 'enum',
    default: 'auto',
    values: ['auto', 'on', 'off'],
    description:
      'Packed segments (docs/segments.md). on: a prefix read --segment-after-reads times is kept as one object in layer-major order, written from the frames of a read of it (what the store cannot take as fast as the read goes is read again from the chunks after it, in the background), and later reads of it are a few large sequential reads of that object. auto: on for the budgeted buckets (--budget), whose budgets the segments count against, evicted in the same least-recently-used order as the chunks (docs/capacity.md); off where no bucket is budgeted. off: every read is served from the chunks.',
  },
  segmentBucket: {
    flag: 'segment-bucket',
    env: 'OBJECTCACHE_SEGMENT_BUCKET',
    kind: 'string',
    default: 'objectcache-segments',
    description: 'Bucket the packed segments and their manifests are kept in (created when missing, and reserved like --reserved-buckets: clients never read or write it).',
  },
  segmentAfterReads: {
    flag: 'segment-after-reads',
    env: 'OBJECTCACHE_SEGMENT_AFTER_READS',
    kind: 'integer',
    default: '2',
    min: 1,
    max: 1_000_000,
    description: 'Layerwise GETs of the same prefix (same chunks, layout and layers) at this gateway, counting the one that packs it, before it is packed.',
  },
  segmentMinBytes: {
    flag: 'segment-min-bytes',
    env: 'OBJECTCACHE_SEGMENT_MIN_BYTES',
    kind: 'integer',
    default: String(16 * 1024 * 1024),
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    description:
      'Smallest prefix packed, in payload bytes (chunks x layers x layer bytes): below it the store\u2019s per-request cost is small next to the transfer. At most 5 GiB (one PutObject) is packed.',
  },
  maxSegmentBytes: {
    flag: 'max-segment-bytes',
    env: 'OBJECTCACHE_MAX_SEGMENT_BYTES',
    kind: 'integer',
    default: String(64 * 1024 ** 3),
    min: 1,
    max: Number.MAX_SAFE_INTEGER,
    description:
      'Bytes of all the packed segments in the segment bucket, whatever the budgets: past it, the least recently used segments this gateway knows are deleted at once, and the hourly sweep deletes the oldest of those it does not know (packed by another gateway or before a restart; docs/segments.md, Within the budget). The memory of the index of segments is bounded apart (at most 16 Mi slices together, about 64 MiB with their keys).',
  },
  maxSegmentPacks: {
    flag: 'max-segment-packs',
    env: 'OBJECTCACHE_MAX_SEGMENT_PACKS',
    kind: 'integer',
    default: '2',
    min: 1,
    max: 1_000,
    description: 'Segments written at once; a prefix that would be packed while this many are being written is packed at a later read.',
  },
  segmentReadAheadBytes: {
    flag: 'segment-read-ahead-bytes',
    env: 'OBJECTCACHE_SEGMENT_READ_AHEAD_BYTES',
    kind: 'integer',
    default: String(128 * 1024 * 1024),
    min: 4096,
    max: Number.MAX_SAFE_INTEGER,
    description:
      'Bytes one layerwise GET served from a segment may have read but not yet sent (at most --read-ahead-bytes, at least one layer): its reads are few, large and sequential, so a window of two layers or so keeps the stream going with a fraction of the memory a read from the chunks needs.',
  },
  segmentPackQueueBytes: {
    flag: 'segment-pack-queue-bytes',
    env: 'OBJECTCACHE_SEGMENT_PACK_QUEUE_BYTES',
    kind: 'integer',
    default: String(64 * 1024 * 1024),
    min: 4096,
    max: Number.MAX_SAFE_INTEGER,
    description:
      'Bytes a pack may have copied from its read\u2019s frames that the store has not taken yet (at least one layer frame): past it the pack stops copying, and the layers it missed are read again from the chunks after the read, at the store\u2019s pace. The read that packs never waits for the store.',
  },
  segmentPackFrom: {
    flag: 'segment-pack-from',
    env: 'OBJECTCACHE_SEGMENT_PACK_FROM',
    kind: 'enum',
    default: 'auto',
    values: ['auto', 'frames', 'chunks'],
    description:
      'Where a pack takes its bytes. auto: chunks on the embedded store (it shares the gateway\u2019s cores), frames in front of MinIO or S3. frames: from the frames of the read that packs, as they go out (no extra read while the store keeps up; the rest is read from the chunks after the read, --segment-pack-queue-bytes). chunks: the read that packs copies nothing and the store writes nothing during it; after it, the pack reads the whole run from the chunks at the store\u2019s pace, one more read of the prefix in the background. Choose chunks where the store shares the gateway\u2019s cores, so the read that packs is not slowed (docs/segments.md, Measured).',
  },
  segmentCheck: {
    flag: 'segment-check',
    env: 'OBJECTCACHE_SEGMENT_CHECK',
    kind: 'enum',
    default: 'heads',
    values: ['heads', 'writes'],
    description:
      'How a read from a segment knows its chunks are unchanged. heads: a HEAD of each covered chunk, sent while the first layer is read, must find the version the segment was packed from. writes: only writes and deletes through this gateway make a segment stale (only when no other gateway or client writes to the store).',
  },
  chunkReads: {
    flag: 'chunk-reads',
    env: 'OBJECTCACHE_CHUNK_READS',
    kind: 'enum',
    default: 'grouped',
    values: ['grouped', 'auto'],
    description:
      'grouped: range reads of layer groups. auto: a layerwise GET from an S3 backend reads each chunk as a stream (a range GET for its first layer, then one for the rest, consumed layer by layer) when its chunk streams are free within --max-chunk-streams, grouped otherwise (docs/layerwise-get.md, Streamed reads: fewer store requests and less memory for one GET at a time, slower first layers for GETs that share the gateway with a streamed one).',
  },
  sliceChecks: {
    flag: 'slice-checks',
    env: 'OBJECTCACHE_SLICE_CHECKS',
    kind: 'enum',
    default: 'auto',
    values: ['auto', 'gateway', 'client'],
    description:
      'Who checks a slice of a chunk whose writer recorded per-layer CRC32Cs (x-amz-meta-oc-layer-crc32c) against them: the gateway (its read workers checksum every slice they read; a mismatch is OC_ERR_CHUNK_CORRUPT, naming chunk and layer) or the client (the workers take the recorded CRC32Cs as the slices\u2019 without a pass over the bytes, so every frame carries its writer\u2019s checksums and the client\u2019s frame check is the writer check; a mismatch is the client\u2019s OC_ERR_CLIENT_CRC, naming the layer only). auto: the client when its descriptor asks (sliceChecks: client, as the ObjectCache clients do, since they check every frame), else the gateway. gateway: always the gateway. client: the client unless its descriptor asks for the gateway (docs/layerwise-get.md, Integrity). Slices without recorded CRC32Cs, packed segments and the reads of a pack (which then reads its run from the chunks, never copying frames) are checksummed either way.',
  },
  streamWindowBytes: {
    flag: 'stream-window-bytes',
    env: 'OBJECTCACHE_STREAM_WINDOW_BYTES',
    kind: 'integer',
    default: String(128 * 1024 * 1024),
    min: 4096,
    max: Number.MAX_SAFE_INTEGER,
    description: 'Layer buffers of one streamed layerwise GET (whole layers, at least two: one being sent, one being read); it is what such a request holds in memory.',
  },
  maxChunkStreams: {
    flag: 'max-chunk-streams',
    env: 'OBJECTCACHE_MAX_CHUNK_STREAMS',
    kind: 'integer',
    default: '256',
    min: 1,
    max: 65_536,
    description:
      "Backend chunk streams (one connection each) all streamed layerwise GETs together hold open; a request whose streams are not free at once is served with grouped range reads. Each open stream may hold the store's send buffer (MinIO: 4 MiB) in flight.",
  },
  streamReceiveBufferBytes: {
    flag: 'stream-receive-buffer-bytes',
    env: 'OBJECTCACHE_STREAM_RECEIVE_BUFFER_BYTES',
    kind: 'integer',
    default: String(256 * 1024),
    min: 64 * 1024,
    max: 16 * 1024 * 1024,
    description: 'Kernel receive buffer (SO_RCVBUF; Linux doubles it) of each chunk stream connection: what a paused stream may hold in the kernel.',
  },
  threshold: {
    flag: 'threshold',
    env: 'OBJECTCACHE_THRESHOLD',
    kind: 'integer',
    default: String(32 * 1024 * 1024),
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    description: 'Mode threshold: requests of fewer bytes (N x layers x S) are served chunkwise, others layerwise.',
  },
  maxDescriptorKeys: {
    flag: 'max-descriptor-keys',
    env: 'OBJECTCACHE_MAX_DESCRIPTOR_KEYS',
    kind: 'integer',
    default: '8192',
    min: 1,
    max: 1_000_000,
    description: 'Most chunk keys one descriptor may name.',
  },
  maxLayers: { flag: 'max-layers', env: 'OBJECTCACHE_MAX_LAYERS', kind: 'integer', default: '512', min: 1, max: 65_535, description: 'Most layers a descriptor may declare.' },
  maxLayerBytes: {
    flag: 'max-layer-bytes',
    env: 'OBJECTCACHE_MAX_LAYER_BYTES',
    kind: 'integer',
    default: String(64 * 1024 * 1024),
    min: 1,
    max: 1024 ** 3,
    description: 'Largest per-layer slice S a descriptor may declare.',
  },
  maxRequestBytes: {
    flag: 'max-request-bytes',
    env: 'OBJECTCACHE_MAX_REQUEST_BYTES',
    kind: 'integer',
    default: String(64 * 1024 ** 3),
    min: 1,
    max: Number.MAX_SAFE_INTEGER,
    description: 'Largest total payload (N x layers x S) of one layerwise GET.',
  },
  maxDescriptorBytes: {
    flag: 'max-descriptor-bytes',
    env: 'OBJECTCACHE_MAX_DESCRIPTOR_BYTES',
    kind: 'integer',
    default: String(4 * 1024 * 1024),
    min: 1024,
    max: 256 * 1024 * 1024,
    description: 'Largest descriptor body of POST /{bucket}?objectcache.',
  },
  clientStallTimeoutMs: {
    flag: 'client-stall-timeout-ms',
    env: 'OBJECTCACHE_CLIENT_STALL_TIMEOUT_MS',
    kind: 'integer',
    default: '30000',
    min: 100,
    max: 3_600_000,
    description:
      'A response whose client takes no data for this long is ended and its buffers released (a layerwise GET with an ERROR frame where it can, any other by closing the connection).',
  },
  maxDescriptorGets: {
    flag: 'max-descriptor-gets',
    env: 'OBJECTCACHE_MAX_DESCRIPTOR_GETS',
    deprecated: { flag: 'max-layerwise-requests', env: 'OBJECTCACHE_MAX_LAYERWISE_REQUESTS' },
    kind: 'integer',
    default: '64',
    min: 1,
    max: 100_000,
    description: 'Descriptor GETs (layerwise or chunkwise) served at once; beyond it (or with all of --max-buffered-bytes held) new ones get 503 SlowDown.',
  },
  cap: {
    flag: 'cap',
    env: 'OBJECTCACHE_CAP',
    kind: 'string',
    default: 'unlimited',
    description: 'Egress shared by layerwise GETs, e.g. 10Gbps, 800MB/s, 1GiB/s; unlimited: no scheduling or pacing.',
  },
  policy: {
    flag: 'policy',
    env: 'OBJECTCACHE_POLICY',
    kind: 'enum',
    default: 'cal-stall-opt',
    values: ['equal', 'kv-prop', 'bw-prop', 'stall-opt', 'cal-stall-opt'],
    description: 'Bandwidth allocation policy among concurrent layerwise GETs.',
  },
  margin: {
    flag: 'margin',
    env: 'OBJECTCACHE_MARGIN',
    kind: 'string',
    default: '5%',
    description: 'Calibrated Stall-opt margin delta added to each zero-stall rate: a rate, or a percentage of --cap.',
  },
  epochMs: {
    flag: 'epoch-ms',
    env: 'OBJECTCACHE_EPOCH_MS',
    kind: 'integer',
    default: '50',
    min: 1,
    max: 60_000,
    description: 'Scheduling epoch: pending layerwise GETs are admitted in batches at epoch boundaries.',
  },
  logLevel: {
    flag: 'log-level',
    env: 'OBJECTCACHE_LOG_LEVEL',
    kind: 'enum',
    default: 'info',
    values: ['debug', 'info', 'warn', 'error', 'silent'],
    description: 'Least severe log level written (one JSON line per request at info).',
  },
} as const satisfies Record<string, SettingSpec>;

export type SettingName = keyof typeof SERVE_SETTINGS;

export interface ClientCredential {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** Tenant for scheduling and metrics; defaults to the access key id. */
  readonly tenant: string;
  /** What the key may do: unrestricted for the administrator key (OBJECTCACHE_ACCESS_KEY). */
  readonly access: AccessPolicy;
}

/** The published trial secret (README.md): accepted on loopback addresses only, unless opted out. */
export const TRIAL_SECRET: string = SERVE_SETTINGS.secretKey.default;

/** Who checks a request's slices against their writer's CRC32Cs (sliceChecksFor). */
export type SliceChecks = 'gateway' | 'client';

/**
 * Who checks a request's slices (--slice-checks): the gateway unless the reader checks them. auto
 * follows the descriptor (the gateway when it says nothing); gateway always checks; client leaves
 * the checks to the reader unless its descriptor asks the gateway for them.
 */
export function sliceChecksFor(setting: SliceChecksSetting, asked: SliceChecks | undefined): SliceChecks {
  if (setting === 'gateway') return 'gateway';
  if (setting === 'client') return asked ?? 'client';
  return asked ?? 'gateway';
}

/** --slice-checks. */
export type SliceChecksSetting = 'auto' | SliceChecks;

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

/** Settings of the layerwise GET: workers, read plan, read-ahead, mode threshold, descriptor limits. */
export interface DescriptorGetConfig {
  readonly workers: number;
  readonly workerQueue: number;
  readonly readConcurrency: number;
  readonly readBytes: number;
  readonly taskBytes: number;
  readonly readAheadBytes: number;
  readonly maxBufferedBytes: number;
  readonly chunkReads: 'auto' | 'grouped';
  readonly sliceChecks: SliceChecksSetting;
  readonly streamWindowBytes: number;
  readonly maxChunkStreams: number;
  readonly streamReceiveBufferBytes: number;
  readonly threshold: number;
  readonly maxDescriptorBytes: number;
  readonly maxDescriptorGets: number;
  readonly clientStallTimeoutMs: number;
  readonly limits: DescriptorLimits;
}

/** The scheduling policies (gateway/descriptor-get/scheduler/allocate.ts; --scheduling-policy). */
export const POLICIES = ['equal', 'kv-prop', 'bw-prop', 'stall-opt', 'cal-stall-opt'] as const;
export type Policy = (typeof POLICIES)[number];

/** The policy named `text`, or what is wrong with it. */
export function parseSchedulingPolicy(text: string): { readonly policy: Policy } | { readonly problem: string } {
  return (POLICIES as readonly string[]).includes(text) ? { policy: text as Policy } : { problem: `must be one of ${POLICIES.join(', ')}, got ${text}` };
}

/** How the gateway reaches an S3 store (gateway/stores/s3-backend.ts). */
export interface S3BackendOptions {
  readonly endpoint: URL;
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly connections: number;
  readonly timeoutMs: number;
}

/**
 * Serving processes by default: one per three cores the process may use, at least one. A serving
 * process's read workers spend about twice what its main thread does per GiB, so one main thread
 * and two read workers keep three cores busy; more processes than that only compete for the
 * cores: on 2 cores, two processes delivered 12% less than one, at 24% more CPU per GiB
 * (docs/benchmarks.md, Serving processes).
 */
export function defaultProcessCount(): number {
  return Math.max(1, Math.round(availableParallelism() / 3));
}

const GIB = 1024 ** 3;

/**
 * Buffered bytes by default: 1 GiB per serving process (at most a quarter of the memory the
 * process may use, at least 1 GiB). The budget is one for the host, and what it allows in flight
 * bounds the throughput (bytes buffered over the time a byte waits to be sent): on 16 cores in
 * front of MinIO, 4 processes delivered 2.32 GB/s with 1 GiB and 4.07 GB/s with 8 GiB
 * (docs/benchmarks.md, Serving processes).
 */
export function defaultBufferedBytes(processes = 1, memory = usableMemory()): number {
  return Math.max(GIB, Math.min(processes * GIB, Math.floor(memory / 4)));
}

/** The memory this process may use: the host's, or less where a cgroup limits it. */
function usableMemory(): number {
  const constrained = process.constrainedMemory();
  return Math.min(totalmem(), constrained > 0 ? constrained : Infinity);
}

/** The cores per serving process, less one for its main thread (socket writes): 1 to 4 read workers each. */
export function defaultWorkerCount(processes = 1): number {
  return Math.max(1, Math.min(4, Math.round(availableParallelism() / processes) - 1));
}

/** Packed segments (gateway/segments/; docs/segments.md). */
export interface SegmentConfig {
  /** Where segments are kept: a bucket of the store only the gateway uses (--segment-bucket). */
  readonly bucket: string;
  /** Reads of a run, counting the one that packs, before it is packed (--segment-after-reads). */
  readonly afterReads: number;
  /** Smallest run packed, in payload bytes (--segment-min-bytes). */
  readonly minBytes: number;
  /** Packs written at once (--max-segment-packs). */
  readonly maxPacks: number;
  /** Bytes of all the segments this gateway keeps (--max-segment-bytes); past it the least recently used go. */
  readonly maxBytes: number;
  /** How a read checks that the covered chunks are unchanged (--segment-check). */
  readonly check: 'heads' | 'writes';
  /** Bytes a GET served from a segment may have read but not sent (--segment-read-ahead-bytes). */
  readonly readAheadBytes: number;
  /** Bytes a pack may have copied and the store not yet taken (--segment-pack-queue-bytes). */
  readonly packQueueBytes: number;
  /** Where a pack takes its bytes: its read's frames, or the chunks after its read (--segment-pack-from). */
  readonly packFrom: 'frames' | 'chunks';
  /** The buckets whose prefixes are packed (--segments auto: the budgeted ones); undefined: every bucket. */
  readonly buckets?: ReadonlySet<string>;
}

export interface GatewayConfig {
  readonly host: string;
  readonly port: number;
  readonly metricsHost: string;
  readonly metricsPort: number;
  readonly region: string;
  /** Domains whose subdomains name buckets (virtual-hosted-style requests); lower case. */
  readonly domains: readonly string[];
  /** Accept Signature Version 2 requests. */
  readonly sigV2: boolean;
  readonly clientCredentials: readonly ClientCredential[];
  readonly backend: BackendConfig;
  readonly maxObjectBytes: number;
  readonly maxHeaderBytes: number;
  /** Bounds on what a client, above all an unauthenticated one, may make the gateway hold. */
  readonly limits: ConnectionLimits;
  /** First path segments that are the store's own APIs (--reserved-buckets). */
  readonly reservedBuckets: ReadonlySet<string>;
  /** Former setting names this configuration used (each a warning at start-up). */
  readonly deprecatedSettings: readonly string[];
  /** Longest SigV2 presigned URL lifetime in seconds; 0: no limit. */
  readonly sigV2MaxExpiresSeconds: number;
  readonly logLevel: LogLevel;
  /** --processes: serving processes on the S3 port (gateway/cluster/). */
  readonly processes: number;
  readonly descriptorGet: DescriptorGetConfig;
  /** Undefined when --cap is unlimited. */
  readonly scheduler: SchedulerConfig | undefined;
  /** Undefined when no bucket has a --budget. */
  readonly capacity: CapacityConfig | undefined;
  /** Packed segments (gateway/segments/segments.ts); undefined when --segments is off. */
  readonly segments: SegmentConfig | undefined;
  /** --kv-events; undefined when off. */
  readonly kvEvents: KvEventsConfig | undefined;
  /** OBJECTCACHE_STATE_KEY (gateway/common/state-key.ts); undefined: derived from the store's credentials or kept in the data directory. */
  readonly stateKey: string | undefined;
  /** --multipart-expiry: unfinished uploads older than this are aborted (the embedded store's; budgeted buckets' at the lease holder); undefined: never. */
  readonly multipartExpiryMs: number | undefined;
  /** OBJECTCACHE_ADMIN_TOKEN: what /capacity asks for; undefined: /capacity on a loopback admin address only. */
  readonly adminToken: string | undefined;
}

/** Budgets, quotas and eviction (gateway/capacity/). */
export interface CapacityConfig {
  /** Bytes per budgeted bucket. */
  readonly budgets: ReadonlyMap<string, number>;
  /** Bytes per tenant over the budgeted buckets. */
  readonly quotas: ReadonlyMap<string, number>;
  readonly highFraction: number;
  readonly lowFraction: number;
  /** Evict what was not accessed for this long; undefined: off. */
  readonly idleMs: number | undefined;
  readonly evictPerSecond: number;
  readonly stateBucket: string;
  readonly syncMs: number;
  readonly leaseMs: number;
  /** Unfinished multipart uploads of budgeted buckets older than this are aborted by the lease holder (--multipart-expiry); undefined: never. */
  readonly multipartExpiryMs: number | undefined;
}

/** What one connection, one request and one key may hold (gateway/pipeline/server.ts enforces them). */
export interface ConnectionLimits {
  readonly maxConnections: number;
  /** --max-requests-per-connection: 0 for no limit. */
  readonly maxRequestsPerConnection: number;
  readonly maxRequestsPerKey: number;
  readonly maxDescriptorGetsPerKey: number;
  readonly headerTimeoutMs: number;
  readonly bodyIdleTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly clientStallTimeoutMs: number;
  readonly maxFormFieldsBytes: number;
}

export interface SchedulerConfig {
  readonly capBytesPerSec: number;
  readonly policy: Policy;
  readonly marginBytesPerSec: number;
  readonly epochMs: number;
}

export type BackendConfig = { readonly kind: 'local'; readonly dataDir: string } | ({ readonly kind: 's3' } & S3BackendOptions);

/**
 * A configuration error names the setting (flag and environment variable) that is wrong. It is an
 * ObjectCacheError with a stable code like every other failure (`objectcache serve` exits 2 on it).
 */
export class ConfigError extends ObjectCacheError {
  readonly setting: string;
  constructor(setting: string, message: string) {
    super('OC_ERR_CONFIG_INVALID', message, { details: { Setting: setting } });
    this.setting = setting;
  }
}

function label(spec: SettingSpec): string {
  return spec.envOnly ? spec.env : `--${spec.flag} / ${spec.env}`;
}

type RawSettings = Partial<Record<SettingName, string>>;

function readRaw(argv: readonly string[], env: NodeJS.ProcessEnv): { raw: RawSettings; deprecated: string[] } {
  const options: Record<string, { type: 'string' }> = {};
  for (const spec of Object.values(SERVE_SETTINGS) as SettingSpec[]) {
    if (!spec.envOnly) options[spec.flag] = { type: 'string' };
    if (spec.deprecated) options[spec.deprecated.flag] = { type: 'string' };
  }
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new ConfigError('argv', (error as Error).message);
  }
  const raw: RawSettings = {};
  const deprecated: string[] = [];
  const given = (text: unknown): text is string => typeof text === 'string' && text !== '';
  for (const [name, spec] of Object.entries(SERVE_SETTINGS) as [SettingName, SettingSpec][]) {
    const old = spec.deprecated;
    let fromFlag = spec.envOnly ? undefined : values[spec.flag];
    let fromEnv = env[spec.env];
    // A former name is read when the new one is not given, and named in a start-up warning.
    if (old && !given(fromFlag) && given(values[old.flag])) {
      fromFlag = values[old.flag];
      deprecated.push(`--${old.flag} is deprecated: use --${spec.flag}`);
    }
    if (old && !given(fromEnv) && given(env[old.env])) {
      fromEnv = env[old.env];
      deprecated.push(`${old.env} is deprecated: use ${spec.env}`);
    }
    const value = typeof fromFlag === 'string' ? fromFlag : fromEnv !== undefined && fromEnv !== '' ? fromEnv : spec.default;
    if (value !== undefined) raw[name] = value;
  }
  return { raw, deprecated };
}

function integer(name: SettingName, raw: RawSettings): number {
  const spec: SettingSpec = SERVE_SETTINGS[name];
  const text = raw[name];
  if (text === undefined) throw new ConfigError(spec.flag, `${label(spec)} is required`);
  if (!/^\d+$/.test(text.trim())) throw new ConfigError(spec.flag, `${label(spec)} must be a whole number, got ${JSON.stringify(text)}`);
  const value = Number(text.trim());
  if (!Number.isSafeInteger(value) || (spec.min !== undefined && value < spec.min) || (spec.max !== undefined && value > spec.max)) {
    throw new ConfigError(spec.flag, `${label(spec)} must be between ${spec.min} and ${spec.max}, got ${text}`);
  }
  return value;
}

/** An `enum` setting's value, one of its spec's values. */
function oneOf(name: SettingName, raw: RawSettings): string {
  const spec: SettingSpec = SERVE_SETTINGS[name];
  const value = nonEmpty(name, raw);
  const values = spec.values ?? [];
  if (!values.includes(value)) {
    throw new ConfigError(spec.flag, `${label(spec)} must be ${values.length === 2 ? `${values[0]} or ${values[1]}` : `one of ${values.join(', ')}`}, got ${value}`);
  }
  return value;
}

function nonEmpty(name: SettingName, raw: RawSettings): string {
  const spec: SettingSpec = SERVE_SETTINGS[name];
  const value = raw[name];
  if (value === undefined || value.trim() === '') throw new ConfigError(spec.flag, `${label(spec)} is required`);
  return value;
}

/**
 * Reads a JSON settings file. Duplicate names in an object are an error (JSON.parse would keep
 * the last silently, and a policy file that says two things must not mean one of them).
 */
function readJsonFile(path: string, setting: SettingName): unknown {
  const spec: SettingSpec = SERVE_SETTINGS[setting];
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(spec.flag, `--${spec.flag} ${path}: ${(error as Error).message}`);
  }
  let document: ReturnType<typeof parseJson>;
  try {
    document = parseJson(text);
  } catch (error) {
    throw new ConfigError(spec.flag, `--${spec.flag} ${path}: not valid JSON: ${(error as Error).message}`);
  }
  for (const { node, phase } of iterator(document)) {
    if (phase !== 'enter' || node.type !== 'Object') continue;
    const seen = new Set<string>();
    for (const member of (node as ObjectNode).members) {
      const name = member.name.type === 'String' ? member.name.value : member.name.name;
      if (seen.has(name)) {
        const at = member.name.loc.start;
        throw new ConfigError(spec.flag, `--${spec.flag} ${path}:${at.line}:${at.column}: ${JSON.stringify(name)} appears twice in the same object`);
      }
      seen.add(name);
    }
  }
  return evaluate(document);
}

const POLICY_NAME = /^[A-Za-z0-9._-]{1,128}$/;
/** A tenant a key belongs to is one a descriptor may name (schemas/descriptor-schema.ts). */
const TENANT_NAME = new RegExp(DESCRIPTOR_SCHEMA.properties.tenant.pattern);

/** A `policy` value: a policy name, a list of names, or a policy document written in place. */
type PolicyRef = { readonly names: readonly string[] } | { readonly inline: AccessPolicy };

function policyRef(value: unknown, where: string): PolicyRef {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) return { inline: parseAccessPolicy(value, where) };
  const names = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(names) || names.length === 0 || names.some((n) => typeof n !== 'string' || !POLICY_NAME.test(n))) {
    throw new PolicyError(where, 'must be a policy document, a policy name, or a non-empty array of policy names (letters, digits, . _ -)');
  }
  return { names: names as string[] };
}

interface CredentialEntry {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly tenant: string;
  readonly policy: PolicyRef | undefined;
}

function readCredentialFile(path: string): CredentialEntry[] {
  const parsed = readJsonFile(path, 'credentials');
  if (!Array.isArray(parsed)) throw new ConfigError('credentials', `--credentials ${path}: expected a JSON array of {"accessKeyId","secretAccessKey","tenant"?,"policy"?}`);
  return parsed.map((entry: unknown, index) => {
    const item = entry as Record<string, unknown> | null;
    if (typeof item !== 'object' || item === null || Array.isArray(item)) throw new ConfigError('credentials', `--credentials ${path}: entry ${index} is not an object`);
    const unknown = Object.keys(item).filter((name) => !['accessKeyId', 'secretAccessKey', 'tenant', 'policy'].includes(name));
    if (unknown.length > 0)
      throw new ConfigError('credentials', `--credentials ${path}: entry ${index} has ${JSON.stringify(unknown[0])}, which is not accessKeyId, secretAccessKey, tenant or policy`);
    const accessKeyId = item['accessKeyId'];
    const secretAccessKey = item['secretAccessKey'];
    const tenant = item['tenant'];
    if (typeof accessKeyId !== 'string' || !/^[A-Za-z0-9._~+=-]{3,128}$/.test(accessKeyId)) {
      throw new ConfigError('credentials', `--credentials ${path}: entry ${index} needs an accessKeyId of 3-128 URL-safe characters`);
    }
    if (typeof secretAccessKey !== 'string' || secretAccessKey.length < 8) {
      throw new ConfigError('credentials', `--credentials ${path}: entry ${index} needs a secretAccessKey of at least 8 characters`);
    }
    if (tenant !== undefined && (typeof tenant !== 'string' || !TENANT_NAME.test(tenant) || tenant.length > 128)) {
      throw new ConfigError('credentials', `--credentials ${path}: entry ${index} has a tenant that is not 1-128 of letters, digits and . _ : -`);
    }
    let policy: PolicyRef | undefined;
    try {
      policy = item['policy'] === undefined ? undefined : policyRef(item['policy'], `${accessKeyId}.policy`);
    } catch (error) {
      if (error instanceof PolicyError) throw new ConfigError('credentials', `--credentials ${path}: ${error.message}`);
      throw error;
    }
    return { accessKeyId, secretAccessKey, tenant: typeof tenant === 'string' ? tenant : accessKeyId, policy };
  });
}

interface PolicyFile {
  readonly policies: ReadonlyMap<string, AccessPolicy>;
  readonly tenants: ReadonlyMap<string, readonly string[]>;
  readonly keys: ReadonlyMap<string, readonly string[]>;
}

function readPolicyFile(path: string): PolicyFile {
  const fail = (message: string): ConfigError => new ConfigError('access-policies', `--access-policies ${path}: ${message}`);
  const parsed = readJsonFile(path, 'accessPolicies');
  const usage = 'expected {"policies": {name: policy}, "tenants"?: {tenant: [policy names]}, "keys"?: {accessKeyId: [policy names]}}';
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw fail(usage);
  const file = parsed as Record<string, unknown>;
  const extra = Object.keys(file).filter((name) => !['policies', 'tenants', 'keys'].includes(name));
  if (extra.length > 0) throw fail(`${JSON.stringify(extra[0])} is not policies, tenants or keys; ${usage}`);
  const section = (name: string): Record<string, unknown> => {
    const value = file[name] ?? {};
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw fail(`"${name}" must be an object; ${usage}`);
    return value as Record<string, unknown>;
  };
  const policies = new Map<string, AccessPolicy>();
  const attachments = (name: string): Map<string, readonly string[]> => {
    const out = new Map<string, readonly string[]>();
    for (const [who, value] of Object.entries(section(name))) {
      const ref = policyRef(value, `${name}.${who}`);
      if (!('names' in ref)) throw new PolicyError(`${name}.${who}`, 'must name policies of "policies" (write the document there)');
      for (const policy of ref.names)
        if (!policies.has(policy)) throw new PolicyError(`${name}.${who}`, `names the policy ${JSON.stringify(policy)}, which "policies" does not define`);
      out.set(who, ref.names);
    }
    return out;
  };
  try {
    for (const [name, document] of Object.entries(section('policies'))) {
      if (!POLICY_NAME.test(name)) throw new PolicyError(`policies.${name}`, 'a policy name is 1-128 of letters, digits and . _ -');
      policies.set(name, parseAccessPolicy(document, `policies.${name}`));
    }
    return { policies, tenants: attachments('tenants'), keys: attachments('keys') };
  } catch (error) {
    if (error instanceof PolicyError) throw fail(error.message);
    throw error;
  }
}

/** Loopback addresses: where the published trial secret may be served. */
export function isLoopback(host: string): boolean {
  const name = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  if (name === 'localhost') return true;
  if (isIP(name) === 4) return name.startsWith('127.');
  return name === '::1' || name === '0:0:0:0:0:0:0:1';
}

/**
 * Every key with its access policy: the administrator key (OBJECTCACHE_ACCESS_KEY) may do
 * everything; a key from --credentials may do what its own `policy`, its tenant's and its key's
 * entries in --access-policies allow together, and nothing when none applies.
 */
function resolveCredentials(
  admin: { accessKeyId: string; secretAccessKey: string },
  entries: readonly CredentialEntry[],
  file: PolicyFile | undefined,
  policyPath: string | undefined,
): ClientCredential[] {
  const fail = (message: string): ConfigError => new ConfigError('access-policies', `--access-policies ${policyPath ?? ''}: ${message}`);
  const seen = new Set<string>([admin.accessKeyId]);
  for (const entry of entries) {
    if (seen.has(entry.accessKeyId)) throw new ConfigError('credentials', `access key ${entry.accessKeyId} is configured twice`);
    seen.add(entry.accessKeyId);
  }
  if (file) {
    for (const key of file.keys.keys()) {
      if (key === admin.accessKeyId)
        throw fail(`"keys" names ${key}, the administrator key (OBJECTCACHE_ACCESS_KEY), which may always do everything; give the restricted key its own entry in --credentials`);
      if (!seen.has(key)) throw fail(`"keys" names ${key}, which is not a key of --credentials`);
    }
    const tenants = new Set(entries.map((e) => e.tenant));
    for (const tenant of file.tenants.keys()) if (!tenants.has(tenant)) throw fail(`"tenants" names ${tenant}, which no key of --credentials belongs to`);
  }
  const named = (names: readonly string[] | undefined, where: string): AccessPolicy[] =>
    (names ?? []).map((name) => {
      const policy = file?.policies.get(name);
      if (!policy)
        throw new ConfigError(
          'credentials',
          `${where} names the policy ${JSON.stringify(name)}, but ${file ? `--access-policies ${policyPath ?? ''} does not define it` : 'no --access-policies file is given'}`,
        );
      return policy;
    });
  return [
    { ...admin, tenant: admin.accessKeyId, access: AccessPolicy.unrestricted },
    ...entries.map((entry) => {
      const own = entry.policy === undefined ? [] : 'inline' in entry.policy ? [entry.policy.inline] : named(entry.policy.names, `--credentials: ${entry.accessKeyId}.policy`);
      const access = AccessPolicy.combine([...own, ...named(file?.tenants.get(entry.tenant), 'tenants'), ...named(file?.keys.get(entry.accessKeyId), 'keys')]);
      return { accessKeyId: entry.accessKeyId, secretAccessKey: entry.secretAccessKey, tenant: entry.tenant, access };
    }),
  ];
}

/** `--domain`: comma-separated DNS names (a port or scheme is a mistake worth naming). */
function parseDomains(text: string | undefined): string[] {
  if (text === undefined) return [];
  const domains = text
    .split(',')
    .map((d) => d.trim().toLowerCase())
    .filter((d) => d !== '');
  for (const domain of domains) {
    if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(domain)) {
      throw new ConfigError('domain', `--domain / OBJECTCACHE_DOMAIN must be DNS names such as s3.example.com (no scheme or port), got ${JSON.stringify(domain)}`);
    }
  }
  return domains;
}

/** `--reserved-buckets`: first path segments, comma-separated (any name a path could start with). */
function parseReserved(text: string | undefined): Set<string> {
  const names = (text ?? '')
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '');
  for (const name of names) {
    if (!/^[A-Za-z0-9._-]{1,63}$/.test(name))
      throw new ConfigError(
        'reserved-buckets',
        `--reserved-buckets / OBJECTCACHE_RESERVED_BUCKETS must be path segments such as minio,admin (letters, digits, . _ -), got ${JSON.stringify(name)}`,
      );
  }
  return new Set(names.map((n) => n.toLowerCase()));
}

const SIZE_UNITS: Readonly<Record<string, number>> = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, tib: 1024 ** 4 };

/** `500GiB`, `2.5GB`, `1048576`: bytes, or a message saying what is wrong. */
export function parseSize(text: string): number | string {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = SIZE_UNITS[(m?.[2] ?? '').toLowerCase() || 'b'];
  if (!m || unit === undefined) return `${JSON.stringify(text)} is not a size such as 500GiB, 2.5GB or 1048576`;
  const bytes = Math.floor(Number(m[1]) * unit);
  if (!Number.isSafeInteger(bytes) || bytes <= 0) return `${JSON.stringify(text)} must be a positive size`;
  return bytes;
}

/** `name=size,name=size` (--budget, --tenant-quota). */
function parseSizes(setting: 'budget' | 'tenantQuota', text: string | undefined): Map<string, number> {
  const spec = SERVE_SETTINGS[setting];
  const out = new Map<string, number>();
  for (const item of (text ?? '')
    .split(',')
    .map((i) => i.trim())
    .filter((i) => i !== '')) {
    const at = item.lastIndexOf('=');
    const name = item.slice(0, at).trim();
    const size = at > 0 ? parseSize(item.slice(at + 1)) : `${JSON.stringify(item)} is not name=size`;
    if (typeof size === 'string') throw new ConfigError(spec.flag, `--${spec.flag} / ${spec.env}: ${size}`);
    if (out.has(name)) throw new ConfigError(spec.flag, `--${spec.flag} / ${spec.env} names ${name} twice`);
    out.set(name, size);
  }
  return out;
}

/** `7d`, `12h`, `30m`, `90s`, `off`: ms, or undefined for off (--evict-idle, --multipart-expiry). */
function parseDuration(setting: 'evictIdle' | 'multipartExpiry', raw: RawSettings): number | undefined {
  const text = nonEmpty(setting, raw);
  if (text.trim().toLowerCase() === 'off') return undefined;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(d|h|m|s)\s*$/.exec(text);
  const unit = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 }[m?.[2] as 'd' | 'h' | 'm' | 's'];
  const ms = m && unit ? Math.round(Number(m[1]) * unit) : NaN;
  if (!(ms > 0))
    throw new ConfigError(SERVE_SETTINGS[setting].flag, `${label(SERVE_SETTINGS[setting])} must be a duration such as 7d, 12h, 30m or 90s, or off; got ${JSON.stringify(text)}`);
  return ms;
}

/** The budgets' settings; `multipartExpiryMs` is the gateway's own (--multipart-expiry), parsed once. */
function loadCapacity(raw: RawSettings, multipartExpiryMs: number | undefined): CapacityConfig | undefined {
  const budgets = parseSizes('budget', raw.budget);
  const quotas = parseSizes('tenantQuota', raw.tenantQuota);
  const idleMs = parseDuration('evictIdle', raw);
  if (budgets.size === 0) {
    if (quotas.size > 0) throw new ConfigError('tenant-quota', '--tenant-quota counts the chunks of budgeted buckets, and no bucket has a --budget');
    if (idleMs !== undefined) throw new ConfigError('evict-idle', '--evict-idle evicts from budgeted buckets, and no bucket has a --budget');
    return undefined;
  }
  for (const bucket of budgets.keys()) bucketSetting('budget', '--budget / OBJECTCACHE_BUDGET', bucket);
  const high = integer('budgetHighPercent', raw);
  const low = integer('budgetLowPercent', raw);
  if (low >= high) throw new ConfigError('budget-low-percent', `--budget-low-percent (${low}) must be below --budget-high-percent (${high}): trimming stops at the low mark`);
  const stateBucket = nonEmpty('capacityStateBucket', raw);
  bucketSetting('capacity-state-bucket', '--capacity-state-bucket / OBJECTCACHE_CAPACITY_STATE_BUCKET', stateBucket);
  if (budgets.has(stateBucket))
    throw new ConfigError('capacity-state-bucket', `--capacity-state-bucket ${stateBucket} is also a budgeted bucket: its state would be evicted with its chunks`);
  const syncMs = integer('capacitySyncMs', raw);
  const leaseMs = integer('capacityLeaseMs', raw);
  if (leaseMs < 3 * syncMs)
    throw new ConfigError('capacity-lease-ms', `--capacity-lease-ms (${leaseMs}) must be at least three --capacity-sync-ms (${syncMs}): the holder renews the lease once a sync`);
  return { budgets, quotas, highFraction: high / 100, lowFraction: low / 100, idleMs, evictPerSecond: integer('evictRate', raw), stateBucket, syncMs, leaseMs, multipartExpiryMs };
}

/** Builds and validates the serve configuration from argv (after `serve`) and the environment. */
export function loadServeConfig(argv: readonly string[], env: NodeJS.ProcessEnv): GatewayConfig {
  const { raw, deprecated } = readRaw(argv, env);

  const sigV2 = oneOf('sigV2', raw);
  const logLevel = oneOf('logLevel', raw);

  const accessKeyId = nonEmpty('accessKey', raw);
  const secretAccessKey = nonEmpty('secretKey', raw);
  if (secretAccessKey.length < 8) throw new ConfigError('secret-key', 'OBJECTCACHE_SECRET_KEY must be at least 8 characters');
  const entries = raw.credentials === undefined ? [] : readCredentialFile(raw.credentials);
  const policyFile = raw.accessPolicies === undefined ? undefined : readPolicyFile(raw.accessPolicies);
  const credentials = resolveCredentials({ accessKeyId, secretAccessKey }, entries, policyFile, raw.accessPolicies);

  // Protected mode: the trial secret is published, so it is served on loopback only.
  const host = nonEmpty('host', raw);
  const insecure = oneOf('insecureTrialCredentials', raw);
  const trial = credentials.find((c) => c.secretAccessKey === TRIAL_SECRET);
  if (trial && insecure === 'off' && !isLoopback(host)) {
    throw new ConfigError(
      'host',
      `Refusing to listen on ${host} with the published trial secret (key ${trial.accessKeyId}): anyone who read the README could use it. ` +
        'Set OBJECTCACHE_ACCESS_KEY and OBJECTCACHE_SECRET_KEY (and give --credentials keys their own secrets), or listen on 127.0.0.1. ' +
        'To serve the trial secret on a trusted network anyway, set --insecure-trial-credentials on.',
    );
  }

  let backend: BackendConfig;
  if (raw.s3Endpoint !== undefined) {
    let endpoint: URL;
    try {
      endpoint = new URL(raw.s3Endpoint);
    } catch {
      throw new ConfigError('s3-endpoint', `--s3-endpoint / OBJECTCACHE_S3_ENDPOINT is not a URL: ${raw.s3Endpoint}`);
    }
    if (
      (endpoint.protocol !== 'http:' && endpoint.protocol !== 'https:') ||
      endpoint.search !== '' ||
      endpoint.hash !== '' ||
      (endpoint.pathname !== '/' && endpoint.pathname !== '')
    ) {
      throw new ConfigError('s3-endpoint', `--s3-endpoint must be an http(s) origin such as http://127.0.0.1:9000, got ${raw.s3Endpoint}`);
    }
    backend = {
      kind: 's3',
      endpoint,
      region: nonEmpty('s3Region', raw),
      accessKeyId: nonEmpty('backendAccessKey', raw),
      secretAccessKey: nonEmpty('backendSecretKey', raw),
      connections: integer('backendConnections', raw),
      timeoutMs: integer('backendTimeoutMs', raw),
    };
  } else {
    backend = { kind: 'local', dataDir: nonEmpty('dataDir', raw) };
  }

  const named = parseSchedulingPolicy(nonEmpty('policy', raw));
  if ('problem' in named) throw new ConfigError('policy', `--policy / OBJECTCACHE_POLICY ${named.problem}`);
  const policy = named.policy;
  let scheduler: SchedulerConfig | undefined;
  const capText = nonEmpty('cap', raw);
  if (capText.trim().toLowerCase() !== 'unlimited') {
    const cap = parseRate(capText);
    if (typeof cap === 'string' || cap <= 0) throw new ConfigError('cap', `--cap / OBJECTCACHE_CAP: ${typeof cap === 'string' ? cap : 'must be positive'}`);
    const margin = parseMargin(nonEmpty('margin', raw).trim(), cap);
    if (typeof margin === 'string') throw new ConfigError('margin', `--margin / OBJECTCACHE_MARGIN: ${margin}`);
    scheduler = { capBytesPerSec: cap, policy, marginBytesPerSec: margin, epochMs: integer('epochMs', raw) };
  }

  const maxDescriptorGets = integer('maxDescriptorGets', raw);
  const maxDescriptorGetsPerKey = raw.maxDescriptorGetsPerKey === 'auto' ? Math.max(1, Math.floor((maxDescriptorGets * 3) / 4)) : integer('maxDescriptorGetsPerKey', raw);
  if (maxDescriptorGetsPerKey > maxDescriptorGets) {
    throw new ConfigError(
      'max-descriptor-gets-per-key',
      `--max-descriptor-gets-per-key (${maxDescriptorGetsPerKey}) is more than --max-descriptor-gets (${maxDescriptorGets}): one key could hold every slot`,
    );
  }
  if (integer('requestTimeoutMs', raw) < integer('headerTimeoutMs', raw)) {
    throw new ConfigError(
      'request-timeout-ms',
      `--request-timeout-ms (${raw.requestTimeoutMs}) is less than --header-timeout-ms (${raw.headerTimeoutMs}): a whole request cannot take less time than its headers`,
    );
  }
  if (integer('maxRequestsPerKey', raw) > integer('maxConnections', raw)) {
    throw new ConfigError(
      'max-requests-per-key',
      `--max-requests-per-key (${raw.maxRequestsPerKey}) is more than --max-connections (${raw.maxConnections}): one key could hold every connection`,
    );
  }

  const processes = raw.processes === 'auto' ? defaultProcessCount() : integer('processes', raw);
  const multipartExpiryMs = parseDuration('multipartExpiry', raw);
  const capacity = loadCapacity(raw, multipartExpiryMs);
  const segments = loadSegments(raw, backend.kind);
  const kvEvents = loadKvEvents(raw, capacity);
  const reservedBuckets = parseReserved(raw.reservedBuckets);
  // Clients never reach the gateways' own state (capacity's journals, snapshot and lease; packed
  // segments), whatever features this gateway has on: another gateway in front of the same store
  // may have them on, and would trust what it finds there. The default names are reserved too, and
  // the configured ones (the administrator key still can).
  for (const name of stateBuckets(raw)) reservedBuckets.add(name);
  for (const bucket of capacity?.budgets.keys() ?? []) {
    if (reservedBuckets.has(bucket.toLowerCase()))
      throw new ConfigError('budget', `--budget names ${bucket}, a reserved bucket (the store's own API or the gateways' own state): no client may write it`);
  }

  return {
    scheduler,
    capacity,
    segments,
    kvEvents,
    stateKey: stateKeySetting(raw),
    multipartExpiryMs,
    adminToken: adminTokenSetting(raw),
    host,
    port: integer('port', raw),
    metricsHost: nonEmpty('metricsHost', raw),
    metricsPort: integer('metricsPort', raw),
    region: nonEmpty('region', raw),
    domains: parseDomains(raw.domain),
    sigV2: sigV2 === 'on',
    clientCredentials: credentials,
    backend,
    maxObjectBytes: integer('maxObjectBytes', raw),
    maxHeaderBytes: integer('maxHeaderBytes', raw),
    limits: {
      maxConnections: integer('maxConnections', raw),
      maxRequestsPerConnection: raw.maxRequestsPerConnection === 'auto' ? (processes > 1 ? 100 : 0) : integer('maxRequestsPerConnection', raw),
      maxRequestsPerKey: integer('maxRequestsPerKey', raw),
      maxDescriptorGetsPerKey,
      headerTimeoutMs: integer('headerTimeoutMs', raw),
      bodyIdleTimeoutMs: integer('bodyIdleTimeoutMs', raw),
      requestTimeoutMs: integer('requestTimeoutMs', raw),
      clientStallTimeoutMs: integer('clientStallTimeoutMs', raw),
      maxFormFieldsBytes: integer('maxFormFieldsBytes', raw),
    },
    reservedBuckets,
    deprecatedSettings: deprecated,
    sigV2MaxExpiresSeconds: integer('sigV2MaxExpiresSeconds', raw),
    logLevel: logLevel as LogLevel,
    processes,
    descriptorGet: {
      workers: raw.workers === 'auto' ? defaultWorkerCount(processes) : integer('workers', raw),
      workerQueue: integer('workerQueue', raw),
      readConcurrency: integer('readConcurrency', raw),
      readBytes: integer('readBytes', raw),
      taskBytes: integer('taskBytes', raw),
      readAheadBytes: integer('readAheadBytes', raw),
      maxBufferedBytes: raw.maxBufferedBytes === 'auto' ? defaultBufferedBytes(processes) : integer('maxBufferedBytes', raw),
      chunkReads: oneOf('chunkReads', raw) as 'auto' | 'grouped',
      sliceChecks: oneOf('sliceChecks', raw) as SliceChecksSetting,
      streamWindowBytes: integer('streamWindowBytes', raw),
      maxChunkStreams: integer('maxChunkStreams', raw),
      streamReceiveBufferBytes: integer('streamReceiveBufferBytes', raw),
      threshold: integer('threshold', raw),
      maxDescriptorBytes: integer('maxDescriptorBytes', raw),
      maxDescriptorGets,
      clientStallTimeoutMs: integer('clientStallTimeoutMs', raw),
      limits: {
        maxKeys: integer('maxDescriptorKeys', raw),
        maxLayers: integer('maxLayers', raw),
        maxLayerBytes: integer('maxLayerBytes', raw),
        maxTotalBytes: integer('maxRequestBytes', raw),
      },
    },
  };
}

/** OBJECTCACHE_ADMIN_TOKEN, when set: long enough to be a secret. */
function adminTokenSetting(raw: RawSettings): string | undefined {
  const token = raw.adminToken;
  if (token === undefined || token === '') return undefined;
  if (token.length < 16 || /\s/.test(token)) throw new ConfigError('admin-token', `OBJECTCACHE_ADMIN_TOKEN must be at least 16 characters with no spaces (it is ${token.length})`);
  return token;
}

/** OBJECTCACHE_STATE_KEY, when set: long enough to be a secret. */
function stateKeySetting(raw: RawSettings): string | undefined {
  const key = raw.stateKey;
  if (key === undefined || key === '') return undefined;
  if (key.length < MIN_STATE_KEY_CHARS) throw new ConfigError('state-key', `OBJECTCACHE_STATE_KEY must be at least ${MIN_STATE_KEY_CHARS} characters long (it is ${key.length})`);
  return key;
}

/**
 * The buckets that hold the gateways' own state: the default names of the capacity state bucket
 * and the segment bucket, and the names configured here (each checked as a bucket name, used or not).
 */
function stateBuckets(raw: RawSettings): string[] {
  const names = new Set<string>([SERVE_SETTINGS.capacityStateBucket.default, SERVE_SETTINGS.segmentBucket.default]);
  for (const [setting, flag] of [
    ['capacityStateBucket', 'capacity-state-bucket'],
    ['segmentBucket', 'segment-bucket'],
  ] as const) {
    const name = raw[setting];
    if (name === undefined || name === '') continue;
    bucketSetting(flag, `--${flag} / ${SERVE_SETTINGS[setting].env}`, name);
    names.add(name.toLowerCase());
  }
  return [...names];
}

/** A setting that names a bucket follows S3's naming rules (gateway/s3/request.ts assertBucketName). */
function bucketSetting(setting: string, names: string, bucket: string): void {
  try {
    assertBucketName(bucket);
  } catch {
    throw new ConfigError(setting, `${names}: ${JSON.stringify(bucket)} is not a bucket name`);
  }
}

function loadSegments(raw: RawSettings, store: BackendConfig['kind']): SegmentConfig | undefined {
  const mode = oneOf('segments', raw);
  const packFrom = oneOf('segmentPackFrom', raw);
  // auto: where a budget bounds what the copies may take, and only for the budgeted buckets.
  const budgeted = mode === 'auto' ? new Set(parseSizes('budget', raw.budget).keys()) : undefined;
  if (mode === 'off' || budgeted?.size === 0) return undefined;
  const bucket = nonEmpty('segmentBucket', raw);
  bucketSetting('segment-bucket', '--segment-bucket / OBJECTCACHE_SEGMENT_BUCKET', bucket);
  if (raw.capacityStateBucket === bucket) throw new ConfigError('segment-bucket', `--segment-bucket ${bucket} is also --capacity-state-bucket`);
  // Its objects would be indexed, budgeted and evicted as chunks, and the bucket closed to clients.
  if (parseSizes('budget', raw.budget).has(bucket)) throw new ConfigError('segment-bucket', `--segment-bucket ${bucket} is also a budgeted bucket (--budget)`);
  return {
    bucket,
    afterReads: integer('segmentAfterReads', raw),
    minBytes: integer('segmentMinBytes', raw),
    maxPacks: integer('maxSegmentPacks', raw),
    maxBytes: integer('maxSegmentBytes', raw),
    check: oneOf('segmentCheck', raw) as 'heads' | 'writes',
    readAheadBytes: integer('segmentReadAheadBytes', raw),
    packQueueBytes: integer('segmentPackQueueBytes', raw),
    // auto: the embedded store shares the gateway's cores, where copying the frames as they go out
    // slowed the read that packs (docs/segments.md, Measured); a store of its own takes them.
    packFrom: packFrom === 'auto' ? (store === 'local' ? 'chunks' : 'frames') : (packFrom as 'frames' | 'chunks'),
    ...(budgeted ? { buckets: budgeted } : {}),
  };
}

/** `--kv-events-topic llm-d`: llm-d's pool form (llm-d-router PR #2586), the pod `pool:objectcache`. */
export const LLM_D_POOL_TOPIC = 'kv@pool:objectcache@{model}';

export interface KvEventsConfig {
  readonly endpoint: string;
  readonly replayEndpoint: string | undefined;
  readonly history: number;
  readonly topic: string;
  readonly encoding: 'tagged' | 'array';
  readonly medium: string;
  readonly locality: string | undefined;
  /** Undefined: every tenant's. */
  readonly tenants: ReadonlySet<string> | undefined;
  /** What a stored block carries as its cache salt (vLLM's extra_keys). */
  readonly salt: 'none' | 'tenant';
  /** Messages ZeroMQ queues per subscriber before it drops for that one. */
  readonly highWaterMark: number;
  /** How long events gather into one batch. */
  readonly batchMs: number;
}

const ZMQ_ENDPOINT = /^(tcp:\/\/[^\s]+:(\d+|\*)|ipc:\/\/\S+|inproc:\/\/\S+)$/;

function loadKvEvents(raw: RawSettings, capacity: CapacityConfig | undefined): KvEventsConfig | undefined {
  const endpoint = nonEmpty('kvEvents', raw).trim();
  if (endpoint === 'off') return undefined;
  const connects = endpoint.startsWith('connect:');
  const flag = (name: 'kvEvents' | 'kvEventsReplay'): string => `--${SERVE_SETTINGS[name].flag} / ${SERVE_SETTINGS[name].env}`;
  if (!ZMQ_ENDPOINT.test(connects ? endpoint.slice('connect:'.length) : endpoint))
    throw new ConfigError(
      'kv-events',
      `${flag('kvEvents')} must be a ZeroMQ endpoint (tcp://host:port, ipc://path, or either after connect:) or off, got ${JSON.stringify(endpoint)}`,
    );
  if (!capacity)
    throw new ConfigError(
      'kv-events',
      `${flag('kvEvents')} publishes the chunks of budgeted buckets, and no bucket has a --budget (a budget larger than the bucket will grow evicts nothing)`,
    );
  const replay = nonEmpty('kvEventsReplay', raw).trim();
  if (replay !== 'off' && !ZMQ_ENDPOINT.test(replay))
    throw new ConfigError('kv-events-replay', `${flag('kvEventsReplay')} must be a ZeroMQ endpoint or off, got ${JSON.stringify(replay)}`);
  if (replay === endpoint && !endpoint.endsWith(':*')) throw new ConfigError('kv-events-replay', `${flag('kvEventsReplay')} is also --kv-events`);
  const locality = nonEmpty('kvEventsLocality', raw).trim();
  const tenants = nonEmpty('kvEventsTenants', raw).trim();
  return {
    endpoint,
    replayEndpoint: replay === 'off' ? undefined : replay,
    history: integer('kvEventsHistory', raw),
    // The llm-d preset: its pool form (llm-d-router PR #2586), pod `pool:objectcache`.
    topic: raw.kvEventsTopic === 'llm-d' ? LLM_D_POOL_TOPIC : (raw.kvEventsTopic ?? ''),
    encoding: oneOf('kvEventsEncoding', raw) as 'tagged' | 'array',
    medium: nonEmpty('kvEventsMedium', raw).trim(),
    locality: locality === 'off' ? undefined : locality,
    salt: oneOf('kvEventsSalt', raw) as 'none' | 'tenant',
    tenants:
      tenants === 'all'
        ? undefined
        : new Set(
            tenants
              .split(',')
              .map((t) => t.trim())
              .filter((t) => t !== ''),
          ),
    // A subscriber that stops reading makes the gateway hold at most this many batches for it
    // (each at most MAX_BATCH_EVENTS events, gateway/kv-events/kv-events.ts) before ZeroMQ drops.
    highWaterMark: 1000,
    batchMs: 20,
  };
}

/** `--help` text for `objectcache serve`, from the same table. */
export function serveHelp(): string {
  const lines = ['Usage: objectcache serve [options]', '', 'Runs the S3-compatible gateway. Every option can also be set by its environment variable.', ''];
  for (const spec of Object.values(SERVE_SETTINGS) as SettingSpec[]) {
    const name = spec.envOnly ? `  ${spec.env}` : `  --${spec.flag} <value>  (${spec.env})`;
    const fallback = spec.default === undefined ? 'unset' : spec.secret ? '(see README)' : spec.default;
    lines.push(name, `      ${spec.description} Default: ${fallback}.`);
  }
  return lines.join('\n');
}
