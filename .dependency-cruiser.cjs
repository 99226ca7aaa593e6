/**
 * Which folder may import which (docs/development.md "The map"), checked by `npm test`
 * (`npm run -s lint:layers`; test/layering.test.ts shows a violating import fails it).
 *
 * Bottom to top: the wire contract (schemas/, sigv4/, native/); the HTTP/1.1 range reader
 * (http-range/); the TypeScript client (client/). In the gateway: common/ (settings, logging,
 * metrics and the observer interfaces they read), threads/ (what both threads share), stores/,
 * worker/ (the read worker threads), admission/, s3/ (the S3 front door), capacity/,
 * descriptor-get/ (the layerwise data plane), segments/, kv-events/ (the KV events for routers), pipeline/ (the server and its routes),
 * cluster/ (several serving processes on one port, gateway/cluster/primary.ts). Then cli/ and bench/; test/ may import anything. A folder imports only folders below it.
 */
const GATEWAY_LAYERS = ['common', 'threads', 'stores', 'worker', 'admission', 's3', 'capacity', 'descriptor-get', 'segments', 'kv-events', 'pipeline', 'cluster'];
/** Folders a gateway layer must not import: those above it (worker/ and admission/ share a rank). */
const above = (layer) => {
  const rank = (l) => (l === 'admission' ? GATEWAY_LAYERS.indexOf('worker') : GATEWAY_LAYERS.indexOf(l));
  return GATEWAY_LAYERS.filter((l) => l !== layer && rank(l) >= rank(layer));
};

module.exports = {
  forbidden: [
    { name: 'no-circular', severity: 'error', comment: 'No import cycles anywhere.', from: {}, to: { circular: true } },
    {
      name: 'contract-imports-nothing-above',
      severity: 'error',
      comment: 'schemas/, sigv4/ and native/ are the wire contract and its primitives: they import none of the code built on them.',
      from: { path: '^(schemas|sigv4|native)/' },
      to: { path: '^(http-range|client|gateway|cli|bench|test)/' },
    },
    {
      name: 'http-range-stands-alone',
      severity: 'error',
      comment: 'http-range/ is shared by the read workers and the TypeScript client: it imports only the contract.',
      from: { path: '^http-range/' },
      to: { path: '^(client|gateway|cli|bench|test)/' },
    },
    {
      name: 'client-is-not-the-gateway',
      severity: 'error',
      comment: 'client/ ships to users: it imports the contract and http-range/, never the gateway.',
      from: { path: '^client/' },
      to: { path: '^(gateway|cli|bench|test)/' },
    },
    ...GATEWAY_LAYERS.map((layer) => ({
      name: `gateway-${layer}-imports-only-below`,
      severity: 'error',
      comment: `gateway/${layer}/ imports only the gateway folders below it (.dependency-cruiser.cjs GATEWAY_LAYERS).`,
      from: { path: `^gateway/${layer}/` },
      to: { path: [`^gateway/(${above(layer).join('|')})/`, '^(client|cli|bench|test)/'] },
    })),
    {
      name: 'worker-code-runs-in-workers',
      severity: 'error',
      comment: 'gateway/worker/ runs in the read worker threads (piscina loads it through the #read-worker import): the main thread takes its types only.',
      from: { path: '^gateway/', pathNot: '^gateway/worker/' },
      to: { path: '^gateway/worker/', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'tests-are-not-product',
      severity: 'error',
      comment: 'Nothing but test/ imports test/, save the MinIO harness the benchmarks start too.',
      from: { pathNot: '^test/' },
      to: { path: '^test/', pathNot: '^test/helpers/minio\\.ts$' },
    },
    {
      name: 'bench-is-not-product',
      severity: 'error',
      comment: 'Only cli/ (the `objectcache bench` command) and test/ import bench/.',
      from: { pathNot: '^(bench|cli|test)/' },
      to: { path: '^bench/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.check.json' },
    exclude: { path: '^(dist|node_modules)/' },
  },
};
