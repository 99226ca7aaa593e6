// Lint for the TypeScript, run by `npm test` (`npm run -s lint`): typescript-eslint's type-aware
// recommended rules, for the defects types can see (floating and misused promises, unsafe any,
// awaiting what is not a promise, needless assertions); formatting is Prettier's (.prettierrc.json).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'client/python/**', '.venv-python/**', 'bench/results/**', '**/*.mjs', '**/*.cjs', 'vitest.config.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { project: './tsconfig.check.json', tsconfigRootDir: import.meta.dirname } },
    rules: {
      // An async function that implements an async interface need not await anything itself.
      '@typescript-eslint/require-await': 'off',
      // `_` names a value deliberately left unused (an ignored argument, a rest sibling).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // Rejections and throws pass on what they were given (an AbortSignal's reason, a caught error).
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      '@typescript-eslint/only-throw-error': ['error', { allowThrowingUnknown: true }],
    },
  },
  {
    // Tests build expectations from vitest's asymmetric matchers (typed any) and spy on prototypes.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-unsafe-assignment': 'off', '@typescript-eslint/no-unsafe-member-access': 'off', '@typescript-eslint/unbound-method': 'off' },
  },
);
