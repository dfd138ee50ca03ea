import { BlockList, isIP } from 'node:net'

/**
 * The service's rule for webhook URLs (spec, HTTP delivery): https only; loopback, private,
 * link-local, unique-local, IPv4-mapped, IPv4-compatible and NAT64 addresses and the known
 * cloud metadata hosts are refused, at creation and again before every POST. The client
 * applies the part that needs no DNS to its input; the emulator adds name resolution.
 */

/** Options of the webhook URL rule. */
export interface WebhookUrlRuleOptions {
  /**
   * Development only: accept loopback targets (127.0.0.0/8, ::1, localhost), over http too.
   * Every other refused range stays refused.
   */
  allowLoopback?: boolean
}

/** One address a name resolves to, as `dns.promises.lookup(name, { all: true })` gives it. */
export interface ResolvedAddress {
  address: string
  family: number
}

/** Resolves a host name to all its addresses (the emulator passes `node:dns`'s lookup). */
export type WebhookLookup = (hostname: string) => Promise<ResolvedAddress[]>

type Range = [network: string, prefix: number]

/** Refused IPv4 ranges, by what they are; the first match names the refusal. */
const IPV4_RANGES: Record<string, Range[]> = {
  'loopback': [['127.0.0.0', 8]],
  'unspecified': [['0.0.0.0', 8]],
  'private': [
    ['10.0.0.0', 8],
    ['172.16.0.0', 12],
    ['192.168.0.0', 16],
    ['100.64.0.0', 10],
    ['198.18.0.0', 15],
  ],
  'link-local': [['169.254.0.0', 16]],
  'reserved': [
    ['192.0.0.0', 24],
    ['224.0.0.0', 4],
    ['240.0.0.0', 4],
  ],
}

/** Refused IPv6 ranges, in the order they are tried (`::1` before the IPv4-compatible ::/96). */
const IPV6_RANGES: Record<string, Range[]> = {
  'unspecified': [['::', 128]],
  'loopback': [['::1', 128]],
  'IPv4-mapped': [['::ffff:0:0', 96]],
  'IPv4-compatible': [['::', 96]],
  'NAT64': [
    ['64:ff9b::', 96],
    ['64:ff9b:1::', 48],
  ],
  'link-local': [['fe80::', 10]],
  'site-local': [['fec0::', 10]],
  'unique-local': [['fc00::', 7]],
  'reserved': [['ff00::', 8]],
}

function blockLists(ranges: Record<string, Range[]>, family: 'ipv4' | 'ipv6') {
  return Object.entries(ranges).map(([kind, list]) => {
    const blocks = new BlockList()
    for (const [network, prefix] of list) blocks.addSubnet(network, prefix, family)
    return { kind, blocks }
  })
}

const IPV4_BLOCKS = blockLists(IPV4_RANGES, 'ipv4')
const IPV6_BLOCKS = blockLists(IPV6_RANGES, 'ipv6')

/** Cloud metadata services reached by name (their addresses are in the ranges above). */
const METADATA_HOSTS = new Set([
  'metadata',
  'metadata.google.internal',
  'metadata.goog',
  'instance-data',
  'instance-data.ec2.internal',
])

/** A URL's host as the rule compares it: lower case, without brackets or trailing dots. */
export function normaliseWebhookHost(hostname: string): string {
  return hostname
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.+$/, '')
}

/**
 * What kind of refused address an IP address is (`loopback`, `private`, `IPv4-mapped`...),
 * or null for a public one.
 */
export function forbiddenAddressKind(address: string): string | null {
  const family = isIP(address)
  if (family === 4) return IPV4_BLOCKS.find((b) => b.blocks.check(address, 'ipv4'))?.kind ?? null
  if (family === 6) return IPV6_BLOCKS.find((b) => b.blocks.check(address, 'ipv6'))?.kind ?? null
  return null
}

/** The kind of refused address this is, unless the options allow it. */
function refusedKind(address: string, options: WebhookUrlRuleOptions): string | null {
  const kind = forbiddenAddressKind(address)
  return kind === 'loopback' && options.allowLoopback ? null : kind
}

const isLocalhostName = (host: string) => host === 'localhost' || host.endsWith('.localhost')

/**
 * Why a webhook URL is refused without resolving its host, or null when it passes: the
 * scheme, an address written in the URL, `localhost` names and the metadata host names.
 */
export function webhookUrlRefusal(
  value: string,
  options: WebhookUrlRuleOptions = {}
): string | null {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return 'must be a valid URL'
  }
  const host = normaliseWebhookHost(url.hostname)
  const loopback = isLocalhostName(host) || forbiddenAddressKind(host) === 'loopback'
  const httpAllowed = options.allowLoopback && loopback && url.protocol === 'http:'
  if (url.protocol !== 'https:' && !httpAllowed) return 'must be an https URL'
  if (!host) return 'must name a host'
  if (METADATA_HOSTS.has(host)) return `metadata hosts are not allowed (${host})`
  if (isLocalhostName(host)) {
    return options.allowLoopback ? null : `loopback addresses are not allowed (${host})`
  }
  const kind = refusedKind(host, options)
  return kind ? `${kind} addresses are not allowed (${host})` : null
}

/** The outcome of checking a webhook URL with its host resolved. */
export type WebhookTarget =
  | { refusal: string }
  /** Allowed; `addresses` is empty when the URL holds an address or the name did not resolve. */
  | { host: string; addresses: ResolvedAddress[]; unresolved?: string }

/**
 * The whole rule: `webhookUrlRefusal`, then every address the host name resolves to must be
 * allowed too. A name that does not resolve is not refused (`unresolved` says why).
 */
export async function checkWebhookTarget(
  value: string,
  options: WebhookUrlRuleOptions & { lookup: WebhookLookup }
): Promise<WebhookTarget> {
  const refusal = webhookUrlRefusal(value, options)
  if (refusal) return { refusal }
  const host = normaliseWebhookHost(new URL(value).hostname)
  if (isIP(host)) return { host, addresses: [] }
  let addresses: ResolvedAddress[]
  try {
    addresses = await options.lookup(host)
  } catch (error) {
    return { host, addresses: [], unresolved: (error as { code?: string }).code ?? 'ENOTFOUND' }
  }
  for (const { address } of addresses) {
    const kind = refusedKind(address, options)
    if (kind) return { refusal: `${host} resolves to a ${kind} address (${address})` }
  }
  return { host, addresses }
}
