import type { TestProject } from 'vitest/node';
import { acquireServer } from './server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    valkeyUrl: string;
  }
}

/** Starts (or finds) one server for the whole run and hands its URL to every test file. */
export default async function setup(project: TestProject) {
  const server = await acquireServer();
  project.provide('valkeyUrl', server.url);
  return () => server.stop();
}
