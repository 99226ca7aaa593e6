/**
 * The gateway: configuration, the server, the scheduler's pure parts, and the pieces tests and
 * embedders use. The command line is cli.ts.
 */
export { ConfigError, SERVE_SETTINGS, loadServeConfig, serveHelp } from './config.js';
export type { BackendConfig, ClientCredential, GatewayConfig, LayerwiseConfig, LogLevel, SchedulerConfig, SettingSpec } from './config.js';
export { startGateway } from './server.js';
export type { Gateway, GatewayDependencies } from './server.js';
export { createLogger } from './logger.js';
export type { Logger } from './logger.js';
export { SigV4Verifier, MAX_CLOCK_SKEW_MS, MAX_PRESIGNED_EXPIRES_S } from './auth/sigv4.js';
export type { AuthResult } from './auth/sigv4.js';
export { POLICIES, allocate, predictedStall, waterFill, zeroStallRate } from './scheduler/allocate.js';
export type { Allocation, AllocationOptions, AllocationRequest, Policy } from './scheduler/allocate.js';
export { EpochScheduler, systemClock } from './scheduler/epoch-scheduler.js';
export type { Clock, Grant, LoadRequest, SchedulerOptions, SchedulerSnapshot } from './scheduler/epoch-scheduler.js';
export { Pacer } from './scheduler/pacer.js';
export { parseRate } from './scheduler/rate.js';
export { chooseMode } from './layerwise/serve-layerwise.js';
export type { DeliveryMode } from './layerwise/serve-layerwise.js';
