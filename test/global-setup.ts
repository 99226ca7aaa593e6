/**
 * Vitest global setup: builds MinIO when needed and runs one server for the whole run.
 * Integration tests never skip for want of MinIO: if it cannot be built, the run fails.
 */
import type { TestProject } from 'vitest/node';
import { installMinio, startMinio, type MinioInfo } from '../bench/minio.js';

declare module 'vitest' {
  export interface ProvidedContext {
    minio: MinioInfo;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const binary = installMinio();
  const minio = await startMinio({ binary });
  project.provide('minio', { endpoint: minio.endpoint, accessKey: minio.accessKey, secretKey: minio.secretKey, binary });
  return () => minio.destroy();
}
