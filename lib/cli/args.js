'use strict';
// Command-line parsing for bin/mlx-node.js: node:util's parseArgs over a
// command's flag table, usage errors (exit 2), number flags and help text.
const { parseArgs } = require('node:util');

// A mistake in the command line itself: reported with a pointer to --help, exit code 2.
class UsageError extends Error {
  constructor(message) {
    super(message);
    this.name = 'UsageError';
  }
}

const HELP_FLAG = { help: { type: 'boolean', short: 'h', help: 'show this help' } };

// Number flags: `kind` 'number' (any finite number) or 'int' (an integer), with an
// optional `min` (and `max`). Their text is checked here so that "--temp abc" is a
// usage error, not a library one.
function toNumber(flag, spec, text) {
  const t = text.trim();
  const n = t === '' ? NaN : Number(t);
  if (!Number.isFinite(n)) throw new UsageError(`--${flag} needs a number, got ${JSON.stringify(text)}`);
  if (spec.kind === 'int' && !Number.isInteger(n)) throw new UsageError(`--${flag} needs a whole number, got ${JSON.stringify(text)}`);
  if (spec.min !== undefined && n < spec.min) throw new UsageError(`--${flag} must be at least ${spec.min}, got ${text}`);
  if (spec.max !== undefined && n > spec.max) throw new UsageError(`--${flag} must be at most ${spec.max}, got ${text}`);
  return n;
}

// Parses `argv` against `flags` ({ name: { type, short, multiple, kind, min, max,
// value, help } }); returns { values, positionals } with number flags converted.
function parse(argv, flags) {
  const all = { ...flags, ...HELP_FLAG };
  const options = {};
  for (const [name, spec] of Object.entries(all)) {
    options[name] = { type: spec.type ?? 'string' };
    if (spec.short) options[name].short = spec.short;
    if (spec.multiple) options[name].multiple = true;
  }
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (e) {
    if (e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw new UsageError(`unknown option ${/'([^']*)'/.exec(e.message)?.[1] ?? e.message}`);
    if (typeof e.code === 'string' && e.code.startsWith('ERR_PARSE_ARGS')) throw new UsageError(e.message);
    throw e;
  }
  const values = { ...parsed.values };
  for (const [name, spec] of Object.entries(all)) {
    if (values[name] === undefined || !spec.kind) continue;
    values[name] = spec.multiple ? values[name].map((v) => toNumber(name, spec, v)) : toNumber(name, spec, values[name]);
  }
  return { values, positionals: parsed.positionals };
}

// The positionals a command takes: `names` in order, those ending in '?' optional.
function positionals(list, names) {
  const required = names.filter((n) => !n.endsWith('?')).length;
  if (list.length < required) throw new UsageError(`missing ${names[list.length]}`);
  if (list.length > names.length) throw new UsageError(`unexpected argument ${JSON.stringify(list[names.length])}`);
  return list;
}

// Usage text: the synopsis, a description, then the flags in a column.
function helpText({ usage, description, flags }) {
  const rows = Object.entries({ ...flags, ...HELP_FLAG }).map(([name, spec]) => {
    const value = spec.type === 'boolean' ? '' : ` ${spec.value ?? (spec.kind ? 'N' : 'TEXT')}`;
    const left = `${spec.short ? `-${spec.short}, ` : '    '}--${name}${value}`;
    return [left, spec.help + (spec.multiple ? ' (repeatable)' : '')];
  });
  const width = Math.max(...rows.map(([l]) => l.length)) + 2;
  const lines = [`Usage: ${usage}`, '', ...description, '', 'Options:'];
  for (const [l, r] of rows) lines.push(`  ${l.padEnd(width)}${r}`);
  return `${lines.join('\n')}\n`;
}

module.exports = { UsageError, parse, positionals, helpText };
