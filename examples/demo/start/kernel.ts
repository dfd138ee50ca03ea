import router from '@adonisjs/core/services/router'
import server from '@adonisjs/core/services/server'

server.use([])
router.use([
  () => import('@adonisjs/otel/otel_middleware'),
  () => import('@adonisjs/core/bodyparser_middleware'),
])

export const middleware = router.named({})
