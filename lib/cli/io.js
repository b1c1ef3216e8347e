'use strict';
// Standard streams for the commands: the text of stdin, and stdout readers that go away.
const { UsageError } = require('./args');

async function readStdin() {
  process.stdin.setEncoding('utf8');
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return text;
}

// A text argument, or stdin's text when it is '-' or (where `fromStdinWhenMissing`) absent.
async function textArgument(value, what) {
  if (value !== undefined && value !== '-') return value;
  if (value === undefined && process.stdin.isTTY) throw new UsageError(`missing ${what} (give it as an argument, or pipe it in with "-")`);
  return readStdin();
}

// Calls `onClose` once if stdout's reader goes away (EPIPE, as in `| head -c 100`).
function onStdoutClosed(onClose) {
  let called = false;
  process.stdout.on('error', (e) => {
    if (e.code !== 'EPIPE') throw e;
    if (!called) {
      called = true;
      onClose();
    }
  });
}

module.exports = { readStdin, textArgument, onStdoutClosed };
