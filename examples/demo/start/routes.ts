import router from '@adonisjs/core/services/router'
import transmit from '@adonisjs/transmit/services/main'

const PayoutsController = () => import('#controllers/payouts_controller')
const ObservabilityController = () => import('#controllers/observability_controller')

transmit.registerRoutes()

router.get('/', [PayoutsController, 'page'])
router.get('/assets/transmit-client.js', [PayoutsController, 'transmitClient'])
router.get('/api/payouts', [PayoutsController, 'index'])
router.post('/api/payouts', [PayoutsController, 'store'])
router.get('/api/health', [PayoutsController, 'health'])
router.get('/api/activity', [PayoutsController, 'activity'])
router.get('/api/coverage', [PayoutsController, 'coverage'])
router.get('/api/payouts/:id/events', [PayoutsController, 'events'])
router.post('/api/payouts/:id/deposit', [PayoutsController, 'simulateDeposit'])
router.get('/api/payouts/:id/trace', [ObservabilityController, 'trace'])
router.get('/metrics', [ObservabilityController, 'metrics'])
