// Platforms as `os/arch[/variant]`, and matching them the way container
// tools do (x86_64 is amd64, aarch64 is arm64, arm64 without a variant is v8).
import { StrataError } from '../../../fs/common/errors.js'

export interface Platform {
  os: string
  architecture: string
  variant?: string
}

export const DEFAULT_PLATFORM: Platform = { os: 'linux', architecture: 'amd64' }

const ARCH_ALIASES: Record<string, string> = { x86_64: 'amd64', 'x86-64': 'amd64', aarch64: 'arm64', armhf: 'arm', armel: 'arm', i386: '386' }

function normArch(a: string): string {
  return ARCH_ALIASES[a] ?? a
}

/** `linux/amd64`, `linux/arm64/v8` → Platform; INVALID_ARGUMENT otherwise. */
export function parsePlatform(s: string): Platform {
  const parts = s.split('/')
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => !/^[A-Za-z0-9._-]+$/.test(p))) {
    throw new StrataError('INVALID_ARGUMENT', `platform ${JSON.stringify(s)} is not os/arch[/variant]`)
  }
  const p: Platform = { os: parts[0]!.toLowerCase(), architecture: normArch(parts[1]!.toLowerCase()) }
  if (parts[2]) p.variant = parts[2].toLowerCase()
  return p
}

export function formatPlatform(p: Platform): string {
  return p.variant ? `${p.os}/${p.architecture}/${p.variant}` : `${p.os}/${p.architecture}`
}

/** The platform an index descriptor or image config names, if it names one. */
export function platformOf(v: unknown): Platform | null {
  if (typeof v !== 'object' || v === null) return null
  const o = v as Record<string, unknown>
  if (typeof o.os !== 'string' || typeof o.architecture !== 'string' || !o.os || !o.architecture) return null
  const p: Platform = { os: o.os.toLowerCase(), architecture: normArch(o.architecture.toLowerCase()) }
  if (typeof o.variant === 'string' && o.variant) p.variant = o.variant.toLowerCase()
  return p
}

function variantOf(p: Platform): string | undefined {
  return p.variant ?? (p.architecture === 'arm64' ? 'v8' : undefined)
}

/** Does `have` satisfy `want`? A wanted variant must match; no wanted variant accepts any. */
export function platformMatches(have: Platform, want: Platform): boolean {
  if (have.os !== want.os || have.architecture !== want.architecture) return false
  const wv = variantOf(want)
  return want.variant === undefined || wv === variantOf(have)
}

/**
 * The platform of an image picked from an index entry: the entry's (the index
 * decides, as podman and skopeo have it), with the variant of the config
 * when the entry names none. A config that names another os or architecture,
 * or another variant, wins, so that a check against the wanted platform
 * refuses it; a config without a variant (common for `linux/arm/v7` images)
 * does not. Without an entry platform, the config's.
 */
export function imagePlatform(entry: Platform | null | undefined, config: Platform | null): Platform | null {
  if (!entry) return config
  if (!config) return entry
  if (config.os !== entry.os || config.architecture !== entry.architecture) return config
  if (config.variant !== undefined && variantOf(config) !== variantOf(entry)) return config
  return entry.variant !== undefined ? entry : config
}
