// The layering check (.dependency-cruiser.cjs, run by `npm test` as `npm run -s lint:layers`):
// the tree as it is passes it, and one import against the rules fails it, naming the rule.
import { execFile } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from './helpers/minio.js';

const run = promisify(execFile);
const root = repoRoot();
const depcruise = join(root, 'node_modules', '.bin', 'depcruise');

async function cruise(...paths: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout } = await run(depcruise, ['--config', '.dependency-cruiser.cjs', ...paths], { cwd: root });
    return { code: 0, output: stdout };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, output: `${failed.stdout}${failed.stderr}` };
  }
}

/** Files the probes below write into the tree for a moment (named in .gitignore). */
const PROBES = ['gateway/common/layering-probe.ts', 'client/layering-probe.ts', 'gateway/descriptor-get/layering-probe.ts'] as const;

describe('the layering check', () => {
  // A run killed mid-probe leaves its file behind, which would fail the tree's check and tsc.
  beforeAll(() => {
    for (const probe of PROBES) rmSync(join(root, probe), { force: true });
  });

  it('passes the tree as it is: no cycle, every import downward', async () => {
    const { code, output } = await cruise('cli', 'gateway', 'http-range', 'client', 'schemas', 'sigv4', 'bench', 'native', 'test');
    expect(output).toContain('no dependency violations found');
    expect(code).toBe(0);
  });

  for (const [what, file, source, rule] of [
    ['a settings module importing the server', PROBES[0], "import '../pipeline/server.js';\n", 'gateway-common-imports-only-below'],
    ['the client importing the gateway', PROBES[1], "import '../gateway/common/config.js';\n", 'client-is-not-the-gateway'],
    ['the main thread running worker code', PROBES[2], "import '../worker/read-worker.js';\n", 'worker-code-runs-in-workers'],
  ] as const) {
    it(`fails ${what}, naming the rule`, async () => {
      const path = join(root, file);
      writeFileSync(path, `// written by test/layering.test.ts, removed after it\n${source}`);
      try {
        const { code, output } = await cruise(file);
        expect(code).not.toBe(0);
        expect(output).toContain(rule);
      } finally {
        rmSync(path, { force: true });
      }
    });
  }
});
