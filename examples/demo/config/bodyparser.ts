import { defineConfig } from '@adonisjs/core/bodyparser'

export default defineConfig({
  allowedMethods: ['POST', 'PUT', 'PATCH', 'DELETE'],
  json: { convertEmptyStringsToNull: true, types: ['application/json'] },
  form: { convertEmptyStringsToNull: true, types: ['application/x-www-form-urlencoded'] },
  multipart: {
    autoProcess: false,
    convertEmptyStringsToNull: true,
    processManually: [],
    limit: '1mb',
    types: ['multipart/form-data'],
  },
})
