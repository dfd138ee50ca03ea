import env from '#start/env'
import { defineConfig } from '@adonisjs/core/http'

export const appUrl = `http://${env.get('HOST')}:${env.get('PORT')}`

export const http = defineConfig({
  generateRequestId: true,
  allowMethodSpoofing: false,
  useAsyncLocalStorage: false,
  cookie: {},
})
