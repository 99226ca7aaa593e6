/**
 * Storage: the embedded local store, the S3 backend client, read planning, range readers, and
 * the read-worker pool (the worker itself is read-worker.ts, loaded by piscina).
 */
export { LocalStore, MAX_PART_NUMBER, MIN_PART_BYTES, objectRelativePath } from './local-store/local-store.js';
export type { ObjectAttributes, ObjectMeta, OpenObject, PutOptions } from './local-store/local-store.js';
export { KeyIndex, compareKeys } from './local-store/key-index.js';
export type { ListOptions, ListPage } from './local-store/key-index.js';
export { EMPTY_PAYLOAD_SHA256, S3Backend, mapBackendError } from './s3-backend.js';
export type { BackendRequest, BackendStats, S3BackendOptions } from './s3-backend.js';
export { planChunkwise, planLayerGroups, planLayerwise } from './read-plan.js';
export type { PlanInput, PlannedTask, ReadPlan } from './read-plan.js';
export { ReaderPool, defaultWorkerCount } from './reader-pool.js';
export type { ReaderPoolOptions, ReaderPoolStats } from './reader-pool.js';
export { LocalRangeReader, ReadError, S3RangeReader, createRangeReader } from './range-reader.js';
export type { RangeRead, RangeReader } from './range-reader.js';
export type { ReadResult, ReadTask, TaskOrder, WorkerBackend, WorkerInit } from './protocol.js';
export { NodeSha256, toQueryBag } from './sigv4-support.js';
