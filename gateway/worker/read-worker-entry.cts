/**
 * The read workers' entry as CommonJS: piscina loads a worker file with require() first, and on
 * Node 20.19+ require() of an ES module goes through require(esm), which aborted a worker start
 * with a native assertion (node::loader::ModuleWrap::CreateRequiredModuleFacade) in a CI run and
 * took its test process down. This file is CommonJS, so require() loads it plainly; it loads the
 * ES module read-worker.js with import() and exports its task function (piscina awaits it).
 */
import type { WorkerTasks } from '../threads/protocol.js';

const worker = import('./read-worker.js');
// One export per named task (gateway/threads/protocol.ts WorkerTasks); piscina awaits each.
const tasks: { readonly [K in keyof WorkerTasks]: Promise<WorkerTasks[K]> } = { read: worker.then((w) => w.read), stream: worker.then((w) => w.stream) };
// A failed import fails each task piscina asks for; the export it never asks for must not end
// the worker as an unhandled rejection.
for (const task of Object.values(tasks)) task.catch(() => {});
export = tasks;
