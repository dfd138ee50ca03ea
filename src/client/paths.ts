export { DEFAULT_PATHS, type PathName } from '../contract/endpoints.ts'

/** Fills `{id}` with an encoded identifier. */
export function fillPath(template: string, id?: string): string {
  return id === undefined ? template : template.replace('{id}', encodeURIComponent(id))
}
