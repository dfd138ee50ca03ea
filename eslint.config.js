import { configPkg } from '@adonisjs/eslint-config'

export default configPkg(
  {
    ignores: [
      'build/**',
      'tests/tmp/**',
      'tests/fixtures/**',
      'bench/tmp/**',
      'test-results/**',
      'examples/**/build/**',
      'examples/**/node_modules/**',
      'examples/**/tmp/**',
      'examples/**/.adonisjs/**',
      'examples/**/database/schema.ts',
      'coverage/**',
    ],
  },
  {
    // Tests read `(await api(...)).json` on purpose: one request, one assertion.
    files: ['tests/**/*.ts'],
    rules: { '@unicorn/no-await-expression-member': 'off' },
  }
)
