/**
 * One classifier names every request once (gateway/pipeline/routes.ts classify): form uploads, descriptor GETs in
 * both forms, prefix lookups, and S3 operations, copies included even when presigned.
 */
import { describe, expect, it } from 'vitest';
import { classify, operationLabel } from '../gateway/pipeline/routes.js';
import { parseTarget } from '../gateway/s3/request.js';

const of = (method: string, url: string, headers: Record<string, string> = {}): string => {
  const c = classify(method, parseTarget(url, undefined), headers);
  return `${c.kind}:${c.operation}`;
};

describe('classify', () => {
  it('tells form uploads, descriptor GETs, lookups and S3 operations apart', () => {
    expect(of('POST', '/b', { 'content-type': 'multipart/form-data; boundary=x' })).toBe('post-object:PostObject');
    expect(of('POST', '/b?objectcache')).toBe('descriptor-get:DescriptorGet');
    expect(of('GET', '/b/kv/last', { 'x-objectcache-descriptor': 'e30' })).toBe('descriptor-get:DescriptorGet');
    expect(of('POST', '/b?objectcache-lookup')).toBe('prefix-lookup:PrefixLookup');
    expect(of('GET', '/b/kv/last')).toBe('s3:GetObject');
    expect(of('POST', '/b?delete')).toBe('s3:DeleteObjects');
    expect(of('GET', '/')).toBe('s3:ListBuckets');
    expect(of('PATCH', '/b/k')).toBe('s3:Other');
    // A descriptor header on anything but an object GET does not make a descriptor GET.
    expect(of('HEAD', '/b/k', { 'x-objectcache-descriptor': 'e30' })).toBe('s3:HeadObject');
  });

  it('names copies by their source header, or its presigned query form', () => {
    expect(of('PUT', '/b/k', { 'x-amz-copy-source': '/b/src' })).toBe('s3:CopyObject');
    expect(of('PUT', '/b/k?partNumber=2&uploadId=u', { 'x-amz-copy-source': '/b/src' })).toBe('s3:UploadPartCopy');
    expect(of('PUT', '/b/k?X-Amz-Copy-Source=%2Fb%2Fsrc&X-Amz-Signature=s')).toBe('s3:CopyObject');
    expect(of('PUT', '/b/k')).toBe('s3:PutObject');
    // On a request signed in its header, a query parameter of that name is only a parameter.
    expect(of('PUT', '/b/k?x-amz-copy-source=%2Fb%2Fsrc')).toBe('s3:PutObject');
  });

  it('labels descriptor GETs by delivery mode, as their metrics always were', () => {
    expect(operationLabel('DescriptorGet', 'chunkwise')).toBe('ChunkwiseGet');
    expect(operationLabel('DescriptorGet', 'layerwise')).toBe('LayerwiseGet');
    expect(operationLabel('DescriptorGet', undefined)).toBe('LayerwiseGet');
    expect(operationLabel('PutObject', undefined)).toBe('PutObject');
  });
});
