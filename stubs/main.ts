/** Root of the stubs that `configure` publishes into a host app. */
export const stubsRoot = import.meta.dirname
