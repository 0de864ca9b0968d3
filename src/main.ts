#!/usr/bin/env node
/**
 * The service's entry point (`npm start`, the Dockerfile): the same as
 * `echostore serve` (src/serve.ts).
 */
import { runService } from './serve.js';

runService(process.argv.slice(2));
