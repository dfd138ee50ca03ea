/** The ledger's table prefix and connection, from the app's validated config. */
export interface ModelTables {
  tablePrefix: string
  connection?: string
}

let source: (() => Promise<ModelTables | null>) | undefined
let configure: ((tables: ModelTables) => void) | undefined

/**
 * Where the models take their tables from (the provider: its config's ledger, or null when the
 * ledger is off or the config invalid). Nothing loads here: not the models, not the validator.
 */
export function modelTablesFrom(next: () => Promise<ModelTables | null>) {
  source = next
}

/** Called by the models as they load: they are pointed at the tables now, and on each boot. */
export async function modelsLoaded(next: (tables: ModelTables) => void) {
  configure = next
  await pointModels()
}

/** Points the models at the source's tables if they are loaded; otherwise they will be then. */
export async function pointModels() {
  if (!configure || !source) return
  const tables = await source()
  if (tables) configure(tables)
}
