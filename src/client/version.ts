import { readFileSync } from 'node:fs'

/** The package version, read once; works from the sources and from build/. */
function readVersion(): string {
  for (const candidate of ['../../package.json', '../../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(candidate, import.meta.url), 'utf8'))
      if (pkg.name === '@svc/adonis-payouts') return pkg.version
    } catch {}
  }
  return '0.0.0'
}

export const PACKAGE_VERSION = readVersion()
