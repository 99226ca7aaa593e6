// The house rule (docs/development.md): no source file over 600 lines without a one-line reason at
// its top, so that a long file is long on purpose.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from './helpers/minio.js';

const MAX_LINES = 600;

describe('source files', () => {
  it(`are at most ${MAX_LINES} lines, or say why at their top`, () => {
    const root = repoRoot();
    const files = execFileSync('git', ['ls-files', '*.ts', '*.cts', '*.mjs', '*.py'], { cwd: root, encoding: 'utf8' }).split('\n').filter(Boolean);
    const unexplained = files.filter((file) => {
      const lines = readFileSync(join(root, file), 'utf8').split('\n');
      if (lines.length - 1 <= MAX_LINES) return false;
      const top = (lines[0]?.startsWith('#!') ? lines[1] : lines[0]) ?? '';
      return !/^(\/\/|#) Over 600 lines: \S/.test(top);
    });
    expect(unexplained).toEqual([]);
  });
});
