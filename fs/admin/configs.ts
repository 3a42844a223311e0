// Per-node-type configuration kept by mgmtd: set-config and get-config.

import type { NodeType } from '../common/types.js'
import type { GetConfigRsp } from '../mgmtd/index.js'
import type { AdminSession } from './session.js'
import type { ActionResult } from './table.js'

/** `set-config --type T --file F [--desc D]`: stores a new config version for a node type. */
export async function setConfig(s: AdminSession, type: NodeType, content: string, desc?: string): Promise<ActionResult<{ nodeType: NodeType; configVersion: number }>> {
  const rsp = await s.mgmtd.setConfig({ nodeType: type, content, ...(desc !== undefined ? { desc } : {}) })
  return { lines: [['Succeed'], ['ConfigVersion', String(rsp.configVersion)]], result: { nodeType: type, configVersion: rsp.configVersion } }
}

/** `get-config --type T`: the latest config of a node type (version 0 / null when none was set). */
export async function getConfig(s: AdminSession, type: NodeType): Promise<ActionResult<GetConfigRsp & { exists: boolean }>> {
  const rsp = await s.mgmtd.getConfig(type)
  const exists = rsp.configVersion > 0
  const lines = [['NodeType', type], ['ConfigVersion', exists ? String(rsp.configVersion) : 'null']]
  if (exists) lines.push(['ConfigDesc', rsp.desc])
  return { lines, result: { ...rsp, exists } }
}
