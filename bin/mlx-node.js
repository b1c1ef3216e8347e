#!/usr/bin/env node
'use strict';
// npx mlx-node <generate|chat|speak|serve|info|launch> ... (docs/cli.md)
require('../lib/cli/main').main(process.argv.slice(2));
