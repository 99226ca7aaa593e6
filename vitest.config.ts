import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Integration tests start servers; two cores run two files at a time.
    maxWorkers: 2,
    reporters: ['default'],
    // The AWS SDK's notice that its 2027 releases need Node 22 says nothing about these tests.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
